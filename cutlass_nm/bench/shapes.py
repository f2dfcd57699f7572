"""The seed papers' shape sets and sparsity levels, as named presets in cutlass_nm's convention.

Every shape is ``y (m x n) = x (m x k) · W (n x k)ᵀ``: m tokens, n output features, k input features,
with W the sparse operand, pruned along k. How each paper's shapes map onto it:

* nmSPARSE (MLSys'23) and NM-SpMM (IPDPS'25) multiply a dense A (M x K) by a sparse weight B (K x N),
  pruned along K: that is our convention with W = Bᵀ, so (m, n, k) = (M, N, K) as printed.
* VENOM (SC'23) multiplies a sparse A (M x K), pruned along K in V-row blocks, by a dense B (K x N).
  Transposing, Cᵀ (N x M) = Bᵀ (N x K) · Aᵀ, i.e. x = Bᵀ and W = A: our (m, n, k) = (VENOM N, VENOM M,
  VENOM K). W's V-row blocks are then A's V-row blocks, as in VENOM. See :func:`venom_shape`.
"""

from __future__ import annotations

from dataclasses import dataclass


def parse_mnk(text: str) -> tuple[int, int, int]:
    """``"M,N,K"`` as three integers >= 1 (a command line's problem); ValueError naming the rule otherwise."""
    try:
        m, n, k = (int(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"expected M,N,K (e.g. 2048,4096,4096), got {text!r}") from None
    if min(m, n, k) < 1:
        raise ValueError(f"M, N and K must be >= 1, got {text!r}")
    return m, n, k


@dataclass(frozen=True, slots=True)
class Shape:
    """One problem, y (m x n) = x (m x k) · W (n x k)ᵀ; ``name`` says where it comes from."""

    m: int
    n: int
    k: int
    name: str = ""

    @property
    def mnk(self) -> tuple[int, int, int]:
        return self.m, self.n, self.k


# nmSPARSE's eight (k, n) pairs, in its table's order
NMSPARSE_KN = ((1024, 1024), (2048, 2048), (4096, 4096), (8192, 8192), (1024, 4096), (4096, 1024), (5120, 20480),
               (20480, 5120))


def nmsparse() -> list[Shape]:
    """nmSPARSE's M1-M32, numbered as in its table: M1-M8 are m = 1 over the eight (k, n) pairs, then
    for each pair in turn m = 256, 1024, 4096 (M9-M11 are 1024², M12-M14 2048², ...)."""
    out = [Shape(1, n, k, f"M{i + 1}") for i, (k, n) in enumerate(NMSPARSE_KN)]
    i = 9
    for k, n in NMSPARSE_KN:
        for m in (256, 1024, 4096):
            out.append(Shape(m, n, k, f"M{i}"))
            i += 1
    return out


# NM-SpMM's LLaMA layers, (n, k): attention out / q,k,v fused / MLP up (and gate) / MLP down
LLAMA_NK = ((4096, 4096), (12288, 4096), (11008, 4096), (4096, 11008))
LLAMA_M = (256, 512, 1024, 2048, 4096)


def llama() -> list[Shape]:
    """NM-SpMM's LLaMA-7B set: m in {256, ..., 4096} tokens x its four (n, k) layers."""
    return [Shape(m, n, k, f"llama-{n}x{k}") for n, k in LLAMA_NK for m in LLAMA_M]


VENOM_MK = ((768, 768), (3072, 768), (768, 3072), (1024, 1024), (4096, 1024), (1024, 4096))
VENOM_N = (2048, 4096, 8192)


def venom_shape(m: int, k: int, n: int) -> Shape:
    """VENOM's sparse A (m x k) · dense B (k x n) as our y = x·Wᵀ: W = A (out = m, in = k), x = Bᵀ (n rows)."""
    return Shape(m=n, n=m, k=k, name=f"venom-{m}x{k}")


def venom() -> list[Shape]:
    """VENOM's set: (M, K) in {768², 3072x768, 768x3072, 1024², 4096x1024, 1024x4096} x N in {2048, 4096, 8192}."""
    return [venom_shape(m, k, n) for m, k in VENOM_MK for n in VENOM_N]


def quick() -> list[Shape]:
    """A few shapes that touch every family at few distinct kernels: decode (m = 1), a square, a LLaMA layer."""
    return [Shape(1, 4096, 4096, "M3"), Shape(4096, 4096, 4096, "M17"), Shape(2048, 11008, 4096, "llama-11008x4096")]


def headline() -> list[Shape]:
    """One shape per seed regime, for a run that fits a few minutes: nmSPARSE m = 1 and m = 4096 at 4096²
    and its large OPT pair, the LLaMA layers at m = 2048, VENOM's BERT-large shapes at N = 4096."""
    by = {s.name: s for s in nmsparse()}
    seeds = [by[n] for n in ("M3", "M7", "M17", "M29")]
    return seeds + [s for s in llama() if s.m == 2048] + [s for s in venom() if s.m == 4096 and 1024 in (s.n, s.k)]


PRESETS = {"quick": quick, "headline": headline, "nmsparse": nmsparse, "llama": llama, "venom": venom}


def preset(name: str) -> list[Shape]:
    try:
        return PRESETS[name]()
    except KeyError:
        raise KeyError(f"unknown shape preset {name!r}; known: {sorted(PRESETS)}") from None


def merge(shapes: list[Shape]) -> list[Shape]:
    """Drop repeated (m, n, k), keeping the first occurrence's order and joining the names."""
    names: dict[tuple[int, int, int], list[str]] = {}
    for s in shapes:
        names.setdefault(s.mnk, [])
        if s.name and s.name not in names[s.mnk]:
            names[s.mnk].append(s.name)
    return [Shape(*mnk, "+".join(ns)) for mnk, ns in names.items()]


# Sparsity levels (fraction of weights removed) and the pattern each weight kind runs them with. "24": the
# 2:4 Sparse Tensor Core format; "vnm": V:N:M (VENOM, N = 2 on Sparse Tensor Cores, V = 128 rows share
# columns); "nm": general N:M on CUDA cores. >= 90 %: 2:20 (VENOM's M = 20), exactly 90 %.
LEVELS = (0.5, 0.75, 0.875, 0.9)
PATTERNS: dict[str, dict[float, tuple[str, ...]]] = {
    "24": {0.5: ("2:4",)},
    "vnm": {0.75: ("128:2:8",), 0.875: ("128:2:16",), 0.9: ("128:2:20",)},
    "nm": {0.5: ("2:4",), 0.75: ("2:8",), 0.875: ("2:16",), 0.9: ("2:20",)},
}
# the other patterns of the seeds at the same levels, for --all-patterns
EXTRA_PATTERNS: dict[str, dict[float, tuple[str, ...]]] = {
    "vnm": {0.75: ("64:2:8",), 0.875: ("64:2:16",), 0.9: ("128:2:32",)},
    "nm": {0.5: ("16:32",), 0.75: ("1:4", "8:32"), 0.875: ("1:8", "4:32"), 0.9: ("1:16", "3:32")},
}


def patterns_for(kind: str, levels: tuple[float, ...] = LEVELS, extra: bool = False) -> list[str]:
    """The patterns a weight kind is timed at, for the given sparsity levels."""
    out: list[str] = []
    for level in levels:
        out += PATTERNS.get(kind, {}).get(level, ())
        if extra:
            out += EXTRA_PATTERNS.get(kind, {}).get(level, ())
    return out


def parse_level(text: str) -> float:
    """'50', '87.5', '0.875' or '90%' -> a fraction in LEVELS."""
    val = float(text.strip().rstrip("%"))
    val = val / 100 if val > 1 else val
    for level in LEVELS:
        if abs(level - val) < 1e-9:
            return level
    raise ValueError(f"sparsity {text!r} is not one of {[f'{lv:.1%}' for lv in LEVELS]}")
