"""The interface every kernel family implements (:class:`Family`), and the problem it is asked to solve.

A family lives in ``families/<name>/``: ``family.py`` defines a :class:`Family` subclass and exports one
instance as ``FAMILY``; its kernel template(s) sit beside it and are declared in ``Family.templates``.
"""

from __future__ import annotations

import dataclasses
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from string import Template
from typing import Any, ClassVar

from ..errors import ConfigError

DTYPE_NAMES = ("f16", "bf16", "f32", "e4m3")  # e4m3: FP8 inputs (sptc24_fp8_sm90)
HALF_DTYPES = ("f16", "bf16")  # the input types of the tensor-core families (and the decode path)
PACKAGE = "cutlass_nm"
CANDIDATES = 512  # random draws a family's candidate list takes from its space (warm start)


@dataclass(frozen=True, slots=True)
class KernelTypes:
    """The compile-time data types of a kernel: input (A, B), output, and whether it adds a bias."""

    dtype: str
    out_dtype: str
    bias: bool

    def __post_init__(self) -> None:
        if self.dtype not in DTYPE_NAMES or self.out_dtype not in DTYPE_NAMES:
            raise ConfigError(f"unsupported kernel types {self.dtype}->{self.out_dtype}")
        if not isinstance(self.bias, bool):
            raise ConfigError("bias must be a bool")


@dataclass(frozen=True, slots=True)
class Problem:
    """y(m x n) = x(m x k) · W(n x k)ᵀ: m tokens, n out_features, k in_features, W's sparsity pattern (tuned
    winners are kept per pattern: a 128:2:8 and a 128:2:16 weight of one shape are different problems) and,
    for a general N:M weight (``NMWeight``), its ``vector``: the consecutive rows that share kept positions
    (1 = element-wise, 32 = the format's default). 0 = not applicable (other weight types) or unknown; a
    family whose resources depend on it (nm_simt's column indices) then checks the worst case."""

    m: int
    n: int
    k: int
    types: KernelTypes
    pattern: str = "2:4"
    vector: int = 0


def pipelined_mma_rule(mma_pipe: int, stages: int) -> str | None:
    """The reason our pipelined sparse mainloop (``mma_pipe`` 1, codegen/sparse_mainloop.cuh) cannot run a
    ``stages``-deep pipeline well: it holds each stage one k-tile longer, so below 3 stages the producer starves."""
    if mma_pipe == 1 and stages < 3:
        return f"mma_pipe=1 holds a stage one k-tile longer: it needs >= 3 pipeline stages, this config runs {stages}"
    return None


def half_inputs_only(types: KernelTypes) -> str | None:
    """The reason a family that takes fp16/bf16 inputs only cannot run ``types`` (f32 x: CUDA-core nm_simt)."""
    if types.dtype not in HALF_DTYPES:
        return f"input dtype {types.dtype} is not supported (fp16/bf16 only; fp32 x runs on the nm_simt family)"
    return None


