"""examples/dlpack_ipc.py between Python processes, and against hostile peers. Prints TAP.

    PYTHONPATH=build/pydeps python3 spec/peers/ipc_python.py

Two processes (fork, and the command line through subprocess): values of every dtype, zero-copy
both ways, views, readonly (enforced by the kernel), timeouts and polling, listeners, a closed or
killed peer, thousands of round trips with the descriptor and mapping counts of both sides
unchanged; PyTorch when it imports (a visible SKIP otherwise). In one process: a corpus of
hostile messages, each refused with a clear ProtocolError, no descriptor or mapping leaked, and
the channel still working. Exits 1 when a test fails.
"""
import array
import errno
import fcntl
import gc
import mmap
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import zlib

_pydeps = os.environ.get("DLPACK_PEERS_PYTHONPATH", "build/pydeps")
if _pydeps:
    sys.path.insert(0, os.path.abspath(_pydeps))
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_EXAMPLE = os.path.join(_ROOT, "examples", "dlpack_ipc.py")
sys.path.insert(0, os.path.dirname(_EXAMPLE))

try:
    import numpy as np
    if int(np.__version__.split(".")[0]) < 2:
        raise ImportError("numpy %s < 2" % np.__version__)
except ImportError as e:
    print("1..0 # SKIP NumPy >= 2 missing: %s" % e)
    sys.exit(0)

import dlpack_ipc as d  # noqa: E402

try:
    import torch
except Exception as e:  # ImportError, or a broken install raising anything
    torch, _torch_missing = None, "%s: %s" % (type(e).__name__, e)

_count = _failed = 0


def ok(cond, desc, *diag):
    global _count, _failed
    _count += 1
    if not cond:
        _failed += 1
    print("%sok %d - %s" % ("" if cond else "not ", _count, desc), flush=True)
    if not cond:
        for line in diag:
            for text in str(line).splitlines():
                print("# " + text)
    return cond


def skip(desc, reason):
    global _count
    _count += 1
    print("ok %d - %s # SKIP %s" % (_count, desc, reason), flush=True)


def eq(got, want, desc):
    return ok(got == want, desc, "got:  %r" % (got,), "want: %r" % (want,))


def raises(fn, exc, pattern, desc):
    try:
        fn()
    except exc as e:
        return ok(pattern in str(e), desc, "message: %s" % e, "wanted in it: %s" % pattern)
    except Exception as e:
        return ok(False, desc, "raised %s: %s (wanted %s)" % (type(e).__name__, e, exc.__name__))
    return ok(False, desc, "did not raise")


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")


def fds():
    return len(os.listdir("/proc/self/fd"))


def maps():
    """The mappings of memfds (the allocators' own come and go)."""
    with open("/proc/self/maps") as f:
        return sum("memfd:" in line for line in f)


def counts():
    gc.collect()
    return fds(), maps(), len(d._registry)


def fork(body):
    """Run body(channel) in a child process; returns (pid, the parent's channel)."""
    mine, theirs = d.pair()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            mine.close()
            body(theirs)
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            os._exit(code)
    theirs.close()
    return pid, mine


def reap(pid, desc):
    _, status = os.waitpid(pid, 0)
    return eq(os.waitstatus_to_exitcode(status), 0, desc + " (child exit status)")


def echo(ch):
    while True:
        try:
            a = ch.recv()
        except d.ChannelClosed:
            return
        ch.send(a)


TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


# ---- two processes --------------------------------------------------------------------------------

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "complex64", "complex128"]


def sample(dtype, shape):
    n = int(np.prod(shape))
    dt = np.dtype(dtype)
    if dt.kind == "b":
        v = np.arange(n) % 3 == 1
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        v = np.array([info.min, info.max, 0, 1, 7][:n] + list(range(2, n - 3)), dtype=dt)[:n] if n else np.zeros(0, dt)
    elif dt.kind == "f":
        v = np.array([np.nan, np.inf, -0.0, 0.5, -1.25] + list(range(n)), dtype=dt)[:n]
    else:
        v = (np.arange(n) + 1j * (np.arange(n) - 0.5)).astype(dt)
    return v.astype(dt).reshape(shape)


