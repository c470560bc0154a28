"""dlpack_ipc: NumPy arrays between processes without copying, the protocol of Lua's `dlpack.ipc`.

The memory is an anonymous memfd sealed against shrinking and growing; its file descriptor
crosses a Unix socket (SOCK_SEQPACKET, SCM_RIGHTS) and the receiver maps it MAP_SHARED, so a
write on one side is seen on the other. The wire format (version 1) and the threat model are
those of docs/ipc.md. Linux only; standard library and NumPy only:

    import dlpack_ipc
    with dlpack_ipc.listen("@camera") as listener:      # '@': the abstract namespace, no file
        ch = listener.accept(timeout=5)                 # a Channel, or None after 5 s
        frame = dlpack_ipc.zeros((480, 640, 3), "uint8")  # shareable memory: sent without a copy
        frame[...] = 7
        ch.send(frame)                                  # the peer sees later writes too
        ch.send(frame[::-1, :, 0], readonly=True)       # a view travels as a view; readonly: kernel-enforced
        a = ch.recv(timeout=0)                          # poll: an array on the shared memory, or None
        ch.close()

    ch = dlpack_ipc.connect("@camera", timeout=5)      # waits up to 5 s for a listener
    t = torch.from_dlpack(ch.recv())                    # no copy: the array keeps the mapping alive

- `listen(path)` -> Listener: `.accept(timeout=None)` -> Channel or None, `.fileno()`, `.close()`
  (removes the socket file it made; a stale file nobody listens on is replaced), `with`.
- `connect(path, timeout=None)` -> Channel; without a timeout it raises ConnectionRefusedError at
  once when nobody listens, with one it retries until the time is up (then None, as Lua's nil).
- `Channel.send(x, readonly=False)`: `x` a NumPy array or anything with `__dlpack__` (PyTorch
  tensors, bfloat16 and float8 ones included). Zero-copy when `x` lies in shareable memory
  (made by `empty`/`zeros`/`share`, or received); otherwise it is copied into a new block first.
  `readonly=True` passes a descriptor reopened read-only: the receiver cannot map it writable.
  An array that is not writeable here (a received read-only one, `numpy.broadcast_to`) is sent
  read-only too, as Lua does.
- `Channel.recv(timeout=None)` -> a NumPy array on the shared memory (read-only when the sender
  asked for it), or None after `timeout` seconds (0 polls). Raises ChannelClosed (a
  ConnectionError whose message contains "closed") at end of file and ProtocolError (a
  ValueError) for a message it refuses; the channel still works after a ProtocolError.
  Dtypes NumPy lacks (bfloat16, the 8-, 6- and 4-bit floats) raise ProtocolError too.
- `Channel.fileno()`, `.close()`, `with`; `Channel(sock)` wraps a connected SOCK_SEQPACKET socket,
  `pair()` makes two connected channels (one process, or across fork).
- `empty(shape, dtype=float64)`, `zeros(shape, dtype=float64)`: arrays in shareable memory;
  `share(x)` -> `x` as a NumPy array in shareable memory (itself when it already is);
  `shareable(x)` -> bool.

Memory lives while any array (or view, or torch tensor made from one) uses it: received
arrays keep their descriptor and mapping through their `base`, and both are closed when the
last array goes. Both sides map the same pages: send a copy (`share(x.copy())`) when the peer
must get a snapshot.

Command line (for examples and tests; PATH as for listen, --timeout S seconds, default 10):

    python3 examples/dlpack_ipc.py echo PATH        connect to PATH (waiting up to S seconds) and send
                                                    every array received back unchanged, zero-copy, until
                                                    the peer closes; a message it refuses is reported on
                                                    stderr and skipped (the channel still works)
    python3 examples/dlpack_ipc.py serve-echo PATH  listen at PATH, accept one peer (within S seconds),
                                                    echo as above
    python3 examples/dlpack_ipc.py print PATH       connect and print each array received

NumPy >= 2 is needed (numpy.from_dlpack for objects with `__dlpack__`). To import the module,
put examples/ on PYTHONPATH.
"""
import bisect
import ctypes
import errno
import fcntl
import mmap
import os
import select
import socket
import stat
import struct
import sys
import threading
import time
import weakref
import zlib
from array import array

