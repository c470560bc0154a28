"""Real DLPack peers in one process: PyTorch and NumPy exchange tensors with Lua.

Run by build/peers (spec/peers/peers.c), which embeds this interpreter and Lua
and provides the module `luapeer`. Prints TAP. A peer that cannot be imported
turns its tests into visible SKIPs; a Python exception is a `not ok` with the
traceback as comments. Sets `failures` (read by peers.c) instead of exiting.
"""
import gc
import os
import sys

_pydeps = os.environ.get("DLPACK_PEERS_PYTHONPATH", "build/pydeps")
if _pydeps:
    sys.path.insert(0, os.path.abspath(_pydeps))

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # for tap, next to this file

import luapeer as lp  # noqa: E402  (built into build/peers)
import tap  # noqa: E402  (spec/peers/tap.py)
from tap import group, raises  # noqa: E402

failures = 0  # copied from tap after the run, read by peers.c


# ---- peers -------------------------------------------------------------------

peers = tap.import_peers(("numpy", tap.import_numpy), ("torch", tap.import_torch))  # name -> (module or None, reason)


class LuaTensor:
    """A Python producer standing for a Lua tensor (`expr` is evaluated in Lua at each export)."""

    def __init__(self, expr):
        self.expr = expr

    def __dlpack_device__(self):
        return lp.device(self.expr)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if stream is not None and stream != -1:
            raise BufferError("a CPU tensor takes stream=None")
        if dl_device is not None and tuple(dl_device) != tuple(lp.device(self.expr)):
            raise BufferError("LuaTensor cannot move to device %r" % (dl_device,))
        versioned = max_version is not None and max_version[0] >= 1
        return lp.export(self.expr, versioned=versioned, copy=copy)


# ---- PyTorch (legacy capsules) -------------------------------------------------

TORCH_DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]


@group("torch → Lua", "torch",
       ["%s values, shape and dtype" % d for d in TORCH_DTYPES] +
       ["the consumed capsule is renamed used_dltensor",
        "a transposed, sliced view keeps its strides and values",
        "same data_ptr as the torch tensor",
        "a write in Lua is seen by torch",
        "a write in torch is seen by Lua",
        "the Lua tensor outlives the torch tensor"])
def torch_to_lua(t):
    torch, tdl = peers["torch"][0], peers["torch"][0].utils.dlpack
    samples = {
        "bool": [[True, False, True], [False, False, True]],
        "uint8": [0, 1, 200, 255],
        "int8": [-128, -1, 0, 127],
        "int16": [-32768, 7, 32767],
        "int32": [[-2**31, 0], [5, 2**31 - 1]],
        "int64": [[1, -2, 3], [2**40, -2**62, 2**63 - 1]],
        "float16": [0.5, -1.25, 65504.0, 1 / 3, float("inf")],
        "bfloat16": [1.0, -2.5, 3.140625, 1e30],
        "float32": [[0.25, -0.5, 1e-20], [3.4e38, 1 / 3, -0.0]],
        "float64": [[1e-300, -0.0], [float("inf"), 2.5]],
    }
    for name in TORCH_DTYPES:
        x = torch.tensor(samples[name], dtype=getattr(torch, name))
        try:
            cap = tdl.to_dlpack(x)
        except RuntimeError as e:  # torch 1.13: "Bool type is not supported by dlpack"
            t.skip("%s values, shape and dtype" % name, "torch %s cannot export %s: %s" % (torch.__version__, name, e))
            continue
        got = lp.run("local t = ...; return {t.dtype, t.shape, t:totable()}", cap)
        t.eq("%s values, shape and dtype" % name, got, [name, list(x.shape), x.tolist()])

    cap = tdl.to_dlpack(torch.zeros(3))
    lp.run("local t = ...", cap)
    t.eq("the consumed capsule is renamed used_dltensor", lp.capsule_name(cap), "used_dltensor")

    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    view = base.t()[1::2]  # shape (3, 4), strides (2, 6), storage offset 1
    got = lp.run("V = ...; return {V.shape, V.strides, V:totable(), V:is_contiguous()}", tdl.to_dlpack(view))
    t.eq("a transposed, sliced view keeps its strides and values", got,
         [list(view.shape), list(view.stride()), view.tolist(), False])
    t.eq("same data_ptr as the torch tensor", lp.run("return V:data_ptr()"), view.data_ptr())
    lp.run("V:set(1, 1, -7); V[3][4] = 99")
    # V[1][1] is base.t()[1, 0] = base[0, 1]; V[3][4] is base.t()[5, 3] = base[3, 5]
    t.ok("a write in Lua is seen by torch", base[0, 1].item() == -7 and base[3, 5].item() == 99,
         "base = %r" % base.tolist())
    view[1, 2] = 1234.5
    t.eq("a write in torch is seen by Lua", lp.run("return V:get(2, 3)"), 1234.5)

    x = torch.arange(5, dtype=torch.float64) * 2
    lp.run("K = ...", tdl.to_dlpack(x))
    del x, base, view
    gc.collect()
    t.eq("the Lua tensor outlives the torch tensor", lp.run("local v = K:totable(); K:release(); K = nil; V = nil;"
                                                            " collectgarbage(); return v"), [0.0, 2.0, 4.0, 6.0, 8.0])


