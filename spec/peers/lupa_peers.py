"""NumPy and PyTorch exchange tensors with Lua run by lupa, through examples/dlpack_lupa.py.

Run by spec/stages/40-peers.t with /usr/bin/python3 (lupa and NumPy >= 2 from
build/pydeps). Prints TAP; a missing peer (lupa, numpy, torch) turns its tests
into visible SKIPs.
"""
import gc
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [HERE, os.path.join(ROOT, "examples"), os.path.join(ROOT, os.environ.get("DLPACK_PEERS_PYTHONPATH", "build/pydeps"))]

import tap  # noqa: E402  (spec/peers/tap.py)
from tap import group  # noqa: E402

LUA_PATHS = ('package.path = "{0}/lua/?.lua;" .. package.path; package.cpath = "{0}/build/?.so;" .. package.cpath'
             .format(ROOT))


def _import_lupa():
    import dlpack_lupa
    return dlpack_lupa.load_lupa(module=os.path.join(ROOT, "build", "dlpack", "core.so"))  # lupa.lua54


peers = tap.import_peers(("lupa", _import_lupa), ("numpy", tap.import_numpy), ("torch", tap.import_torch))
state = {}


def open_lua():
    import dlpack_lupa
    lua = peers["lupa"][0].LuaRuntime()
    lua.execute(LUA_PATHS)
    state["lua"], state["bridge"] = lua, dlpack_lupa.Bridge(lua)


def close_lua():
    state.clear()
    gc.collect()


def lua(code):
    """A Lua function from its body (arguments in `...`)."""
    return state["lua"].eval("function(...) %s end" % code)


def address(t):
    return lua("return require('dlpack.unsafe').address((...):data_ptr())")(t)


@group("lupa", "lupa",
       ["without RTLD_GLOBAL, require \"dlpack\" fails naming an undefined Lua symbol",
        "load_lupa(): require \"dlpack\" works in a LuaRuntime",
        "a Lua tensor is seen from Python as a Lua object the bridge recognises"])
def lupa_loading(t):
    code = ("import sys; sys.path[:0] = %r; import lupa.lua54 as l; r = l.LuaRuntime(); r.execute(%r); "
            "r.eval('require \"dlpack\"')" % (sys.path[1:3], LUA_PATHS))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    t.ok("without RTLD_GLOBAL, require \"dlpack\" fails naming an undefined Lua symbol",
         proc.returncode != 0 and "undefined symbol: lua" in proc.stderr, proc.stderr[-600:])
    t.eq("load_lupa(): require \"dlpack\" works in a LuaRuntime",
         lua("return require('dlpack').zeros({2, 3}).shape[2]")(), 3)
    b = state["bridge"]
    t.ok("a Lua tensor is seen from Python as a Lua object the bridge recognises",
         b.is_tensor(lua("return require('dlpack').zeros({1})")()) and not b.is_tensor(lua("return {}")()))


@group("numpy → Lua (lupa)", ("lupa", "numpy"),
       ["values, shape and dtype of float32, int64, uint8 and bool arrays",
        "same address as the array",
        "a write in Lua is seen by numpy",
        "a transposed view keeps its strides",
        "a read-only array gives a read-only tensor",
        "a PyCapsule from __dlpack__ is consumed and renamed used_dltensor_versioned",
        "the array is held while the Lua tensor lives, and let go once it is released"])
