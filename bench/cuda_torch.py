"""bench/cuda_torch.py: the CUDA rows of bench/cuda_rows.lua against PyTorch, in one process on
one GPU: this Python imports torch and runs Lua (with the module) inside itself through
build/gpu/libluapeer.so (spec/gpu/luapeer_ctypes.py; `make gpu-build` builds it), so both sides
share the device, its context and its clocks. `make bench` and `spec/gpu/prepare.sh run` run it.

Each row: the module's operation (bench/cuda_rows.lua, run from Lua in batches that end with a
synchronisation) and torch's (the same sizes and values, batches ending with
torch.cuda.synchronize()), rounds of the two interleaved, alternating which goes first; the line
gives the medians and their ratio, module / torch (below 1: the module is faster). torch keeps its
defaults but for TF32, set off explicitly (its default for matmul, and the module's). Rows the
module cannot do on CUDA tensors yet print as skipped, with the module's message. Without torch,
a CUDA build of it, a GPU or libluapeer.so, it prints why it skips and exits 0.
DLPACK_BENCH_CUDA_SCALE divides every side of the inputs (as for bench/cuda.c)."""
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROUNDS = 7
TARGET = 0.05  # seconds a timed batch should take


def skip(why):
    print(f"cuda vs torch: skipped ({why})")
    sys.exit(0)


try:
    import torch
except ImportError as e:
    skip(f"no torch: {e}")
if not torch.cuda.is_available():
    skip(f"torch {torch.__version__} sees no GPU (torch.cuda.is_available() is false)")
sys.path.insert(0, os.path.join(ROOT, "spec", "gpu"))
try:
    import luapeer_ctypes as lp
except OSError as e:
    skip(f"cannot load build/gpu/libluapeer.so (make gpu-build): {e}")

os.chdir(ROOT)
lp.open()
available, why = lp.run("local ok, why = require('dlpack').cuda.is_available() return ok, tostring(why)")
if not available:
    skip(f"dlpack.cuda.is_available() is false: {why}")
lp.run("ROWS = dofile('bench/cuda_rows.lua')")
sizes = lp.run("return ROWS.sizes")
route = lp.run("return ROWS.route")
count = lp.run("return #ROWS")
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
DEV = "cuda:0"


def torch_op(key):
    """torch's inputs for the row, made as bench/cuda_rows.lua makes the module's, and its operation."""
    n, m, h, w = sizes["n"], sizes["elements"], sizes["height"], sizes["width"]
    if key in ("cuda_matmul_f32", "cuda_matmul_bf16"):
        dtype = torch.float32 if key == "cuda_matmul_f32" else torch.bfloat16
        a = torch.full((n, n), 0.5, dtype=dtype, device=DEV)
        b = torch.full((n, n), 0.25, dtype=dtype, device=DEV)
        return lambda: a @ b
    if key in ("cuda_add_f32_out", "cuda_exp_f32_out", "cuda_f32_to_f16"):
        a = (torch.arange(64, dtype=torch.float32) / 16 - 2).repeat(m // 64).to(DEV)
        b = torch.full((m,), 0.75, dtype=torch.float32, device=DEV)
        c = torch.empty(m, dtype=torch.float32, device=DEV)
        if key == "cuda_add_f32_out":
            return lambda: torch.add(a, b, out=c)
        if key == "cuda_exp_f32_out":
            return lambda: torch.exp(a, out=c)
        return lambda: a.to(torch.float16)
    if key == "cuda_transpose_copy":
        a = torch.full((n, n), 0.5, dtype=torch.float32, device=DEV)
        return lambda: a.t().contiguous()
    if key == "cuda_normalize_frame":
        pattern = torch.tensor([(i * 37) % 256 for i in range(256)], dtype=torch.uint8)
        frame = pattern.repeat(h * w * 3 // 256 + 1)[: h * w * 3].reshape(h, w, 3).to(DEV)
        mean = torch.tensor([0.485, 0.456, 0.406], dtype=torch.float32, device=DEV).reshape(3, 1, 1)
        std = torch.tensor([0.229, 0.224, 0.225], dtype=torch.float32, device=DEV).reshape(3, 1, 1)
        return lambda: (frame.permute(2, 0, 1).float() / 255 - mean) / std
    if key == "cuda_add_small":
        s1 = torch.tensor([1, 2, 3], dtype=torch.float32, device=DEV)
        s2 = torch.tensor([4, 5, 6], dtype=torch.float32, device=DEV)
        return lambda: torch.add(s1, s2)
    return None


def batch_of(fn):
    """A repeat count that makes fn(reps) take about TARGET seconds."""
    reps = 1
    while True:
        t0 = time.perf_counter()
        fn(reps)
        t = time.perf_counter() - t0
        if t >= TARGET / 4 or reps >= 1 << 20:
            return max(1, int(reps * TARGET / max(t, 1e-9)))
        reps *= 4


def per_op(fn, reps):
    t0 = time.perf_counter()
    fn(reps)
    return (time.perf_counter() - t0) / reps


def fmt(t):
    return f"{t * 1e3:9.3f} ms" if t >= 1e-3 else f"{t * 1e6:9.2f} us"


print(f"cuda vs torch {torch.__version__} on {torch.cuda.get_device_name(0)}, one process: median of {ROUNDS} "
      f"interleaved rounds, ratio module / torch; {route}")
for i in range(1, count + 1):
    key, name, unit = lp.run(f"local r = ROWS[{i}] return r.key, r.name, r.unit")
    try:
        lp.run(f"ROWS[{i}].prepare()")
    except (lp.LuaError, BufferError) as e:
        print(f"{name:58s} skipped: {str(e).splitlines()[0]}")
        lp.run(f"ROWS[{i}].release()")
        continue
    op = torch_op(key)
    op()
    torch.cuda.synchronize()

    def ours(reps, i=i):
        lp.run(f"ROWS[{i}].run(...)", reps)

    def theirs(reps, op=op):
        for _ in range(reps):
            op()
        torch.cuda.synchronize()

    n1, n2 = batch_of(ours), batch_of(theirs)
    mine, torchs = [], []
    for r in range(ROUNDS):
        if r % 2 == 0:
            mine.append(per_op(ours, n1))
            torchs.append(per_op(theirs, n2))
        else:
            torchs.append(per_op(theirs, n2))
            mine.append(per_op(ours, n1))
    mine.sort()
    torchs.sort()
    m, t = mine[ROUNDS // 2], torchs[ROUNDS // 2]
    what = "a call" if unit == "call" else ""
    print(f"{name:58s} {fmt(m)} vs torch {fmt(t)} {what:6s} {m / t:7.2f}x")
    lp.run(f"ROWS[{i}].release()")
    del op, theirs
    torch.cuda.empty_cache()
lp.close()
