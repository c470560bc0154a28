"""The NumPy oracle: every computing function of the module against NumPy >= 2 on the same data.

Run by spec/stages/40-peers.t with /usr/bin/python3 (lupa and NumPy from build/pydeps), or
by hand: `PYTHONPATH=build/pydeps python3 spec/peers/oracle.py [name ...]` (only the named
functions; DLPACK_ORACLE_SEED=n for other cases; DLPACK_LUA_CPU=baseline or avx2 for a lower
build of the module's loops than the processor allows). Lua 5.4 runs inside this process through
lupa (examples/dlpack_lupa.py); operands are NumPy arrays handed to Lua without a copy, so
both sides compute on the very same memory and layout.

For each function the cases are drawn from a generator seeded once (the same cases on every
run): shapes 0-d, empty, 1 to 4 dims and long rows (vector loops and their tails); layouts
contiguous, transposed, sliced with steps, flipped (negative strides) and expanded (stride 0);
broadcast pairs; every pair of the dtypes bool, int8..int64, uint8..uint64, float16, float32
and float64 at least once per binary function (bfloat16 is not in NumPy). Values mix small
integers (ties, exact results), the whole range of each integer type (wrap-around, the
minimum divided by -1) and, for floats, NaN, infinities, -0.0 and halves (rounding ties).
Each case compares the result dtype and the values; an error NumPy raises (a dtype with no
loop, a Lua number out of range, a broadcast mismatch, integers to negative powers, a
same_kind violation in place) must be an error in Lua too, and the other way round.

Tolerances: integers and bools are exact (wrap-around included). Float results of + - * /,
sqrt, floor/ceil/round/trunc, maximum/minimum, idiv/mod, comparisons and everything that
only moves values are exact: IEEE operations are correctly rounded, and computing them in a
wider type and rounding once (float16 in float32, float32 in float64) gives the same bits.
exp log log1p expm1 sin cos tan tanh sigmoid and float pow may differ by 4 units in the last
place (NumPy's own float32 loops are off by up to 3 ulp from the exact result, a libm by 1;
float16, computed in float32 and rounded once, by 1 ulp). Sums and means may differ by
2*log2(n+1)*eps*sum(|x|) (two pairwise summations, NumPy's bound), products by 2*n*eps*|p|,
var by B = 16*log2(n+2)*eps*mean(x^2), std by min(sqrt(B), B/(2 std)), matmul by 2*k*eps*(|A|@|B|). float16 var
and std are NumPy's of the float32 values rounded to float16: NumPy squares float16 deviations
in float16 (infinite from 256 on), the contract computes float16 in float32.
NaN equals NaN; an infinity must be the same infinity.

Complex operands (the `complex` job, run_complex) are checked for the functions the module
supports for them, exactly but for mul, pow and the <complex.h> functions (8 ulp of the result's
magnitude on each part) and abs (4 ulp); the functions it refuses for complex must raise.

The `attack` job (run_attack) checks three classes an attack found, exactly: bool arrays whose
true bytes are 1 to 255 (results must hold 0 and 1 only), int8..int64 against uint64 in the
comparisons, and int64/uint64 values just above a float32 tie cast to float32, float16, complex64.

Each function prints a few TAP lines ("oracle: add: every dtype pair (... cases)", "...:
out=", "...: in place add_", ...); a failing line lists up to 5 cases with their operands.
A function, method or operator the module does not have yet is one visible SKIP naming it.
"""
import math
import os
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [HERE, os.path.join(ROOT, "examples"),
                os.path.join(ROOT, os.environ.get("DLPACK_PEERS_PYTHONPATH", "build/pydeps"))]

import tap  # noqa: E402  (spec/peers/tap.py)

SEED = int(os.environ.get("DLPACK_ORACLE_SEED", "16"))
# DLPACK_ORACLE_LUA: the Lua lupa runs (lua54, lua55, lua53, lua52, lua51, luajit21) and the build
# of the module for it (build/ for 5.4, build/lua5.5/ ... build/luajit/, made by `make LUA=...`)
RUNTIMES = {"lua54": "build", "lua55": "build/lua5.5", "lua53": "build/lua5.3", "lua52": "build/lua5.2",
            "lua51": "build/lua5.1", "luajit21": "build/luajit"}
RUNTIME = (os.environ.get("DLPACK_ORACLE_LUA", "lua54"),) * 2
RUNTIME = (RUNTIME[0], RUNTIMES.get(RUNTIME[0], "build"))
TITLE = "oracle" if RUNTIME[0] == "lua54" else "oracle (%s)" % RUNTIME[0]
# DLPACK_LUA_CPU forces a lower build of the module's loops (docs/api.md): named in every line
if os.environ.get("DLPACK_LUA_CPU"):
    TITLE += " [DLPACK_LUA_CPU=%s]" % os.environ["DLPACK_LUA_CPU"]
MAX_SHOWN = 5

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64"]
INTS = [d for d in DTYPES if d[0] in "iu"]
FLOATS = ["float16", "float32", "float64"]
LAYOUTS = ["contiguous", "transposed", "sliced", "flipped", "expanded"]
WRITABLE = ["contiguous", "transposed", "sliced", "flipped"]

LUA_HELPERS = r"""
local dlpack = require "dlpack"
local unpack = table.unpack or unpack
local H = {}
function H.has(name) return dlpack[name] ~= nil end
function H.has_method(name)
  local t = dlpack.zeros({1})
  return (pcall(function() return t[name] end))
end
function H.has_meta(event) return getmetatable(dlpack.zeros({1}))[event] ~= nil end
-- dlpack[name](...), with a last {out =, dtype =} when either is given
function H.call(name, out, dtype, ...)
  local args = {n = select("#", ...), ...}
  if out ~= nil or dtype ~= nil then
    args.n = args.n + 1
    args[args.n] = {out = out, dtype = dtype}
  end
  return dlpack[name](unpack(args, 1, args.n))
end
function H.method(name, self, ...) return self[name](self, ...) end
function H.reduce(name, as_method, t, dim, keepdim, correction, dtype)
  local opts
  if keepdim ~= nil or correction ~= nil or dtype ~= nil then
    opts = {keepdim = keepdim, correction = correction, dtype = dtype}
  end
  if as_method then return t[name](t, dim, opts) end
  return dlpack[name](t, dim, opts)
end
local ops = {
  add = function(a, b) return a + b end, sub = function(a, b) return a - b end,
  mul = function(a, b) return a * b end, div = function(a, b) return a / b end,
  mod = function(a, b) return a % b end, pow = function(a, b) return a ^ b end,
  neg = function(a) return -a end,
}
-- the operators of Lua 5.3 and later, compiled only there
H.integers = math.type ~= nil
if H.integers then
  local more = (loadstring or load)([[return {
    idiv = function(a, b) return a // b end, band = function(a, b) return a & b end,
    bor = function(a, b) return a | b end, bxor = function(a, b) return a ~ b end,
    shl = function(a, b) return a << b end, shr = function(a, b) return a >> b end,
    bnot = function(a) return ~a end}]])()
  for k, v in pairs(more) do ops[k] = v end
end
function H.has_operator(name) return ops[name] ~= nil end
function H.operator(name, a, b) return ops[name](a, b) end
function H.list(...) return {...} end
function H.field(t, k) return t[k] end
function H.opts(...) -- H.opts("name", value, ...): an options table (nil values left out)
  local t, a = {}, {...}
  for i = 1, select("#", ...), 2 do if a[i + 1] ~= nil then t[a[i]] = a[i + 1] end end
  return t
end
-- two views of t, an input and an out that overlap: 0 out one element behind the input, 1 out one
-- element ahead, 2 out the input reversed, 3 t and t reversed
function H.overlap(t, kind)
  local n = t:size(1)
  if kind == 0 then return t:narrow(1, 2, n - 1), t:narrow(1, 1, n - 1) end
  if kind == 1 then return t:narrow(1, 1, n - 1), t:narrow(1, 2, n - 1) end
  if kind == 2 then return t:narrow(1, 2, n - 1), t:narrow(1, 2, n - 1):slice(1, -1, 1, -1) end
  return t, t:slice(1, -1, 1, -1)
end
function H.same(a, b) return rawequal(a, b) end
function H.is_tensor(v) return getmetatable(v) == getmetatable(dlpack.zeros({})) end
return H
"""

np = lupa = bridge = H = LuaError = RUNTIME_OBJ = None
INTEGERS = True  # whether the Lua has an integer subtype (5.3 and later)
counts = {"passed": 0, "failed": 0, "skipped": 0}


# ---- TAP -------------------------------------------------------------------------------

# Differences from NumPy that were found and reported, not yet resolved. A case that differs
# in one of these ways makes its line a TODO ("not ok ... # TODO", counted as a skip, never as
# a pass) instead of a failure; any other difference fails. Remove an entry once it is fixed
# (its lines then pass) or once the module's behaviour is documented as intended (then make
# the oracle expect it).
KNOWN = {
    # "name": "what differs (and where it comes from)", as the cases' `known` functions name them.
    # Found and fixed so far: empty outs with zero strides refused; overlap missed across two
    # imports of one memory; float16 results put unrounded into a wider out; div ignoring an
    # integer dtype=; dtype=float16 not converting the operands to float16 first; allclose(x, inf)
    # true; several dtypes promoted pairwise (cat, stack); float16-converted operands broadcast
    # along a short row read as float16 bits (an out-of-bounds read).
}


class Line:
    """One TAP line over many cases: passes when no case failed; shows the first failures."""

    def __init__(self, title):
        self.title, self.cases, self.failed, self.shown = title, 0, 0, []
        self.known, self.known_shown = {}, []

    def fail(self, text, known=None):
        if known:
            self.known[known] = self.known.get(known, 0) + 1
            if len(self.known_shown) < MAX_SHOWN:
                self.known_shown.append("[%s] %s" % (known, text))
            return
        self.failed += 1
        if len(self.shown) < MAX_SHOWN:
            self.shown.append(text)

    def emit(self):
        if self.failed:
            counts["failed"] += 1
            tap.line("not ok - %s: %s (%d of %d cases differ from NumPy)" % (
                TITLE, self.title, self.failed, self.cases))
            for text in self.shown:
                tap.comment(text)
        elif self.known:
            counts["skipped"] += 1
            tap.line("not ok - %s: %s (%d of %d cases differ from NumPy as reported) # TODO %s" % (
                TITLE, self.title, sum(self.known.values()), self.cases,
                "; ".join("%s: %s" % (k, KNOWN[k]) for k in sorted(self.known))))
            for text in self.known_shown:
                tap.comment(text)
        elif self.cases == 0:
            counts["failed"] += 1
            tap.line("not ok - %s: %s (no case ran)" % (TITLE, self.title))
        else:
            counts["passed"] += 1
            tap.line("ok - %s: %s (%d cases)" % (TITLE, self.title, self.cases))


def skip(title, reason):
    counts["skipped"] += 1
    tap.line("ok - %s: %s # SKIP %s" % (TITLE, title, reason))


def missing(name, method=None, meta=None):
    """Why a function cannot be tested yet (None when it exists)."""
    if name and not H.has(name):
        return "no dlpack.%s yet" % name
    if method and not H.has_method(method):
        return "no method t:%s yet" % method
    if meta and not H.has_meta(meta):
        return "no %s metamethod yet" % meta
    return None


# ---- operands ----------------------------------------------------------------------------

def rng_for(name):
    """A generator per function, so that one function's cases do not depend on the others'."""
    return np.random.default_rng([SEED] + [ord(c) for c in name])


def values(rng, dtype, shape, domain=None):
    n = int(np.prod(shape, dtype=np.int64))
    if dtype == "bool":
        return (rng.random(n) < 0.5).reshape(shape)
    if dtype in INTS:
        info = np.iinfo(dtype)
        lo, hi = (-3, 3) if domain == "tiny" else (-9, 9)
        small = rng.integers(max(info.min, lo), min(info.max, hi) + 1, size=n).astype(dtype)
        if domain == "tiny":
            return small.reshape(shape)
        full = rng.integers(info.min, info.max, size=n, endpoint=True, dtype=dtype)
        edges = np.array([info.min, info.max, 0, 1, info.max if info.min == 0 else -1], dtype)
        r = rng.random(n)
        out = np.where(r < 0.6, small, full)
        out = np.where(r > 0.93, edges[rng.integers(0, len(edges), size=n)], out)
        return out.reshape(shape)
    if domain == "tiny":  # products: magnitudes near 1, no overflow on any path
        x = rng.uniform(0.5, 2, n) * rng.choice([-1.0, 1.0], n)
        return x.astype(dtype).reshape(shape)
    x = rng.standard_normal(n) * 10.0 ** rng.uniform(-2, 3, n)
    halves = rng.integers(-8, 9, size=n) / 2.0
    special = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 0.1, 2.5, -2.5, 1e-30, 65504.0, 1e300])
    r = rng.random(n)
    x = np.where(r < 0.25, halves, x)
    if domain != "finite":
        x = np.where(r > 0.94, special[rng.integers(0, len(special), size=n)], x)
    return x.astype(dtype).reshape(shape)


def rand_shape(rng, min_nd=0, max_nd=4):
    r = rng.random()
    if r < 0.08 and min_nd == 0:
        return ()
    if r < 0.16:
        nd = int(rng.integers(max(min_nd, 1), max(max_nd, 1) + 1))
        shape = [int(rng.integers(1, 4)) for _ in range(nd)]
        shape[int(rng.integers(0, nd))] = 0
        return tuple(shape)
    if r < 0.32:  # long rows: the vector loops and their tails
        if max_nd >= 2 and rng.random() < 0.5:
            return (int(rng.integers(2, 4)), int(rng.integers(17, 90)))
        return (int(rng.integers(17, 300)),) + (() if min_nd <= 1 else (1,) * (min_nd - 1))
    nd = int(rng.integers(max(min_nd, 1), max_nd + 1))
    return tuple(int(rng.integers(1, 6)) for _ in range(nd))


def operand(rng, dtype, shape, layout, domain=None):
    """A NumPy array of `shape` with the given layout (falling back to contiguous where the
    layout cannot apply: a 0-d array is never transposed)."""
    shape, nd = tuple(shape), len(shape)
    if layout == "transposed" and nd >= 2:
        i, j = sorted(int(k) for k in rng.choice(nd, 2, replace=False))
        perm = list(range(nd))
        perm[i], perm[j] = perm[j], perm[i]
        return values(rng, dtype, tuple(shape[p] for p in perm), domain).transpose(perm)
    if layout == "sliced" and nd >= 1:
        steps = [int(rng.integers(1, 4)) for _ in shape]
        offs = [int(rng.integers(0, 2)) for _ in shape]
        base = values(rng, dtype, tuple(o + max(s - 1, 0) * st + 1 for s, st, o in zip(shape, steps, offs)), domain)
        return base[tuple(slice(o, o + s * st, st) for s, st, o in zip(shape, steps, offs))]
    if layout == "flipped" and nd >= 1:
        dims = [d for d in range(nd) if rng.random() < 0.6] or [int(rng.integers(0, nd))]
        return np.flip(values(rng, dtype, shape, domain), dims)
    if layout == "expanded" and nd >= 1 and any(s != 1 for s in shape):
        base = tuple(1 if (s != 1 and rng.random() < 0.5) else s for s in shape)
        if base == shape:
            k = [d for d in range(nd) if shape[d] != 1][0]
            base = base[:k] + (1,) + base[k + 1:]
        return np.broadcast_to(values(rng, dtype, base, domain), shape)
    return values(rng, dtype, shape, domain)


def broadcast_pair(rng, shape):
    """Two shapes that broadcast to `shape` (leading dims dropped, dims set to 1)."""
    def one():
        drop = int(rng.integers(0, len(shape) + 1)) if rng.random() < 0.3 else 0
        return tuple(1 if rng.random() < 0.2 else s for s in shape[drop:])
    return one(), one()


def to_lua(a):
    return bridge.to_lua(a)


def from_lua(v):
    """A Lua result as NumPy (a copy) or a Python value; tuples element by element."""
    if isinstance(v, tuple):
        return tuple(from_lua(x) for x in v)
    if H.is_tensor(v):
        return np.array(np.from_dlpack(bridge.wrap(v)), copy=True)
    return v


