"""Seeded random matmul problems for the GPU fuzz test: shapes, patterns, dtypes, bias and output types."""

from __future__ import annotations

import random
from dataclasses import dataclass

PRIMES = (2, 3, 5, 7, 11, 13, 17, 31, 61, 97, 127, 257, 509, 1021, 2039, 4093)
VNM_GROUPS = (4, 5, 7, 8, 10, 11, 13, 16, 17, 20, 31, 32, 64, 100, 127, 128)  # M of V:N:M, primes included
TYPES = {  # (x dtype, out dtype, bias) per weight kind: a few combinations, so the kernels to build stay bounded
    "24": (("f16", "f16", False), ("bf16", "bf16", True), ("f16", "f32", True)),
    "vnm": (("f16", "f16", False), ("bf16", "bf16", True), ("f16", "f32", False)),
    "nm": (("f32", "f32", False), ("f32", "f32", True), ("f16", "f16", True), ("bf16", "f32", False)),
}


@dataclass(frozen=True)
class FuzzCase:
    seed: int
    m: int
    n: int
    k: int
    pattern: str
    kind: str  # "24", "vnm", "nm"
    dtype: str
    out_dtype: str
    bias: bool

    @property
    def id(self) -> str:
        b = "+b" if self.bias else ""
        return f"{self.m}x{self.n}x{self.k}-{self.pattern}-{self.dtype}>{self.out_dtype}{b}-s{self.seed}"


def _m(rng: random.Random) -> int:
    """Tokens: decode sizes, primes, odd values and large ones up to 5000."""
    pick = rng.random()
    if pick < 0.25:
        return rng.randint(1, 16)
    if pick < 0.45:
        return rng.choice([p for p in PRIMES if p <= 5000])
    return rng.randint(17, 5000) | rng.choice((0, 1))


def _dim(rng: random.Random, group: int) -> int:
    """n or k: every alignment from 1 to 64 elements, up to ~4k, sometimes a multiple of the pattern's group."""
    align = rng.choice((1, 2, 4, 8, 16, 32, 64, group))
    return max(align, rng.randint(1, 4096 // align) * align)


def _pattern(rng: random.Random, kind: str) -> str:
    if kind == "24":
        return "2:4"
    if kind == "vnm":
        return f"{rng.choice((32, 64, 128))}:2:{rng.choice(VNM_GROUPS)}"
    m = rng.choice((3, 4, 5, 7, 8, 11, 13, 16, 17, 31, 32, 37, 64))
    return f"{rng.randint(1, m - 1)}:{m}"


def fuzz_cases(count: int, seed: int = 0) -> list[FuzzCase]:
    """``count`` problems, the same for the same seed."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        kind = rng.choice(("24", "vnm", "nm"))
        pattern = _pattern(rng, kind)
        group = int(pattern.rsplit(":", 1)[1])
        dtype, out_dtype, bias = rng.choice(TYPES[kind])
        out.append(FuzzCase(seed * 1_000_003 + i, _m(rng), _dim(rng, 8), _dim(rng, group), pattern, kind, dtype,
                            out_dtype, bias))
    return out