@group("Lua → torch", "torch",
       ["values equal after torch.utils.dlpack.from_dlpack(capsule)",
        "torch renamed our capsule used_dltensor",
        "same data_ptr as the Lua tensor",
        "a write in torch is seen by Lua",
        "a write in Lua is seen by torch",
        "through the __dlpack__ protocol, a transposed view keeps its strides",
        "a read-only Lua tensor is refused as a legacy capsule (BufferError)",
        "the host buffer is not handed back while torch holds it, after lua_close",
        "torch tensors keep their values after lua_close",
        "dropping the torch tensors runs the host deleter exactly once"])
def lua_to_torch(t):
    torch, tdl = peers["torch"][0], peers["torch"][0].utils.dlpack
    before = lp.host_deletes()
    lp.push_host("H", "float32", (3, 4))
    lp.run("for i = 1, 3 do for j = 1, 4 do H:set(i, j, (i - 1) * 4 + j) end end")
    cap = lp.export("H")
    tt = tdl.from_dlpack(cap)
    expected = [[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], [9.0, 10.0, 11.0, 12.0]]
    t.ok("values equal after torch.utils.dlpack.from_dlpack(capsule)",
         tt.tolist() == expected and tt.dtype == torch.float32, "got %r %r" % (tt.dtype, tt.tolist()))
    t.eq("torch renamed our capsule used_dltensor", lp.capsule_name(cap), "used_dltensor")
    t.eq("same data_ptr as the Lua tensor", tt.data_ptr(), lp.run("return H:data_ptr()"))
    tt[0, 0] = 100
    t.eq("a write in torch is seen by Lua", lp.run("return H:get(1, 1)"), 100.0)
    lp.run("H:set(3, 4, -1)")
    t.eq("a write in Lua is seen by torch", tt[2, 3].item(), -1.0)
    tp = tdl.from_dlpack(LuaTensor("H:transpose(1, 2)"))
    t.ok("through the __dlpack__ protocol, a transposed view keeps its strides",
         tp.stride() == (1, 4) and tp.tolist() == tt.t().tolist() and tp.data_ptr() == tt.data_ptr(),
         "strides %r" % (tp.stride(),))
    e = raises(lambda: lp.export("H:as_readonly()"), Exception)
    t.ok("a read-only Lua tensor is refused as a legacy capsule (BufferError)", isinstance(e, BufferError),
         "raised %r" % (e,))
    lp.close()
    t.eq("the host buffer is not handed back while torch holds it, after lua_close", lp.host_deletes() - before, 0)
    expected[0][0], expected[2][3] = 100.0, -1.0
    t.ok("torch tensors keep their values after lua_close",
         tt.tolist() == expected and tp.tolist() == tt.t().tolist(), "got %r" % tt.tolist())
    del tt, tp, cap
    gc.collect()
    t.eq("dropping the torch tensors runs the host deleter exactly once", lp.host_deletes() - before, 1)


# ---- NumPy (versioned capsules, read-only) ----------------------------------------

NUMPY_DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
                "float16", "float32", "float64"]