import numpy

__all__ = ["listen", "connect", "pair", "Listener", "Channel", "empty", "zeros", "share", "shareable",
           "ProtocolError", "ChannelClosed"]

# ---- Linux constants that older Pythons lack ----------------------------------------------------

F_ADD_SEALS = getattr(fcntl, "F_ADD_SEALS", 1033)
F_GET_SEALS = getattr(fcntl, "F_GET_SEALS", 1034)
F_SEAL_SEAL = getattr(fcntl, "F_SEAL_SEAL", 1)
F_SEAL_SHRINK = getattr(fcntl, "F_SEAL_SHRINK", 2)
F_SEAL_GROW = getattr(fcntl, "F_SEAL_GROW", 4)
F_SEAL_WRITE = getattr(fcntl, "F_SEAL_WRITE", 8)
F_SEAL_FUTURE_WRITE = getattr(fcntl, "F_SEAL_FUTURE_WRITE", 16)
MFD_CLOEXEC = getattr(os, "MFD_CLOEXEC", 1)
MFD_ALLOW_SEALING = getattr(os, "MFD_ALLOW_SEALING", 2)
MSG_NOSIGNAL = getattr(socket, "MSG_NOSIGNAL", 0x4000)
MSG_CMSG_CLOEXEC = getattr(socket, "MSG_CMSG_CLOEXEC", 0x40000000)

# ---- wire format, version 1 (docs/ipc.md) -------------------------------------------------------

MAGIC = b"DLIP"
VERSION = 1
KIND_TENSOR = 1
MAX_NDIM = 64
_HEAD = struct.Struct("<4sHHIIIiBBHIQQq")  # magic .. offset: 56 bytes
_HEAD_SIZE = _HEAD.size
_MAX_MESSAGE = _HEAD_SIZE + 16 * MAX_NDIM
_MAX_FDS = 8  # room in the control buffer: more is MSG_CTRUNC, an error
_CRC_AT = 12
_CONTROL_SPACE = socket.CMSG_SPACE(4 * _MAX_FDS)
FLAG_READ_ONLY = 1
FLAG_IS_COPIED = 2
FLAG_IS_SUBBYTE_TYPE_PADDED = 4
_KNOWN_FLAGS = FLAG_READ_ONLY | FLAG_IS_SUBBYTE_TYPE_PADDED
DEVICE_CPU = 1
_DEVICE_NAMES = {1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal", 9: "vpi",
                 10: "rocm", 11: "rocm_host", 13: "cuda_managed", 14: "oneapi", 15: "webgpu", 16: "hexagon"}
_INT64_MAX = (1 << 63) - 1

# DLPack (code, bits) -> NumPy dtype name; _NO_NUMPY: the dtypes of the protocol NumPy lacks (names, for errors)
_DTYPES = {(6, 8): "bool", (0, 8): "int8", (0, 16): "int16", (0, 32): "int32", (0, 64): "int64",
           (1, 8): "uint8", (1, 16): "uint16", (1, 32): "uint32", (1, 64): "uint64",
           (2, 16): "float16", (2, 32): "float32", (2, 64): "float64",
           (5, 64): "complex64", (5, 128): "complex128"}
_NUMPY_DTYPES = {key: numpy.dtype(name) for key, name in _DTYPES.items()}
_NO_NUMPY = {(4, 16): "bfloat16", (7, 8): "float8_e3m4", (8, 8): "float8_e4m3", (9, 8): "float8_e4m3b11fnuz",
             (10, 8): "float8_e4m3fn", (11, 8): "float8_e4m3fnuz", (12, 8): "float8_e5m2",
             (13, 8): "float8_e5m2fnuz", (14, 8): "float8_e8m0fnu", (15, 6): "float6_e2m3fn",
             (16, 6): "float6_e3m2fn", (17, 4): "float4_e2m1fn"}
_NUMPY_KINDS = {"b": 6, "i": 0, "u": 1, "f": 2, "c": 5}
# torch dtypes NumPy lacks, sent as an integer view of the same bits with their own DLPack code
_TORCH_RAW = {"torch.bfloat16": (4, 16), "torch.float8_e4m3fn": (10, 8), "torch.float8_e4m3fnuz": (11, 8),
              "torch.float8_e5m2": (12, 8), "torch.float8_e5m2fnuz": (13, 8), "torch.float8_e8m0fnu": (14, 8)}