@test
def values_every_dtype():
    pid, ch = fork(echo)
    with ch:
        for dtype in DTYPES:
            for shape in [(), (5,), (2, 3, 4), (0, 3)]:
                x = sample(dtype, shape)
                ch.send(x)
                y = ch.recv(5)
                ok(y is not None and same(x, y), "round trip of %s %r" % (dtype, shape), "sent %r" % x, "got %r" % y)
        x = sample("float32", (1,) * 64)
        ch.send(x)
        y = ch.recv(5)
        ok(y is not None and same(x, y), "64 dimensions")
    reap(pid, "echo child")


@test
def zero_copy_both_ways():
    def child(ch):
        a = ch.recv()          # the parent's block
        a[1] = 42              # seen by the parent
        ch.send(np.zeros(1))   # "written"
        b = d.zeros(4, "int64")
        ch.send(b)             # the child's block
        ch.recv()              # "the parent wrote"
        ch.send(np.array([b[2]]))

    pid, ch = fork(child)
    with ch:
        x = d.zeros(4, "int64")
        ok(d.shareable(x), "zeros makes shareable memory")
        ch.send(x)
        ch.recv(5)
        eq(int(x[1]), 42, "the receiver's write is seen by the sender")
        b = ch.recv(5)
        ok(d.shareable(b), "a received array is shareable")
        b[2] = -7
        ch.send(np.zeros(1))
        eq(int(ch.recv(5)[0]), -7, "the sender's block sees the receiver's write")
    reap(pid, "zero-copy child")


@test
def views_travel_as_views():
    base = d.empty((4, 6), "float32")
    base[...] = np.arange(24).reshape(4, 6)
    views = {
        "slice with steps": base[1:4:2, ::3],
        "transpose": base.T,
        "negative strides": base[::-1, ::-2],
        "broadcast (stride 0)": np.broadcast_to(base[2], (3, 6)),
        "0-d element": base[3, 5],
        "column": base[:, 4],
    }
    pid, ch = fork(echo)
    with ch:
        for name, v in views.items():
            v = np.asarray(v)
            ch.send(v)
            got = ch.recv(5)
            ok(same(got, v), "%s: values" % name, "sent %r" % v, "got %r" % got)
            eq(got.strides, v.strides, "%s: same strides after the round trip" % name)
            eq(got.__array_interface__["data"][0] != v.__array_interface__["data"][0], True,
               "%s: a new mapping" % name)
        v = base[::-1, ::2]
        ch.send(v)
        got = ch.recv(5)
        base[0, 0] = 1000
        eq(float(got[-1, 0]), 1000.0, "a view's round trip shares the memory (write after it is seen)")
        tail = d.empty(3, "int32")  # the page goes on past the file: an array reaching there is copied
        past = np.lib.stride_tricks.as_strided(tail, shape=(2,), strides=(8,))
        tail[:] = [1, 2, 3]
        ok(not d.shareable(np.lib.stride_tricks.as_strided(tail, shape=(3,), strides=(8,))),
           "an array reaching past the end of its block's file is not shareable")
        ch.send(past)
        eq(ch.recv(5).tolist(), [1, 3], "an array within its block's file is sent as a view")
        odd = np.lib.stride_tricks.as_strided(base.view(np.uint8)[1:], shape=(3,), strides=(5,)).view()
        ch.send(odd)
        got = ch.recv(5)
        ok(same(got, odd), "strides that are not a multiple of the itemsize are copied")
        plain = np.arange(6, dtype=np.int16)
        ch.send(plain)
        got = ch.recv(5)
        got[0] = 99
        eq(int(plain[0]), 0, "memory that is not shareable is copied (the peer writes to its copy)")
        big = np.arange(10).astype(">i4")
        ch.send(big)
        got = ch.recv(5)
        ok(same(got, big.astype("<i4")) and got.dtype.isnative, "a big-endian array arrives in native order")
    reap(pid, "views child")