def numpy_to_lua(t):
    np, b = peers["numpy"][0], state["bridge"]
    info = lua("""
      local function flat(v, out)
        if type(v) ~= "table" then out[#out + 1] = tostring(v) return out end
        for _, x in ipairs(v) do flat(x, out) end
        return out
      end
      local t = ...
      return t.dtype .. " " .. table.concat(t.shape, "x") .. " " .. table.concat(flat(t:totable(), {}), ",")""")
    cases = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([-5, 2**40], dtype=np.int64),
             np.array([0, 255], dtype=np.uint8), np.array([True, False])]

    def show(v):
        return str(v).lower() if isinstance(v, bool) else repr(v)
    t.eq("values, shape and dtype of float32, int64, uint8 and bool arrays", [info(b.to_lua(a)) for a in cases],
         ["%s %s %s" % (a.dtype, "x".join(map(str, a.shape)), ",".join(show(v) for v in a.ravel().tolist()))
          for a in cases])
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    x = b.to_lua(a)
    t.eq("same address as the array", address(x), a.ctypes.data)
    lua("local x = ...; x[2][3] = -1")(x)
    t.eq("a write in Lua is seen by numpy", a[1, 2], -1.0)
    v = b.to_lua(a.T)
    t.eq("a transposed view keeps its strides", list(lua("return (...).strides")(v).values()), [1, 4])
    r = np.arange(3)
    r.flags.writeable = False
    t.ok("a read-only array gives a read-only tensor", lua("return (...).readonly")(b.to_lua(r)) is True)
    cap = np.arange(3).__dlpack__(max_version=(1, 3))
    b.to_lua(cap)
    t.ok("a PyCapsule from __dlpack__ is consumed and renamed used_dltensor_versioned",
         "used_dltensor_versioned" in repr(cap), repr(cap))
    h = np.arange(1000.0)
    base = sys.getrefcount(h)
    x = b.to_lua(h)
    held = sys.getrefcount(h)
    lua("(...):release()")(x)
    gc.collect()
    t.ok("the array is held while the Lua tensor lives, and let go once it is released",
         held > base and sys.getrefcount(h) == base, "refcounts %d, %d, %d" % (base, held, sys.getrefcount(h)))


@group("Lua → numpy (lupa)", ("lupa", "numpy"),
       ["numpy.from_dlpack(bridge.wrap(t)): values, dtype, shared address",
        "a write in numpy is seen by Lua",
        "a read-only Lua tensor gives a read-only array",
        "a dropped, unconsumed capsule hands the tensor back (deleter ran)"])
def lua_to_numpy(t):
    np, b = peers["numpy"][0], state["bridge"]
    x = lua("return require('dlpack').tensor({{1, 2, 3}, {4, 5, 6}}, 'int32')")()
    a = np.from_dlpack(b.wrap(x))
    t.ok("numpy.from_dlpack(bridge.wrap(t)): values, dtype, shared address",
         a.tolist() == [[1, 2, 3], [4, 5, 6]] and a.dtype == np.int32 and a.ctypes.data == address(x),
         "got %r %r" % (a.dtype, a.tolist()))
    a[1, 1] = 50
    t.eq("a write in numpy is seen by Lua", lua("return (...):get(2, 2)")(x), 50)
    ro = np.from_dlpack(b.wrap(lua("return (...):as_readonly()")(x)))
    t.ok("a read-only Lua tensor gives a read-only array", not ro.flags.writeable)
    h = np.arange(10.0)
    base = sys.getrefcount(h)
    y = b.to_lua(h)
    cap = b.to_capsule(y)
    lua("(...):release()")(y)
    gc.collect()
    held = sys.getrefcount(h)
    del cap
    gc.collect()
    t.ok("a dropped, unconsumed capsule hands the tensor back (deleter ran)",
         held > base and sys.getrefcount(h) == base, "refcounts %d, %d, %d" % (base, held, sys.getrefcount(h)))


@group("torch ↔ Lua (lupa)", ("lupa", "torch"),
       ["torch → Lua through __dlpack__: values and shared address",
        "torch → Lua from torch.utils.dlpack.to_dlpack (a legacy capsule)",
        "Lua → torch through torch.utils.dlpack.from_dlpack(bridge.wrap(t)): shared address",
        "a write in torch is seen by Lua",
        "Lua → torch from a legacy capsule (to_capsule(t, max_version=None))"])
