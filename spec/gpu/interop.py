"""spec/gpu/interop.py: PyTorch and CuPy CUDA tensors exchanged with Lua both ways, in one process.

Two ways to run it (from the repository root; see docs/gpu.md):

    python3 spec/gpu/interop.py        Lua loaded into this python3 with ctypes
                                       (build/gpu/libluapeer.so, spec/gpu/luapeer_ctypes.py)
    DLPACK_PEERS_SCRIPT=spec/gpu/interop.py ./build/peers
                                       Python embedded in C (spec/peers/peers.c)

Both give the same `luapeer` module. Prints TAP, ends with "N passed, M failed,
K skipped", and exits 1 on a failure (under build/peers it sets `failures`).
Without CUDA in Lua it prints "1..0 # SKIP <reason>"; a missing or CPU-only
PyTorch or CuPy turns its group into SKIPs. Long GPU work on a stream comes from
spec/gpu/kernels.cu (gpu_kernels.sleep, when build/gpu/gpu_kernels.so exists) or
else torch.cuda._sleep on that stream.
"""
import gc
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
_root = os.path.dirname(os.path.dirname(_here))
_build = os.environ.get("DLPACK_BUILD", os.path.join(_root, "build"))
try:
    import luapeer as lp  # built into build/peers
    _how = "embedded (build/peers)"
except ImportError:
    sys.path.insert(0, _here)
    import luapeer_ctypes as lp
    _how = "ctypes (build/gpu/libluapeer.so)"

sys.path.insert(0, os.path.join(_root, "spec", "peers"))
import tap  # noqa: E402  (spec/peers/tap.py)
from tap import group  # noqa: E402

failures = 0  # copied from tap after the run, read by build/peers
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


# ---- peers -------------------------------------------------------------------

def _import_torch():
    import torch
    import torch.utils.dlpack  # noqa: F401
    if not torch.cuda.is_available():
        raise ImportError("torch %s sees no CUDA device" % torch.__version__)
    return torch


def _import_cupy():
    import cupy
    if cupy.cuda.runtime.getDeviceCount() < 1:
        raise ImportError("cupy sees no CUDA device")
    return cupy


peers = tap.import_peers(("torch", _import_torch), ("cupy", _import_cupy))  # name -> (module or None, reason)


class LuaTensor:
    """A Python producer standing for a Lua tensor (`expr` is evaluated in Lua at each export).
    It records the keyword arguments of every __dlpack__ call (`calls`)."""

    def __init__(self, expr):
        self.expr, self.calls = expr, []

    def __dlpack_device__(self):
        return lp.device(self.expr)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.calls.append({"stream": stream, "max_version": max_version, "dl_device": dl_device, "copy": copy})
        versioned = max_version is not None and max_version[0] >= 1
        return lp.export(self.expr, versioned=versioned, copy=copy, stream=stream,
                         dl_device=None if dl_device is None else tuple(dl_device))


def open_lua():
    lp.open()
    lp.run("package.cpath = ... .. '/gpu/?.so;' .. package.cpath", _build)


def lua_ptr(expr):
    return lp.run("return %s:data_ptr()" % expr)


def lua_stream(name):
    """A new dlpack.cuda.Stream kept in the Lua global `name`; returns its handle."""
    return lp.run("%s = dlpack.cuda.Stream{} return %s.handle" % (name, name))


_cycles_per_ms = None


def sleep_on(handle, ms):
    """Put about ms milliseconds of GPU work on the stream `handle` (device 0)."""
    global _cycles_per_ms
    # (`K.sleep(..., 0)` would pass the handle alone: `...` followed by an argument is cut to one
    # value, and the first GPU run's ordering cases slept 0 ms)
    if lp.run("local handle, ms = ... local ok, K = pcall(require, 'gpu_kernels') "
              "if ok then K.sleep(handle, ms, 0) end return ok", int(handle), float(ms)):
        return
    torch = peers["torch"][0]
    if torch is None:
        raise RuntimeError("no way to sleep on a stream: gpu_kernels not built and torch missing")
    if _cycles_per_ms is None:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        torch.cuda._sleep(10 ** 7)
        b.record()
        b.synchronize()
        _cycles_per_ms = 10 ** 7 / max(a.elapsed_time(b), 1e-3)
    with torch.cuda.stream(torch.cuda.ExternalStream(int(handle), device="cuda:0")):
        torch.cuda._sleep(int(_cycles_per_ms * ms))


