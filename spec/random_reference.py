#!/usr/bin/env python3
"""An independent model of dlpack's random numbers, written from docs/api.md ("Random
numbers"), not from src/compute/random.c. It printed the values that spec/random_spec.lua pins:
    python3 spec/random_reference.py
Pure Python (floats are IEEE-754 doubles, one rounding per operation); NumPy only for the
float16 rounding, when present."""
import math
import struct

M64 = (1 << 64) - 1


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & M64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return state, z ^ (z >> 31)


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & M64


class Xoshiro256ss:
    def __init__(self, seed):
        x = seed & M64
        self.s = []
        for _ in range(4):
            x, out = splitmix64(x)
            self.s.append(out)

    def next(self):
        s = self.s
        result = (rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result


BITS = {"float64": 53, "float32": 24, "float16": 11, "bfloat16": 8}


def rand(g, n, dtype):
    b = BITS[dtype]
    return [(g.next() >> (64 - b)) * 2.0 ** -b for _ in range(n)]


def log_(x):
    m, e = math.frexp(x)
    if m < 0.70710678118654752440:
        m = m * 2
        e = e - 1
    f = (m - 1) / (m + 1)
    f2 = f * f
    p = 1.0 / 25
    for k in range(11, -1, -1):
        p = p * f2 + 1.0 / (2 * k + 1)
    return float(e) * 0.69314718055994530942 + 2 * f * p


def randn(g, n):
    out = []
    while len(out) < n:
        while True:
            u = (g.next() >> 11) * 2.0 ** -52 - 1
            v = (g.next() >> 11) * 2.0 ** -52 - 1
            s = u * u + v * v
            if 0 < s < 1:
                break
        r = math.sqrt(-2 * log_(s) / s)
        out.append(u * r)
        if len(out) < n:
            out.append(v * r)
    return out


def randint(g, lo, hi, n):
    rng = (hi - lo) & M64
    out = []
    for _ in range(n):
        m = g.next() * rng
        low = m & M64
        if low < rng:
            threshold = (2 ** 64 - rng) % rng
            while low < threshold:
                m = g.next() * rng
                low = m & M64
        out.append(lo + (m >> 64))
    return out


def randperm(g, n):
    """randperm(n): Fisher-Yates from the end, each j drawn as randint(0, i + 1) draws it."""
    p = list(range(n))
    for i in range(n - 1, 0, -1):
        j = randint(g, 0, i + 1, 1)[0]
        p[i], p[j] = p[j], p[i]
    return [v + 1 for v in p]


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def bf16(x):  # to nearest even, as a double
    if x == 0:
        return x
    m, e = math.frexp(x)
    return math.ldexp(round(m * 256), e - 8)


def lua(values, fmt="%.17g"):
    return "{" + ", ".join(fmt % v for v in values) + "}"


if __name__ == "__main__":
    g = Xoshiro256ss(42)
    print("seed 42, raw:", [hex(g.next()) for _ in range(4)])
    g = Xoshiro256ss(42)
    print("seed 42, rand float64 x4:", lua(rand(g, 4, "float64")))
    g = Xoshiro256ss(42)
    print("seed 42, rand float32 x4:", lua(rand(g, 4, "float32")))
    g = Xoshiro256ss(42)
    print("seed 42, rand float16 x4:", lua(rand(g, 4, "float16")))
    g = Xoshiro256ss(42)
    print("seed 42, rand bfloat16 x4:", lua(rand(g, 4, "bfloat16")))
    g = Xoshiro256ss(0)
    print("seed 0, rand float64 x3:", lua(rand(g, 3, "float64")))
    g = Xoshiro256ss(-1)
    print("seed -1, rand float64 x2:", lua(rand(g, 2, "float64")))
    g = Xoshiro256ss(7)
    z = randn(g, 5)
    print("seed 7, randn float64 x5:", lua(z))
    print("seed 7, randn float32 x5:", lua([f32(v) for v in z]))
    print("seed 7, randn bfloat16 x5:", lua([bf16(v) for v in z]))
    try:
        import numpy as np
        print("seed 7, randn float16 x5:", lua([float(np.float16(v)) for v in z]))
    except ImportError:
        pass
    g = Xoshiro256ss(7)
    print("seed 7, log of the first s:", "%.17g" % log_(0.5), "%.17g" % log_(1e-300))
    g = Xoshiro256ss(123)
    print("seed 123, randint(-5, 5) x10:", lua(randint(g, -5, 5, 10), "%d"))
    g = Xoshiro256ss(123)
    print("seed 123, randint(-2^63, 2^63-1) x3:", lua(randint(g, -2 ** 63, 2 ** 63 - 1, 3), "%d"))
    g = Xoshiro256ss(123)
    print("seed 123, randint(0, 3) x10 then rand:", lua(randint(g, 0, 3, 10), "%d"), lua(rand(g, 1, "float64")))
    # a range that rejects about half the draws: 2^63 + 1 values (threshold 2^63 - 1)
    g = Xoshiro256ss(5)
    print("seed 5, randint(-2^63, 1) x6:", lua(randint(g, -2 ** 63, 1, 6), "%d"))
    g = Xoshiro256ss(9)
    print("seed 9, randperm(12):", lua(randperm(g, 12), "%d"))
