""".npy files between NumPy and the module: np.save's files (versions 1.0, 2.0 and 3.0, every
dtype both have, C and Fortran order, both byte orders, 0-d and empty) read by dlpack.load, with
and without mmap; dlpack.save's files read by np.load, with and without mmap_mode.

Run by spec/stages/40-peers.t with /usr/bin/python3 (lupa and NumPy >= 2 from build/pydeps):
Lua runs in this process through lupa (examples/dlpack_lupa.py), and tensors are compared with
the arrays through DLPack, on the very same memory. Prints TAP; a missing peer is a visible SKIP.
"""
import gc
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [HERE, os.path.join(ROOT, "examples"), os.path.join(ROOT, "build/pydeps")]

import tap  # noqa: E402  (spec/peers/tap.py)
from tap import group  # noqa: E402

LUA_PATHS = ('package.path = "{0}/lua/?.lua;" .. package.path; package.cpath = "{0}/build/?.so;" .. package.cpath'
             .format(ROOT))

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "complex64", "complex128"]
SHAPES = [(), (0,), (5,), (2, 3), (2, 3, 4), (3, 0, 2), (1, 7, 1)]


def _import_lupa():
    import dlpack_lupa
    return dlpack_lupa.load_lupa(module=os.path.join(ROOT, "build", "dlpack", "core.so"))


peers = tap.import_peers(("lupa", _import_lupa), ("numpy", tap.import_numpy))
state = {}


def open_lua():
    import dlpack_lupa
    lua = peers["lupa"][0].LuaRuntime()
    lua.execute(LUA_PATHS)
    state["lua"], state["bridge"] = lua, dlpack_lupa.Bridge(lua)
    state["dir"] = tempfile.mkdtemp(prefix="dlpack-npy-")


def close_lua():
    shutil.rmtree(state.pop("dir"), ignore_errors=True)
    state.clear()
    gc.collect()


def lua(code):
    return state["lua"].eval("function(...) %s end" % code)


def path(name):
    return os.path.join(state["dir"], name)


def values(np, dtype, shape, seed):
    """Arrays with varied values: negatives, fractions, NaN and infinities in the floats."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape)) if shape else 1
    if dtype == "bool":
        a = rng.integers(0, 2, n).astype(bool)
    elif dtype.startswith(("int", "uint")):
        info = np.iinfo(dtype)
        a = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    else:
        a = (rng.standard_normal(n) * 1000).astype(dtype)
        if dtype.startswith("complex"):
            a = a + 1j * (rng.standard_normal(n) * 7).astype(dtype)
        if n >= 3:
            a[0], a[1], a[2] = np.nan, np.inf, -np.inf
    return a.astype(dtype).reshape(shape)


def as_numpy(np, tensor):
    """The array on the tensor's memory (DLPack, no copy)."""
    return np.from_dlpack(state["bridge"].wrap(tensor))


def same(np, a, b):
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")


@group("np.save -> dlpack.load", ("lupa", "numpy"),
       ["%s: versions 1.0, 2.0 and 3.0, C and Fortran order, 0-d, empty and n-d, read and mapped" % d
        for d in DTYPES] +
       ["big-endian files of every multi-byte dtype load byte-swapped (and refuse mmap)",
        "a Fortran-ordered file maps without a copy: column-major strides on the file's bytes",
        "a mapped tensor is a read-only array for NumPy, on the mapping's memory"])