class FamilyConfig:
    """Mixin for family configs: strict construction from untrusted records (DB, files)."""

    SPACE: ClassVar[dict[str, tuple[Any, ...]]]

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> FamilyConfig:
        """Build a config from a dict, accepting only known keys whose values are in the space (missing
        keys take their defaults, which are the values used before those parameters existed).

        Values must be exact ints (not bools, floats or strings) or members of an enum's string set;
        anything else raises ConfigError before it can reach code generation.
        """
        if not isinstance(record, dict):
            raise ConfigError(f"a config record must be a dict, got {type(record).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(record) - names
        if unknown or not record:
            raise ConfigError(f"config keys {sorted(record)} are not a subset of {sorted(names)}")
        # a missing key takes its default: records measured before a parameter existed stay valid
        for key, val in record.items():
            allowed = cls.SPACE[key]
            kind = type(allowed[0])
            if type(val) is not kind or val not in allowed:
                raise ConfigError(f"config value {key}={val!r} is not one of {allowed}")
        return cls(**record)

    def to_record(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def estimate_ms(self, problem: Problem, sm_count: int) -> float | None:
        """This config's time on ``problem`` by the family's own model (ranking only), or None to use the
        generic roofline of ``families.perfmodel``."""
        return None


class Family(ABC):
    """A kernel family: a config space over one kernel template, and how to check, emit, pick and launch it.

    Subclasses declare every class attribute below and implement the four abstract methods; the other methods
    have defaults a family overrides only where it differs.
    """

    name: ClassVar[str]
    arch: ClassVar[str]  # nvcc target of its kernels ("sm_90a", "sm_80")
    weight: ClassVar[type]  # the compressed-weight class it runs
    Config: ClassVar[type[FamilyConfig]]
    templates: ClassVar[tuple[str, ...]]  # files (relative to the package) its source() reads: fingerprinted
    also_runs: ClassVar[tuple[type, ...]] = ()  # other weight classes it takes when forced
    input_dtypes: ClassVar[tuple[str, ...]] = HALF_DTYPES

    def space(self) -> dict[str, tuple[Any, ...]]:
        """Every config parameter and its allowed values (what the tuner searches)."""
        return self.Config.SPACE

    def runs(self, kind: type) -> bool:
        """Whether this family takes weights of class ``kind``: an FP8 weight only where the family declares FP8
        weights (a 16-bit family never reads e4m3 values as its own)."""
        accepted = (self.weight, *self.also_runs)
        return issubclass(kind, accepted) and getattr(kind, "fp8", False) == any(getattr(c, "fp8", False)
                                                                                   for c in accepted)

    @abstractmethod
    def check(self, cfg: Any, problem: Problem) -> str | None:
        """``None`` if ``cfg`` can run ``problem`` on the target GPU (``arch.target()``), else the reason."""

    @abstractmethod
    def source(self, cfg: Any, types: KernelTypes) -> str:
        """The full CUDA translation unit of ``cfg`` for ``types``."""

    @abstractmethod
    def heuristic(self, problem: Problem) -> Any:
        """A good config for ``problem`` without tuning (the fallback of last resort)."""

    @abstractmethod
    def bind(self, lib: Any, cfg: Any, types: KernelTypes, helpers: Sequence[Callable[..., None]] = ()
             ) -> Callable[..., None]:
        """A launcher over the loaded library: ``launcher(x, w, bias, y)`` writes y on torch's current stream.
        ``helpers`` are the launchers of :meth:`helpers`' kernel ids, in that order (resolved before this call)."""

    def helpers(self, cfg: Any, types: KernelTypes) -> list[tuple[str, Any, KernelTypes]]:
        """Kernel ids (family, config, types) of other kernels the launcher of ``cfg`` calls: resolved by the
        caller and passed to :meth:`bind`, so that a launch never looks a kernel up."""
        return []

    def candidates(self, problem: Problem, space: dict[str, tuple[Any, ...]] | None = None,
                   limit: int = CANDIDATES) -> list[Any]:
        """Valid configs to rank before tuning: the heuristic's, then a seeded sample of at most ``limit`` draws
        from ``space`` (default: the family's; never the whole product), each in ``space`` and valid."""
        space = space or self.space()
        rng = random.Random(f"{self.name}:{problem.m}:{problem.n}:{problem.k}:{problem.pattern}")
        draws = (self.Config(**{k: rng.choice(v) for k, v in space.items()}) for _ in range(limit))
        seen, out = set(), []
        for cfg in (self.heuristic(problem), *draws):
            if cfg in seen:
                continue
            seen.add(cfg)
            inside = all(getattr(cfg, k) in v for k, v in space.items())
            if inside and self.check(cfg, problem) is None:
                out.append(cfg)
        return out

    def output_shape(self, m: int, n: int) -> tuple[int, int]:
        """The shape the kernel writes for m tokens and an n-row weight."""
        return m, n

    def reference(self, x: Any, w: Any) -> Any:
        """What the kernel computes, in fp64 (the tuner's worker checks candidates against it)."""
        return x.double() @ w.to_dense().double().T

    def template(self, name: str) -> Template:
        """One of ``templates`` as a ``string.Template`` (placeholders are ``${name}``)."""
        if name not in self.templates:
            raise KeyError(f"{self.name} does not declare the template {name!r}")
        return Template(package_file(name).read_text())

    def fingerprint_files(self) -> tuple[str, ...]:
        """What shapes this family's kernels and choices: its module and its declared templates."""
        module = type(self).__module__.removeprefix(f"{PACKAGE}.").replace(".", "/") + ".py"
        return (module, *self.templates)


def package_file(path: str) -> Traversable:
    """A file shipped in the package, by its path relative to the package root."""
    return resources.files(PACKAGE).joinpath(path)