def show(a):
    if not isinstance(a, np.ndarray):
        return repr(a)
    strides = tuple(s // a.itemsize for s in a.strides) if a.itemsize else a.strides
    text = repr(a.tolist())
    if len(text) > 160:
        text = text[:160] + "..."
    return "%s%s strides %s %s" % (a.dtype, list(a.shape), list(strides), text)


# ---- comparison --------------------------------------------------------------------------

def float_diff(got, want, tol, info=None):
    """Where the float arrays `got` and `want` (same shape) differ beyond `tol`: None or text."""
    g, w = got.astype(np.float64), want.astype(np.float64)
    gn, wn = np.isnan(g), np.isnan(w)
    bad = gn != wn
    both = ~(gn | wn)
    winf = np.isinf(w) | np.isinf(g)
    bad |= both & winf & (g != w)
    fin = both & ~winf
    if isinstance(tol, str) and tol == "exact":
        bad |= fin & (g != w)
    elif isinstance(tol, str) and tol == "ulp":
        bad |= fin & (np.abs(g - w) > ulp_bound(want))
    else:  # an absolute bound per element (an array or a number) computed by the caller
        bad |= fin & (np.abs(g - w) > tol)
    if bad.any():
        k = np.argwhere(bad)[0] if bad.ndim else ()
        k = tuple(int(i) for i in k)
        return "first at %s: got %r, NumPy %r (%d elements differ)" % (
            list(k), g[k].item(), w[k].item(), int(bad.sum()))
    return None


def ulp_bound(r):
    """The 'ulp' tolerance of the float array r, in its own dtype: 4 units in the last place, 1 for
    float16 (see the module docstring)."""
    units = 1 if r.dtype == np.float16 else 4
    return units * np.spacing(np.abs(r)).astype(np.float64)


def diff_converted(got, result, out_dtype, tol):
    """Where `got` differs from the float (or other) array `result` converted into out_dtype as
    copy converts, judged with the tolerance of result's own dtype; through a conversion to an
    integer or bool an 'ulp' tolerance becomes the range of conversions of result -+ its bound
    (a last-place difference may cross an integer)."""
    result = np.asarray(result)
    o = np.dtype(out_dtype)
    want = cast_like_copy(result, o)
    if not (isinstance(tol, str) and tol == "ulp" and result.dtype.kind == "f"):
        return diff(got, want, tol)
    bound = ulp_bound(result)
    if o.kind == "f":
        return diff(got, want, bound)
    if not isinstance(got, np.ndarray) or got.dtype != o or got.shape != want.shape:
        return diff(got, want)
    bound = np.nan_to_num(bound, nan=0.0, posinf=0.0)
    r = result.astype(np.float64)
    with np.errstate(all="ignore"):
        if o.kind == "b":
            tolerable = np.abs(r) <= bound  # within a last place of 0: either truth value
        else:
            lo, hi = cast_like_copy(r - bound, o), cast_like_copy(r + bound, o)
            g = got.astype(np.float64)
            tolerable = (g >= np.minimum(lo, hi).astype(np.float64)) & (g <= np.maximum(lo, hi).astype(np.float64))
    bad = (got != want) & ~tolerable
    if bad.any():
        k = tuple(int(i) for i in np.argwhere(bad)[0]) if bad.ndim else ()
        return "first at %s: got %r, NumPy %r (%d elements differ)" % (
            list(k), got[k].item(), want[k].item(), int(bad.sum()))
    return None


def diff(got, want, tol="exact"):
    """None when `got` (from Lua) matches `want` (NumPy), else what differs."""
    if isinstance(want, tuple):
        if not isinstance(got, tuple) or len(got) != len(want):
            return "got %r, NumPy gives %d values" % (got, len(want))
        for i, (g, w) in enumerate(zip(got, want)):
            d = diff(g, w, tol[i] if isinstance(tol, tuple) else tol)
            if d:
                return "value %d: %s" % (i + 1, d)
        return None
    if not isinstance(want, np.ndarray):  # a Lua value for a NumPy scalar
        if isinstance(got, np.ndarray) or got is None:
            return "got %s, NumPy gives the value %r" % (show(got), want)
        w = np.asarray(want)
        if w.dtype == np.bool_:
            return None if (got is True or got is False) and got == bool(want) else \
                "got %r, NumPy %r (a boolean)" % (got, bool(want))
        if w.dtype.kind in "iu":
            if INTEGERS:
                ok = isinstance(got, int) and not isinstance(got, bool) and (
                    got == int(want) or got % 2 ** 64 == int(want) % 2 ** 64)
            else:  # a double: the integer rounded to it
                ok = isinstance(got, (int, float)) and not isinstance(got, bool) and float(got) == float(int(want))
            return None if ok else "got %r, NumPy %r" % (got, int(want))
        if not isinstance(got, (int, float)) or isinstance(got, bool):
            return "got %r, NumPy %r" % (got, want)
        d = float_diff(np.asarray(got, np.float64), w, tol)
        return d and "got %r, NumPy %r (%s)" % (got, want.item(), w.dtype)
    if not isinstance(got, np.ndarray):
        return "got %r, NumPy gives a %s array" % (got, want.dtype)
    if got.dtype != want.dtype:
        return "dtype %s, NumPy %s" % (got.dtype, want.dtype)
    if got.shape != want.shape:
        return "shape %s, NumPy %s" % (list(got.shape), list(want.shape))
    if want.dtype.kind in "biu":
        if not np.array_equal(got, want):
            bad = got != want
            k = tuple(int(i) for i in np.argwhere(bad)[0]) if bad.ndim else ()
            return "first at %s: got %r, NumPy %r (%d elements differ)" % (
                list(k), got[k].item(), want[k].item(), int(bad.sum()))
        return None
    return float_diff(got, want, tol)


NP_ERRORS = (TypeError, ValueError, OverflowError, ZeroDivisionError)


def check(line, what, run_lua, run_np, tol="exact", compare=None, known=None):
    """One case: run_np() is NumPy's answer (or raises), run_lua() the module's (Lua values
    converted with from_lua). Errors must agree; values must match within tol. known(got,
    want, lua_err, np_err) names a KNOWN difference a mismatch is an instance of, or None."""
    def classify(got, want, lua_err, np_err):
        return known and known(got, want, lua_err, np_err)

    line.cases += 1
    try:
        want, np_err = run_np(), None
    except NP_ERRORS as e:
        want, np_err = None, e
    try:
        got, lua_err = from_lua(run_lua()), None
    except LuaError as e:
        got, lua_err = None, e
    if np_err is not None and lua_err is not None:
        return True
    if lua_err is not None and not INTEGERS and "no exact Lua number" in str(lua_err) and \
            np.ndim(want) == 0 and np.asarray(want).dtype.kind in "iu" and abs(int(want)) > 2 ** 53:
        return True  # Lua 5.1, 5.2, LuaJIT: an integer result a double cannot hold may raise
    if np_err is not None:
        line.fail("%s: NumPy raises (%s: %s), Lua gives %s" % (what(), type(np_err).__name__, np_err,
                                                               show(got)), classify(got, want, lua_err, np_err))
        return False
    if lua_err is not None:
        line.fail("%s: Lua raises (%s), NumPy gives %s" % (what(), str(lua_err).splitlines()[0][:300],
                                                           show(want)), classify(got, want, lua_err, np_err))
        return False
    d = compare(got, want) if compare else diff(got, want, tol)
    if d:
        line.fail("%s: %s" % (what(), d), classify(got, want, lua_err, np_err))
        return False
    return True


def lua_raises(line, what, run_lua):
    line.cases += 1
    try:
        run_lua()
    except LuaError:
        return True
    line.fail("%s: no error raised" % what())
    return False


def cast_like_copy(a, dtype):
    """`t:copy(src)`'s conversion (src/core/convert.c): C casts, integers wrap, floats to integers
    truncate toward zero and saturate, NaN gives 0; to bool is `~= 0`."""
    dtype = np.dtype(dtype)
    if a.dtype.kind == "f" and dtype.kind in "iu":
        info = np.iinfo(dtype)
        x = np.trunc(np.nan_to_num(a.astype(np.float64), nan=0.0, posinf=np.inf, neginf=-np.inf))
        out = np.empty(a.shape, dtype)
        lo, hi = x <= float(info.min), x >= float(info.max)
        out[...] = np.where(lo | hi, 0, x).astype(dtype)
        out[lo], out[hi] = info.min, info.max
        return out
    if dtype == np.bool_:
        return np.asarray(a != 0)
    return a.astype(dtype)


# ---- elementwise ------------------------------------------------------------------------

BINARY = [  # (Lua name, NumPy ufunc, tolerance, operator)
    ("add", "add", "exact", "+"), ("sub", "subtract", "exact", "-"), ("mul", "multiply", "exact", "*"),
    ("div", "true_divide", "exact", "/"), ("idiv", "floor_divide", "exact", "//"),
    ("mod", "remainder", "exact", "%"), ("pow", "power", "ulp", "^"),
    ("maximum", "maximum", "exact", None), ("minimum", "minimum", "exact", None),
    ("eq", "equal", "exact", None), ("ne", "not_equal", "exact", None), ("lt", "less", "exact", None),
    ("le", "less_equal", "exact", None), ("gt", "greater", "exact", None),
    ("ge", "greater_equal", "exact", None),
    ("logical_and", "logical_and", "exact", None), ("logical_or", "logical_or", "exact", None),
    ("logical_xor", "logical_xor", "exact", None),
    ("band", "bitwise_and", "exact", "&"), ("bor", "bitwise_or", "exact", "|"),
    ("bxor", "bitwise_xor", "exact", "~"), ("shl", "left_shift", "exact", "<<"),
    ("shr", "right_shift", "exact", ">>"),
    ("atan2", "arctan2", "ulp", None), ("hypot", "hypot", "ulp", None),
]


def sigmoid(x):
    """1/(1+exp(-x)) with exp's dtypes (the contract), float16 computed in float32."""
    dtype = np.exp(x).dtype  # raises as exp does
    work = np.float64 if dtype == np.float64 else np.float32
    one = work(1)
    return (one / (one + np.exp(-x.astype(work)))).astype(dtype)


def float_function(x, fn):
    """fn of x with exp's dtypes (the contract), float16 computed in float32."""
    dtype = np.exp(x).dtype  # raises as exp does
    work = np.float64 if dtype == np.float64 else np.float32
    return np.asarray(fn(x.astype(work))).astype(dtype)


def erf(x):
    """The error function (NumPy has none; Python's math.erf, element by element)."""
    return float_function(x, np.vectorize(math.erf, otypes=[np.float64]))


def rsqrt(x):
    """1 / sqrt(x), torch's rsqrt (NumPy has none)."""
    return float_function(x, lambda w: w.dtype.type(1) / np.sqrt(w))


def reciprocal(x):
    """np.reciprocal, but an integer 0 raises (NumPy's C loop divides by it; the module raises
    as for integer division by zero)."""
    if x.dtype.kind in "biu" and not np.all(x):
        raise ZeroDivisionError("integer division by zero")
    return np.reciprocal(x)


def round_(x):
    """np.round, except that bool keeps bool (docs/api.md: the rounding functions keep integers
    and bool, as NumPy's floor, ceil and trunc do; NumPy's round alone gives bool float16)."""
    return np.array(x, copy=True) if x.dtype == np.bool_ else np.round(x)


UNARY = [  # (Lua name, NumPy function, tolerance, operator)
    ("neg", "negative", "exact", "-"), ("abs", "absolute", "exact", None), ("sign", "sign", "exact", None),
    ("sqrt", "sqrt", "exact", None), ("exp", "exp", "ulp", None), ("log", "log", "ulp", None),
    ("log1p", "log1p", "ulp", None), ("expm1", "expm1", "ulp", None), ("sin", "sin", "ulp", None),
    ("cos", "cos", "ulp", None), ("tan", "tan", "ulp", None), ("tanh", "tanh", "ulp", None),
    ("sigmoid", "sigmoid", "ulp", None), ("floor", "floor", "exact", None), ("ceil", "ceil", "exact", None),
    ("round", "round", "exact", None),  # bool keeps bool: see round_ ("trunc", "trunc", "exact", None),
    ("isnan", "isnan", "exact", None), ("isinf", "isinf", "exact", None),
    ("isfinite", "isfinite", "exact", None), ("logical_not", "logical_not", "exact", None),
    ("bnot", "invert", "exact", "~"),
    ("log2", "log2", "ulp", None), ("log10", "log10", "ulp", None), ("asin", "arcsin", "ulp", None),
    ("acos", "arccos", "ulp", None), ("atan", "arctan", "ulp", None), ("sinh", "sinh", "ulp", None),
    ("cosh", "cosh", "ulp", None), ("erf", "erf", "ulp", None), ("rsqrt", "rsqrt", "ulp", None),
    ("reciprocal", "reciprocal", "exact", None), ("square", "square", "exact", None),
]


def integer_result(a, b):
    """Whether NumPy computes a with b (arrays, dtypes, or Lua numbers as weak scalars) in an
    integer loop (bool pairs use int8 loops for idiv/mod)."""
    def arg(x):
        return x.dtype if isinstance(x, np.ndarray) else x
    try:
        return np.result_type(arg(a), arg(b)).kind in "biu"
    except (TypeError, ValueError, OverflowError):
        return False


def binary_domain(name, a, b):
    """Adjust the right operand (an array or a number) for the value cases: no integer
    division by zero (it raises: tested on its own), no negative integer exponents (NumPy
    raises: tested on its own, with the scalars)."""
    if name in ("idiv", "mod") and integer_result(a, b):
        if isinstance(b, np.ndarray):
            b = np.where(b == 0, np.ones((), b.dtype), b) if b.dtype != np.bool_ else np.ones_like(b)
        elif b == 0:
            b = 1
    if name == "pow" and isinstance(b, np.ndarray) and b.dtype.kind in "iu":
        b = np.asarray(np.where(b < 0, -(b + 1), b) % 7 if b.dtype.kind == "i" else b % 7).astype(b.dtype)
    return b


def nonnegative(s):
    """A Lua integer exponent made non-negative (negative ones are tested on their own)."""
    if isinstance(s, int) and not isinstance(s, bool) and s < 0:
        return lua_number(-(s + 1))
    return s


class desc_call:
    """A case's description (text made only when it fails); keeps the operands for KNOWN."""

    def __init__(self, name, *args):
        self.name, self.args = name, args

    def __call__(self):
        return "%s(%s)" % (self.name, ", ".join(show(a) for a in self.args))


def np_binary(ufunc, a, b, **kw):
    """NumPy's result as an array (a 0-d result too: the module gives a 0-d tensor)."""
    with np.errstate(all="ignore"):
        return np.asarray(ufunc(a, b, **kw))


def run_binary(spec):
    name, npname, tol, op = spec
    ufunc = getattr(np, npname)
    rng = rng_for(name)
    reason = missing(name)
    title = "%s: every dtype pair, layouts and broadcasting" % name
    if reason:
        skip(title, reason)
    else:
        line = Line(title)
        pairs = [(x, y) for x in DTYPES for y in DTYPES]
        pairs += [(DTYPES[int(rng.integers(12))], DTYPES[int(rng.integers(12))]) for _ in range(40)]
        for k, (da, db) in enumerate(pairs):
            shape = rand_shape(rng)
            sa, sb = broadcast_pair(rng, shape)
            a = operand(rng, da, sa, LAYOUTS[k % 5])
            b = binary_domain(name, a, operand(rng, db, sb, LAYOUTS[(k // 5 + k) % 5]))
            as_method = k % 3 == 1
            check(line, desc_call(name, a, b),
                  (lambda a=a, b=b, m=as_method: H.method(name, to_lua(a), to_lua(b)) if m else
                   H.call(name, None, None, to_lua(a), to_lua(b))),
                  lambda a=a, b=b: np_binary(ufunc, a, b), tol)
        # short rows broadcast along long ones ({480, 640, 3} + {3}): periods 1 to 17 (the module
        # folds periods up to 16 into long rows, reading the short operand from a tile)
        for k in range(36):
            da, db = DTYPES[int(rng.integers(12))], DTYPES[int(rng.integers(12))]
            shape, short = periodic_shapes(rng, k)
            a = operand(rng, da, shape, ["contiguous", "flipped", "sliced"][k % 3])
            b = binary_domain(name, a, operand(rng, db, short, ["contiguous", "flipped", "sliced", "expanded"][k % 4]))
            if k % 2:  # the short operand first
                a, b = b, binary_domain(name, b, a)
            check(line, desc_call(name, a, b), lambda a=a, b=b: H.call(name, None, None, to_lua(a), to_lua(b)),
                  lambda a=a, b=b: np_binary(ufunc, a, b), tol)
        # a broadcast mismatch raises
        a, b = values(rng, "int32", (2, 3)), values(rng, "int32", (4,))
        check(line, desc_call(name, a, b), lambda: H.call(name, None, None, to_lua(a), to_lua(b)),
              lambda: np_binary(ufunc, a, b))
        line.emit()
        binary_scalars(name, ufunc, tol, rng)
        binary_out(name, ufunc, tol, rng)
        binary_dtype(name, ufunc, tol, rng)
        binary_overlap(name, ufunc, tol, rng)
    binary_inplace(name, ufunc, tol, rng)
    if op:
        binary_operator(name, ufunc, tol, op, rng)
    if name in ("idiv", "mod"):
        division_by_zero(name, op, rng)
    if name == "pow":
        negative_powers(rng)


SCALARS = [0, 1, 2, 7, -1, -3, 100, 127, 128, 255, 256, 300, -129, 70000, 2 ** 31, 2 ** 40, 2 ** 63 - 1,
           -2 ** 63, 0.5, -2.5, 1e-3, 3.0, 1e10, float("nan"), float("inf"), -float("inf"), True, False]


def lua_number(s):
    """The value a Python number has in Lua as the module reads it: itself on Lua 5.3 and later;
    on 5.1, 5.2 and LuaJIT every number is a double, and an integral one within int64 counts as
    an integer (docs/api.md)."""
    if INTEGERS or isinstance(s, bool) or not isinstance(s, (int, float)):
        return s
    d = float(s)
    if math.isfinite(d) and d == int(d) and -2.0 ** 63 <= d < 2.0 ** 63:
        return int(d)
    return d


def pick_scalar(rng):
    return lua_number(SCALARS[int(rng.integers(len(SCALARS)))])


def periodic_shapes(rng, k):
    """A long shape and a short one broadcast along it: (..., n, p) and (p,), (1, p) or (..., 1, p)."""
    p, n = int(rng.integers(1, 18)), int(rng.integers(2, 200))
    shape = ((int(rng.integers(1, 4)),) if k % 3 == 0 else ()) + (n, p)
    return shape, [(p,), (1, p), shape[:-2] + (1, p)][k % 3]


def binary_scalars(name, ufunc, tol, rng):
    line = Line("%s: weak Lua scalars on either side (NumPy 2: uint8 + 1 stays uint8)" % name)
    for k in range(3 * len(DTYPES)):
        dt = DTYPES[k % len(DTYPES)]
        a = operand(rng, dt, rand_shape(rng), LAYOUTS[int(rng.integers(5))])
        s = pick_scalar(rng)
        if k % 2 == 0:
            s = binary_domain(name, a, s)
            if name == "pow":
                s = nonnegative(s)
            check(line, desc_call(name, a, s), lambda a=a, s=s: H.call(name, None, None, to_lua(a), s),
                  lambda a=a, s=s: np_binary(ufunc, a, s), tol)
        else:
            a = binary_domain(name, s, a)
            check(line, desc_call(name, s, a), lambda a=a, s=s: H.call(name, None, None, s, to_lua(a)),
                  lambda a=a, s=s: np_binary(ufunc, s, a), tol)
    line.emit()


def writable_like(rng, dtype, shape):
    """A writable operand of `shape` in a random layout, as an array view of a base we keep."""
    return operand(rng, dtype, shape, WRITABLE[int(rng.integers(len(WRITABLE)))])


def binary_out(name, ufunc, tol, rng):
    line = Line("%s: out= a tensor of any dtype and layout (converted as copy converts)" % name)
    for k in range(40):
        da, db, do = (DTYPES[int(rng.integers(12))] for _ in range(3))
        shape = rand_shape(rng)
        sa, sb = broadcast_pair(rng, shape)
        if k % 3 == 2:
            sa, sb = periodic_shapes(rng, k // 3)
        a = operand(rng, da, sa, LAYOUTS[int(rng.integers(5))])
        b = binary_domain(name, a, operand(rng, db, sb, LAYOUTS[int(rng.integers(5))]))
        try:
            full = np.broadcast_shapes(a.shape, b.shape)
        except ValueError:
            continue
        out = writable_like(rng, do, full)
        res = {}

        def run_lua(a=a, b=b, out=out):
            lout = to_lua(out)
            r = H.call(name, lout, None, to_lua(a), to_lua(b))
            res["same"] = H.same(r, lout)
            return out

        def run_np(a=a, b=b, out=out):
            return cast_like_copy(np_binary(ufunc, a, b), out.dtype)

        def compare(got, want, a=a, b=b, out=out):
            return diff_converted(got, np_binary(ufunc, a, b), out.dtype, tol)

        if check(line, desc_call(name + " out=" + str(out.dtype), a, b), run_lua, run_np, compare=compare) and \
                "same" in res and not res["same"]:
            line.fail("%s: returns another tensor than out" % desc_call(name, a, b)())
    line.emit()


def binary_dtype(name, ufunc, tol, rng):
    if name not in ("add", "sub", "mul", "div", "maximum", "minimum"):
        return
    line = Line("%s: dtype= (inputs converted as copy converts, computed in that dtype)" % name)
    for k in range(30):
        da, db, dd = DTYPES[int(rng.integers(12))], DTYPES[int(rng.integers(12))], DTYPES[int(rng.integers(12))]
        shape = rand_shape(rng)
        sa, sb = broadcast_pair(rng, shape)
        a = operand(rng, da, sa, LAYOUTS[int(rng.integers(5))])
        b = operand(rng, db, sb, LAYOUTS[int(rng.integers(5))])
        check(line, desc_call("%s dtype=%s" % (name, dd), a, b),
              lambda a=a, b=b, dd=dd: H.call(name, None, dd, to_lua(a), to_lua(b)),
              lambda a=a, b=b, dd=dd: np_binary(ufunc, cast_like_copy(a, dd), cast_like_copy(b, dd), dtype=dd),
              tol)
    line.emit()


def binary_inplace(name, ufunc, tol, rng):
    title = "%s: in place %s_ (NumPy's same_kind rule: raises where NumPy does)" % (name, name)
    reason = missing(None, method=name + "_")
    if reason:
        skip(title, reason)
        return
    line = Line(title)
    for k in range(60):
        da, db = DTYPES[int(rng.integers(12))], DTYPES[int(rng.integers(12))]
        if k < 12:
            da = db = DTYPES[k]
        shape = rand_shape(rng)
        sa, sb = broadcast_pair(rng, shape)
        if rng.random() < 0.8:
            sa = shape  # mostly a target of the broadcast shape; else NumPy raises, so must Lua
        a = writable_like(rng, da, sa)
        b = binary_domain(name, a, operand(rng, db, sb, LAYOUTS[int(rng.integers(5))]) if k % 4 else pick_scalar(rng))
        if name == "pow":
            b = nonnegative(b)
        mine, theirs = a, a.copy()

        def run_lua(mine=mine, b=b):
            ta = to_lua(mine)
            r = H.method(name + "_", ta, to_lua(b) if isinstance(b, np.ndarray) else b)
            if not H.same(r, ta):
                raise AssertionError("returns another tensor than t")
            return mine

        def run_np(theirs=theirs, b=b):
            np_binary(ufunc, theirs, b, out=theirs, casting="same_kind")
            return theirs

        try:
            check(line, desc_call(name + "_", a.copy(), b), run_lua, run_np, tol)
        except AssertionError as e:
            line.fail("%s: %s" % (desc_call(name + "_", a, b)(), e))
    line.emit()


OVERLAPS = ["behind", "ahead", "reversed", "itself reversed"]


def np_overlap(x, kind):
    """The NumPy views H.overlap makes in Lua: (input, out)."""
    if kind == 0:
        return x[1:], x[:-1]
    if kind == 1:
        return x[:-1], x[1:]
    if kind == 2:
        return x[1:], x[1:][::-1]
    return x, x[::-1]


def binary_overlap(name, ufunc, tol, rng):
    """out overlapping an input: NumPy reads every input first. Views made in Lua of one tensor,
    then views made by NumPy and imported one by one (the same memory, separate owners)."""
    for foreign in (False, True):
        line = Line("%s: out overlapping an input (%s)" % (
            name, "two views of one NumPy array, imported separately" if foreign else "views of one tensor"))
        same = []  # dtypes whose result with themselves is themselves: no cast on the way out
        for d in DTYPES:
            try:
                if np_binary(ufunc, np.ones(1, d), np.ones(1, d)).dtype == d:
                    same.append(d)
            except NP_ERRORS:
                pass
        for k in range(24 if not foreign else 12):
            dt = same[int(rng.integers(len(same)))]
            base = values(rng, dt, (int(rng.integers(2, 40)),))
            b = binary_domain(name, base, values(rng, dt, base.shape[:1]))[1:]
            kind = k % 3
            mine, theirs = base.copy(), base.copy()

            def run_lua(mine=mine, b=b, kind=kind, foreign=foreign):
                if foreign:
                    src, dst = (to_lua(v) for v in np_overlap(mine, kind))
                else:
                    src, dst = H.overlap(to_lua(mine), kind)
                H.call(name, dst, None, src, to_lua(b))
                return mine

            def run_np(theirs=theirs, b=b, kind=kind):
                src, dst = np_overlap(theirs, kind)
                np_binary(ufunc, src, b, out=dst, casting="unsafe")
                return theirs

            check(line, lambda base=base, kind=kind, b=b: "%s(input, %s, out) with out %s the input, of %s" % (
                name, show(b), OVERLAPS[kind], show(base)), run_lua, run_np, tol)
        line.emit()


def binary_operator(name, ufunc, tol, op, rng):
    title = "%s: the Lua operator a %s b (tensor or number on either side)" % (name, op)
    reason = None if H.has_operator(name) else "%s has no a %s b operator" % (RUNTIME[0], op)
    reason = reason or missing(None, meta="__" + {
        "add": "add", "sub": "sub", "mul": "mul", "div": "div", "idiv": "idiv",
        "mod": "mod", "pow": "pow", "band": "band", "bor": "bor", "bxor": "bxor",
        "shl": "shl", "shr": "shr"}[name])
    if reason:
        skip(title, reason)
        return
    line = Line(title)
    for k in range(48):
        da, db = DTYPES[int(rng.integers(12))], DTYPES[int(rng.integers(12))]
        shape = rand_shape(rng)
        sa, sb = broadcast_pair(rng, shape)
        a = operand(rng, da, sa, LAYOUTS[int(rng.integers(5))])
        b = binary_domain(name, a, operand(rng, db, sb, LAYOUTS[int(rng.integers(5))]))
        if k % 3 == 1:
            b = binary_domain(name, a, pick_scalar(rng))
            if name == "pow":
                b = nonnegative(b)
            check(line, desc_call(op, a, b), lambda a=a, b=b: H.operator(name, to_lua(a), b),
                  lambda a=a, b=b: np_binary(ufunc, a, b), tol)
        elif k % 3 == 2:
            s = pick_scalar(rng)
            if isinstance(s, bool):
                s = int(s)  # Lua operators see booleans as no operand at all
            b = binary_domain(name, s, b)
            check(line, desc_call(op, s, b), lambda s=s, b=b: H.operator(name, s, to_lua(b)),
                  lambda s=s, b=b: np_binary(ufunc, s, b), tol)
        else:
            check(line, desc_call(op, a, b), lambda a=a, b=b: H.operator(name, to_lua(a), to_lua(b)),
                  lambda a=a, b=b: np_binary(ufunc, a, b), tol)
    line.emit()


def division_by_zero(name, op, rng):
    title = "%s: integer %s by zero raises (tensor divisor, Lua number, operator)" % (
        name, "division" if name == "idiv" else "modulo")
    reason = missing(name)
    if reason:
        skip(title, reason)
        return
    line = Line(title)
    has_op = H.has_meta("__" + name) and H.has_operator(name)
    for dt in INTS + ["bool"]:
        a = values(rng, dt, (5,))
        b = np.ones(5, dt)
        b[3] = 0
        lua_raises(line, desc_call(name, a, b), lambda a=a, b=b: H.call(name, None, None, to_lua(a), to_lua(b)))
        lua_raises(line, desc_call(name, a, 0), lambda a=a: H.call(name, None, None, to_lua(a), 0))
        if has_op:
            lua_raises(line, desc_call(op, a, 0), lambda a=a: H.operator(name, to_lua(a), 0))
        if dt != "bool":  # the minimum divided by -1 wraps as in NumPy (no trap)
            info = np.iinfo(dt)
            m = np.array([info.min, info.min, 7], dt)
            d = np.array([-1 if info.min else 1, 1, -1 if info.min else 3], dt)
            check(line, desc_call(name, m, d), lambda m=m, d=d: H.call(name, None, None, to_lua(m), to_lua(d)),
                  lambda m=m, d=d: np_binary(getattr(np, "floor_divide" if name == "idiv" else "remainder"), m, d))
    # float division by zero does not raise: inf, nan as NumPy
    for dt in FLOATS:
        a = np.array([1, -1, 0, 2.5], dt)
        b = np.zeros(4, dt)
        check(line, desc_call(name, a, b), lambda a=a, b=b: H.call(name, None, None, to_lua(a), to_lua(b)),
              lambda a=a, b=b: np_binary(getattr(np, "floor_divide" if name == "idiv" else "remainder"), a, b))
    line.emit()


def negative_powers(rng):
    title = "pow: integers to negative integer powers raise (as NumPy)"
    reason = missing("pow")
    if reason:
        skip(title, reason)
        return
    line = Line(title)
    for dt in ["int8", "int16", "int32", "int64"]:
        a = values(rng, dt, (4,))
        b = np.array([1, 2, -1, 0], dt)
        check(line, desc_call("pow", a, b), lambda a=a, b=b: H.call("pow", None, None, to_lua(a), to_lua(b)),
              lambda a=a, b=b: np.power(a, b))
        check(line, desc_call("pow", a, -2), lambda a=a: H.call("pow", None, None, to_lua(a), -2),
              lambda a=a: np.power(a, -2))
    line.emit()


def run_unary(spec):
    name, fn, tol, op = spec
    fn = {"sigmoid": sigmoid, "round": round_, "erf": erf, "rsqrt": rsqrt, "reciprocal": reciprocal}.get(fn) or \
        getattr(np, fn)
    rng = rng_for(name)

    reason = missing(name)
    title = "%s: every dtype and layout" % name
    if reason:
        skip(title, reason)
    else:
        line = Line(title)
        for k in range(5 * len(DTYPES)):
            dt = DTYPES[k % len(DTYPES)]
            a = operand(rng, dt, rand_shape(rng), LAYOUTS[k // len(DTYPES)])
            as_method = k % 2 == 1
            check(line, desc_call(name, a),
                  lambda a=a, m=as_method: H.method(name, to_lua(a)) if m else H.call(name, None, None, to_lua(a)),
                  lambda a=a: np_unary(fn, a), tol)
        line.emit()
        line = Line("%s: out= a tensor of any dtype and layout" % name)
        for k in range(24):
            dt, do = DTYPES[k % 12], DTYPES[int(rng.integers(12))]
            a = operand(rng, dt, rand_shape(rng), LAYOUTS[int(rng.integers(5))])
            out = writable_like(rng, do, a.shape)

            def run_lua(a=a, out=out):
                H.call(name, to_lua(out), None, to_lua(a))
                return out

            check(line, desc_call(name + " out=" + do, a), run_lua,
                  lambda a=a, out=out: cast_like_copy(np_unary(fn, a), out.dtype),
                  compare=lambda got, want, a=a, out=out: diff_converted(got, np_unary(fn, a), out.dtype, tol))
        # out = the input itself reversed, views made in Lua (NumPy reads the input first)
        for k in range(6):
            dt = DTYPES[int(rng.integers(12))]
            base = values(rng, dt, (int(rng.integers(2, 40)),))
            mine, theirs = base.copy(), base.copy()

            def run_lua(mine=mine):
                src, dst = H.overlap(to_lua(mine), 3)
                H.call(name, dst, None, src)
                return mine

            def run_np(theirs=theirs):
                r = np_unary(fn, theirs)
                theirs[::-1] = cast_like_copy(r, theirs.dtype)
                return theirs

            check(line, desc_call(name + " out=the input reversed", base), run_lua, run_np,
                  compare=lambda got, want, base=base: diff_converted(got, np_unary(fn, base)[::-1], base.dtype, tol))
        line.emit()
    title = "%s: in place %s_ (same_kind)" % (name, name)
    reason = missing(None, method=name + "_")
    if reason:
        skip(title, reason)
    else:
        line = Line(title)
        for k in range(24):
            dt = DTYPES[k % 12]
            a = writable_like(rng, dt, rand_shape(rng))
            mine, theirs = a, a.copy()

            def run_lua(mine=mine):
                H.method(name + "_", to_lua(mine))
                return mine

            def run_np(theirs=theirs):
                r = np_unary(fn, theirs)
                if not np.can_cast(r.dtype, theirs.dtype, "same_kind"):
                    raise TypeError("same_kind: %s into %s" % (r.dtype, theirs.dtype))
                theirs[...] = r
                return theirs
            check(line, desc_call(name + "_", a.copy()), run_lua, run_np, tol)
        line.emit()
    if op:
        title = "%s: the Lua operator %sa" % (name, op)
        reason = (None if H.has_operator(name) else "%s has no %sa operator" % (RUNTIME[0], op)) or \
            missing(None, meta="__unm" if name == "neg" else "__bnot")
        if reason:
            skip(title, reason)
            return
        line = Line(title)
        for k in range(24):
            a = operand(rng, DTYPES[k % 12], rand_shape(rng), LAYOUTS[int(rng.integers(5))])
            check(line, desc_call(op, a), lambda a=a: H.operator(name, to_lua(a)), lambda a=a: np_unary(fn, a), tol)
        line.emit()


def np_unary(fn, a):
    with np.errstate(all="ignore"):
        return np.asarray(fn(a))


# ---- selection ----------------------------------------------------------------------------

def run_clamp():
    rng = rng_for("clamp")
    title = "clamp: every dtype, bounds numbers or nil (np.clip)"
    reason = missing("clamp")
    if reason:
        skip(title, reason)
    else:
        line = Line(title)
        bounds = [(0, 5), (-3, 3), (None, 2), (-1.5, None), (0.5, 2.5), (None, None), (3, -3), (-2.5, 100),
                  (float("-inf"), 0.0), (True, None)]
        for k in range(4 * len(DTYPES)):
            dt = DTYPES[k % 12]
            a = operand(rng, dt, rand_shape(rng), LAYOUTS[int(rng.integers(5))])
            lo, hi = (lua_number(x) for x in bounds[int(rng.integers(len(bounds)))])
            if dt[0] == "u" and any(isinstance(x, int) and not isinstance(x, bool) and x < 0 for x in (lo, hi)):
                continue  # NumPy wraps -1 into uint8 here, the module refuses it: out of range
            if lo is None and hi is None:
                continue  # np.clip refuses, the contract allows it: the same tensor values
            check(line, desc_call("clamp(%r, %r)" % (lo, hi), a),
                  lambda a=a, lo=lo, hi=hi: H.call("clamp", None, None, to_lua(a), lo, hi),
                  lambda a=a, lo=lo, hi=hi: np_unary(lambda x: np.clip(x, lo, hi), a))
        line.emit()
    title = "clamp: in place clamp_"
    reason = missing(None, method="clamp_")
    if reason:
        skip(title, reason)
        return
    line = Line(title)
    for k in range(24):
        dt = DTYPES[k % 12]
        if dt == "bool":
            continue
        a = writable_like(rng, dt, rand_shape(rng))
        lo, hi = (0, 5) if dt in INTS else (-0.5, 0.5)
        mine, theirs = a, a.copy()

        def run_lua(mine=mine, lo=lo, hi=hi):
            H.method("clamp_", to_lua(mine), lo, hi)
            return mine

        def run_np(theirs=theirs, lo=lo, hi=hi):
            np.clip(theirs, lo, hi, out=theirs)
            return theirs
        check(line, desc_call("clamp_(%r, %r)" % (lo, hi), a.copy()), run_lua, run_np)
    line.emit()


def run_where():
    rng = rng_for("where")
    title = "where: broadcast cond, tensors and numbers of every dtype"
    reason = missing("where")
    if reason:
        skip(title, reason)
        return
    line = Line(title)
    for k in range(2 * len(DTYPES) + 20):
        da, db = DTYPES[k % 12], DTYPES[int(rng.integers(12))]
        shape = rand_shape(rng)
        sc, sa = broadcast_pair(rng, shape)
        sb = broadcast_pair(rng, shape)[0]
        cond = operand(rng, "bool" if k % 7 else DTYPES[int(rng.integers(12))], sc, LAYOUTS[int(rng.integers(5))])
        a = operand(rng, da, sa, LAYOUTS[int(rng.integers(5))])
        b = operand(rng, db, sb, LAYOUTS[int(rng.integers(5))]) if k % 4 else lua_number([0, 1, 2.5, True, -1][k % 5])
        if not isinstance(b, np.ndarray) and da[0] == "u" and not isinstance(b, bool) and b < 0:
            b = 1
        check(line, desc_call("where", cond, a, b),
              lambda c=cond, a=a, b=b: H.call("where", None, None, to_lua(c), to_lua(a),
                                              to_lua(b) if isinstance(b, np.ndarray) else b),
              lambda c=cond, a=a, b=b: np.where(c, a, b))
    line.emit()


def run_masked_fill():
    rng = rng_for("masked_fill")
    title = "masked_fill: in place, a broadcast mask of any dtype, values of every kind (same_kind)"
    reason = missing(None, method="masked_fill")
    if reason:
        skip(title, reason)
        return
    line = Line(title)
    fills = [7, -1, 300, 0, 2.5, float("nan"), -7.0, 1e30, True, False]
    for k in range(4 * len(DTYPES)):
        dt = DTYPES[k % 12]
        shape = rand_shape(rng)
        a = writable_like(rng, dt, shape)
        mask = operand(rng, "bool" if k % 5 else DTYPES[int(rng.integers(12))], broadcast_pair(rng, shape)[0],
                       LAYOUTS[int(rng.integers(5))])
        v = lua_number(fills[int(rng.integers(len(fills)))])
        mine, theirs = a, a.copy()

        def run_lua(mine=mine, mask=mask, v=v):
            t = to_lua(mine)
            r = H.method("masked_fill", t, to_lua(mask), v)
            if not H.same(r, t):
                raise LuaError("masked_fill returns another tensor than t")
            return mine

        def run_np(theirs=theirs, mask=mask, v=v):
            with np.errstate(all="ignore"):  # NumPy's copyto: the same_kind rule, weak Lua numbers
                np.copyto(theirs, v, where=np.broadcast_to(mask != 0, theirs.shape), casting="same_kind")
            return theirs
        check(line, desc_call("masked_fill(mask, %r)" % (v,), a.copy(), mask), run_lua, run_np)
    line.emit()


# ---- reductions ------------------------------------------------------------------------

def sum_bound(x, n_axis, dtype, scale=1.0):
    eps = np.finfo(dtype).eps if np.dtype(dtype).kind == "f" else 0
    return 2 * math.log2(n_axis + 1) * eps * scale


def reduction_tol(name, a, axis, want, keepdim=False):
    """Per-element absolute bounds (see the module docstring)."""
    if np.asarray(want).dtype.kind != "f":
        return "exact"
    dt = np.asarray(want).dtype
    eps = float(np.finfo(dt).eps)
    x = np.abs(a.astype(np.float64))
    n = a.size if axis is None else int(np.prod([a.shape[d] for d in axis]))
    with np.errstate(all="ignore"):
        if name in ("sum", "mean"):
            s = np.sum(x, axis=axis, keepdims=bool(keepdim))
            bound = 2 * math.log2(n + 1) * eps * s / (max(n, 1) if name == "mean" else 1)
        elif name == "prod":
            bound = 2 * (n + 1) * eps * np.abs(np.asarray(want, np.float64))
        elif name in ("var", "std"):
            bound = 16 * math.log2(n + 2) * eps * np.mean(x * x, axis=axis, keepdims=bool(keepdim))
            if name == "std":  # |sqrt(u) - sqrt(v)| <= min(sqrt|u - v|, |u - v| / (2 sqrt v))
                w = np.abs(np.asarray(want, np.float64))
                bound = np.minimum(np.sqrt(bound), np.where(w > 0, bound / (2 * np.where(w > 0, w, 1)), np.inf))
        else:
            return "exact"
    return np.asarray(bound, np.float64) + np.spacing(np.abs(np.asarray(want, np.float64)))


REDUCTIONS = [  # (name, NumPy function, domain)
    ("sum", "sum", None), ("prod", "prod", "tiny"), ("mean", "mean", None), ("min", "min", None),
    ("max", "max", None), ("argmin", "argmin", None), ("argmax", "argmax", None), ("any", "any", None),
    ("all", "all", None), ("var", "var", None), ("std", "std", None),
]


def run_reduction(spec):
    name, fn, domain = spec
    fn = getattr(np, fn)
    rng = rng_for(name)
    title = "%s: every dtype and layout, over all, one or several dims, keepdim" % name
    reason = missing(name)
    if reason:
        skip(title, reason)
        return
    line = Line(title)
    single = name in ("min", "max", "argmin", "argmax")
    for k in range(6 * len(DTYPES)):
        dt = DTYPES[k % 12]
        shape = rand_shape(rng)
        a = operand(rng, dt, shape, LAYOUTS[int(rng.integers(5))], domain)
        nd = a.ndim
        mode = int(rng.integers(3)) if nd else 0
        keepdim = None
        if mode == 0:
            axis, dim = None, None
        elif mode == 1 or single:
            d = int(rng.integers(nd))
            axis, dim = (d,), (d + 1 if rng.random() < 0.7 else d - nd)
            keepdim = bool(rng.random() < 0.4)
        else:
            ds = sorted(set(int(x) for x in rng.integers(0, nd, size=int(rng.integers(1, nd + 1)))))
            axis, dim = tuple(ds), H.list(*[d + 1 for d in ds])
        correction = None
        if name in ("var", "std") and rng.random() < 0.5:
            correction = 1
        dtype = None
        if name in ("sum", "prod", "mean", "var", "std") and rng.random() < 0.25:
            if name in ("var", "std") or (name == "mean" and dt not in FLOATS):
                dtype = "float64"
            elif dt in FLOATS:
                dtype = ["float32", "float64"][k % 2]
            else:
                dtype = ["int64", "float64"][k % 2]
        as_method = k % 2 == 1

        def run_np(a=a, axis=axis, keepdim=keepdim, correction=correction, dtype=dtype):
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                kw = {"keepdims": bool(keepdim)}
                if correction is not None:
                    kw["ddof"] = correction
                if dtype is not None:
                    kw["dtype"] = dtype
                if name in ("argmin", "argmax"):
                    r = fn(a, axis=None if axis is None else axis[0], **kw)
                    return np.int64(r + 1) if axis is None else np.asarray(r + 1).astype(np.int64)
                if name in ("min", "max") and axis is not None:
                    arg = (np.argmin if name == "min" else np.argmax)(a, axis=axis[0], **kw)
                    return np.asarray(fn(a, axis=axis, **kw)), np.asarray(arg + 1).astype(np.int64)
                if name in ("var", "std") and a.dtype == np.float16 and dtype is None:
                    # NumPy squares float16 deviations in float16 (inf from 256 on); the module
                    # computes float16 in float32 and rounds once, as the contract says
                    r = np.asarray(fn(a.astype(np.float32), axis=axis, **kw)).astype(np.float16)
                else:
                    r = fn(a, axis=axis, **kw)
                return np.asarray(r) if axis is not None else r[()] if isinstance(r, np.ndarray) else r

        def run_lua(a=a, dim=dim, keepdim=keepdim, correction=correction, m=as_method, dtype=dtype):
            return H.reduce(name, m, to_lua(a), dim, keepdim, correction, dtype)

        def compare(got, want, a=a, axis=axis, keepdim=keepdim):
            if isinstance(want, tuple):
                return diff(got, want, ("exact", "exact"))
            if name in ("any", "all") and axis is None:
                return diff(got, np.bool_(want))
            return diff(got, want, reduction_tol(name, a, axis, want, keepdim))
        check(line, desc_call("%s(dim=%s, keepdim=%s%s%s)" % (
            name, list(dim.values()) if hasattr(dim, "values") else dim, keepdim,
            "" if correction is None else ", correction=%d" % correction,
            "" if dtype is None else ", dtype=%s" % dtype), a), run_lua, run_np, compare=compare)
    # dims out of range or repeated raise (NumPy's AxisError)
    a = values(rng, "float32", (2, 3))
    for dim, axis in ((0, 5), (3, 5), (-3, 5), ((1, 1), (0, 0)), ((1, 3), (0, 5))):
        if single and isinstance(dim, tuple):
            continue
        check(line, desc_call("%s(dim=%s)" % (name, dim), a),
              lambda dim=dim: H.reduce(name, False, to_lua(a), H.list(*dim) if isinstance(dim, tuple) else dim),
              lambda axis=axis: (np.argmax if name == "argmax" else np.argmin if name == "argmin" else fn)(
                  a, axis=axis))
    line.emit()


# ---- sorting, scans and statistics ------------------------------------------------------

def descending_order(a, axis):
    """Positions of a stable descending sort along axis, NaN first (torch's order): the reversed
    ascending stable sort of the reversed array."""
    n = a.shape[axis]
    r = np.argsort(np.flip(a, axis), axis=axis, kind="stable")
    return np.flip(n - 1 - r, axis)


SORTING = ["sort", "argsort", "topk", "cumsum", "cumprod", "softmax", "log_softmax", "median", "quantile",
           "unique", "norm"]


def run_sorting(name):
    rng = rng_for(name)
    title = "%s: every real dtype and layout, along each dimension" % name
    reason = missing(name)
    if reason:
        skip(title, reason)
        return
    line = Line(title)
    for k in range(6 * len(DTYPES)):
        dt = DTYPES[k % 12]
        needs_dim = name in ("sort", "argsort", "topk", "softmax", "log_softmax")
        shape = rand_shape(rng, min_nd=1 if needs_dim else 0)
        domain = "tiny" if name == "cumprod" else None
        a = operand(rng, dt, shape, LAYOUTS[int(rng.integers(5))], domain)
        nd = a.ndim
        axis = int(rng.integers(nd)) if nd else None
        if nd and not needs_dim and rng.random() < 0.3:
            axis = None
        dim = None if axis is None else (axis + 1 if rng.random() < 0.7 else axis - nd)
        opts, tol = None, "exact"
        if name in ("sort", "argsort"):
            desc = bool(rng.random() < 0.4)
            opts = H.opts("descending", desc) if desc else None

            def run_np(a=a, axis=axis, desc=desc):
                idx = descending_order(a, axis) if desc else np.argsort(a, axis=axis, kind="stable")
                pos = (idx + 1).astype(np.int64)
                return (np.take_along_axis(a, idx, axis), pos) if name == "sort" else pos

            def run_lua(a=a, dim=dim, opts=opts):
                return H.method(name, to_lua(a), dim, opts)
        elif name == "topk":
            n = a.shape[axis]
            kk = int(rng.integers(0, n + 1))
            largest = bool(rng.random() < 0.6)
            if rng.random() < 0.05:
                kk = n + 1

            def run_np(a=a, axis=axis, kk=kk, largest=largest):
                if kk > a.shape[axis]:
                    raise ValueError("k out of range")
                idx = descending_order(a, axis) if largest else np.argsort(a, axis=axis, kind="stable")
                idx = np.take(idx, np.arange(kk), axis=axis)
                return np.take_along_axis(a, idx, axis), (idx + 1).astype(np.int64)

            def run_lua(a=a, dim=dim, kk=kk, largest=largest):
                return H.method("topk", to_lua(a), kk, dim, H.opts("largest", largest))
        elif name in ("cumsum", "cumprod"):
            fn = np.cumsum if name == "cumsum" else np.cumprod
            dtype = None
            if rng.random() < 0.25:  # (a float's inf or NaN into int32 converts as copy does: not here)
                dtype = ["float64", "int32" if dt not in FLOATS else "float64", "float32"][k % 3]
            if axis is None and nd == 0:
                dim = None

            def run_np(a=a, axis=axis, dtype=dtype, fn=fn):
                with np.errstate(all="ignore"):
                    return fn(a, axis=axis, dtype=dtype)

            def run_lua(a=a, dim=dim, dtype=dtype):
                return H.method(name, to_lua(a), dim, H.opts("dtype", dtype) if dtype else None)
        elif name in ("softmax", "log_softmax"):
            out = dt if dt in FLOATS else "float32"

            def run_np(a=a, axis=axis, out=out):
                x = a.astype(out).astype(np.float64)  # torch: the input in the result's dtype first
                if x.size == 0:  # (NumPy's max raises; torch's softmax gives the empty result)
                    return x.astype(out)
                with np.errstate(all="ignore"):
                    m = np.max(x, axis=axis, keepdims=True)
                    e = np.exp(x - m)
                    s = np.sum(e, axis=axis, keepdims=True)
                    r = (x - m) - np.log(s) if name == "log_softmax" else e / s
                return r.astype(out)

            def run_lua(a=a, dim=dim):
                return H.method(name, to_lua(a), dim)
            eps = float(np.finfo(out).eps)

            def tol_of(want, eps=eps):  # x - max is rounded to the dtype: eps * |x - max| more
                w = np.abs(want.astype(np.float64))
                with np.errstate(all="ignore"):
                    spread = np.where(w > 0, np.abs(np.log(np.where(w > 0, w, 1))), 0) if name == "softmax" else w
                return 16 * eps * (w * (1 + spread) + (1 if name == "log_softmax" else 0)) + 1e-37
            tol = tol_of
        elif name == "median":
            keepdim = bool(rng.random() < 0.3)

            def run_np(a=a, axis=axis, keepdim=keepdim):
                with np.errstate(all="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    r = np.median(a, axis=axis, keepdims=keepdim)
                return np.asarray(r) if keepdim or axis is not None else r[()]

            def run_lua(a=a, dim=dim, keepdim=keepdim):
                return H.method("median", to_lua(a), dim, H.opts("keepdim", keepdim))
            tol = "ulp"
        elif name == "norm":
            if dt == "float16":  # (NumPy squares and sums float16 in float16; the module's sums use float32)
                continue
            matrix = nd == 2 and rng.random() < 0.5
            if matrix:
                ord_ = [None, "fro", 1, -1, np.inf, -np.inf][int(rng.integers(6))]
                axis, dim = None, None
            else:
                ord_ = [None, 1, 2, np.inf, -np.inf, 0, 3, 0.5][int(rng.integers(8))]
                if axis is None and ord_ is not None and nd not in (1, 2):
                    ord_ = None
                if axis is None and nd == 2 and ord_ is not None:
                    axis, dim = 1, 2
            keepdim = bool(rng.random() < 0.3)

            def run_np(a=a, ord_=ord_, axis=axis, keepdim=keepdim):
                with np.errstate(all="ignore"):
                    r = np.linalg.norm(a, ord_, axis, keepdim)
                return np.asarray(r) if keepdim or axis is not None else r

            def run_lua(a=a, ord_=ord_, dim=dim, keepdim=keepdim):
                o = float(ord_) if isinstance(ord_, float) else ord_
                return H.method("norm", to_lua(a), o, dim, keepdim)
            n_el = max(a.size, 1)

            def tol_of(want, n_el=n_el):
                w = np.abs(want.astype(np.float64))
                eps = float(np.finfo(want.dtype).eps)
                return 8 * (math.log2(n_el + 2) + 2) * eps * w + np.spacing(w)
            tol = tol_of
        elif name == "unique":
            inv, cnt = bool(rng.random() < 0.5), bool(rng.random() < 0.5)

            def run_np(a=a, inv=inv, cnt=cnt):
                r = np.unique(a, return_inverse=inv, return_counts=cnt)
                if not (inv or cnt):
                    return r
                r = list(r)
                if inv:
                    r[1] = (r[1] + 1).astype(np.int64)
                return tuple(np.asarray(x) for x in r)

            def run_lua(a=a, inv=inv, cnt=cnt):
                return H.method("unique", to_lua(a), H.opts("return_inverse", inv, "return_counts", cnt))
        else:  # quantile
            if a.size == 0:
                continue
            if axis is not None and a.shape[axis] == 0:
                continue
            q = float(rng.random()) if rng.random() < 0.6 else [float(x) for x in rng.random(int(rng.integers(1, 4)))]
            keepdim = bool(rng.random() < 0.3)

            def run_np(a=a, axis=axis, q=q, keepdim=keepdim):
                with np.errstate(all="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    r = np.quantile(a, q, axis=axis, keepdims=keepdim)
                return np.asarray(r) if keepdim or axis is not None or np.ndim(r) else np.asarray(r)[()]

            def run_lua(a=a, dim=dim, q=q, keepdim=keepdim):
                return H.method("quantile", to_lua(a), H.list(*q) if isinstance(q, list) else q, dim,
                                H.opts("keepdim", keepdim))
            tol = "ulp"

        def compare(got, want, tol=tol):
            t = tol(want if not isinstance(want, tuple) else want[0]) if callable(tol) else tol
            if isinstance(want, tuple):
                return diff(got, want, (t,) + ("exact",) * (len(want) - 1))
            return diff(got, want, t)
        check(line, desc_call("%s(dim=%s)" % (name, dim), a), run_lua, run_np, compare=compare)
    line.emit()


# ---- matmul and dot, cat, stack, flip, equal, allclose ---------------------------------

def matmul_shapes(rng):
    m, k, n = (int(rng.integers(1, 9)) for _ in range(3))
    if rng.random() < 0.25:
        m, k, n = int(rng.integers(1, 40)), int(rng.integers(30, 80)), int(rng.integers(1, 40))
    if rng.random() < 0.05:
        k = 0
    r = int(rng.integers(7))
    if r == 0:
        return (k,), (k,)
    if r == 1:
        return (m, k), (k,)
    if r == 2:
        return (k,), (k, n)
    if r == 3:
        b = int(rng.integers(1, 4))
        return (b, m, k), (k, n)
    if r == 4:
        b, c = int(rng.integers(1, 3)), int(rng.integers(1, 3))
        return (b, 1, m, k), (c, k, n)
    return (m, k), (k, n)


def matmul_tol(a, b, want):
    dt = np.asarray(want).dtype
    if dt.kind != "f":
        return "exact"
    k = a.shape[-1]
    with np.errstate(all="ignore"):
        mag = np.matmul(np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)))
    return 2 * (k + 1) * float(np.finfo(dt).eps) * mag + np.spacing(np.abs(np.asarray(want, np.float64)))


def np_matmul(name, a, b):
    """NumPy's matmul or dot: two 1-d operands give a scalar (the module gives a Lua number)."""
    with np.errstate(all="ignore"):
        r = (np.matmul if name == "matmul" else np.dot)(a, b)
    return r if a.ndim == 1 and b.ndim == 1 else np.asarray(r)


def run_matmul(name):
    rng = rng_for(name)
    title = "%s: every dtype pair, 1-d, 2-d%s, transposed and strided operands" % (
        name, " and batched" if name == "matmul" else "")
    reason = missing(name)
    if reason:
        skip(title, reason)
        return
    line = Line(title)
    pairs = [(x, y) for x in DTYPES for y in DTYPES] if name == "matmul" else \
        [(DTYPES[int(rng.integers(12))], DTYPES[int(rng.integers(12))]) for _ in range(40)]
    for k, (da, db) in enumerate(pairs):
        sa, sb = matmul_shapes(rng)
        if name == "dot" and (len(sa) > 2 or len(sb) > 2):
            sa, sb = sa[-2:], sb[-2:]
        a = operand(rng, da, sa, LAYOUTS[k % 5], "finite")
        b = operand(rng, db, sb, LAYOUTS[(k + k // 5) % 5], "finite")
        check(line, desc_call(name, a, b), lambda a=a, b=b: H.call(name, None, None, to_lua(a), to_lua(b)),
              lambda a=a, b=b: np_matmul(name, a, b),
              compare=lambda got, want, a=a, b=b: diff(got, want, matmul_tol(a, b, want)))
    a, b = values(rng, "float32", (2, 3)), values(rng, "float32", (4, 2))
    check(line, desc_call(name, a, b), lambda: H.call(name, None, None, to_lua(a), to_lua(b)),
          lambda: np.matmul(a, b))
    line.emit()


def run_cat_stack(name):
    rng = rng_for(name)
    title = "%s: 1 to 4 tensors of mixed dtypes and layouts, every dim" % name
    reason = missing(name)
    if reason:
        skip(title, reason)
        return
    line = Line(title)
    for k in range(60):
        shape = rand_shape(rng, min_nd=1 if name == "cat" else 0, max_nd=3)
        nd = len(shape)
        count = int(rng.integers(1, 5))
        d = int(rng.integers(0, nd + (1 if name == "stack" else 0))) if nd or name == "stack" else 0
        parts = []
        for i in range(count):
            s = list(shape)
            if name == "cat" and nd:
                s[d] = int(rng.integers(0, 4))
            if k % 10 == 9 and i == count - 1 and nd:  # a shape mismatch: both raise
                s[(d + 1) % nd if name == "cat" and nd > 1 else 0] += 1
            dt = DTYPES[int(rng.integers(12))] if k % 2 else DTYPES[k % 12]
            parts.append(operand(rng, dt, s, LAYOUTS[int(rng.integers(5))]))
        dim = d + 1 if rng.random() < 0.7 else d - (nd + (1 if name == "stack" else 0))
        join(line, name, parts, d, dim)
    # three dtypes whose promotion depends on grouping: NumPy promotes them together
    # (uint16, int8, float16 -> float32), not pairwise ((uint16, int8) -> int32, then float64)
    for dts in (("uint16", "int8", "float16"), ("float16", "uint8", "int16"), ("int64", "uint64", "float16")):
        parts = [values(rng, dt, (2, 3)) for dt in dts]
        join(line, name, parts, 0, 1)
    line.emit()


def join(line, name, parts, d, dim):
    check(line, desc_call("%s(dim=%d)" % (name, dim), *parts),
          lambda: H.call(name, None, None, H.list(*[to_lua(p) for p in parts]), dim),
          lambda: (np.concatenate if name == "cat" else np.stack)(parts, axis=d))


def run_flip():
    rng = rng_for("flip")
    title = "flip: a view of every dtype, dims a number or a table"
    reason = missing(None, method="flip")
    if reason:
        skip(title, reason)
        return
    line = Line(title)
    for k in range(36):
        a = operand(rng, DTYPES[k % 12], rand_shape(rng, min_nd=1), LAYOUTS[int(rng.integers(5))])
        dims = sorted(set(int(x) for x in rng.integers(0, a.ndim, size=int(rng.integers(1, a.ndim + 1)))))
        as_number = len(dims) == 1 and k % 2 == 0
        res = {}

        def run_lua(a=a, dims=dims, as_number=as_number):
            r = H.method("flip", to_lua(a), dims[0] + 1 if as_number else H.list(*[d + 1 for d in dims]))
            view = np.from_dlpack(bridge.wrap(r))
            res["shares"] = a.size == 0 or np.shares_memory(view, a)
            return r

        if check(line, desc_call("flip(%s)" % [d + 1 for d in dims], a), run_lua,
                 lambda a=a, dims=dims: np.flip(a, dims)) and not res.get("shares", True):
            line.fail("flip(%s) of %s: a copy, not a view" % (dims, show(a)))
    line.emit()


def run_equal_allclose(name):
    rng = rng_for(name)
    title = "%s: same and different shapes, dtypes, values, NaN" % name
    reason = missing(name)
    if reason:
        skip(title, reason)
        return
    line = Line(title)
    for k in range(48):
        da, db = DTYPES[k % 12], DTYPES[int(rng.integers(12))]
        shape = rand_shape(rng, max_nd=3)
        a = operand(rng, da, shape, LAYOUTS[int(rng.integers(5))], "finite" if k % 3 else None)
        r = k % 4
        if r == 0:
            b = a.astype(db)  # the same values in another dtype (they may not survive it)
        elif r == 1:
            b = np.array(a, copy=True)
            if b.size:
                flat = b.reshape(-1)
                flat[int(rng.integers(b.size))] = values(rng, da, (1,))[0]
        elif r == 2:
            b = operand(rng, db, broadcast_pair(rng, shape)[0], "contiguous")
        else:
            with np.errstate(all="ignore"):
                b = np.asarray(a.astype(np.float64) * (1 + float(rng.choice([1e-9, 1e-6, 1e-3])))).astype(
                    a.dtype if a.dtype.kind == "f" else np.float64)
        if name == "equal":
            check(line, desc_call(name, a, b), lambda a=a, b=b: H.call(name, None, None, to_lua(a), to_lua(b)),
                  lambda a=a, b=b: np.bool_(np.array_equal(a, b)), compare=diff)
        else:
            tols = [(), (1e-3,), (0.0, 1e-2)][k % 3]
            check(line, desc_call("%s%s" % (name, list(tols)), a, b),
                  lambda a=a, b=b, t=tols: H.call(name, None, None, to_lua(a), to_lua(b), *t),
                  lambda a=a, b=b, t=tols: np.bool_(np_unary(lambda x: np.allclose(
                      x, b, *(t + (1e-5, 1e-8)[len(t):])), a)), compare=diff)
    line.emit()


# ---- more functions: isclose, views, tables of views, shape functions --------------------------

def lua_table(tbl):
    """A Lua list of tensors as a tuple (lupa table, 1-based)."""
    return tuple(tbl[i] for i in range(1, len(tbl) + 1))


def np_split(a, size, axis):
    """torch's split by a size (NumPy's array_split takes indices)."""
    n = a.shape[axis]
    if n == 0:
        return (a,)
    return tuple(np.take(a, range(i, min(i + size, n)), axis=axis) for i in range(0, n, size))


def np_chunk(a, pieces, axis):
    n = a.shape[axis]
    return np_split(a, -(-n // pieces) if n else 0, axis)


def run_isclose(_):
    rng = rng_for("isclose")
    title = "isclose: every dtype pair, broadcasting, tolerances, equal_nan"
    reason = missing("isclose")
    if reason:
        skip(title, reason)
        return
    line = Line(title)
    for k in range(60):
        da, db = DTYPES[k % 12], DTYPES[int(rng.integers(12))]
        shape = rand_shape(rng, max_nd=3)
        sa, sb = broadcast_pair(rng, shape)
        a = operand(rng, da, sa, LAYOUTS[int(rng.integers(5))])
        if k % 2:
            with np.errstate(all="ignore"):
                b = np.asarray(a.astype(np.float64) * (1 + float(rng.choice([1e-9, 1e-6, 1e-3])))).astype(
                    a.dtype if a.dtype.kind == "f" else np.float64)
        else:
            b = operand(rng, db, sb, LAYOUTS[int(rng.integers(5))])
        tols = [(), (1e-3,), (0.0, 1e-2), (1e-5, 1e-8, True)][k % 4]
        check(line, desc_call("isclose%s" % list(tols), a, b),
              lambda a=a, b=b, t=tols: H.call("isclose", None, None, to_lua(a), to_lua(b), *t),
              lambda a=a, b=b, t=tols: np_unary(lambda x: np.isclose(
                  x.astype(np.float64), b.astype(np.float64), *(t + (1e-5, 1e-8, False)[len(t):])), a))
    line.emit()


def shape_cases(rng, name, k):
    """(description, Lua call, NumPy answer) of case k of a shape function."""
    dt = DTYPES[k % 12]
    lay = LAYOUTS[int(rng.integers(5))]
    a = operand(rng, dt, rand_shape(rng, min_nd=1 if name not in ("T", "ravel", "flatten", "tile") else 0,
                                    max_nd=4), lay)
    nd = a.ndim
    d = int(rng.integers(nd)) if nd else 0
    if name == "T":
        return (desc_call("T", a), lambda: H.field(to_lua(a), "T"), lambda: a.T)
    if name == "ravel":
        return (desc_call("ravel", a), lambda: H.method("ravel", to_lua(a)), lambda: np.ravel(a))
    if name == "flatten":
        s, e = sorted(int(x) for x in rng.integers(0, max(nd, 1), size=2))
        want = a.reshape(a.shape[:s] + (-1,) + a.shape[e + 1:]) if nd and a.size else \
            a.reshape(a.shape[:s] + (int(np.prod(a.shape[s:e + 1], dtype=np.int64)),) + a.shape[e + 1:]) if nd \
            else a.reshape(1)
        return (desc_call("flatten(%d, %d)" % (s + 1, e + 1), a),
                lambda: H.method("flatten", to_lua(a), s + 1, e + 1) if nd else H.method("flatten", to_lua(a)),
                lambda: want)
    if name == "diagonal":
        if nd < 2:
            a = operand(rng, dt, (3, 4), lay)
        off = int(rng.integers(-3, 4))
        return (desc_call("diagonal(%d)" % off, a), lambda: H.method("diagonal", to_lua(a), off),
                lambda: np.diagonal(a, off))
    if name == "split":
        size = int(rng.integers(1, 4))
        return (desc_call("split(%d, %d)" % (size, d + 1), a),
                lambda: lua_table(H.call("split", None, None, to_lua(a), size, d + 1)),
                lambda: np_split(a, size, d))
    if name == "chunk":
        pieces = int(rng.integers(1, 5))
        return (desc_call("chunk(%d, %d)" % (pieces, d + 1), a),
                lambda: lua_table(H.call("chunk", None, None, to_lua(a), pieces, d + 1)),
                lambda: np_chunk(a, pieces, d))
    if name == "unbind":
        return (desc_call("unbind(%d)" % (d + 1), a),
                lambda: lua_table(H.call("unbind", None, None, to_lua(a), d + 1)),
                lambda: tuple(np.asarray(np.take(a, i, axis=d)) for i in range(a.shape[d])))
    if name == "tile":
        reps = [int(x) for x in rng.integers(0, 4, size=int(rng.integers(1, 4)))]
        return (desc_call("tile(%s)" % reps, a), lambda: H.call("tile", None, None, to_lua(a), H.list(*reps)),
                lambda: np.tile(a, reps))
    if name == "repeat_interleave":
        n = int(rng.integers(0, 4))
        axis = None if k % 3 == 0 else d
        return (desc_call("repeat_interleave(%d, %s)" % (n, axis), a),
                lambda: H.call("repeat_interleave", None, None, to_lua(a), n, None if axis is None else axis + 1),
                lambda: np.repeat(a, n, axis))
    if name == "roll":
        if k % 3 == 0:
            sh = int(rng.integers(-30, 30))
            return (desc_call("roll(%d)" % sh, a), lambda: H.call("roll", None, None, to_lua(a), sh),
                    lambda: np.roll(a, sh))
        dims = sorted(set(int(x) for x in rng.integers(0, nd, size=int(rng.integers(1, nd + 1)))))
        shifts = [int(x) for x in rng.integers(-7, 8, size=len(dims))]
        return (desc_call("roll(%s, %s)" % (shifts, dims), a),
                lambda: H.call("roll", None, None, to_lua(a), H.list(*shifts), H.list(*[x + 1 for x in dims])),
                lambda: np.roll(a, shifts, dims))
    if name in ("tril", "triu"):
        if nd < 2:
            a = operand(rng, dt, (int(rng.integers(0, 5)), int(rng.integers(0, 5))), lay)
        off = int(rng.integers(-3, 4))
        return (desc_call("%s(%d)" % (name, off), a), lambda: H.call(name, None, None, to_lua(a), off),
                lambda: getattr(np, name)(a, off))
    if name == "diag":
        if nd > 2:
            a = a.reshape(-1) if a.size else operand(rng, dt, (3,), lay)
        off = int(rng.integers(-3, 4))
        return (desc_call("diag(%d)" % off, a), lambda: H.call("diag", None, None, to_lua(a), off),
                lambda: np.diag(a, off))
    if name == "outer":
        b = operand(rng, DTYPES[int(rng.integers(12))], rand_shape(rng, max_nd=2), LAYOUTS[int(rng.integers(5))])
        return (desc_call("outer", a, b), lambda: H.call("outer", None, None, to_lua(a), to_lua(b)),
                lambda: np_binary(np.multiply, np.ravel(a)[:, None], np.ravel(b)))
    if name in ("hstack", "vstack", "concatenate"):
        parts = [a]
        for _ in range(int(rng.integers(0, 3))):
            s = list(a.shape)
            if name == "concatenate" or (name == "hstack" and nd > 1):
                s[d if name == "concatenate" else 1] = int(rng.integers(0, 3))
            elif name == "vstack" and nd > 1:
                s[0] = int(rng.integers(0, 3))
            parts.append(operand(rng, DTYPES[int(rng.integers(12))], s, LAYOUTS[int(rng.integers(5))]))
        if name == "concatenate":
            return (desc_call("concatenate(dim=%d)" % (d + 1), *parts),
                    lambda: H.call(name, None, None, H.list(*[to_lua(p) for p in parts]), d + 1),
                    lambda: np.concatenate(parts, axis=d))
        return (desc_call(name, *parts), lambda: H.call(name, None, None, H.list(*[to_lua(p) for p in parts])),
                lambda: getattr(np, name)(parts))
    raise ValueError(name)


EINSUM_SPECS = ["ij,jk->ik", "ij,jk", "ii", "ii->i", "ij->ji", "ij->", "i,i", "i,j->ij", "...ij,...jk->...ik",
                "bij,bjk->bik", "ijk->kji", "ij,ij->ij", "ij,ji->", "iij->ij", "i,i,i->i", "abc,cd,de->abe",
                "Ab,bA->A", "...i,...i->...", "ij,j", "i j,j k", "ba,AB", "...", "ij,kl->ijkl", "ijj->"]


def einsum_operands(rng, spec, dt):
    """Operands for spec: sizes per label 0 to 4 (mostly 1 to 3), some 1 to broadcast, 0 to 2
    dims for '...'; finite values (0 * inf in one order of the sums is NaN, in another not)."""
    terms = spec.split("->")[0].replace(" ", "").split(",")
    size = {c: int(rng.choice([1, 2, 3, 3, 4, 0])) for c in "".join(terms) if c.isalpha()}
    ell = [int(rng.integers(1, 4)) for _ in range(int(rng.integers(0, 3)))]
    ops = []
    for t in terms:
        shape = []
        for part in t.split("..."):
            if shape or t.startswith("..."):
                e = ell[int(rng.integers(0, len(ell) + 1)):] if ell else []
                shape += [1 if rng.random() < 0.2 else x for x in e]
            shape += [1 if rng.random() < 0.1 else size[c] for c in part]
        if t.startswith("...") and not t.replace("...", ""):
            shape = ell
        ops.append(operand(rng, dt, tuple(shape), LAYOUTS[int(rng.integers(5))], "finite"))
    return ops


def einsum_tol(spec, ops, want):
    """Sums in another order (pairwise products through matmul, NumPy one sum over every
    subscript): 2 (K + 1) eps times the sum of the magnitudes, K the terms summed per element, as
    matmul's bound; integers exact (wrapping does not depend on the order)."""
    dt = np.asarray(want).dtype
    if dt.kind != "f":
        return "exact"
    terms = max(1, int(np.prod([o.size for o in ops], dtype=np.float64)) // max(1, np.asarray(want).size))
    with np.errstate(all="ignore"):
        mag = np.asarray(np.einsum(spec, *[np.abs(o.astype(np.float64)) for o in ops]))
    return 2 * (terms + 1) * float(np.finfo(dt).eps) * mag + np.spacing(np.abs(np.asarray(want, np.float64)))


def run_einsum(_):
    rng = rng_for("einsum")
    title = "einsum: NumPy's subscripts (explicit, implicit, diagonals, '...', broadcasting), dtypes, layouts"
    reason = missing("einsum")
    if reason:
        skip(title, reason)
        return
    line = Line(title)
    for k in range(4 * len(EINSUM_SPECS)):
        spec = EINSUM_SPECS[k % len(EINSUM_SPECS)]
        dt = ["int32", "int64", "float32", "float64", "int8", "uint8", "int16", "float64"][k % 8]
        ops = einsum_operands(rng, spec, dt)
        check(line, desc_call("einsum(%r)" % spec, *ops),
              lambda spec=spec, ops=ops: H.call("einsum", None, None, spec, *[to_lua(o) for o in ops]),
              lambda spec=spec, ops=ops: np.asarray(np.einsum(spec, *ops)),
              compare=lambda got, want, spec=spec, ops=ops: diff(got, want, einsum_tol(spec, ops, want)))
    line.emit()


def run_einsum_out(_):
    rng = rng_for("einsum_out")
    title = "einsum out= and dtype=: NumPy's safe casting, out of any writable layout, wrong shapes"
    reason = missing("einsum")
    if reason:
        skip(title, reason)
        return
    line = Line(title)
    for k in range(2 * len(EINSUM_SPECS)):
        spec = EINSUM_SPECS[k % len(EINSUM_SPECS)]
        dt = ["int32", "int8", "float32", "int64", "uint8", "float64"][k % 6]
        ops = einsum_operands(rng, spec, dt)
        dtype = [None, "int64", "float64", "float32", "int16"][k % 5]
        odt = ["float64", "int64", "float32", "int32"][(k // 5) % 4]
        shape = np.einsum(spec, *ops).shape
        if k % 9 == 8:  # one more along the first dim (or a dim where there was none): both raise
            shape = (shape[0] + 1,) + shape[1:] if shape else (1,)
        out = operand(rng, odt, shape, WRITABLE[int(rng.integers(4))])
        if not out.flags.writeable:
            out = np.zeros(shape, odt)

        def run_lua(spec=spec, ops=ops, out=out, dtype=dtype):
            H.call("einsum", to_lua(out), dtype, spec, *[to_lua(o) for o in ops])
            return out

        def run_np(spec=spec, ops=ops, shape=shape, odt=odt, dtype=dtype):
            mine = np.zeros(shape, odt)
            with np.errstate(all="ignore"):
                np.einsum(spec, *ops, out=mine, **({"dtype": dtype} if dtype else {}))
            return mine
        check(line, desc_call("einsum(%r, dtype=%s, out=%s)" % (spec, dtype, odt), *ops), run_lua, run_np,
              compare=lambda got, want, spec=spec, ops=ops: diff(got, want, einsum_tol(spec, ops, want)))
    line.emit()


SHAPE_FUNCTIONS = ["T", "ravel", "flatten", "diagonal", "split", "chunk", "unbind", "tile", "repeat_interleave",
                   "roll", "tril", "triu", "diag", "outer", "hstack", "vstack", "concatenate"]


def run_shape(name):
    rng = rng_for(name)
    title = "%s: every dtype and layout (NumPy's %s)" % (name, {"split": "take by pieces", "chunk": "take by pieces",
                                                                 "repeat_interleave": "repeat"}.get(name, name))
    reason = None if name == "T" else missing(name) if name not in ("ravel", "flatten", "diagonal") else \
        missing(None, method=name)
    if reason:
        skip(title, reason)
        return
    line = Line(title)
    for k in range(48):
        what, run_lua, run_np = shape_cases(rng, name, k)
        check(line, what, run_lua, run_np)
    line.emit()


# ---- complex ---------------------------------------------------------------------------------

COMPLEX = ["complex64", "complex128"]
# functions on complex operands: name, NumPy's, tolerance ("exact", "ulp" for real results, or
# "mag": 8 units in the last place of the result's magnitude, on each part), the Lua operator.
# mul: NumPy's SIMD loops may fuse a multiply-add (the module does not); abs: NumPy's SIMD loop
# scales by the larger part, the module calls hypot (correctly rounded): a last place apart.
COMPLEX_BINARY = [("add", "add", "exact", "add"), ("sub", "subtract", "exact", "sub"),
                  ("mul", "multiply", "mag", "mul"), ("div", "divide", "exact", "div"),
                  ("pow", "power", "mag", "pow"), ("eq", "equal", "exact", None), ("ne", "not_equal", "exact", None),
                  ("logical_and", "logical_and", "exact", None), ("logical_or", "logical_or", "exact", None),
                  ("logical_xor", "logical_xor", "exact", None)]
COMPLEX_UNARY = [("neg", "negative", "exact"), ("abs", "absolute", "ulp"), ("sign", "sign", "exact"),
                 ("sqrt", "sqrt", "mag"), ("exp", "exp", "mag"), ("log", "log", "mag"), ("log1p", "log1p", "mag"),
                 ("expm1", "expm1", "mag"), ("sin", "sin", "mag"), ("cos", "cos", "mag"), ("tan", "tan", "mag"),
                 ("tanh", "tanh", "mag"), ("round", "round", "exact"), ("isnan", "isnan", "exact"),
                 ("isinf", "isinf", "exact"), ("isfinite", "isfinite", "exact"),
                 ("logical_not", "logical_not", "exact"), ("log2", "log2", "mag"), ("log10", "log10", "mag"),
                 ("asin", "arcsin", "mag"), ("acos", "arccos", "mag"), ("atan", "arctan", "mag"),
                 ("sinh", "sinh", "mag"), ("cosh", "cosh", "mag"), ("reciprocal", "reciprocal", "exact"),
                 ("square", "square", "mag")]
# refused for complex (NumPy refuses them, or orders complex numbers lexicographically)
COMPLEX_REFUSED = ["idiv", "mod", "maximum", "minimum", "lt", "le", "gt", "ge", "floor", "ceil", "trunc",
                   "sigmoid", "band", "bor", "bxor", "bnot", "shl", "shr", "erf", "rsqrt", "atan2", "hypot"]


def complex_values(rng, dtype, shape, domain=None):
    real = "float32" if dtype == "complex64" else "float64"
    re, im = values(rng, real, shape, domain), values(rng, real, shape, domain)
    n = int(np.prod(shape, dtype=np.int64))
    if domain is None and n:  # small integers (exact products and quotients), pure reals, zeros
        r = rng.random(shape)
        re = np.where(r < 0.3, rng.integers(-4, 5, size=shape).astype(real), re)
        im = np.where(r < 0.3, rng.integers(-4, 5, size=shape).astype(real), im)
        im = np.where((r > 0.3) & (r < 0.4), 0, im)
    out = np.empty(shape, dtype)
    out.real, out.imag = re, im
    return out


def complex_operand(rng, dtype, shape, layout, domain=None):
    """operand() for every dtype, complex ones included (laid out along the first dimension)."""
    if dtype not in COMPLEX:
        return operand(rng, dtype, shape, layout, domain)
    shape = tuple(shape)
    if layout == "transposed" and len(shape) >= 2:
        return np.ascontiguousarray(complex_values(rng, dtype, shape, domain).swapaxes(0, -1)).swapaxes(0, -1)
    if layout == "sliced" and shape:
        return complex_values(rng, dtype, (2 * shape[0],) + shape[1:], domain)[1::2]
    if layout == "flipped" and shape:
        return np.flip(complex_values(rng, dtype, shape, domain), 0)
    if layout == "expanded" and shape and shape[0] > 1:
        return np.broadcast_to(complex_values(rng, dtype, (1,) + shape[1:], domain), shape)
    return complex_values(rng, dtype, shape, domain)


def complex_bound(want):
    """The "mag" tolerance of the complex array want: 8 units in the last place of |want|."""
    with np.errstate(all="ignore"):
        bound = 8 * np.spacing(np.abs(want).astype(want.real.dtype)).astype(np.float64)
    return np.nan_to_num(bound, nan=0.0, posinf=np.inf)


def complex_diff(got, want, tol):
    if not (isinstance(want, np.ndarray) and want.dtype.kind == "c"):
        return diff(got, want, tol if tol == "exact" else "ulp")
    if not isinstance(got, np.ndarray) or got.dtype != want.dtype or got.shape != want.shape:
        return diff(got, want)
    bound = "exact" if tol == "exact" else complex_bound(want)
    for part in ("real", "imag"):
        d = float_diff(getattr(got, part), getattr(want, part), bound)
        if d:
            return "%s part: %s" % (part, d)
    return None


def run_complex():
    rng = rng_for("complex")
    others = ["bool", "int16", "int64", "uint8", "float16", "float32", "float64"] + COMPLEX * 3
    for name, npname, tol, op in COMPLEX_BINARY:
        ufunc = getattr(np, npname)
        line = Line("complex: %s, with every other dtype, layouts, broadcasting, Lua numbers" % name)
        for k in range(40):
            da = COMPLEX[k % 2]
            db = others[int(rng.integers(len(others)))]
            shape = rand_shape(rng, max_nd=3)
            sa, sb = broadcast_pair(rng, shape)
            dom = "tiny" if name == "pow" and k % 2 else None
            a = complex_operand(rng, da, sa, LAYOUTS[k % 5], dom)
            b = complex_operand(rng, db, sb, LAYOUTS[(k // 5) % 5], dom)
            if k % 4 == 3:
                a, b = b, a
            check(line, desc_call(name, a, b), lambda a=a, b=b: H.call(name, None, None, to_lua(a), to_lua(b)),
                  lambda a=a, b=b: np_binary(ufunc, a, b), compare=lambda g, w: complex_diff(g, w, tol))
        for k, s in enumerate([0.5, 2, -1, 3, 0, 1e10, float("inf"), True]):
            a = complex_operand(rng, COMPLEX[k % 2], rand_shape(rng, max_nd=2), LAYOUTS[k % 5])
            x, y = (a, s) if k % 2 else (s, a)
            check(line, desc_call(name, x, y),
                  lambda x=x, y=y: H.call(name, None, None, *(to_lua(v) if isinstance(v, np.ndarray) else
                                                              lua_number(v) for v in (x, y))),
                  lambda x=x, y=y: np_binary(ufunc, x, y), compare=lambda g, w: complex_diff(g, w, tol))
            if op:
                check(line, desc_call(op, x, y),
                      lambda x=x, y=y: H.operator(op, *(to_lua(v) if isinstance(v, np.ndarray) else
                                                        lua_number(v) for v in (x, y))),
                      lambda x=x, y=y: np_binary(ufunc, x, y), compare=lambda g, w: complex_diff(g, w, tol))
        line.emit()
    for name, npname, tol in COMPLEX_UNARY:
        fn = round_ if name == "round" else getattr(np, npname)
        line = Line("complex: %s, layouts" % name)
        for k in range(20):
            a = complex_operand(rng, COMPLEX[k % 2], rand_shape(rng, max_nd=3), LAYOUTS[k % 5])
            check(line, desc_call(name, a), lambda a=a: H.call(name, None, None, to_lua(a)),
                  lambda a=a: np_unary(fn, a), compare=lambda g, w: complex_diff(g, w, tol))
        line.emit()
    # out= (converted as copy converts: into a real out, the real part) and in place (same_kind)
    line = Line("complex: out= and in place (same_kind: a complex result into a real tensor raises)")
    for k in range(24):
        name, npname, tol, _ = COMPLEX_BINARY[k % 5]
        ufunc = getattr(np, npname)
        shape = rand_shape(rng, min_nd=1, max_nd=2)
        a = complex_operand(rng, COMPLEX[k % 2], shape, LAYOUTS[k % 5])
        b = complex_operand(rng, others[int(rng.integers(len(others)))], shape, "contiguous")
        do = ["complex64", "complex128", "float64", "float32"][k % 4]
        out = np.zeros(shape, do)

        def run_lua(a=a, b=b, out=out):
            H.call(name, to_lua(out), None, to_lua(a), to_lua(b))
            return out

        def want(a=a, b=b, out=out, ufunc=ufunc):
            r = np_binary(ufunc, a, b)
            return np.asarray(r.real if out.dtype.kind == "f" else r).astype(out.dtype)

        def compare(g, w, a=a, b=b, tol=tol, ufunc=ufunc):
            if w.dtype.kind == "c":
                return complex_diff(g, w, tol)
            r = np_binary(ufunc, a, b)  # the real part, within the complex result's tolerance
            return diff(g, w, "exact" if tol == "exact" else complex_bound(r))
        check(line, desc_call(name + " out=" + do, a, b), run_lua, want, compare=compare)
        t = complex_operand(rng, ["complex64", "complex128", "float32", "float64"][k % 4], shape, "contiguous")
        mine, theirs = t.copy(), t.copy()

        def run_lua_(mine=mine, b=a, name=name):
            H.method(name + "_", to_lua(mine), to_lua(b))
            return mine

        def run_np_(theirs=theirs, b=a, ufunc=ufunc):
            with np.errstate(all="ignore"):
                ufunc(theirs, b, out=theirs)
            return theirs
        check(line, desc_call(name + "_", t, a), run_lua_, run_np_,
              compare=lambda g, w, tol=tol: complex_diff(g, w, tol))
    line.emit()
    # where, masked_fill, cat, stack, equal, allclose
    line = Line("complex: where, masked_fill, cat, stack, equal, allclose")
    for k in range(16):
        shape = rand_shape(rng, min_nd=1, max_nd=3)
        a = complex_operand(rng, COMPLEX[k % 2], shape, LAYOUTS[k % 5])
        b = complex_operand(rng, others[int(rng.integers(len(others)))], shape, LAYOUTS[(k + 2) % 5])
        cond = values(rng, "bool", shape)
        check(line, desc_call("where", cond, a, b),
              lambda c=cond, a=a, b=b: H.call("where", None, None, to_lua(c), to_lua(a), to_lua(b)),
              lambda c=cond, a=a, b=b: np.where(c, a, b))
        mine = np.array(a, copy=True)

        def run_fill(mine=mine, cond=cond):
            H.method("masked_fill", to_lua(mine), to_lua(cond), 2.5)
            return mine
        check(line, desc_call("masked_fill", a, cond), run_fill, lambda a=a, c=cond: np.where(c, a.dtype.type(2.5), a))
        for fname in ("cat", "stack"):
            np_fn = np.concatenate if fname == "cat" else np.stack
            check(line, desc_call(fname, a, b),
                  lambda a=a, b=b, f=fname: H.call(f, None, None, H.list(to_lua(a), to_lua(b)), 1),
                  lambda a=a, b=b, f=np_fn: f([a, b], 0))
        c = a.astype(np.complex128) * (1 + [0, 1e-9, 1e-3][k % 3])
        check(line, desc_call("equal", a, c), lambda a=a, c=c: H.call("equal", None, None, to_lua(a), to_lua(c)),
              lambda a=a, c=c: np.bool_(np.array_equal(a, c)), compare=diff)
        check(line, desc_call("allclose", a, c), lambda a=a, c=c: H.call("allclose", None, None, to_lua(a), to_lua(c)),
              lambda a=a, c=c: np.bool_(np.allclose(a, c)), compare=diff)
    line.emit()
    line = Line("complex: %s raise" % " ".join(COMPLEX_REFUSED))
    for k, name in enumerate(COMPLEX_REFUSED):
        a = complex_operand(rng, COMPLEX[k % 2], (3,), "contiguous")
        args = (a,) if name in ("floor", "ceil", "trunc", "sigmoid", "bnot") else (a, a)
        lua_raises(line, desc_call(name, *args), lambda n=name, args=args: H.call(n, None, None,
                                                                                 *(to_lua(x) for x in args)))
    line.emit()


# ---- the attack's classes ---------------------------------------------------------------
# bool bytes other than 0 and 1, int64 against uint64 compared exactly, and 64-bit integers
# rounded once to the narrow floats: NumPy reads a nonzero byte as True and writes 0 or 1, has
# exact mixed comparison loops, and casts integers with one rounding.

BOOL_BINARY = [("eq", "equal"), ("ne", "not_equal"), ("lt", "less"), ("le", "less_equal"), ("gt", "greater"),
               ("ge", "greater_equal"), ("add", "add"), ("mul", "multiply"), ("maximum", "maximum"),
               ("minimum", "minimum"), ("band", "bitwise_and"), ("bor", "bitwise_or"), ("bxor", "bitwise_xor"),
               ("logical_and", "logical_and"), ("logical_or", "logical_or"), ("logical_xor", "logical_xor")]


def raw_bool(rng, shape):
    """A bool array whose true bytes are anything from 1 to 255."""
    raw = rng.integers(1, 256, size=shape, dtype=np.uint8)
    raw[rng.random(shape) < 0.4] = 0
    return raw.view(np.bool_)


def canonical_diff(got, want):
    """diff, and a bool result must hold the bytes 0 and 1 only."""
    d = diff(got, want)
    if d is None and isinstance(got, np.ndarray) and got.dtype == np.bool_ and got.view(np.uint8).max(initial=0) > 1:
        return "a bool result holds byte %d (only 0 and 1)" % got.view(np.uint8).max()
    return d


def mixed_integers(rng, dtype, n):
    """n values of dtype near the places where float64 rounds: 2^53, 2^63, 2^64, -1, 0."""
    info = np.iinfo(dtype)
    near = [2 ** 53, 2 ** 53 + 1, 2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1, 2 ** 62 + 1, -1, 0, -2 ** 63, 1]
    near = [v for v in near if info.min <= v <= info.max]
    pick = [near[int(i)] for i in rng.integers(0, len(near), size=n)]
    return np.array(pick, dtype=object).astype(dtype)


def run_attack():
    rng = rng_for("attack")
    line = Line("attack: bool bytes 1 to 255 in the bool loops, where, masks, reductions and conversions")
    for k in range(12):
        shape = rand_shape(rng, min_nd=1, max_nd=3)
        a, b = raw_bool(rng, shape), raw_bool(rng, shape)
        for name, ufunc in BOOL_BINARY:
            check(line, desc_call(name, a, b), lambda a=a, b=b, n=name: H.call(n, None, None, to_lua(a), to_lua(b)),
                  lambda a=a, b=b, u=getattr(np, ufunc): u(a, b), compare=canonical_diff)
        for name, fn in (("logical_not", np.logical_not), ("abs", np.abs), ("floor", np.floor)):
            check(line, desc_call(name, a), lambda a=a, n=name: H.call(n, None, None, to_lua(a)),
                  lambda a=a, f=fn: f(a), compare=canonical_diff)
        check(line, desc_call("where", a, b, a), lambda a=a, b=b: H.call("where", None, None, to_lua(a), to_lua(b),
                                                                          to_lua(a)),
              lambda a=a, b=b: np.where(a, b, a) != 0, compare=canonical_diff)
        check(line, desc_call("equal", a, b != 0), lambda a=a: H.call("equal", None, None, to_lua(a),
                                                                      to_lua(np.array(a != 0))),
              lambda: np.bool_(True), compare=diff)
        for dtype in ("int32", "float32", "uint8"):
            check(line, desc_call("to", a, dtype), lambda a=a, d=dtype: H.method("to", to_lua(a), d),
                  lambda a=a, d=dtype: a.astype(d))
        for name in ("sum", "any", "all", "max", "min", "argmax", "argmin"):
            if a.size == 0 and name in ("max", "min", "argmax", "argmin"):
                continue
            want = getattr(np, name)(a)
            if name.startswith("arg"):
                want = np.int64(want + 1)
            check(line, desc_call(name, a), lambda a=a, n=name: H.reduce(n, False, to_lua(a), None, None, None, None),
                  lambda w=want: w)
        mine = np.zeros(shape, np.int16)

        def fill(mine=mine, a=a):
            H.method("masked_fill", to_lua(mine), to_lua(a), 7)
            return mine
        check(line, desc_call("masked_fill", mine, a), fill, lambda a=a: np.where(a, np.int16(7), np.int16(0)))
    line.emit()

    line = Line("attack: int8..int64 against uint64 in the comparisons, exactly (and maximum in float64)")
    for k in range(24):
        n = int(rng.integers(1, 40))
        sd = ["int64", "int32", "int8"][k % 3]
        a, b = mixed_integers(rng, sd, n), mixed_integers(rng, "uint64", n)
        if k % 2:
            a, b = b, a
        for name, ufunc in BOOL_BINARY[:6] + [("maximum", "maximum"), ("minimum", "minimum")]:
            check(line, desc_call(name, a, b), lambda a=a, b=b, n=name: H.call(n, None, None, to_lua(a), to_lua(b)),
                  lambda a=a, b=b, u=getattr(np, ufunc): u(a, b))
        check(line, desc_call("equal", a, b), lambda a=a, b=b: H.call("equal", None, None, to_lua(a), to_lua(b)),
              lambda a=a, b=b: np.bool_(np.array_equal(a, b)), compare=diff)
    line.emit()

    line = Line("attack: int64 and uint64 to float32, float16 and complex64, one rounding")
    for k in range(8):
        n = 200
        bits = rng.integers(1, 65, size=n)
        v = rng.integers(0, 2 ** 64, size=n, dtype=np.uint64, endpoint=False) >> (64 - bits).astype(np.uint64)
        # half of them just above a float32 tie by less than float64 can hold: 24 bits, the tie
        # bit, zeros, and a few low bits (float64 rounds them to the tie, float32 then to even)
        top = rng.integers(54, 65, size=n).astype(np.uint64)
        tie = (v | (np.uint64(1) << (top - np.uint64(1)))) >> (top - np.uint64(24)) << (top - np.uint64(24))
        tie |= (np.uint64(1) << (top - np.uint64(25))) | rng.integers(1, 2 ** 10, size=n, dtype=np.uint64)
        v = np.where(rng.random(n) < 0.5, tie, v)
        for src in (v, v.view(np.int64)):
            for dtype in ("float32", "float16", "complex64"):
                check(line, desc_call("to", src, dtype), lambda s=src, d=dtype: H.method("to", to_lua(s), d),
                      lambda s=src, d=dtype: s.astype(d))
            check(line, desc_call("add", src, 0, "float32"),
                  lambda s=src: H.call("add", None, "float32", to_lua(s), 0), lambda s=src: s.astype(np.float32))
    line.emit()


# ---- indexing with tensors -------------------------------------------------------------

INDEX_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


def one_based(rng, dtype, shape, size, layout, bad=False):
    """An index array of dtype and shape holding 1-based indices into `size` (negatives from
    the end where the dtype is signed); with bad, one 0 or one beyond the size."""
    n = int(np.prod(shape, dtype=np.int64))
    signed = dtype[0] == "i"
    lo = -min(size, -np.iinfo(dtype).min) if signed else 1
    hi = min(size, np.iinfo(dtype).max)
    v = rng.integers(lo, hi + 1, size=n) if hi >= lo and size > 0 else np.zeros(n, np.int64)
    v = np.where(v == 0, 1, v) if size > 0 else v
    if bad and n:
        v[int(rng.integers(n))] = [0, size + 1, -size - 1][int(rng.integers(3 if signed else 2))]
    v = np.clip(v, np.iinfo(dtype).min, np.iinfo(dtype).max).astype(dtype).reshape(shape)
    if layout == "contiguous" or v.ndim == 0:
        return v
    a = operand(rng, dtype, shape, layout)  # the layout, then the values put into it
    if a.flags.writeable:
        a[...] = v
        return a
    return v


def zero_based(idx, size):
    """NumPy's indices for 1-based ones: k - 1, negatives as they are; 0 and out-of-range
    ones raise IndexError as NumPy's own checks do."""
    k = np.asarray(idx).astype(object)
    bad = (k == 0) | (k > size) | (k < -size)
    if np.any(bad):
        raise IndexError("index out of range")
    return np.where(k > 0, k - 1, k).astype(np.int64)


def np_index(fn):
    """NumPy's answer, an IndexError as the errors check() compares."""
    try:
        return fn()
    except IndexError as e:
        raise ValueError(str(e))


def run_nonzero(name):
    rng = rng_for(name)
    title = "%s: every dtype and layout, 1-based {n, ndim} int64 (and as_tuple)" % name
    reason = missing(name)
    if reason:
        skip(title, reason)
        return
    line = Line(title)
    for k in range(5 * len(DTYPES)):
        a = operand(rng, DTYPES[k % 12], rand_shape(rng), LAYOUTS[int(rng.integers(5))])
        if k % 3 == 0 and a.size:  # mostly zeros
            a = np.where(rng.random(a.shape) < 0.8, np.zeros((), a.dtype), a)
        check(line, desc_call(name, a), lambda a=a: H.call(name, None, None, to_lua(a)),
              lambda a=a: np.argwhere(a).astype(np.int64) + 1)
        if name == "nonzero":
            def run_lua(a=a):
                got = H.method("nonzero", to_lua(a), runtime_table(as_tuple=True))
                return tuple(from_lua(got[i + 1]) for i in range(a.ndim))
            check(line, desc_call("nonzero(as_tuple)", a), run_lua,
                  lambda a=a: tuple(x.astype(np.int64) + 1 for x in np.nonzero(a)))
    line.emit()


def runtime_table(**kw):
    return RUNTIME_OBJ.table_from(kw)


def run_count_nonzero():
    rng = rng_for("count_nonzero")
    title = "count_nonzero: every dtype and layout, over everything or dims (keepdim)"
    reason = missing("count_nonzero")
    if reason:
        skip(title, reason)
        return
    line = Line(title)
    for k in range(5 * len(DTYPES)):
        a = operand(rng, DTYPES[k % 12], rand_shape(rng), LAYOUTS[int(rng.integers(5))])
        if k % 2 and a.size:
            a = np.where(rng.random(a.shape) < 0.5, np.zeros((), a.dtype), a)
        if a.ndim == 0 or k % 4 == 0:
            check(line, desc_call("count_nonzero", a), lambda a=a: H.method("count_nonzero", to_lua(a)),
                  lambda a=a: int(np.count_nonzero(a)), compare=diff)
            continue
        axes = sorted(set(int(x) for x in rng.integers(0, a.ndim, size=int(rng.integers(1, a.ndim + 1)))))
        keep = bool(k % 3 == 1)
        dims = H.list(*[d + 1 for d in axes])
        check(line, desc_call("count_nonzero(%s, keepdim=%s)" % ([d + 1 for d in axes], keep), a),
              lambda a=a, dims=dims, keep=keep: H.method("count_nonzero", to_lua(a), dims,
                                                         runtime_table(keepdim=keep)),
              lambda a=a, axes=axes, keep=keep: np.asarray(np.count_nonzero(a, axis=tuple(axes), keepdims=keep),
                                                           np.int64))
    line.emit()


def run_masked_select():
    rng = rng_for("masked_select")
    title = "masked_select: every dtype and layout, masks of any dtype broadcast with t"
    reason = missing("masked_select")
    if reason:
        skip(title, reason)
        return
    line = Line(title)
    for k in range(4 * len(DTYPES)):
        shape = rand_shape(rng)
        sa, sm = broadcast_pair(rng, shape)
        if k % 10 == 9 and len(shape):
            sm = tuple(s + 1 for s in shape)  # does not broadcast: both raise
        a = operand(rng, DTYPES[k % 12], sa, LAYOUTS[int(rng.integers(5))])
        mask = operand(rng, "bool" if k % 3 else DTYPES[int(rng.integers(12))], sm, LAYOUTS[int(rng.integers(5))])

        def run_np(a=a, mask=mask):
            x, m = np.broadcast_arrays(a, mask != 0)
            return x[m]
        check(line, desc_call("masked_select", a, mask),
              lambda a=a, mask=mask: H.method("masked_select", to_lua(a), to_lua(mask)), run_np)
    line.emit()


def run_index_out():
    rng = rng_for("index_out")
    title = "out= of nonzero, argwhere, count_nonzero and masked_select: writable layouts, same_kind dtypes, shapes"
    reason = missing("nonzero")
    if reason:
        skip(title, reason)
        return
    line = Line(title)
    names = ("nonzero", "argwhere", "count_nonzero", "masked_select")
    for k in range(4 * len(DTYPES)):
        name = names[k % 4]
        a = operand(rng, DTYPES[k % 12], rand_shape(rng, min_nd=1), LAYOUTS[int(rng.integers(5))])
        if a.size:
            a = np.where(rng.random(a.shape) < 0.5, np.zeros((), a.dtype), a)
        axis = int(rng.integers(a.ndim))
        if name == "count_nonzero":
            want = np.asarray(np.count_nonzero(a, axis=axis), np.int64)
        elif name == "masked_select":
            want = a[a != 0]
        else:
            want = np.argwhere(a).astype(np.int64) + 1
        odt = str(a.dtype) if name == "masked_select" else ("int64", "int32", "float64", "int16")[(k // 4) % 4]
        shape = want.shape
        wrong = k % 7 == 6 and len(shape) > 0  # one more row: both raise
        if wrong:
            shape = (shape[0] + 1,) + shape[1:]
        out = operand(rng, odt, shape, WRITABLE[int(rng.integers(4))])
        if not out.flags.writeable:
            out = np.zeros(shape, odt)

        def run_lua(a=a, out=out, name=name, axis=axis):
            extra = [axis + 1] if name == "count_nonzero" else [to_lua(a != 0)] if name == "masked_select" else []
            if name == "nonzero":  # the method, options second
                H.method(name, to_lua(a), runtime_table(out=to_lua(out)))
            else:
                H.call(name, to_lua(out), None, to_lua(a), *extra)
            return out

        def run_np(want=want, odt=odt, wrong=wrong):
            if wrong:
                raise ValueError("out of another shape")
            return want.astype(odt)
        check(line, desc_call("%s(out=%s)" % (name, odt), a), run_lua, run_np)
    line.emit()


def run_unique_dim():
    rng = rng_for("unique_dim")
    title = "unique(t, {dim}): np.unique with an axis, every dtype and layout, inverse and counts"
    reason = missing("unique")
    if reason:
        skip(title, reason)
        return
    line = Line(title)
    for k in range(4 * len(DTYPES)):
        shape = rand_shape(rng, min_nd=1, max_nd=3)
        a = operand(rng, DTYPES[k % 12], shape, LAYOUTS[int(rng.integers(5))])
        if a.size and k % 2:  # few distinct values: repeated slices
            a = np.where(rng.random(a.shape) < 0.7, np.zeros((), a.dtype), a)
        d = int(rng.integers(a.ndim))
        inv, cnt = bool(k % 3 == 1), bool(k % 4 >= 2)
        dim = d + 1 if k % 2 else d - a.ndim

        def run_np(a=a, d=d, inv=inv, cnt=cnt):
            # NumPy's float16 slices compare as records with NaN before every number, its float32
            # and float64 ones with NaN after (as the module, in every dtype): float16 through float32
            x = a.astype(np.float32) if a.dtype == np.float16 else a
            r = np.unique(x, axis=d, return_inverse=inv, return_counts=cnt)
            if a.dtype == np.float16:
                r = r.astype(np.float16) if not (inv or cnt) else (r[0].astype(np.float16),) + tuple(r[1:])
            if not (inv or cnt):
                return r
            r = list(r)
            if inv:
                r[1] = (r[1].reshape(-1) + 1).astype(np.int64)
            return tuple(np.asarray(x) for x in r)

        def run_lua(a=a, dim=dim, inv=inv, cnt=cnt):
            return H.method("unique", to_lua(a), H.opts("dim", dim, "return_inverse", inv, "return_counts", cnt))
        check(line, desc_call("unique(dim=%d, inverse=%s, counts=%s)" % (dim, inv, cnt), a), run_lua, run_np)
    line.emit()


def run_norm_svd():
    rng = rng_for("norm_svd")
    title = "norm ord 2, -2, 'nuc': np.linalg.norm's singular values, batched, any dims, layouts, edges"
    reason = missing("norm")
    if reason:
        skip(title, reason)
        return
    line = Line(title)
    dtypes = ["float64", "float32", "int32", "int64", "uint8", "bool", "int16", "float64"]
    for k in range(48):
        dt = dtypes[k % len(dtypes)]
        nd = 2 + int(rng.integers(0, 3))
        shape = tuple(int(rng.integers(1, 7)) for _ in range(nd))
        if k % 11 == 5:  # an empty matrix: 2 and 'nuc' give 0, -2 raises in both
            shape = (0,) + shape[1:]
        a = operand(rng, dt, shape, LAYOUTS[int(rng.integers(5))])
        if dt.startswith("float") and a.size and k % 13 == 7:  # NaN raises in both; infinity gives NaN
            a = a.copy()
            a.flat[int(rng.integers(a.size))] = np.nan if k % 2 else np.inf
        ord_ = [2, -2, "nuc"][k % 3]
        r, c = (int(x) for x in rng.choice(nd, 2, replace=False))
        keepdim = bool(k % 4 == 3)
        dims = None if nd == 2 and r == 0 and c == 1 and not keepdim else [r + 1, c + 1]

        def run_np(a=a, ord_=ord_, r=r, c=c, keepdim=keepdim, dims=dims):
            with np.errstate(all="ignore"):
                x = a.astype(np.float64) if a.dtype.kind in "biu" else a
                res = np.linalg.norm(x, ord_, (r, c), keepdim)
            return res if dims is None else np.asarray(res)

        def run_lua(a=a, ord_=ord_, dims=dims, keepdim=keepdim):
            return H.method("norm", to_lua(a), ord_, None if dims is None else H.list(*dims), keepdim or None)

        def tol(want, a=a):
            w = np.abs(np.asarray(want, np.float64))
            eps = float(np.finfo(np.asarray(want).dtype).eps)
            big = float(np.abs(a.astype(np.float64)).sum()) if a.size else 0.0
            return 32 * (sum(a.shape) + 2) * eps * (w + big) + np.spacing(w)
        check(line, desc_call("norm(%r, dims=%s, keepdim=%s)" % (ord_, dims, keepdim), a), run_lua, run_np,
              compare=lambda got, want, tol=tol: diff(got, want, tol(want)))
    line.emit()


def run_index_select():
    rng = rng_for("index_select")
    title = "index_select: every dtype, layout and index dtype, 0-d and 1-d indices, out="
    reason = missing("index_select")
    if reason:
        skip(title, reason)
        return
    line = Line(title)
    for k in range(6 * len(DTYPES)):
        a = operand(rng, DTYPES[k % 12], rand_shape(rng, min_nd=1), LAYOUTS[int(rng.integers(5))])
        d = int(rng.integers(a.ndim))
        ishape = () if k % 7 == 3 else (int(rng.integers(0, 7)),)
        idx = one_based(rng, INDEX_DTYPES[k % 8], ishape, a.shape[d], LAYOUTS[int(rng.integers(4))], bad=k % 9 == 8)
        dim = d + 1 if k % 2 else d - a.ndim
        want_shape = a.shape[:d] + (idx.size if idx.ndim else 1,) + a.shape[d + 1:]
        out = np.zeros(want_shape, a.dtype) if k % 5 == 4 else None

        def run_lua(a=a, idx=idx, dim=dim, out=out):
            r = H.call("index_select", None if out is None else to_lua(out), None, to_lua(a), dim, to_lua(idx))
            return out if out is not None else r
        check(line, desc_call("index_select(dim=%d)" % dim, a, idx), run_lua,
              lambda a=a, idx=idx, d=d: np_index(lambda: np.take(a, zero_based(idx.reshape(-1), a.shape[d]),
                                                                 axis=d)))
    line.emit()


def run_gather():
    rng = rng_for("gather")
    title = "gather: every dtype, layout and index dtype, indices smaller than t, out="
    reason = missing("gather")
    if reason:
        skip(title, reason)
        return
    line = Line(title)
    for k in range(6 * len(DTYPES)):
        a = operand(rng, DTYPES[k % 12], rand_shape(rng, min_nd=1), LAYOUTS[int(rng.integers(5))])
        d = int(rng.integers(a.ndim))
        ishape = tuple(int(rng.integers(0, s + 1)) if i != d else int(rng.integers(0, 5))
                       for i, s in enumerate(a.shape))
        if k % 11 == 10 and a.ndim > 1:  # larger than t outside dim: both raise
            e = (d + 1) % a.ndim
            ishape = ishape[:e] + (a.shape[e] + 1,) + ishape[e + 1:]
        idx = one_based(rng, INDEX_DTYPES[k % 8], ishape, a.shape[d], LAYOUTS[int(rng.integers(4))], bad=k % 9 == 8)
        dim = d + 1 if k % 2 else d - a.ndim
        out = np.zeros(ishape, a.dtype) if k % 5 == 4 else None

        def run_lua(a=a, idx=idx, dim=dim, out=out):
            r = H.call("gather", None if out is None else to_lua(out), None, to_lua(a), dim, to_lua(idx))
            return out if out is not None else r

        def run_np(a=a, idx=idx, d=d):
            if any(idx.shape[i] > a.shape[i] for i in range(a.ndim) if i != d):
                raise ValueError("index larger than t")
            part = a[tuple(slice(None) if i == d else slice(0, idx.shape[i]) for i in range(a.ndim))]
            return np_index(lambda: np.take_along_axis(part, zero_based(idx, a.shape[d]), axis=d))
        check(line, desc_call("gather(dim=%d)" % dim, a, idx), run_lua, run_np)
    line.emit()


def run_take():
    rng = rng_for("take")
    title = "take: every dtype, layout and index dtype, flat indices of any shape, out="
    reason = missing("take")
    if reason:
        skip(title, reason)
        return
    line = Line(title)
    for k in range(6 * len(DTYPES)):
        a = operand(rng, DTYPES[k % 12], rand_shape(rng), LAYOUTS[int(rng.integers(5))])
        ishape = rand_shape(rng, max_nd=3)
        idx = one_based(rng, INDEX_DTYPES[k % 8], ishape, a.size, LAYOUTS[int(rng.integers(4))], bad=k % 9 == 8)
        out = np.zeros(ishape, a.dtype) if k % 5 == 4 else None

        def run_lua(a=a, idx=idx, out=out):
            r = H.call("take", None if out is None else to_lua(out), None, to_lua(a), to_lua(idx))
            return out if out is not None else r
        check(line, desc_call("take", a, idx), run_lua,
              lambda a=a, idx=idx: np_index(lambda: np.asarray(np.take(a, zero_based(idx, a.size)))))
    line.emit()


def run_take_axis():
    rng = rng_for("take_axis")
    title = "take(t, index, dim): np.take with an axis, every dtype, layout and index dtype, any index shape, out="
    reason = missing("take")
    if reason:
        skip(title, reason)
        return
    line = Line(title)
    for k in range(6 * len(DTYPES)):
        a = operand(rng, DTYPES[k % 12], rand_shape(rng, min_nd=1), LAYOUTS[int(rng.integers(5))])
        d = int(rng.integers(a.ndim))
        ishape = rand_shape(rng, max_nd=3)
        idx = one_based(rng, INDEX_DTYPES[k % 8], ishape, a.shape[d], LAYOUTS[int(rng.integers(4))], bad=k % 9 == 8)
        dim = d + 1 if k % 2 else d - a.ndim
        out = np.zeros(a.shape[:d] + ishape + a.shape[d + 1:], a.dtype) if k % 5 == 4 else None

        def run_lua(a=a, idx=idx, dim=dim, out=out):
            r = H.call("take", None if out is None else to_lua(out), None, to_lua(a), to_lua(idx), dim)
            return out if out is not None else r
        check(line, desc_call("take(dim=%d)" % dim, a, idx), run_lua,
              lambda a=a, idx=idx, d=d: np_index(lambda: np.asarray(np.take(a, zero_based(idx, a.shape[d]), axis=d))))
    line.emit()


def run_scatter():
    rng = rng_for("scatter")
    title = "scatter: every dtype, layout and index dtype, src tensors of any dtype (same_kind), last write wins"
    reason = missing("scatter")
    if reason:
        skip(title, reason)
        return
    line = Line(title)
    for k in range(6 * len(DTYPES)):
        a = operand(rng, DTYPES[k % 12], rand_shape(rng, min_nd=1), LAYOUTS[int(rng.integers(5))])
        d = int(rng.integers(a.ndim))
        ishape = tuple(int(rng.integers(0, s + 1)) if i != d else int(rng.integers(0, 5))
                       for i, s in enumerate(a.shape))
        idx = one_based(rng, INDEX_DTYPES[k % 8], ishape, a.shape[d], LAYOUTS[int(rng.integers(4))], bad=k % 9 == 8)
        sshape = tuple(s + int(rng.integers(0, 2)) for s in ishape)
        src = operand(rng, DTYPES[k % 12] if k % 3 else DTYPES[int(rng.integers(12))], sshape,
                      LAYOUTS[int(rng.integers(5))])
        dim = d + 1 if k % 2 else d - a.ndim

        def run_np(a=a, idx=idx, src=src, d=d):
            if not np.can_cast(src.dtype, a.dtype, "same_kind"):
                raise TypeError("cannot cast")
            k0 = np_index(lambda: zero_based(idx, a.shape[d]))
            r, s = a.copy(), src.astype(a.dtype)
            for pos in np.ndindex(*idx.shape):  # row-major: the last write wins
                p = list(pos)
                p[d] = int(k0[pos])
                r[tuple(p)] = s[pos]
            return r
        check(line, desc_call("scatter(dim=%d)" % dim, a, idx, src),
              lambda a=a, idx=idx, src=src, dim=dim: H.method("scatter", to_lua(a), dim, to_lua(idx), to_lua(src)),
              run_np)
    line.emit()


# ---- main ------------------------------------------------------------------------------

def setup():
    """Import NumPy and lupa, open a Lua runtime with the module; None (and a SKIP line) without."""
    global np, lupa, bridge, H, LuaError
    peers = tap.import_peers(("numpy", tap.import_numpy))
    np = peers["numpy"][0]
    version, build = RUNTIME
    module = os.path.join(ROOT, build, "dlpack", "core.so")
    lupa, why = None, None
    try:
        import dlpack_lupa
        lupa = dlpack_lupa.load_lupa(version)
    except Exception as e:  # ImportError, or a lupa that cannot load
        why = "lupa.%s not importable (%s: %s)" % (version, type(e).__name__, e)
    if np is None:
        why = "numpy not importable (%s)" % peers["numpy"][1]
    elif lupa is not None and not os.path.exists(module):
        why = "%s is not built (make LUA=%s)" % (os.path.relpath(module, ROOT), build.split("/")[-1])
    if why:
        skip("NumPy oracle", why)
        return None
    warnings.simplefilter("ignore")
    LuaError = lupa.LuaError
    runtime = lupa.LuaRuntime()
    runtime.execute('package.path = "{0}/lua/?.lua;" .. package.path; '
                    'package.cpath = "{0}/{1}/?.so;" .. package.cpath'.format(ROOT, build))
    bridge = dlpack_lupa.Bridge(runtime)
    H = runtime.execute(LUA_HELPERS)
    global RUNTIME_OBJ
    RUNTIME_OBJ = runtime
    global INTEGERS
    INTEGERS = bool(H.integers)
    tap.comment("NumPy oracle: %s, numpy %s, seed %d, the module's %s loops" % (
        runtime.lua_implementation, np.__version__, SEED, runtime.eval('(require("dlpack").cpu())')))
    return runtime


def run(only=()):
    t0 = time.time()
    jobs = [(spec[0], run_binary, spec) for spec in BINARY] + [(spec[0], run_unary, spec) for spec in UNARY]
    jobs += [("clamp", lambda _: run_clamp(), None), ("where", lambda _: run_where(), None),
             ("masked_fill", lambda _: run_masked_fill(), None)]
    jobs += [(spec[0], run_reduction, spec) for spec in REDUCTIONS]
    jobs += [(n, run_sorting, n) for n in SORTING]
    jobs += [(n, run_matmul, n) for n in ("matmul", "dot")] + [(n, run_cat_stack, n) for n in ("cat", "stack")]
    jobs += [("flip", lambda _: run_flip(), None)] + [(n, run_equal_allclose, n) for n in ("equal", "allclose")]
    jobs += [("complex", lambda _: run_complex(), None), ("attack", lambda _: run_attack(), None)]
    jobs += [(n, run_nonzero, n) for n in ("nonzero", "argwhere")] + [
        (n, lambda _, f=f: f(), None) for n, f in (("count_nonzero", run_count_nonzero),
                                                   ("masked_select", run_masked_select),
                                                   ("index_out", run_index_out),
                                                   ("unique_dim", run_unique_dim),
                                                   ("norm_svd", run_norm_svd),
                                                   ("index_select", run_index_select), ("gather", run_gather),
                                                   ("take", run_take), ("take_axis", run_take_axis),
                                                   ("scatter", run_scatter))]
    jobs += [("isclose", run_isclose, None), ("einsum", run_einsum, None), ("einsum_out", run_einsum_out, None)]
    jobs += [(n, run_shape, n) for n in SHAPE_FUNCTIONS]
    for job, fn, arg in jobs:
        if only and job not in only:
            continue
        try:
            fn(arg)
        except Exception:
            import traceback
            counts["failed"] += 1
            tap.line("not ok - %s: %s: the oracle itself raised" % (TITLE, job))
            tap.comment(traceback.format_exc())
    tap.comment("NumPy oracle: %d passed, %d failed, %d skipped in %.1f s" % (
        counts["passed"], counts["failed"], counts["skipped"], time.time() - t0))
    return 1 if counts["failed"] else 0


def main(argv):
    if setup() is None:
        return 0
    return run(set(argv[1:]))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