class ProtocolError(ValueError):
    """A message this side refuses (the peer is broken or hostile); the channel still works."""


class ChannelClosed(ConnectionError):
    """The peer closed the channel (or died)."""


# ---- mappings -----------------------------------------------------------------------------------
# mmap(2) through ctypes rather than the mmap module, which keeps a dup of every descriptor it
# maps: a block holds exactly one descriptor and one mapping, released together.

_libc = ctypes.CDLL(None, use_errno=True)
_mmap = getattr(_libc, "mmap64", None) or _libc.mmap
_mmap.restype = ctypes.c_void_p
_mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int64]
_munmap = _libc.munmap
_munmap.restype = ctypes.c_int
_munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value
_PAGE = mmap.PAGESIZE
_fstatfs = _libc.fstatfs
_fstatfs.restype = ctypes.c_int
_fstatfs.argtypes = [ctypes.c_int, ctypes.c_void_p]
_SHMEM_MAGIC, _HUGETLB_MAGIC = 0x01021994, 0x958458F6  # statfs's f_type (<linux/magic.h>)


def _fs_type(fd):
    """statfs's f_type of the file system fd lies on (its first field, a long), or None."""
    buf = ctypes.create_string_buffer(256)  # struct statfs is 120 bytes on 64-bit Linux
    if _fstatfs(fd, buf) != 0:
        return None
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF


def _map(fd, length, file_start, writable):
    prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
    addr = _mmap(None, length, prot, mmap.MAP_SHARED, fd, file_start)
    if addr is None or addr == _MAP_FAILED:
        e = ctypes.get_errno()
        raise OSError(e, "mmap of %d bytes: %s" % (length, os.strerror(e)))
    return addr


# The registry of live blocks: mapping start address -> weak reference to the block, and the sorted
# start addresses (mappings never overlap). A block's finaliser leaves the registry before munmap.
_registry = {}
_starts = []
_lock = threading.RLock()


def _release(addr, length, fd):
    with _lock:
        _registry.pop(addr, None)
        i = bisect.bisect_left(_starts, addr)
        if i < len(_starts) and _starts[i] == addr:
            del _starts[i]
    _munmap(addr, length)
    os.close(fd)


class _Block:
    """`length` bytes of the memfd `fd` from `file_start` (a page boundary), mapped at `addr`."""
    __slots__ = ("fd", "addr", "length", "file_start", "size", "readonly", "fd_readonly", "__weakref__")

    def __init__(self, fd, size, file_start, length, readonly, fd_readonly):
        # the caller owns fd until this returns; then the block does
        self.addr = _map(fd, length, file_start, not readonly)
        self.fd, self.size, self.file_start, self.length = fd, size, file_start, length
        self.readonly, self.fd_readonly = readonly, fd_readonly
        finalizer = weakref.finalize(self, _release, self.addr, length, fd)
        finalizer.atexit = False  # at exit the kernel unmaps; arrays may still be in use until then
        with _lock:
            _registry[self.addr] = weakref.ref(self)
            bisect.insort(_starts, self.addr)


class _Memory:
    """The base of the arrays on a block: NumPy reads the layout, the arrays keep the block alive."""
    __slots__ = ("__array_interface__", "block")

    def __init__(self, block, interface):
        self.block, self.__array_interface__ = block, interface


def _array_on(block, address, shape, dtype, strides):
    interface = {"version": 3, "shape": tuple(shape), "typestr": dtype.str, "data": (address, block.readonly),
                 "strides": None if strides is None else tuple(strides)}
    return numpy.asarray(_Memory(block, interface))


def _find_block(address):
    with _lock:
        i = bisect.bisect_right(_starts, address) - 1
        if i < 0:
            return None
        block = _registry[_starts[i]]()
    if block is not None and block.addr <= address < block.addr + block.length:
        return block
    return None


def _span(shape, strides):
    """(lowest, highest) element offsets the layout reaches from element 0 (non-empty layouts)."""
    low = high = 0
    for n, s in zip(shape, strides):
        if s < 0:
            low += (n - 1) * s
        else:
            high += (n - 1) * s
    return low, high