@test
def readonly():
    def child(ch):
        r = ch.recv()
        out = [r.flags.writeable]
        try:
            r[0] = 1
            out.append(1)
        except ValueError:
            out.append(0)
        block = r.base.block
        try:
            mmap.mmap(block.fd, block.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            out.append(1)
        except PermissionError:
            out.append(0)
        try:
            r.flags.writeable = True
            out.append(1)
        except ValueError:
            out.append(0)
        out.append(fcntl.fcntl(block.fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY)
        ch.send(np.array(out, dtype=np.int8))
        w = ch.recv()   # forwarded read-only: the next process gets it read-only too
        ch.send(w)
        ch.send(ch.recv())
        ch.recv()

    pid, ch = fork(child)
    with ch:
        x = d.zeros(8, "int32")
        ch.send(x, readonly=True)
        got = ch.recv(5).tolist()
        eq(got, [0, 0, 0, 0, 1], "readonly: not writable, assignment raises, mmap for writing refused, "
           "writeable=True refused, the descriptor is O_RDONLY")
        x[3] = 5
        ch.send(x, readonly=True)
        back = ch.recv(5)
        ok(not back.flags.writeable and back[3] == 5, "a read-only array forwarded stays read-only")
        ch.send(np.broadcast_to(x[:1], (2, 8)))
        back = ch.recv(5)
        ok(not back.flags.writeable, "an array that is not writeable here is sent read-only")
        ch.send(np.zeros(1))
    reap(pid, "readonly child")

    if os.geteuid() != 0:
        ch1, ch2 = d.pair()
        _reopen_check(ch1, ch2)
        return

    def unprivileged(ch):
        os.setgid(65534)
        os.setuid(65534)
        a, b = d.pair()
        ch.send(np.array([_reopen_check(a, b, report=False)], dtype=np.int8))

    pid, ch = fork(unprivileged)
    with ch:
        eq(int(ch.recv(5)[0]), 1, "readonly (as uid 65534): reopening /proc/self/fd/N for writing is refused")
    reap(pid, "unprivileged child")


def _reopen_check(a, b, report=True):
    x = d.zeros(4, "int8")
    a.send(x, readonly=True)
    r = b.recv(5)
    try:
        os.close(os.open("/proc/self/fd/%d" % r.base.block.fd, os.O_RDWR))
        refused = False
    except PermissionError:
        refused = True
    if report:
        ok(refused, "readonly: reopening /proc/self/fd/N for writing is refused")
    return refused


@test
def timeouts_and_polling():
    a, b = d.pair()
    with a, b:
        t = time.monotonic()
        eq(b.recv(0), None, "recv(0) polls: None when nothing waits")
        eq(b.recv(timeout=0.2), None, "recv(0.2): None after the timeout")
        waited = time.monotonic() - t
        ok(0.19 <= waited < 2, "recv(0.2) waited about 0.2 s", "waited %.3f s" % waited)
        a.send(np.arange(3))
        got = b.recv(0)
        ok(got is not None and got.tolist() == [0, 1, 2], "recv(0) returns a waiting message")
        raises(lambda: b.recv(-1), ValueError, "timeout", "a negative timeout raises")
    path = "@dlpack-ipc-test-%d" % os.getpid()
    with d.listen(path) as listener:
        eq(listener.accept(0), None, "accept(0) polls: None when nobody connects")
        t = time.monotonic()
        eq(listener.accept(0.2), None, "accept(0.2): None after the timeout")
        ok(time.monotonic() - t >= 0.19, "accept(0.2) waited")
    t = time.monotonic()
    raises(lambda: d.connect(path), ConnectionRefusedError, "nobody listens", "connect without a timeout raises "
           "at once when nobody listens")
    ok(time.monotonic() - t < 0.5, "at once")
    t = time.monotonic()
    eq(d.connect(path, 0.3), None, "connect(path, 0.3): None when nobody listened within 0.3 s")
    ok(time.monotonic() - t >= 0.29, "connect waited 0.3 s")

    def later(_):
        time.sleep(0.3)
        with d.listen(path) as lst:
            c = lst.accept(5)
            c.send(np.array([7]))
            try:
                c.recv(5)
            except d.ChannelClosed:
                pass

    pid, ch = fork(later)
    with d.connect(path, 10) as c:
        eq(c.recv(5).tolist(), [7], "connect with a timeout waits for a listener that comes later")
    ch.close()
    reap(pid, "late listener")


@test
def listeners():
    tmp = tempfile.mkdtemp(prefix="dlpack-ipc-")
    path = os.path.join(tmp, "sock")
    with d.listen(path) as listener:
        ok(os.path.exists(path), "listen makes the socket file")
        raises(lambda: d.listen(path), OSError, "in use", "a live listener's path raises 'address in use'")
        probe = listener.accept(5)  # the probe that found the listener alive: a connection closed at once
        raises(lambda: probe.recv(5), d.ChannelClosed, "closed", "the live listener sees the probe as a closed "
               "channel")
        probe.close()
        pid, _ = fork(lambda ch: d.connect(path).send(np.array([1.5])))
        c = listener.accept(5)
        eq(c.recv(5).tolist(), [1.5], "a channel through a filesystem path")
        c.close()
        reap(pid, "connecting child")
    ok(not os.path.exists(path), "close removes the socket file")
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    stale.bind(path)
    stale.close()  # the file stays, nobody listens
    with d.listen(path):
        ok(os.path.exists(path), "a stale socket file is replaced")
    with open(path, "w") as f:
        f.write("keep me")
    raises(lambda: d.listen(path), OSError, "in use", "a regular file at the path is not replaced")
    ok(open(path).read() == "keep me", "the regular file is left alone")
    os.unlink(path)
    os.rmdir(tmp)
    listener = d.listen("@dlpack-ipc-abstract-%d" % os.getpid())
    listener.close()
    listener.close()
    ok(True, "listener close is idempotent")
    raises(lambda: listener.accept(0), ValueError, "closed", "accept on a closed listener raises")


@test
def closed_peer():
    a, b = d.pair()
    a.close()
    raises(lambda: b.recv(1), d.ChannelClosed, "closed", "recv raises 'closed' when the peer closed")
    raises(lambda: b.recv(0), d.ChannelClosed, "closed", "and again")
    raises(lambda: b.send(np.zeros(2)), d.ChannelClosed, "closed", "send to a closed peer raises (no SIGPIPE)")
    b.close()
    b.close()
    raises(lambda: b.recv(0), ValueError, "closed", "recv on a closed channel raises")

    def killed(ch):
        x = d.zeros(3, "int32")
        x[...] = [4, 5, 6]
        ch.send(x)
        os.kill(os.getpid(), signal.SIGKILL)

    pid, ch = fork(killed)
    got = ch.recv(5)
    ok(got is not None and got.tolist() == [4, 5, 6], "a sender killed with SIGKILL right after sending: "
       "the array arrives")
    raises(lambda: ch.recv(5), d.ChannelClosed, "closed", "then the channel reads 'closed'")
    got[0] = 9
    eq(got.tolist(), [9, 5, 6], "the memory outlives its maker")
    _, status = os.waitpid(pid, 0)
    eq(os.WIFSIGNALED(status) and os.WTERMSIG(status), signal.SIGKILL, "the child died of SIGKILL")
    ch.close()


@test
def many_round_trips():
    def child(ch):
        before = n = None
        while True:
            a = ch.recv()
            if a.shape == (1,) and a[0] < 0:
                if a[0] == -1:
                    break
                del a
                before, n = counts(), 0  # after the warm-up rounds
                continue
            ch.send(a)
            n = None if n is None else n + 1
        del a
        after = counts()
        ch.send(np.array(before + after + (n,), dtype=np.int64))

    def rounds(ch, count):
        for i in range(count):
            if i % 3 == 0:
                ch.send(x)
            elif i % 3 == 1:
                ch.send(x[::-1, 1::2], readonly=True)
            else:
                ch.send(np.arange(5))
            ch.recv(10)

    x = d.zeros((64, 64), "float32")
    pid, ch = fork(child)
    rounds(ch, 100)
    before = counts()
    ch.send(np.array([-2]))
    rounds(ch, 3000)
    ch.send(np.array([-1]))
    report = ch.recv(10).tolist()
    after = counts()
    ch.close()
    reap(pid, "round-trip child")
    eq(report[6], 3000, "3000 round trips")
    eq(report[3:6], report[:3], "the child's descriptors, memfd mappings and blocks are unchanged")
    eq(after, before, "the parent's descriptors, memfd mappings and blocks are unchanged")


@test
def command_line():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.path.abspath(_pydeps) if _pydeps else "",
                                                                     os.environ.get("PYTHONPATH", "")])))
    path = "@dlpack-ipc-cli-%d" % os.getpid()
    proc = subprocess.Popen([sys.executable, _EXAMPLE, "serve-echo", path, "--timeout", "20"], env=env)
    with d.connect(path, 20) as ch:
        x = d.zeros(5, "uint16")
        ch.send(x)
        y = ch.recv(10)
        x[0] = 77
        ok(y is not None and int(y[0]) == 77, "serve-echo sends the array back on the same memory")
        ch.send(x[::-1])
        eq(ch.recv(10).tolist(), x[::-1].tolist(), "serve-echo echoes a view")
    eq(proc.wait(20), 0, "serve-echo exits 0 when the peer closes")
    with d.listen(path) as listener:
        proc = subprocess.Popen([sys.executable, _EXAMPLE, "echo", path], env=env)
        ch = listener.accept(20)
        ch.send(np.arange(4.0))
        eq(ch.recv(10).tolist(), [0.0, 1.0, 2.0, 3.0], "echo connects and echoes")
        ch.close()
        eq(proc.wait(20), 0, "echo exits 0 when the peer closes")