def torch_lua(t):
    torch, b = peers["torch"][0], state["bridge"]
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    y = b.to_lua(x)
    t.ok("torch → Lua through __dlpack__: values and shared address",
         lua("return (...):get(2, 3)")(y) == 5.0 and address(y) == x.data_ptr())
    z = b.to_lua(torch.utils.dlpack.to_dlpack(torch.ones(4, dtype=torch.int16)))
    t.eq("torch → Lua from torch.utils.dlpack.to_dlpack (a legacy capsule)",
         lua("local z = ...; return z.dtype .. ' ' .. z:get(4)")(z), "int16 1")
    w = lua("return require('dlpack').tensor({1.5, 2.5})")()
    tw = torch.utils.dlpack.from_dlpack(b.wrap(w))
    t.ok("Lua → torch through torch.utils.dlpack.from_dlpack(bridge.wrap(t)): shared address",
         tw.data_ptr() == address(w) and tw.dtype == torch.float64 and tw[1].item() == 2.5)
    tw[0] = 9
    t.eq("a write in torch is seen by Lua", lua("return (...)[1]")(w), 9.0)
    tl = torch.utils.dlpack.from_dlpack(b.to_capsule(w, max_version=None))
    t.eq("Lua → torch from a legacy capsule (to_capsule(t, max_version=None))", tl.tolist(), [9.0, 2.5])


_GetName = None


def capsule_name(cap):
    """PyCapsule_GetName: the bytes at the name pointer the capsule keeps."""
    global _GetName
    if _GetName is None:
        import ctypes
        _GetName = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", ctypes.pythonapi))
    return _GetName(cap)


def churn():
    """Allocate and free many small bytes objects, as a program does between two calls: memory
    that a capsule name was left pointing into is reused and overwritten."""
    junk = [bytes([65 + i % 26]) * (i % 48) for i in range(50000)]
    del junk
    gc.collect()


class CapsuleProducer:
    """A producer that hands out one capsule, for consumers that take only __dlpack__."""

    def __init__(self, cap):
        self.cap = cap

    def __dlpack__(self, **_):
        return self.cap

    def __dlpack_device__(self):
        return (1, 0)


@group("capsule names (lupa, torch)", ("lupa", "torch"),
       ["a legacy capsule from to_capsule keeps its name 'dltensor' while memory churns",
        "torch.utils.dlpack.from_dlpack imports that legacy capsule after the churn",
        "a versioned capsule from to_capsule keeps its name 'dltensor_versioned' while memory churns",
        "torch.utils.dlpack.from_dlpack imports that versioned capsule, where torch takes them"])
def capsule_names_torch(t):
    torch, b = peers["torch"][0], state["bridge"]
    w = lua("return require('dlpack').tensor({1.5, 2.5, 4})")()
    cap = b.to_capsule(w, max_version=None)
    churn()
    t.eq("a legacy capsule from to_capsule keeps its name 'dltensor' while memory churns",
         capsule_name(cap), b"dltensor")
    t.eq("torch.utils.dlpack.from_dlpack imports that legacy capsule after the churn",
         torch.utils.dlpack.from_dlpack(cap).tolist(), [1.5, 2.5, 4.0])
    cap = b.to_capsule(w, max_version=(1, 3))
    churn()
    t.eq("a versioned capsule from to_capsule keeps its name 'dltensor_versioned' while memory churns",
         capsule_name(cap), b"dltensor_versioned")
    desc = "torch.utils.dlpack.from_dlpack imports that versioned capsule, where torch takes them"
    try:  # a torch that makes versioned capsules (DLPack 1.x, max_version) reads them too
        torch.zeros(1).__dlpack__(max_version=(1, 0))
    except TypeError:
        t.skip(desc, "torch %s knows only legacy capsules (the numpy group imports a versioned one)"
               % torch.__version__)
    else:
        t.eq(desc, torch.utils.dlpack.from_dlpack(cap).tolist(), [1.5, 2.5, 4.0])


@group("capsule names (lupa, numpy)", ("lupa", "numpy"),
       ["numpy.from_dlpack imports a versioned capsule from to_capsule after memory churned",
        "numpy.from_dlpack imports a legacy capsule from to_capsule after memory churned"])
def capsule_names_numpy(t):
    np, b = peers["numpy"][0], state["bridge"]
    w = lua("return require('dlpack').tensor({7, 8, 9}, 'int16')")()
    for desc, version in (("numpy.from_dlpack imports a versioned capsule from to_capsule after memory churned",
                           (1, 3)),
                          ("numpy.from_dlpack imports a legacy capsule from to_capsule after memory churned", None)):
        cap = b.to_capsule(w, max_version=version)
        churn()
        t.eq(desc, np.from_dlpack(CapsuleProducer(cap)).tolist(), [7, 8, 9])