# ---- shareable memory ---------------------------------------------------------------------------

def _new_memfd(nbytes):
    fd = os.memfd_create("dlpack-ipc", MFD_CLOEXEC | MFD_ALLOW_SEALING)
    try:
        # Mode 0400: a receiver of a read-only descriptor cannot reopen /proc/PID/fd/N for writing
        # (unless it is root); this side keeps its read-write descriptor and mapping.
        os.fchmod(fd, 0o400)
        if nbytes:
            os.ftruncate(fd, nbytes)
        fcntl.fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _shape_of(shape):
    if isinstance(shape, (int, numpy.integer)):
        shape = (shape,)
    shape = tuple(int(n) for n in shape)
    if any(n < 0 for n in shape):
        raise ValueError("dlpack_ipc.empty: negative dimension in shape %r" % (shape,))
    return shape


def empty(shape, dtype=None):
    """An uninitialised NumPy array in shareable memory (a sealed memfd): sent without a copy."""
    shape, dtype = _shape_of(shape), numpy.dtype(dtype)
    _dl_dtype(dtype, "dlpack_ipc.empty")
    nbytes = dtype.itemsize
    for n in shape:
        nbytes *= n
    if nbytes == 0:
        return numpy.empty(shape, dtype)  # nothing to share: send makes an empty memfd for it
    if nbytes > _INT64_MAX:
        raise ValueError("dlpack_ipc.empty: %r of %s is too large" % (shape, dtype))
    fd = _new_memfd(nbytes)
    try:  # the block's range ends where the file does, so that no array reaching past it is "shareable"
        block = _Block(fd, nbytes, 0, nbytes, readonly=False, fd_readonly=False)
    except BaseException:
        os.close(fd)
        raise
    return _array_on(block, block.addr, shape, dtype, None)


def zeros(shape, dtype=None):
    """A NumPy array of zeros in shareable memory (a new memfd reads as zeros)."""
    return empty(shape, dtype)


def _dl_dtype(dtype, where):
    code = _NUMPY_KINDS.get(dtype.kind)
    if code is None or (code, dtype.itemsize * 8) not in _DTYPES:
        raise TypeError("%s: dtype %s has no DLPack equivalent the protocol knows" % (where, dtype))
    return code, dtype.itemsize * 8


def _as_array(x, where):
    """x as a NumPy array (zero-copy for anything with __dlpack__ on the cpu) and its DLPack dtype
    (code, bits), which differs from the array's for the torch dtypes NumPy lacks."""
    if isinstance(x, numpy.ndarray):
        arr, raw = x, None
    elif hasattr(x, "__dlpack__"):
        raw = _TORCH_RAW.get(str(getattr(x, "dtype", "")))
        if raw is not None:  # a torch tensor of a dtype NumPy lacks: its bits as integers
            import torch
            x = x.view(torch.int16 if raw[1] == 16 else torch.uint8)
        try:
            arr = numpy.from_dlpack(x)
        except (BufferError, RuntimeError, TypeError, ValueError):
            if not hasattr(x, "cpu"):  # e.g. a torch tensor on a GPU: through host memory
                raise
            arr = numpy.from_dlpack(x.cpu())
    else:
        arr, raw = numpy.asarray(x), None
    if raw is None:
        raw = _dl_dtype(arr.dtype, where)
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return arr, raw