@test
def with_torch():
    if torch is None:
        for desc in ["send a torch tensor", "torch.from_dlpack of a received array shares its memory",
                     "a torch tensor on shareable memory is sent zero-copy", "torch echo child (child exit status)",
                     "a bfloat16 tensor is sent as bfloat16, which recv refuses (NumPy has no bfloat16)"]:
            skip(desc, "torch missing: " + _torch_missing)
        return
    pid, ch = fork(echo)
    with ch:
        t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
        ch.send(t)
        got = ch.recv(5)
        ok(same(got, np.from_dlpack(t)), "send a torch tensor")
        tt = torch.from_dlpack(got)
        got[0, 0] = 5
        eq(float(tt[0, 0]), 5.0, "torch.from_dlpack of a received array shares its memory")
        s = torch.from_dlpack(d.zeros((2, 2), "int32"))
        ch.send(s)
        back = ch.recv(5)
        s[1, 1] = 3
        eq(int(back[1, 1]), 3, "a torch tensor on shareable memory is sent zero-copy")
    reap(pid, "torch echo child")
    a, b = d.pair()
    with a, b:
        a.send(torch.ones(3, dtype=torch.bfloat16))
        raises(lambda: b.recv(5), d.ProtocolError, "bfloat16", "a bfloat16 tensor is sent as bfloat16, which "
               "recv refuses (NumPy has no bfloat16)")


