"""Rows of bench/run.lua whose baseline is NumPy timed in the same process: Lua runs inside this
Python process through lupa (examples/dlpack_lupa.py), and rounds of the module's loop (timed in
Lua) and NumPy's (timed in Python) alternate, so that the load of the machine weighs on both
sides of each round's ratio alike. The Lua state runs the generational collector, as the lua5.4
interpreter that runs bench/run.lua does.

Prints one line per row: "<row key> <median ratio> <lowest> <highest> <module s/op> <numpy s/op>";
a line starting with "#" says why nothing was measured (no lupa, no NumPy, no build).
Arguments: --only=key,key (rows to run), --rounds=n."""
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "examples"), os.path.join(ROOT, "build", "pydeps")]
ONLY, ROUNDS = None, 15
for arg in sys.argv[1:]:
    if arg.startswith("--only="):
        ONLY = set(arg[len("--only="):].split(","))
    elif arg.startswith("--rounds="):
        ROUNDS = int(arg[len("--rounds="):])
TARGET = 0.03  # seconds a timed batch should take

try:
    import numpy as np
    import dlpack_lupa
    lupa = dlpack_lupa.load_lupa(module=os.path.join(ROOT, "build", "dlpack", "core.so"))
except ImportError as e:
    print("# no same-process rows: %s" % e)
    sys.exit(0)

lua = lupa.LuaRuntime()
lua.execute('package.path = "{0}/lua/?.lua;{0}/?.lua;" .. package.path; '
            'package.cpath = "{0}/build/?.so;" .. package.cpath; '
            'collectgarbage("generational")'.format(ROOT))


def lua_loop(setup, body):
    """A Lua function of n that runs body n times after setup and returns its seconds per run."""
    return lua.eval('''function(n)
      local dlpack = require "dlpack"
      local now = require("bench.baselines").now
      %s
      local t0 = now()
      for _ = 1, n do %s end
      return (now() - t0) / n
    end''' % (setup, body))


def py_loop(fn):
    def run(n):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - t0) / n
    return run


def batch(run):
    run(1)
    n = 1
    while run(n) * n < TARGET / 8:
        n *= 4
    return max(1, int(n * TARGET / (run(n) * n)))


def row(key, ours, theirs):
    if ONLY is not None and key not in ONLY:
        return
    n1, n2 = batch(ours), batch(theirs)
    ratios, a, b = [], [], []
    for r in range(ROUNDS):  # which side goes first alternates
        if r % 2 == 0:
            x, y = ours(n1), theirs(n2)
        else:
            y, x = theirs(n2), ours(n1)
        a.append(x)
        b.append(y)
        ratios.append(x / y)
    print("%s %.4f %.4f %.4f %.6e %.6e" % (key, statistics.median(ratios), min(ratios), max(ratios),
                                           statistics.median(a), statistics.median(b)))
    sys.stdout.flush()


s1, s2 = np.array([1, 2, 3], np.float32), np.array([4, 5, 6], np.float32)
row("add_small", lua_loop('local s1, s2 = dlpack.tensor({1, 2, 3}, "float32"), dlpack.tensor({4, 5, 6}, "float32")',
                          "local _ = dlpack.add(s1, s2)"),
    py_loop(lambda: np.add(s1, s2)))