def _locate(arr):
    """(block, byte offset of element 0 in the file, element strides) when arr lies in a live block
    with a layout the protocol can describe, else None."""
    itemsize = arr.dtype.itemsize
    if any(s % itemsize for s in arr.strides):
        return None
    address = arr.__array_interface__["data"][0]
    low, high = _span(arr.shape, arr.strides)
    block = _find_block(address + low)
    if block is None or address + high + itemsize > block.addr + block.length:
        return None
    return block, address - block.addr + block.file_start, tuple(s // itemsize for s in arr.strides)


def shareable(x):
    """True when `x` (a NumPy array) lies in shareable memory, so that send does not copy it."""
    return isinstance(x, numpy.ndarray) and x.size > 0 and _locate(x) is not None


def share(x):
    """`x` as a NumPy array in shareable memory: itself (or a view of the same memory) when it
    already is, else a copy."""
    arr, _ = _as_array(x, "dlpack_ipc.share")
    if arr.size and _locate(arr) is not None:
        return arr
    copy = empty(arr.shape, arr.dtype)
    copy[...] = arr
    return copy


# ---- messages -----------------------------------------------------------------------------------

def _crc_of(msg):
    """zlib's CRC-32 of msg with its CRC field read as 0."""
    view = memoryview(msg)
    return zlib.crc32(view[_CRC_AT + 4:], zlib.crc32(b"\0\0\0\0", zlib.crc32(view[:_CRC_AT]))) & 0xFFFFFFFF


def _encode(dl_dtype, shape, strides, flags, size, offset):
    ndim = len(shape)
    code, bits = dl_dtype
    head = _HEAD.pack(MAGIC, VERSION, KIND_TENSOR, _HEAD_SIZE + 16 * ndim, 0, DEVICE_CPU, 0,
                      code, bits, 1, ndim, flags, size, offset)
    msg = bytearray(head + struct.pack("<%dq%dq" % (ndim, ndim), *shape, *strides))
    struct.pack_into("<I", msg, _CRC_AT, _crc_of(msg))
    return msg


def _recv_error(text):
    return ProtocolError("dlpack_ipc.recv: " + text)


def _decode(data):
    """The fields of a message, every length and value checked (docs/ipc.md, threat model)."""
    n = len(data)
    if n > _MAX_MESSAGE:
        raise _recv_error("message too long (more than %d bytes)" % _MAX_MESSAGE)
    if n < _HEAD_SIZE:
        raise _recv_error("message too short (%d bytes, at least %d needed)" % (n, _HEAD_SIZE))
    (magic, version, kind, length, crc, device_type, device_id, code, bits, lanes, ndim, flags, size,
     offset) = _HEAD.unpack_from(data)
    if magic != MAGIC:
        raise _recv_error("bad magic %r (not a dlpack.ipc message)" % magic)
    if version != VERSION:
        raise _recv_error("unsupported wire format version %d (this side speaks %d)" % (version, VERSION))
    if kind != KIND_TENSOR:
        raise _recv_error("unknown message kind %d" % kind)
    if length != n:
        raise _recv_error("length field %d does not match the message's %d bytes" % (length, n))
    if ndim > MAX_NDIM:
        raise _recv_error("ndim %d out of range (at most %d)" % (ndim, MAX_NDIM))
    if n != _HEAD_SIZE + 16 * ndim:
        raise _recv_error("length %d does not match ndim %d (%d bytes expected)" % (n, ndim, _HEAD_SIZE + 16 * ndim))
    if _crc_of(data) != crc:
        raise _recv_error("bad CRC-32 (message corrupted)")
    if device_type != DEVICE_CPU:
        name = _DEVICE_NAMES.get(device_type, "unknown")
        raise _recv_error("device type %d (%s) is not supported here: dlpack_ipc.py maps cpu memory only"
                          % (device_type, name))
    if device_id != 0:
        raise _recv_error("device cpu:%d does not exist (cpu:0 only)" % device_id)
    if lanes != 1:
        raise _recv_error("dtype with %d lanes (only 1 is supported)" % lanes)
    if (code, bits) not in _DTYPES:
        if (code, bits) in _NO_NUMPY:
            raise _recv_error("dtype %s has no NumPy equivalent" % _NO_NUMPY[(code, bits)])
        raise _recv_error("unknown dtype (code %d, bits %d)" % (code, bits))
    if flags & ~_KNOWN_FLAGS:
        raise _recv_error("unknown flags 0x%x" % flags)
    dims = struct.unpack_from("<%dq%dq" % (ndim, ndim), data, _HEAD_SIZE)
    shape, strides = dims[:ndim], dims[ndim:]
    numel = 1
    for d in shape:
        if d < 0:
            raise _recv_error("negative dimension in shape %r" % (shape,))
        numel *= d
    dtype = _NUMPY_DTYPES[(code, bits)]
    if numel * dtype.itemsize > _INT64_MAX:
        raise _recv_error("shape %r too large" % (shape,))
    if size > _INT64_MAX:
        raise _recv_error("file size %d out of range" % size)
    return dtype, shape, strides, flags, size, offset, numel


def _fds_of(ancdata):
    fds = []
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            a = array("i")
            a.frombytes(data[:len(data) - len(data) % a.itemsize])
            fds.extend(a)
    return fds


def _close_all(fds):
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


# ---- channels -----------------------------------------------------------------------------------

def _address(path, where):
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str) or not path:
        raise ValueError("%s: path must be a non-empty string, got %r" % (where, path))
    return "\0" + path[1:] if path.startswith("@") else path