# The module built for Lua 5.5 (stage 19 builds it; stage 40 names it when it is up to date).
BUILD55 = os.environ.get("DLPACK_PEERS_LUA55")


def python(code, cpath):
    """Runs Python code in a fresh process (with examples/ and lupa on sys.path, LUA_CPATH=cpath):
    (exit status, stdout, stderr). What may abort the process runs there, not here."""
    env = dict(os.environ, LUA_CPATH=cpath + "/?.so;;", LUA_PATH=ROOT + "/lua/?.lua;;")
    prelude = "import sys; sys.path[:0] = %r; import dlpack_lupa\n" % sys.path[1:3]
    proc = subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=120,
                          env=env)
    return proc.returncode, proc.stdout.strip(), proc.stderr[-600:]


ROUND_TRIP = """
import numpy as np
lupa = dlpack_lupa.load_lupa()
import lupa as default
lua = default.LuaRuntime()
b = dlpack_lupa.Bridge(lua)
a = np.arange(4.0)
t = b.to_lua(a)
lua.eval("function(t) t[2] = 7 end")(t)
print(lupa.__name__, type(lua).__module__, lua.execute("return _VERSION"), np.from_dlpack(b.wrap(t)).tolist(), a[1])
"""


@group("lupa runtimes", ("lupa", "numpy"),
       ["module_lua reads the Lua each build is for (build/: Lua 5.4, build/lua5.5/: Lua 5.5)",
        "lupa's default runtime (Lua 5.5) with the 5.5 build: load_lupa() picks lupa.lua55, arrays cross both ways",
        "with the 5.4 build, load_lupa() picks lupa.lua54 and the bridge works",
        "lupa's default runtime imported after load_lupa('lua54') made 5.4 global still runs (no PANIC)",
        "Bridge refuses a Lua 5.5 runtime for the 5.4 build: ImportError naming both, before require",
        "require of the 5.4 build in a Lua 5.5 runtime: a LuaError naming both Luas, and the process goes on",
        "the 5.5 build in a Lua 5.5 runtime while lupa.lua54 is global: Bridge's ImportError, require's LuaError"])
def lupa_runtimes(t):
    import dlpack_lupa
    build55 = BUILD55 and os.path.join(ROOT, BUILD55)
    why55 = "no up-to-date Lua 5.5 build (stage 19 makes build/lua5.5)"
    found = [dlpack_lupa.module_lua(os.path.join(ROOT, "build", "dlpack", "core.so"))]
    want = ["Lua 5.4"]
    if build55:
        found.append(dlpack_lupa.module_lua(os.path.join(build55, "dlpack", "core.so")))
        want.append("Lua 5.5")
    t.eq("module_lua reads the Lua each build is for (build/: Lua 5.4, build/lua5.5/: Lua 5.5)", found, want)
    desc = "lupa's default runtime (Lua 5.5) with the 5.5 build: load_lupa() picks lupa.lua55, arrays cross both ways"
    if build55:
        rc, out, err = python(ROUND_TRIP, build55)
        t.eq(desc, (rc, out), (0, "lupa.lua55 lupa.lua55 Lua 5.5 [0.0, 7.0, 2.0, 3.0] 7.0"))
        if rc:
            tap.comment(err)
    else:
        t.skip(desc, why55)
    rc, out, err = python(ROUND_TRIP.replace("import lupa as default", "default = lupa"), ROOT + "/build")
    t.eq("with the 5.4 build, load_lupa() picks lupa.lua54 and the bridge works", (rc, out, err if rc else ""),
         (0, "lupa.lua54 lupa.lua54 Lua 5.4 [0.0, 7.0, 2.0, 3.0] 7.0", ""))
    rc, out, err = python("dlpack_lupa.load_lupa('lua54')\nimport lupa\nprint(lupa.LuaRuntime().execute('return _VERSION'))",
                          ROOT + "/build")
    t.eq("lupa's default runtime imported after load_lupa('lua54') made 5.4 global still runs (no PANIC)",
         (rc, out, err if rc else ""), (0, "Lua 5.5", ""))
    import lupa.lua55
    lua55 = lupa.lua55.LuaRuntime()
    lua55.execute(LUA_PATHS)
    e = tap.raises(lambda: dlpack_lupa.Bridge(lua55), ImportError)
    t.ok("Bridge refuses a Lua 5.5 runtime for the 5.4 build: ImportError naming both, before require",
         e is not None and "built for Lua 5.4" in str(e) and "is Lua 5.5" in str(e)
         and lua55.eval("package.loaded['dlpack.core'] == nil"), repr(e))
    rc, out, err = python("import lupa.lua55\ndlpack_lupa.load_lupa('lua54')\nr = lupa.lua55.LuaRuntime()\n"
                          "print(r.eval('select(2, pcall(require, \"dlpack\"))'))\nprint(r.eval('1 + 1'))",
                          ROOT + "/build")
    t.ok("require of the 5.4 build in a Lua 5.5 runtime: a LuaError naming both Luas, and the process goes on",
         rc == 0 and "built for Lua 5.4 and cannot load into Lua 5.5" in out and out.endswith("\n2"), rc, out, err)
    desc = "the 5.5 build in a Lua 5.5 runtime while lupa.lua54 is global: Bridge's ImportError, require's LuaError"
    if build55:
        rc, out, err = python("import lupa.lua55\ndlpack_lupa.load_lupa('lua54')\nr = lupa.lua55.LuaRuntime()\n"
                              "try:\n  dlpack_lupa.Bridge(r)\nexcept ImportError as e:\n  print(e)\n"
                              "print(r.eval('select(2, pcall(require, \"dlpack\"))'))", build55)
        t.ok(desc, rc == 0 and "C API was made global in this process before lupa.lua55's" in out
             and "the Lua C API it reaches in this process is Lua 5.4's" in out, rc, out, err)
    else:
        t.skip(desc, why55)


