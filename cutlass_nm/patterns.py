"""Sparsity patterns: N:M (element-wise), V:N:M (VENOM) and the 2:4 special case.

A pattern is a small frozen value type, parsed from strings such as ``"2:4"``,
``"2:8"`` or ``"128:2:8"`` (V:N:M).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import PatternError

_VNM_V = (32, 64, 128, 256)  # 256: also a gate/up pair of V = 128 pruned together (formats.glu)
_MAX_M = 128


@dataclass(frozen=True, slots=True)
class Pattern:
    """Keep ``n`` of every ``m`` consecutive weights along the reduction axis.

    With ``v`` set, the pattern is V:N:M: each block of ``v`` rows keeps the same
    4 columns of every ``m``, and those 4 are 2:4-sparse (so ``n`` must be 2).
    """

    n: int
    m: int
    v: int | None = None

    def __post_init__(self) -> None:
        for name, val in (("n", self.n), ("m", self.m), ("v", self.v)):
            if val is not None and (not isinstance(val, int) or isinstance(val, bool)):
                raise PatternError(f"pattern field {name} must be an int, got {type(val).__name__}")
        if not 1 <= self.n < self.m:
            raise PatternError(f"N:M needs 1 <= N < M, got {self.n}:{self.m}")
        if self.m > _MAX_M:
            raise PatternError(f"M = {self.m} is larger than the supported maximum {_MAX_M}")
        if self.v is not None:
            if self.v not in _VNM_V:
                raise PatternError(f"V:N:M needs V in {_VNM_V}, got V = {self.v}")
            if self.n != 2:
                raise PatternError(f"V:N:M runs on 2:4 Sparse Tensor Cores, so N must be 2, got N = {self.n}")
            if self.m < 4:
                raise PatternError(f"V:N:M needs M >= 4, got M = {self.m}")

    @classmethod
    def parse(cls, text: str | Pattern) -> Pattern:
        """Parse ``"N:M"`` or ``"V:N:M"``; a Pattern passes through unchanged."""
        if isinstance(text, Pattern):
            return text
        if not isinstance(text, str):
            raise PatternError(f"a pattern is a string like '2:4' or '128:2:8', got {type(text).__name__}")
        parts = [p.strip() for p in text.strip().split(":")]
        if len(parts) not in (2, 3) or not all(p.isascii() and p.isdigit() for p in parts):
            raise PatternError(
                f"cannot parse pattern {text!r}: expected 'N:M' (e.g. '2:4') or 'V:N:M' (e.g. '128:2:8'), written "
                "with the ASCII digits 0-9")
        nums = [int(p) for p in parts]
        if len(nums) == 2:
            return cls(n=nums[0], m=nums[1])
        return cls(n=nums[1], m=nums[2], v=nums[0])

    @property
    def is_24(self) -> bool:
        """True for plain 2:4, the pattern Sparse Tensor Cores run natively."""
        return self.v is None and self.n == 2 and self.m == 4

    @property
    def is_vnm(self) -> bool:
        return self.v is not None

    @property
    def density(self) -> float:
        """Fraction of weights kept."""
        return self.n / self.m

    @property
    def sparsity(self) -> float:
        return 1.0 - self.density

    def __str__(self) -> str:
        return f"{self.v}:{self.n}:{self.m}" if self.v is not None else f"{self.n}:{self.m}"


SPARSE_24 = Pattern(2, 4)


def parse_or_none(text: str | Pattern | None) -> Pattern | None:
    """``Pattern.parse(text)``, or None when ``text`` is empty or names no valid pattern (callers that only
    refine an estimate or a rule when the pattern is known)."""
    try:
        return Pattern.parse(text) if text else None
    except PatternError:
        return None