def numpy_writes(t):
    np = peers["numpy"][0]
    load = lua("return require('dlpack').load(...)")
    strides = lua("local s = (...).strides; return table.concat(s, ',')")
    for d in DTYPES:
        problems = []
        for k, shape in enumerate(SHAPES):
            a = values(np, d, shape, k)
            for order in "CF":
                arr = a.copy(order=order)  # (np.asfortranarray makes 0-d arrays 1-d)
                for version in [(1, 0), (2, 0), (3, 0)]:
                    name = path("%s-%d-%s-%d.npy" % (d, k, order, version[0]))
                    with open(name, "wb") as f:
                        np.lib.format.write_array(f, arr, version=version)
                    for mmap in (False, True):
                        tensor = load(name, state["lua"].table_from({"mmap": mmap}))
                        got = as_numpy(np, tensor)
                        if not same(np, got, a):
                            problems.append("%s %s %s mmap=%s: got %r" % (shape, order, version, mmap, got))
                        if order == "F" and not arr.flags.c_contiguous:  # (else np.save writes C order)
                            want = ",".join(str(s // a.itemsize) for s in arr.strides)
                            if strides(tensor) != want:
                                problems.append("%s F strides %s, want %s" % (shape, strides(tensor), want))
                        # (NumPy makes every empty array from DLPack writeable: nothing to write)
                        if a.size > 0 and got.flags.writeable == mmap:
                            problems.append("%s mmap=%s: writeable %s" % (shape, mmap, got.flags.writeable))
                        del got, tensor
        t.ok("%s: versions 1.0, 2.0 and 3.0, C and Fortran order, 0-d, empty and n-d, read and mapped" % d,
             not problems, *problems[:5])

    problems = []
    for d in DTYPES:
        a = values(np, d, (3, 4), 5)
        if a.itemsize == 1:
            continue
        big = a.astype(a.dtype.newbyteorder(">"))
        name = path("big-%s.npy" % d)
        np.save(name, big)
        got = as_numpy(np, load(name))
        if not same(np, got, a):
            problems.append("%s: got %r want %r" % (d, got, a))
        try:
            load(name, state["lua"].table_from({"mmap": True}))
            problems.append("%s: mapped a big-endian file" % d)
        except Exception as e:  # lupa.LuaError
            if "without mmap" not in str(e):
                problems.append("%s: %s" % (d, e))
    t.ok("big-endian files of every multi-byte dtype load byte-swapped (and refuse mmap)", not problems, *problems)

    a = np.asfortranarray(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    name = path("fortran.npy")
    np.save(name, a)
    tensor = load(name, state["lua"].table_from({"mmap": True}))
    got = as_numpy(np, tensor)
    on_file = np.load(name, mmap_mode="r")
    t.ok("a Fortran-ordered file maps without a copy: column-major strides on the file's bytes",
         same(np, got, a) and got.flags.f_contiguous and strides(tensor) == "1,2,6",
         "strides %s, f_contiguous %s" % (strides(tensor), got.flags.f_contiguous))
    t.ok("a mapped tensor is a read-only array for NumPy, on the mapping's memory",
         not got.flags.writeable and same(np, np.asarray(on_file), got),
         "writeable %s" % got.flags.writeable)
    del got, tensor, on_file


@group("dlpack.save -> np.load", ("lupa", "numpy"),
       ["%s: np.load reads it, with and without mmap_mode, version 1.0, data 64-byte aligned" % d for d in DTYPES] +
       ["a transposed and a stepped view are written in C order with their values"])
def module_writes(t):
    np = peers["numpy"][0]
    save = lua("require('dlpack').save(...)")
    for d in DTYPES:
        problems = []
        for k, shape in enumerate(SHAPES):
            a = values(np, d, shape, 10 + k)
            name = path("m-%s-%d.npy" % (d, k))
            save(name, state["bridge"].to_lua(a))
            for mode in (None, "r"):
                got = np.load(name, mmap_mode=mode)
                if not same(np, np.asarray(got), a):
                    problems.append("%s mmap_mode=%s: got %r" % (shape, mode, got))
            with open(name, "rb") as f:
                version = np.lib.format.read_magic(f)
                np.lib.format.read_array_header_1_0(f)
                if version != (1, 0) or f.tell() % 64:
                    problems.append("%s: version %s, data at %d" % (shape, version, f.tell()))
        t.ok("%s: np.load reads it, with and without mmap_mode, version 1.0, data 64-byte aligned" % d,
             not problems, *problems[:5])

    a = values(np, "float64", (4, 6), 3)
    views = lua("local t = ...; return t:transpose(1, 2), t:slice(2, 1, 6, 2)")(state["bridge"].to_lua(a))
    problems = []
    for v, want in zip(views, (a.T, a[:, ::2])):
        name = path("view.npy")
        save(name, v)
        got = np.load(name)
        if not (same(np, got, np.ascontiguousarray(want)) and got.flags.c_contiguous):
            problems.append("got %r want %r" % (got, want))
    t.ok("a transposed and a stepped view are written in C order with their values", not problems, *problems)


def main():
    tap.plan()
    lupa, _ = peers["lupa"]
    tap.versions(lupa.LuaRuntime().lua_implementation if lupa else "Lua ?", peers, ("numpy",), "not importable")
    failures = tap.run_groups(peers, "not importable", open_lua, close_lua)
    sys.exit(1 if failures else 0)


main()