def _wait(fd, timeout):
    """True when fd is readable within timeout seconds (None: wait forever)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    ms = None if timeout is None else max(0, int(timeout * 1000 + 0.999))
    return bool(poller.poll(ms))  # PEP 475: resumed after a signal with the time that is left


def _check_timeout(timeout, where):
    if timeout is not None and (not isinstance(timeout, (int, float)) or timeout != timeout or timeout < 0):
        raise ValueError("%s: timeout must be a number >= 0 or None, got %r" % (where, timeout))


class Channel:
    """A two-way channel over a connected AF_UNIX SOCK_SEQPACKET socket (it takes the socket)."""

    def __init__(self, sock):
        if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_SEQPACKET:
            raise ValueError("dlpack_ipc.Channel: an AF_UNIX SOCK_SEQPACKET socket is needed")
        sock.setblocking(True)
        self._sock = sock

    def _socket(self, where):
        if self._sock is None:
            raise ValueError("dlpack_ipc.%s: the channel is closed" % where)
        return self._sock

    def fileno(self):
        return self._socket("fileno").fileno()

    def close(self):
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "<dlpack_ipc.Channel %s>" % ("closed" if self._sock is None else "fd %d" % self._sock.fileno())

    def send(self, x, readonly=False):
        """Send x (zero-copy when it lies in shareable memory; copied into a new block otherwise)."""
        sock = self._socket("send")
        arr, dl_dtype = _as_array(x, "dlpack_ipc.send")
        if arr.size == 0:  # nothing to map: an empty sealed memfd carries the shape
            fd = _new_memfd(0)
            try:
                flags = FLAG_READ_ONLY if readonly or not arr.flags.writeable else 0
                msg = _encode(dl_dtype, arr.shape, (0,) * arr.ndim, flags, 0, 0)
                self._sendmsg(sock, msg, fd)
            finally:
                os.close(fd)
            return
        located = _locate(arr)
        if located is None:
            copy = empty(arr.shape, arr.dtype)
            copy[...] = arr
            arr = copy
            located = _locate(arr)
        block, offset, strides = located
        readonly = bool(readonly) or block.readonly or not arr.flags.writeable
        flags = FLAG_READ_ONLY if readonly else 0
        msg = _encode(dl_dtype, arr.shape, strides, flags, block.size, offset)
        fd, reopened = block.fd, None
        if readonly and not block.fd_readonly:
            try:
                os.fchmod(block.fd, 0o400)  # see _new_memfd; a peer's file may not be ours to change
            except OSError:
                pass
            reopened = fd = os.open("/proc/self/fd/%d" % block.fd, os.O_RDONLY | os.O_CLOEXEC)
        try:
            self._sendmsg(sock, msg, fd)
        finally:
            if reopened is not None:
                os.close(reopened)
        del arr  # the block may go now: the peer holds its own descriptor

    @staticmethod
    def _sendmsg(sock, msg, fd):
        try:
            sock.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array("i", [fd]))], MSG_NOSIGNAL)
        except (BrokenPipeError, ConnectionResetError) as e:
            raise ChannelClosed(e.errno, "dlpack_ipc.send: channel closed by the peer") from None

    def recv(self, timeout=None):
        """A NumPy array on the shared memory, or None after timeout seconds (0 polls, None waits)."""
        sock = self._socket("recv")
        _check_timeout(timeout, "dlpack_ipc.recv")
        deadline = None if timeout is None else time.monotonic() + timeout
        waited = False  # a message already there is taken without a poll
        while True:
            if waited:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not _wait(sock.fileno(), left):
                    return None
            try:
                data, ancdata, msg_flags, _ = sock.recvmsg(_MAX_MESSAGE + 1, _CONTROL_SPACE,
                                                           MSG_CMSG_CLOEXEC | socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                if waited and left == 0:
                    return None
                waited = True
                continue
            except ConnectionResetError:
                raise ChannelClosed(errno.ECONNRESET, "dlpack_ipc.recv: channel closed by the peer") from None
            return _receive(sock, data, ancdata, msg_flags)


def _hung_up(sock):
    """After an empty record: True when it was the end (the peer hung up), not an empty message."""
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN | getattr(select, "POLLRDHUP", 0x2000))
    return any(ev & (select.POLLHUP | getattr(select, "POLLRDHUP", 0x2000)) for _, ev in poller.poll(0))


def _receive(sock, data, ancdata, msg_flags):
    fds = _fds_of(ancdata)
    try:
        if not data and not fds and not msg_flags & socket.MSG_TRUNC and _hung_up(sock):
            raise ChannelClosed("dlpack_ipc.recv: channel closed by the peer")
        if msg_flags & socket.MSG_CTRUNC:
            raise _recv_error("too many descriptors attached (control message truncated)")
        if msg_flags & socket.MSG_TRUNC:
            raise _recv_error("message too long (more than %d bytes)" % _MAX_MESSAGE)
        dtype, shape, strides, flags, size, offset, numel = _decode(data)
        if len(fds) != 1:
            raise _recv_error("%d descriptors attached (exactly 1 expected)" % len(fds))
        fd = fds[0]
        try:
            seals = fcntl.fcntl(fd, F_GET_SEALS)
        except OSError:
            raise _recv_error("the descriptor is not a memfd (F_GET_SEALS fails): a file, pipe or socket "
                              "that could shrink under the mapping is refused") from None
        if seals & (F_SEAL_SHRINK | F_SEAL_GROW) != F_SEAL_SHRINK | F_SEAL_GROW:
            raise _recv_error("the memfd is not sealed against shrinking and growing (seals 0x%x)" % seals)
        fs_type = _fs_type(fd)
        if fs_type == _HUGETLB_MAGIC:  # hugetlb pages a peer punches out are gone at the next touch: SIGBUS
            raise _recv_error("a hugetlb memfd is refused (its pages can vanish under the mapping: SIGBUS)")
        if fs_type != _SHMEM_MAGIC:
            raise _recv_error("the descriptor is not a memfd")
        st = os.fstat(fd)
        if st.st_size != size:
            raise _recv_error("the memfd has %d bytes, the message says %d" % (st.st_size, size))
        access = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
        if access == os.O_WRONLY:
            raise _recv_error("the descriptor is write-only")
        fd_readonly = access == os.O_RDONLY
        readonly = bool(flags & FLAG_READ_ONLY) or fd_readonly or bool(seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE))
        if numel == 0:
            arr = numpy.empty(shape, dtype)
            arr.flags.writeable = not readonly
            return arr
        itemsize = dtype.itemsize
        low, high = _span(shape, strides)
        start, end = offset + low * itemsize, offset + (high + 1) * itemsize
        if any(abs(s) * itemsize > _INT64_MAX for s in strides):
            raise _recv_error("stride out of range in %r" % (strides,))
        if start < 0 or end > size:
            raise _recv_error("the layout (offset %d, shape %r, strides %r) reaches bytes [%d, %d) outside the "
                              "%d-byte memfd" % (offset, shape, strides, start, end, size))
        file_start = start - start % _PAGE
        block = _Block(fd, size, file_start, end - file_start, readonly, fd_readonly)
        fds.remove(fd)  # the block owns it now
        address = block.addr + (offset - file_start)
        return _array_on(block, address, shape, dtype, [s * itemsize for s in strides])
    finally:
        _close_all(fds)


def pair():
    """Two connected channels (socketpair): for one process, or across fork."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    return Channel(a), Channel(b)