# ---- hostile messages -------------------------------------------------------------------------------

def message(dtype=(2, 32), shape=(4,), strides=(1,), flags=0, size=16, offset=0, magic=b"DLIP", version=1,
            kind=1, length=None, crc=None, device=1, lanes=1, ndim=None):
    ndim = len(shape) if ndim is None else ndim
    length = 56 + 16 * len(shape) if length is None else length
    device = device if isinstance(device, tuple) else (device, 0)
    head = struct.pack("<4sHHIIIiBBHIQQq", magic, version, kind, length, 0, device[0], device[1], dtype[0],
                       dtype[1], lanes, ndim, flags, size, offset)
    msg = bytearray(head + struct.pack("<%dq%dq" % (len(shape), len(strides)), *shape, *strides))
    struct.pack_into("<I", msg, 12, zlib.crc32(msg) if crc is None else crc)
    return bytes(msg)


def sealed(size, seals=d.F_SEAL_SHRINK | d.F_SEAL_GROW):
    fd = os.memfd_create("hostile", d.MFD_CLOEXEC | d.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    if seals:
        fcntl.fcntl(fd, d.F_ADD_SEALS, seals)
    return fd


def send_raw(sock, data, fds):
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sock.sendmsg([data], anc)


@test
def hostile_corpus():
    raw, ch = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ch = d.Channel(ch)
    tmp = tempfile.TemporaryFile()
    tmp.truncate(4096)
    r, w = os.pipe()
    cases = [
        ("garbage", os.urandom(200), "magic"),
        ("a short record", b"DLIP\x01\x00", "too short"),
        ("a record longer than any valid one", b"DLIP" + bytes(5000), "too long"),
        ("a truncated message", message(shape=(4, 4), strides=(4, 1), size=64)[:-8], "length"),
        ("bad magic", message(magic=b"DLIQ"), "magic"),
        ("version 2", message(version=2), "version 2"),
        ("kind 7", message(kind=7), "kind 7"),
        ("a length field that lies", message(length=1000), "length field"),
        ("ndim 65", message(ndim=65), "ndim 65"),
        ("65 dimensions", message(shape=(1,) * 65, strides=(0,) * 65), "too long"),
        ("ndim that disagrees with the length", message(ndim=2), "ndim"),
        ("a bad CRC", message(crc=12345), "CRC"),
        ("an unknown dtype", message(dtype=(3, 64)), "unknown dtype"),
        ("bfloat16", message(dtype=(4, 16)), "bfloat16"),
        ("float8", message(dtype=(10, 8)), "float8_e4m3fn"),
        ("two lanes", message(lanes=2), "lanes"),
        ("unknown flags", message(flags=2), "flags"),
        ("a cuda tensor", message(device=2), "cuda"),
        ("cpu:1", message(device=(1, 1)), "cpu:1"),
        ("a negative dimension", message(shape=(-1,), strides=(1,)), "negative"),
        ("a layout past the end of the file", message(shape=(5,)), "outside"),
        ("a negative offset", message(offset=-4), "outside"),
        ("negative strides below the file", message(shape=(4,), strides=(-1,), offset=8), "outside"),
        ("a huge stride", message(shape=(2,), strides=(1 << 58,)), "outside"),
        ("a stride whose bytes overflow", message(shape=(1, 2), strides=(1 << 62, 1)), "stride out of range"),
        ("a shape whose product overflows", message(shape=(1 << 40, 1 << 40), strides=(0, 0)), "too large"),
        ("a size field that lies", message(size=1 << 20), "says"),
        ("a huge size field", message(size=(1 << 64) - 1), "size"),
    ]
    for desc, data, pattern in cases:
        fd = sealed(16)
        _hostile(raw, ch, "hostile: " + desc, data, [fd], pattern)
        os.close(fd)
    good = message()
    fd = sealed(16, 0)
    _hostile(raw, ch, "hostile: an unsealed memfd", good, [fd], "not sealed")
    os.close(fd)
    fd = sealed(16, d.F_SEAL_GROW)
    _hostile(raw, ch, "hostile: a memfd that can still shrink", good, [fd], "not sealed")
    os.close(fd)
    _hostile(raw, ch, "hostile: a regular file", good, [tmp.fileno()], "not a memfd")
    _hostile(raw, ch, "hostile: a pipe", good, [r], "not a memfd")
    _hostile(raw, ch, "hostile: a socket", good, [raw.fileno()], "not a memfd")
    _hostile(raw, ch, "hostile: no descriptor", good, [], "0 descriptors")
    _hostile(raw, ch, "hostile: an empty record", b"", [], "too short")
    fd, fd2 = sealed(16), sealed(16)
    _hostile(raw, ch, "hostile: two descriptors", good, [fd, fd2], "2 descriptors")
    _hostile(raw, ch, "hostile: 200 descriptors", good, [fd] * 100 + [fd2] * 100, "too many descriptors")
    _hostile(raw, ch, "hostile: 200 descriptors and garbage", b"x" * 3, [fd] * 200, "too many descriptors")
    os.close(fd2)
    wo = os.open("/proc/self/fd/%d" % fd, os.O_WRONLY)
    _hostile(raw, ch, "hostile: a write-only descriptor", good, [wo], "write-only")
    os.close(wo)
    os.close(fd)
    try:  # a hugetlb memfd (2 MiB pages): a peer that punches a page out makes the next touch SIGBUS
        fd = os.memfd_create("hostile", d.MFD_CLOEXEC | d.MFD_ALLOW_SEALING | os.MFD_HUGETLB)
        os.ftruncate(fd, 2 << 20)
        fcntl.fcntl(fd, d.F_ADD_SEALS, d.F_SEAL_SHRINK | d.F_SEAL_GROW)
    except OSError as e:
        skip("hostile: a hugetlb memfd", "this kernel makes none (%s)" % e)
    else:
        _hostile(raw, ch, "hostile: a hugetlb memfd", message(size=2 << 20), [fd], "hugetlb memfd is refused")
        os.close(fd)
    fd = sealed(16, d.F_SEAL_SHRINK | d.F_SEAL_GROW | d.F_SEAL_WRITE)
    send_raw(raw, good, [fd])
    os.close(fd)
    got = ch.recv(1)
    ok(got is not None and not got.flags.writeable, "a memfd sealed against writes gives a read-only array")
    del got
    fd = sealed(16)
    send_raw(raw, message(shape=(0, 5), strides=(5, 1), offset=1 << 40), [fd])
    os.close(fd)
    got = ch.recv(1)
    eq(got is not None and got.shape, (0, 5), "an empty layout maps nothing (its offset is not used)")
    raw.shutdown(socket.SHUT_WR)
    before = counts()
    raises(lambda: ch.recv(1), d.ChannelClosed, "closed", "hostile: a peer that closes")
    eq(counts(), before, "no descriptor leaked after end of file")
    tmp.close()
    os.close(r)
    os.close(w)
    raw.close()
    ch.close()


def _hostile(raw, ch, desc, data, fds, pattern):
    before = counts()
    send_raw(raw, data, fds)
    raises(lambda: ch.recv(1), d.ProtocolError, pattern, desc)
    after = counts()
    ok(after == before, desc + ": no descriptor or mapping leaked", "before %r, after %r" % (before, after))
    x = d.zeros(2, "int8")
    send_raw(raw, message(dtype=(0, 8), shape=(2,), size=2), [x.base.block.fd])
    got = ch.recv(1)
    ok(got is not None and got.tolist() == [0, 0], desc + ": the channel still works")


def main():
    for fn in TESTS:
        try:
            fn()
        except Exception:
            ok(False, "%s raised" % fn.__name__, traceback.format_exc())
    print("1..%d" % _count)
    if _failed:
        print("# %d of %d failed" % (_failed, _count))
    return 1 if _failed else 0


if __name__ == "__main__":
    sys.exit(main())