@group("numpy → Lua", "numpy",
       ["%s values, shape and dtype" % d for d in NUMPY_DTYPES] +
       ["arr.__dlpack__(max_version=(1, 0)) gives a versioned capsule, renamed on consumption",
        "a writable array arrives writable, same data_ptr",
        "a write in Lua is seen by numpy, and back",
        "a reversed, strided view keeps its negative strides and values",
        "a read-only array arrives with t.readonly == true",
        "writing it from Lua raises 'read-only' and changes nothing",
        "numpy's deleter runs exactly once when Lua releases the tensor"])
def numpy_to_lua(t):
    np = peers["numpy"][0]
    samples = {"bool": [[True, False], [False, True]], "float16": [0.5, -1.25, 65504.0, 1 / 3],
               "float32": [0.25, 3.4e38, -1e-20], "float64": [1e-300, -2.5, float("inf")]}
    for name in NUMPY_DTYPES:
        x = np.array(samples.get(name, [[0, 1, 2], [100, 101, 127]]), dtype=name)
        got = lp.run("local t = ...; return {t.dtype, t.shape, t:totable()}", x.__dlpack__(max_version=(1, 0)))
        t.eq("%s values, shape and dtype" % name, got, [name, list(x.shape), x.tolist()])

    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    cap = a.__dlpack__(max_version=(1, 0))
    name = lp.capsule_name(cap)
    lp.run("A = ...", cap)
    t.eq("arr.__dlpack__(max_version=(1, 0)) gives a versioned capsule, renamed on consumption",
         [name, lp.capsule_name(cap)], ["dltensor_versioned", "used_dltensor_versioned"])
    t.eq("a writable array arrives writable, same data_ptr", lp.run("return {A.readonly, A:data_ptr()}"),
         [False, a.ctypes.data])
    lp.run("A:set(2, 3, 99)")
    a[0, 0] = -5
    t.ok("a write in Lua is seen by numpy, and back", a[1, 2] == 99 and lp.run("return A:get(1, 1)") == -5)

    v = np.arange(20, dtype=np.int32).reshape(4, 5)[::-1, 1::2]  # strides (-5, 2) elements
    got = lp.run("local t = ...; return {t.shape, t.strides, t:totable(), t:data_ptr()}",
                 v.__dlpack__(max_version=(1, 0)))
    t.eq("a reversed, strided view keeps its negative strides and values", got,
         [[4, 2], [-5, 2], v.tolist(), v.ctypes.data])

    r = np.arange(6, dtype=np.int16)
    r.flags.writeable = False
    t.eq("a read-only array arrives with t.readonly == true",
         lp.run("R = ...; return R.readonly", r.__dlpack__(max_version=(1, 0))), True)
    got = lp.run("local ok, err = pcall(R.set, R, 1, 5); return {ok, tostring(err)}")
    t.ok("writing it from Lua raises 'read-only' and changes nothing",
         got[0] is False and "read-only" in got[1] and r.tolist() == list(range(6)), "got %r" % (got,))

    b = np.arange(4.0)
    rc = sys.getrefcount(b)
    lp.run("B = ...", b.__dlpack__(max_version=(1, 0)))
    held = sys.getrefcount(b) - rc
    lp.run("B:release(); B = nil; A = nil; R = nil; collectgarbage()")
    t.ok("numpy's deleter runs exactly once when Lua releases the tensor", held == 1 and sys.getrefcount(b) == rc,
         "references held while in Lua: %d, after release: %+d" % (held, sys.getrefcount(b) - rc))


@group("Lua → numpy", "numpy",
       ["np.from_dlpack(obj) gives equal values",
        "same data_ptr, writable",
        "a write in numpy is seen by Lua, and back",
        "a transposed view keeps its strides",
        "a read-only Lua tensor arrives as a non-writeable array",
        "copy=True gives an independent copy",
        "a tensor Lua made (dlpack.tensor) arrives intact",
        "arrays outlive lua_close, host buffer still held",
        "dropping the arrays runs the host deleter exactly once"])