def settled_free_memory(cupy):
    """The device's free memory once Python's garbage, CuPy's memory pools and torch's caching
    allocator (when torch is loaded) have given back what they keep: a case that measures memory
    another library lets go must not count what those caches hold (the first GPU run did)."""
    gc.collect()
    cupy.cuda.runtime.deviceSynchronize()
    cupy.get_default_memory_pool().free_all_blocks()
    cupy.get_default_pinned_memory_pool().free_all_blocks()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    return cupy.cuda.runtime.memGetInfo()[0]


def torch_capsule(x, stream=None):
    """x.__dlpack__ asking for a versioned capsule when this torch can make one."""
    try:
        return x.__dlpack__(stream=stream, max_version=(1, 0))
    except TypeError:
        return x.__dlpack__(stream=stream)


def cupy_capsule(a, stream=None):
    try:
        return a.__dlpack__(stream=stream, max_version=(1, 0))
    except TypeError:
        return a.__dlpack__(stream=stream)


# Count, in Lua, the elements of float32 device tensor `expr` that differ from v, by a
# copy to pinned memory on the Lua stream `stream` (so its ordering is what is tested).
COUNT_ON = """
local x, s, v = %s, %s, ...
local waiting = not s:query()
local h = dlpack.empty({x:numel()}, 'float32', 'cuda_host')
h:copy(x, {stream = s})
s:synchronize()
local bad = 0
for i = 1, x:numel() do if h[i] ~= v then bad = bad + 1 end end
return waiting, bad
"""

# ---- TAP groups --------------------------------------------------------------

N = 1 << 22  # 16 MiB of float32 for the ordering tests
SEQ = [float(i) * 0.5 for i in range(1000)]
MAKE_T = "T = dlpack.empty({1000}, 'float32') for i = 1, 1000 do T[i] = (i - 1) * 0.5 end T = T:to('cuda:0')"


@group("torch", "torch",
       ["torch → Lua: __dlpack__(stream=S) imports on cuda:0 sharing memory",
        "torch → Lua: the values read in Lua",
        "torch → Lua: a legacy capsule (torch.utils.dlpack.to_dlpack) imports too",
        "torch → Lua ordering: S waits for a side stream's long kernel + fill",
        "Lua → torch: torch.from_dlpack(obj) shares memory and values, with an explicit stream",
        "Lua → torch: writes in torch are seen by Lua, and back",
        "Lua → torch ordering: torch's stream waits for the Lua stream's pending copy",
        "Lua → torch: device memory returns once both torch and Lua let go (deleter ran)",
        "torch → Lua: torch's memory is freed when Lua lets go (deleter ran)",
        "dl_device=(1, 0): a host copy flagged IS_COPIED that torch reads",
        "lua_close: torch keeps Lua's memory; Lua's import of torch memory is released"])
