"""NumPy and PyTorch times for the operations of bench/run.lua (make bench), in a process of
their own. Prints one line per measurement: "<row key> numpy|torch <seconds per operation>".
Whatever is not installed is left out; run.lua shows these times next to its rows.
PyTorch is timed by a second process (this script with the argument "torch") that does not see
build/pydeps: a PyTorch built against NumPy 1 (Debian's 1.13) cannot use the NumPy 2 there."""
import os
import subprocess
import sys
import time

# Arguments: "torch" (the PyTorch process), "--only=key,key" (time only those rows: bench/run.lua
# asks for one row at a time when DLPACK_BENCH_PEER_ROUNDS interleaves its rounds with NumPy's).
ARGS = sys.argv[1:]
TORCH_ONLY = "torch" in ARGS
ONLY = None
for arg in ARGS:
    if arg.startswith("--only="):
        ONLY = set(arg[len("--only="):].split(","))
if not TORCH_ONLY:
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "build", "pydeps"))

ROUNDS = 9


def per_op(fn):
    """Median over ROUNDS batches of the seconds one call of fn takes."""
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        if time.perf_counter() - t0 >= 0.0025:
            break
        n *= 4
    times = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        times.append((time.perf_counter() - t0) / n)
    times.sort()
    return times[len(times) // 2]


def report(key, who, fn):
    if ONLY is not None and key not in ONLY:
        return
    try:
        print(f"{key} {who} {per_op(fn):.9g}", flush=True)
    except Exception as e:  # an operation a library lacks: leave it out
        print(f"# {key} {who}: {e}", file=sys.stderr)


MIB16 = 16 * 1024 * 1024
M = 2 * 1024 * 1024

np = None
if not TORCH_ONLY:
    try:
        import numpy as np
    except ImportError:
        pass

if np is not None:
    f32 = np.empty(MIB16 // 4, np.float32)
    u8 = np.empty(MIB16, np.uint8)
    s64, d32 = np.full(M, 1.25), np.empty(M, np.float32)
    s32, d64 = np.full(M, 3, np.int32), np.empty(M)
    src32, h16 = np.full(M, 1.5, np.float32), np.empty(M, np.float16)
    sq, sq_dst = np.ones((2048, 2048), np.float32), np.empty((2048, 2048), np.float32)
    cube = np.ones((64, 256, 256), np.float32)
    m = np.full((1000, 1000), 2, np.float32)
    bytes8 = b"\1" * (8 * 1000 * 1000)
    small = np.zeros((3, 4), np.float32)
    report("roundtrip_small", "numpy", lambda: np.from_dlpack(small))
    report("fill_f32", "numpy", lambda: f32.fill(0))
    report("fill_u8", "numpy", lambda: u8.fill(7))
    report("convert_f64_f32", "numpy", lambda: np.copyto(d32, s64, casting="unsafe"))
    report("convert_i32_f64", "numpy", lambda: np.copyto(d64, s32, casting="unsafe"))
    report("convert_f32_f16", "numpy", lambda: np.copyto(h16, src32, casting="unsafe"))
    report("transpose", "numpy", lambda: np.copyto(sq_dst, sq.T))
    sq8, sq8_dst = np.ones((2048, 2048), np.uint8), np.empty((2048, 2048), np.uint8)
    report("transpose_u8", "numpy", lambda: np.copyto(sq8_dst, sq8.T))
    report("permute_clone", "numpy", lambda: np.ascontiguousarray(cube.transpose(2, 0, 1)))
    report("clone", "numpy", lambda: f32.copy())
    report("make_drop", "numpy", lambda: np.zeros(262144, np.float32))
    report("frombytes", "numpy", lambda: np.frombuffer(bytes8, np.uint8).copy())
    report("tobytes_strided", "numpy", lambda: m.T.tobytes())
    # computing (issue 16): the inputs bench/run.lua makes
    M4 = 4 * 1024 * 1024
    fa = np.tile((np.arange(64, dtype=np.float32) / 16 - 2), M4 // 64)
    fb, fc = np.full(M4, 0.75, np.float32), np.empty(M4, np.float32)
    frame = np.tile(np.array([(i * 37) % 256 for i in range(256)], np.uint8),
                    480 * 640 * 3 // 256).reshape(480, 640, 3)
    mean = np.array([0.485, 0.456, 0.406], np.float32).reshape(3, 1, 1)
    std = np.array([0.229, 0.224, 0.225], np.float32).reshape(3, 1, 1)
    report("add_f32_out", "numpy", lambda: np.add(fa, fb, out=fc))
    report("exp_f32", "numpy", lambda: np.exp(fa, out=fc))
    report("pow_f32", "numpy", lambda: np.power(fb, fa, out=fc))
    report("sum_f32", "numpy", lambda: np.sum(fa))
    h4 = fa.astype(np.float16)
    report("convert_f16_f32", "numpy", lambda: h4.astype(np.float32))
    report("normalize_frame", "numpy", lambda: (frame.transpose(2, 0, 1).astype(np.float32) / 255 - mean) / std)
    report("argmax_f32", "numpy", lambda: np.argmax(fa))
    rows4k = fa.reshape(4096, 1024)
    report("max_outer_f32", "numpy", lambda: np.max(rows4k, axis=0))
    index = (np.arange(1024 * 1024, dtype=np.int64) * 2654435761) % M4  # run.lua's, 0-based
    report("gather", "numpy", lambda: np.take(fa, index))
    report("take", "numpy", lambda: np.take(fa, index))
    hashed = ((np.arange(M4, dtype=np.int64) * 2654435761) % 4294967296).astype(np.float32) / 4294967296 - 0.5
    report("sort_f32", "numpy", lambda: np.sort(hashed))
    report("sort_f32_indices", "numpy", lambda: np.argsort(hashed, kind="stable"))
    report("argsort_f32", "numpy", lambda: np.argsort(hashed, kind="stable"))
    report("cumsum_f32", "numpy", lambda: np.cumsum(fa))
    logits = fa[:4096 * 1000].reshape(4096, 1000)

    def np_softmax(x):
        e = np.exp(x - x.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)
    report("softmax_f32", "numpy", lambda: np_softmax(logits))
    ma, mb = fa[:512 * 512].reshape(512, 512).copy(), np.full((512, 512), 0.5, np.float32)
    report("matmul_f32", "numpy", lambda: ma @ mb)
    s1, s2 = np.array([1, 2, 3], np.float32), np.array([4, 5, 6], np.float32)
    report("add_small", "numpy", lambda: np.add(s1, s2))

torch = None
if TORCH_ONLY:
    try:
        import torch
    except ImportError as e:
        print(f"# torch: {e}", file=sys.stderr)
else:
    sys.stdout.flush()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, os.path.abspath(__file__), "torch"] + ARGS, env=env, check=False)

if torch is not None:
    torch.set_num_threads(1)  # the module's loops are single-threaded
    f32 = torch.empty(MIB16 // 4, dtype=torch.float32)
    u8 = torch.empty(MIB16, dtype=torch.uint8)
    s64, d32 = torch.full((M,), 1.25, dtype=torch.float64), torch.empty(M, dtype=torch.float32)
    s32, d64 = torch.full((M,), 3, dtype=torch.int32), torch.empty(M, dtype=torch.float64)
    src32 = torch.full((M,), 1.5, dtype=torch.float32)
    h16, b16 = torch.empty(M, dtype=torch.float16), torch.empty(M, dtype=torch.bfloat16)
    sq, sq_dst = torch.ones((2048, 2048)), torch.empty((2048, 2048))
    cube = torch.ones((64, 256, 256))
    small = torch.zeros((3, 4))
    from torch.utils import dlpack as tdl
    report("roundtrip_small", "torch", lambda: tdl.from_dlpack(tdl.to_dlpack(small)))
    report("fill_f32", "torch", lambda: f32.fill_(0))
    report("fill_u8", "torch", lambda: u8.fill_(7))
    report("convert_f64_f32", "torch", lambda: d32.copy_(s64))
    report("convert_i32_f64", "torch", lambda: d64.copy_(s32))
    report("convert_f32_f16", "torch", lambda: h16.copy_(src32))
    report("convert_f32_bf16", "torch", lambda: b16.copy_(src32))
    report("transpose", "torch", lambda: sq_dst.copy_(sq.t()))
    report("permute_clone", "torch", lambda: cube.permute(2, 0, 1).contiguous())
    report("clone", "torch", lambda: f32.clone())
    report("make_drop", "torch", lambda: torch.zeros(262144))
    # the logits bench/run.lua makes (64 values in [-2, 2) repeated), without NumPy
    tlogits = (torch.arange(64, dtype=torch.float32) / 16 - 2).repeat(4 * 1024 * 1024 // 64)[:4096 * 1000]
    tlogits = tlogits.reshape(4096, 1000).contiguous()
    report("softmax_f32", "torch", lambda: torch.softmax(tlogits, 1))