def connect(path, timeout=None):
    """A channel to the listener at path ('@name': abstract). Without a timeout, raises
    ConnectionRefusedError at once when nobody listens; with one, retries until it elapses and
    then returns None."""
    _check_timeout(timeout, "dlpack_ipc.connect")
    address = _address(path, "dlpack_ipc.connect")
    deadline = None if timeout is None else time.monotonic() + timeout
    pause = 0.001
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock.connect(address)
            return Channel(sock)
        except (FileNotFoundError, ConnectionRefusedError, BlockingIOError) as e:  # EAGAIN: the backlog is full
            sock.close()
            if deadline is None:
                raise ConnectionRefusedError(e.errno, "dlpack_ipc.connect: nobody listens at %s" % path) from None
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.05)
        except BaseException:
            sock.close()
            raise


class Listener:
    """A listening AF_UNIX SOCK_SEQPACKET socket at path ('@name': the abstract namespace)."""

    def __init__(self, path):
        self.path = path
        address = _address(path, "dlpack_ipc.listen")
        self._made = None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            try:
                sock.bind(address)
            except OSError as e:
                if e.errno != errno.EADDRINUSE or address.startswith("\0") or not _stale(address):
                    raise OSError(e.errno, "dlpack_ipc.listen: %s: %s" % (path, os.strerror(e.errno))) from None
                os.unlink(address)  # a socket file left by a process that is gone
                sock.bind(address)
            if not address.startswith("\0"):
                st = os.stat(address)
                self._made = (address, st.st_dev, st.st_ino)
            sock.listen(64)
        except BaseException:
            sock.close()
            raise
        self._sock = sock

    def fileno(self):
        if self._sock is None:
            raise ValueError("dlpack_ipc.fileno: the listener is closed")
        return self._sock.fileno()

    def accept(self, timeout=None):
        """A Channel, or None after timeout seconds (0 polls, None waits)."""
        if self._sock is None:
            raise ValueError("dlpack_ipc.accept: the listener is closed")
        _check_timeout(timeout, "dlpack_ipc.accept")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not _wait(self._sock.fileno(), left):
                return None
            self._sock.setblocking(False)
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                if left == 0:
                    return None
                continue
            finally:
                self._sock.setblocking(True)
            return Channel(conn)

    def close(self):
        sock, self._sock = self._sock, None
        if sock is None:
            return
        sock.close()
        if self._made is not None:
            address, dev, ino = self._made
            try:
                st = os.stat(address)
                if (st.st_dev, st.st_ino) == (dev, ino):  # still ours: not replaced by another listener
                    os.unlink(address)
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "<dlpack_ipc.Listener %r%s>" % (self.path, " closed" if self._sock is None else "")