def torch_group(t):
    torch = peers["torch"][0]
    tdl = torch.utils.dlpack
    S = lua_stream("S")
    x = torch.arange(1000, dtype=torch.float32, device="cuda") * 0.5
    cap = torch_capsule(x, stream=S)
    name = lp.capsule_name(cap)
    lp.run("X = dlpack.from_dlpack(...)", cap)
    t.ok("torch → Lua: __dlpack__(stream=S) imports on cuda:0 sharing memory",
         lp.run("return X.device") == "cuda:0" and lua_ptr("X") == x.data_ptr()
         and lp.capsule_name(cap).startswith("used_"),
         "device %r, ptr %r vs %r, capsule %r" % (lp.run("return X.device"), lua_ptr("X"), x.data_ptr(), name))
    tap.comment("torch %s gave a %r capsule" % (torch.__version__, name))
    t.eq("torch → Lua: the values read in Lua",
         lp.run("local h = X:to{device = 'cpu', stream = S} S:synchronize() return h:totable()"), SEQ)
    y = torch.full((7,), 2.5, device="cuda")
    lp.run("Y = dlpack.from_dlpack(...)", tdl.to_dlpack(y))
    t.ok("torch → Lua: a legacy capsule (torch.utils.dlpack.to_dlpack) imports too",
         lp.run("return Y:to('cpu'):totable()") == [2.5] * 7 and lua_ptr("Y") == y.data_ptr())

    side = torch.cuda.Stream()
    z = torch.zeros(N, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(1)  # warm
        sleep_on(side.cuda_stream, 300)
        z.fill_(3.0)
        cap = torch_capsule(z, stream=S)  # torch: S waits for side's work
    # the capsule imports, then COUNT_ON runs with the value alone as its `...`
    waiting, bad = lp.run("local cap, value = ...\nZ = dlpack.from_dlpack(cap)\n"
                          "return (function(...)\n" + COUNT_ON % ("Z", "S") + "\nend)(value)", cap, 3.0)
    t.ok("torch → Lua ordering: S waits for a side stream's long kernel + fill", waiting and bad == 0,
         "S waiting right after import: %r; elements not yet 3 when S read them: %d of %d" % (waiting, bad, N))

    lp.run(MAKE_T)
    obj = LuaTensor("T")
    tt = torch.from_dlpack(obj)
    streams = [c["stream"] for c in obj.calls]
    t.ok("Lua → torch: torch.from_dlpack(obj) shares memory and values, with an explicit stream",
         tt.is_cuda and tt.data_ptr() == lua_ptr("T") and tt.tolist() == SEQ
         and all(s is not None and s != 0 for s in streams),
         "ptr %r vs %r, calls %r" % (tt.data_ptr(), lua_ptr("T"), obj.calls))
    tap.comment("torch.from_dlpack called __dlpack__ with %r" % (obj.calls,))
    tt[0] = 42.0
    torch.cuda.synchronize()
    seen = lp.run("return T:to('cpu')[1]")
    lp.run("local h = T:to('cpu') h[2] = -1 T:copy(h)")
    t.ok("Lua → torch: writes in torch are seen by Lua, and back", seen == 42.0 and tt[1].item() == -1.0,
         "Lua saw %r, torch sees %r" % (seen, tt[1].item()))

    P = lua_stream("P")
    lp.run("T2 = dlpack.zeros({%d}, 'float32', 'cuda:0') SRC = dlpack.full({%d}, 5, 'float32', 'cuda_host')" % (N, N))
    torch.cuda.synchronize()
    sleep_on(P, 300)
    lp.run("T2:copy(SRC, {stream = P})")  # the module's async op: T2's work is on P
    B = torch.cuda.Stream()
    with torch.cuda.stream(B):
        u = torch.from_dlpack(LuaTensor("T2"))  # torch passes B
        waiting = not B.query()
        bad = (u != 5).sum()
    B.synchronize()
    t.ok("Lua → torch ordering: torch's stream waits for the Lua stream's pending copy",
         waiting and bad.item() == 0 and u.data_ptr() == lua_ptr("T2"),
         "B waiting right after import: %r; elements not yet 5 when B read them: %d of %d" % (waiting, bad.item(), N))
    lp.run("P:synchronize()")
    del u

    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    free0 = torch.cuda.mem_get_info()[0]
    lp.run("BIG = dlpack.zeros({%d}, 'float32', 'cuda:0')" % (GiB // 4))
    free1 = torch.cuda.mem_get_info()[0]
    big = torch.from_dlpack(LuaTensor("BIG"))
    lp.run("BIG:release() BIG = nil collectgarbage() collectgarbage()")
    free2 = torch.cuda.mem_get_info()[0]
    big.fill_(1.0)
    alive = big[-1].item() == 1.0
    del big
    gc.collect()
    torch.cuda.synchronize()
    free3 = torch.cuda.mem_get_info()[0]
    t.ok("Lua → torch: device memory returns once both torch and Lua let go (deleter ran)",
         free0 - free1 > GiB * 0.9 and free1 - free2 < 256 * MiB and alive and free0 - free3 < 256 * MiB,
         "free MiB: before %d, Lua alloc %d, Lua released %d, torch released %d"
         % (free0 // MiB, free1 // MiB, free2 // MiB, free3 // MiB))

    torch.cuda.empty_cache()
    m0 = torch.cuda.memory_allocated()
    w = torch.ones(GiB // 16, device="cuda")  # 256 MiB
    lp.run("W = dlpack.from_dlpack(...)", torch_capsule(w, stream=1))
    del w
    gc.collect()
    m1 = torch.cuda.memory_allocated()
    lp.run("W = nil collectgarbage() collectgarbage()")
    m2 = torch.cuda.memory_allocated()
    t.ok("torch → Lua: torch's memory is freed when Lua lets go (deleter ran)",
         m1 - m0 >= GiB // 4 and m2 - m0 < 16 * MiB,
         "allocated MiB: before %d, held by Lua %d, after Lua let go %d" % (m0 // MiB, m1 // MiB, m2 // MiB))

    cap = lp.export("T", versioned=True, dl_device=(1, 0))
    flags = lp.flags(cap)
    h = tdl.from_dlpack(cap)
    t.ok("dl_device=(1, 0): a host copy flagged IS_COPIED that torch reads",
         flags & 2 and h.device.type == "cpu" and h.tolist() == tt.tolist(),
         "flags %r, device %r" % (flags, h.device))

    lp.run("C1 = dlpack.full({3}, 9, 'float32', 'cuda:0')")
    c1 = torch.from_dlpack(LuaTensor("C1"))
    v = torch.ones(GiB // 16, device="cuda")
    lp.run("V = dlpack.from_dlpack(...)", torch_capsule(v, stream=1))
    del v
    gc.collect()
    m1 = torch.cuda.memory_allocated()
    lp.close()
    m2 = torch.cuda.memory_allocated()
    c1.add_(1)
    t.ok("lua_close: torch keeps Lua's memory; Lua's import of torch memory is released",
         c1.tolist() == [10.0] * 3 and m1 - m2 >= GiB // 4 - MiB,
         "c1 %r, allocated MiB before/after lua_close %d/%d" % (c1.tolist(), m1 // MiB, m2 // MiB))
    del c1
    gc.collect()
    open_lua()


@group("cupy", "cupy",
       ["Lua → CuPy: cupy.from_dlpack(obj) shares memory and values, with an explicit stream",
        "Lua → CuPy: writes in CuPy are seen by Lua",
        "CuPy → Lua: __dlpack__(stream=S) shares memory and values",
        "Lua → CuPy ordering: a CuPy stream waits for the Lua stream's pending copy",
        "Lua → CuPy: device memory returns once both let go (deleter ran)"])
def cupy_group(t):
    cupy = peers["cupy"][0]
    lua_stream("S")
    lp.run(MAKE_T)
    obj = LuaTensor("T")
    c = cupy.from_dlpack(obj)
    t.ok("Lua → CuPy: cupy.from_dlpack(obj) shares memory and values, with an explicit stream",
         c.data.ptr == lua_ptr("T") and cupy.asnumpy(c).tolist() == SEQ
         and all(k["stream"] is not None and k["stream"] != 0 for k in obj.calls),
         "ptr %r vs %r, calls %r" % (c.data.ptr, lua_ptr("T"), obj.calls))
    tap.comment("cupy %s: cupy.from_dlpack called __dlpack__ with %r" % (cupy.__version__, obj.calls))
    c[0] = 99
    cupy.cuda.runtime.deviceSynchronize()
    t.eq("Lua → CuPy: writes in CuPy are seen by Lua", lp.run("return T:to('cpu')[1]"), 99.0)

    a = cupy.arange(1000, dtype=cupy.float32) * 0.5
    cap = cupy_capsule(a, stream=lp.run("return S.handle"))
    lp.run("A = dlpack.from_dlpack(...)", cap)
    vals = lp.run("local h = A:to{device = 'cpu', stream = S} S:synchronize() return h:totable()")
    t.ok("CuPy → Lua: __dlpack__(stream=S) shares memory and values",
         lua_ptr("A") == a.data.ptr and vals == SEQ and lp.run("return A.device") == "cuda:0",
         "ptr %r vs %r" % (lua_ptr("A"), a.data.ptr))

    P = lua_stream("P")
    lp.run("T2 = dlpack.zeros({%d}, 'float32', 'cuda:0') SRC = dlpack.full({%d}, 5, 'float32', 'cuda_host')" % (N, N))
    cupy.cuda.runtime.deviceSynchronize()
    sleep_on(P, 300)
    lp.run("T2:copy(SRC, {stream = P})")
    cs = cupy.cuda.Stream(non_blocking=True)
    with cs:
        u = cupy.from_dlpack(LuaTensor("T2"))
        waiting = not cs.done
        bad = (u != 5).sum()
    cs.synchronize()
    t.ok("Lua → CuPy ordering: a CuPy stream waits for the Lua stream's pending copy",
         waiting and int(bad) == 0,
         "CuPy stream waiting right after import: %r; elements not yet 5: %d of %d" % (waiting, int(bad), N))
    lp.run("P:synchronize()")
    del u

    free0 = settled_free_memory(cupy)
    lp.run("BIG = dlpack.zeros({%d}, 'float32', 'cuda:0')" % (GiB // 4))
    big = cupy.from_dlpack(LuaTensor("BIG"))
    lp.run("BIG = nil collectgarbage() collectgarbage()")
    free1 = cupy.cuda.runtime.memGetInfo()[0]
    big.fill(1)
    del big
    free2 = settled_free_memory(cupy)
    t.ok("Lua → CuPy: device memory returns once both let go (deleter ran)",
         free0 - free1 > GiB * 0.9 and free0 - free2 < 256 * MiB,
         "free MiB: before %d, held by CuPy %d, after %d" % (free0 // MiB, free1 // MiB, free2 // MiB))


@group("three-way", ("torch", "cupy"),
       ["torch → Lua → CuPy shares one buffer; a CuPy write is seen by torch",
        "CuPy → Lua → torch shares one buffer"])
def three_way(t):
    torch, cupy = peers["torch"][0], peers["cupy"][0]
    x = torch.arange(1000, dtype=torch.float32, device="cuda")
    lp.run("W = dlpack.from_dlpack(...)", torch_capsule(x, stream=1))
    c = cupy.from_dlpack(LuaTensor("W"))
    c[1] = 7
    cupy.cuda.runtime.deviceSynchronize()
    t.ok("torch → Lua → CuPy shares one buffer; a CuPy write is seen by torch",
         c.data.ptr == x.data_ptr() and x[1].item() == 7.0, "ptrs %r %r" % (c.data.ptr, x.data_ptr()))
    a = cupy.arange(10, dtype=cupy.float32)
    lp.run("V = dlpack.from_dlpack(...)", cupy_capsule(a, stream=1))
    tv = torch.from_dlpack(LuaTensor("V"))
    t.ok("CuPy → Lua → torch shares one buffer", tv.data_ptr() == a.data.ptr and tv.tolist() == list(range(10)))
    del c, tv


# ---- run -----------------------------------------------------------------------------

def main():
    lp.open()
    available = lp.run("return dlpack.cuda.is_available()")
    reason = available[1] if isinstance(available, (list, tuple)) else None
    if not (available[0] if isinstance(available, (list, tuple)) else available):
        tap.line("1..0 # SKIP CUDA is not available in Lua: %s" % reason)
        lp.close()
        return
    lp.close()
    tap.plan()
    tap.versions(lp.lua_version(), peers, ("torch", "cupy"), "not usable", ["Lua via " + _how])
    tap.run_groups(peers, "not usable", open_lua, lambda: (lp.close(), gc.collect()))
    tap.summary()


main()
failures = tap.failures
if __name__ == "__main__" and lp.__name__ == "luapeer_ctypes":
    lp.close()
    sys.exit(1 if failures else 0)