def lua_to_numpy(t):
    np = peers["numpy"][0]
    before = lp.host_deletes()
    lp.push_host("N", "float64", (2, 3))
    lp.run("N:copy(dlpack.tensor({{1, 2, 3}, {4, 5, 6}}))")
    arr = np.from_dlpack(LuaTensor("N"))
    t.ok("np.from_dlpack(obj) gives equal values", arr.dtype == np.float64 and arr.tolist() == [[1, 2, 3], [4, 5, 6]],
         "got %r %r" % (arr.dtype, arr))
    t.ok("same data_ptr, writable", arr.ctypes.data == lp.run("return N:data_ptr()") and arr.flags.writeable)
    arr[0, 0] = 10
    lp.run("N:set(2, 3, 60)")
    t.ok("a write in numpy is seen by Lua, and back", lp.run("return N:get(1, 1)") == 10 and arr[1, 2] == 60)
    tr = np.from_dlpack(LuaTensor("N:transpose(1, 2)"))
    t.ok("a transposed view keeps its strides", tr.strides == (8, 24) and tr.tolist() == arr.T.tolist(),
         "strides %r" % (tr.strides,))
    ro = np.from_dlpack(LuaTensor("N:as_readonly()"))
    t.ok("a read-only Lua tensor arrives as a non-writeable array",
         not ro.flags.writeable and ro.ctypes.data == arr.ctypes.data, "flags %r" % (ro.flags,))
    cp = np.from_dlpack(LuaTensor("N"), copy=True)
    cp[0, 1] = -1
    t.ok("copy=True gives an independent copy", cp.ctypes.data != arr.ctypes.data and arr[0, 1] == 2
         and cp.tolist() == [[10, -1, 3], [4, 5, 60]], "copy %r" % (cp,))
    lp.run("M = dlpack.tensor({{1, 2}, {3, 4}}, 'int32')")
    m = np.from_dlpack(LuaTensor("M"))
    t.ok("a tensor Lua made (dlpack.tensor) arrives intact", m.dtype == np.int32 and m.tolist() == [[1, 2], [3, 4]])
    lp.close()
    t.ok("arrays outlive lua_close, host buffer still held",
         lp.host_deletes() == before and arr.tolist() == [[10, 2, 3], [4, 5, 60]] and
         ro.tolist() == arr.tolist() and m.tolist() == [[1, 2], [3, 4]] and cp[0, 1] == -1)
    del arr, tr, ro
    gc.collect()
    t.eq("dropping the arrays runs the host deleter exactly once", lp.host_deletes() - before, 1)
    del cp, m


@group("three-way", ("numpy", "torch"),
       ["numpy → Lua → torch shares one buffer",
        "a write in torch is seen by numpy",
        "the chain survives lua_close and the numpy array's other references",
        "numpy's deleter runs exactly once when torch lets go",
        "torch → Lua → numpy shares one buffer, writes seen"])
def three_way(t):
    np, torch = peers["numpy"][0], peers["torch"][0]
    tdl = torch.utils.dlpack
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    rc = sys.getrefcount(a)
    lp.run("W = ...", a.__dlpack__(max_version=(1, 0)))
    tt = tdl.from_dlpack(LuaTensor("W"))
    t.ok("numpy → Lua → torch shares one buffer", tt.data_ptr() == a.ctypes.data and tt.tolist() == a.tolist())
    tt[1, 2] = 50
    t.eq("a write in torch is seen by numpy", a[1, 2], 50.0)
    lp.close()
    lp.open()
    t.ok("the chain survives lua_close and the numpy array's other references",
         tt.tolist() == [[0, 1, 2], [3, 4, 50]] and sys.getrefcount(a) == rc + 1,
         "refcount %+d" % (sys.getrefcount(a) - rc))
    del tt
    gc.collect()
    t.eq("numpy's deleter runs exactly once when torch lets go", sys.getrefcount(a) - rc, 0)

    x = torch.arange(4, dtype=torch.int32)
    lp.run("X = ...", tdl.to_dlpack(x))
    n = np.from_dlpack(LuaTensor("X"))
    x[0] = 9
    t.ok("torch → Lua → numpy shares one buffer, writes seen",
         n.ctypes.data == x.data_ptr() and n.tolist() == [9, 1, 2, 3] and n.flags.writeable)
    lp.run("X = nil")


# ---- run -----------------------------------------------------------------------------

def main():
    tap.plan()
    tap.versions(lp.lua_version(), peers, ("torch", "numpy"), "not importable")
    tap.run_groups(peers, "not importable", lp.open, lambda: (lp.close(), lp.open()))


main()
failures = tap.failures