CUDA_STREAM = """
import os
os.environ["DLPACK_LUA_CUDA_DRIVER"] = os.path.join(%(root)r, "build", "fakecuda.so")
lupa = dlpack_lupa.load_lupa()
lua = lupa.LuaRuntime()
b = dlpack_lupa.Bridge(lua)
t, handle, pending, sync = lua.execute(
    'local dlpack, fake = require "dlpack", require "fakecuda" '
    'local P, S = dlpack.cuda.Stream(), dlpack.cuda.Stream() '
    'local T = dlpack.zeros({4}, "float32", "cuda:0") '
    'T:copy(dlpack.tensor({1, 2, 3, 4}, "float32"), {stream = P}) '  # queued on P
    'return T, S.handle, function() return fake.pending(S.handle) end, '
    'function() S:synchronize() P:synchronize() end')
before = pending()
cap = b.wrap(t).__dlpack__(stream=handle, max_version=(1, 3))
after = pending()
del cap
sync()
print(before, after)
"""


@group("lupa and CUDA streams", "lupa",
       ["LuaTensor.__dlpack__(stream=handle) of a CUDA tensor makes the consumer's stream wait (fake driver)"])
def lupa_cuda_streams(t):
    desc = "LuaTensor.__dlpack__(stream=handle) of a CUDA tensor makes the consumer's stream wait (fake driver)"
    if not os.path.exists(os.path.join(ROOT, "build", "fakecuda.so")):
        t.skip(desc, "build/fakecuda.so is not built")
        return
    rc, out, err = python(CUDA_STREAM % {"root": ROOT}, os.path.join(ROOT, "build"))
    # before: nothing queued on the consumer's stream; after: its wait for the producer's copy
    counts = out.split()
    t.ok(desc, rc == 0 and len(counts) == 2 and counts[0] == "0" and int(counts[1]) >= 1,
         "exit status %d, pending on the consumer's stream before and after: %r" % (rc, out))
    if rc:
        tap.comment(err)


def main():
    tap.plan()
    lupa, reason = peers["lupa"]
    if lupa:
        import lupa as package
        extra = ["lupa %s" % package.__version__]
    else:
        extra = ["lupa not importable (%s)" % reason]
    tap.versions(lupa.LuaRuntime().lua_implementation if lupa else "Lua ?", peers, ("numpy", "torch"),
                 "not importable", extra)
    failures = tap.run_groups(peers, "not importable", open_lua, close_lua)
    sys.exit(1 if failures else 0)


main()