def _stale(address):
    """True when the socket file at address is one nobody listens on any more."""
    try:
        if not stat.S_ISSOCK(os.lstat(address).st_mode):
            return False
    except OSError:
        return False
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        probe.connect(address)
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
    finally:
        probe.close()
    return False


def listen(path):
    """A Listener at path; '@name' is the abstract namespace (no file)."""
    return Listener(path)


# ---- command line -------------------------------------------------------------------------------

def _echo(ch):
    count = 0
    while True:
        try:
            arr = ch.recv()
        except ChannelClosed:
            return count
        except ProtocolError as e:  # refused (the channel still works): say so and go on
            print("dlpack_ipc.py echo: %s" % e, file=sys.stderr, flush=True)
            continue
        ch.send(arr)
        count += 1


def main(argv=None):
    import argparse
    parser = argparse.ArgumentParser(prog="dlpack_ipc.py", description="dlpack.ipc from Python")
    parser.add_argument("command", choices=["echo", "serve-echo", "print"])
    parser.add_argument("path", help="socket path, or @name for the abstract namespace")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the peer (default 10)")
    args = parser.parse_args(argv)
    if args.command == "serve-echo":
        with listen(args.path) as listener:
            ch = listener.accept(args.timeout)
        if ch is None:
            print("dlpack_ipc.py: nobody connected to %s within %g s" % (args.path, args.timeout), file=sys.stderr)
            return 1
    else:
        ch = connect(args.path, args.timeout)
        if ch is None:
            print("dlpack_ipc.py: nobody listened at %s within %g s" % (args.path, args.timeout), file=sys.stderr)
            return 1
    with ch:
        if args.command == "print":
            while True:
                try:
                    arr = ch.recv()
                except ChannelClosed:
                    return 0
                print(arr.dtype, arr.shape, "readonly" if not arr.flags.writeable else "writable", arr.tolist(),
                      flush=True)
        _echo(ch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
