"""The one small interface every kernel family implements, and the problem it is asked to solve.

A family module exports ``FAMILY``, an object with:

* ``name``, ``arch``, ``weight`` (the compressed-weight type it runs; optionally ``also_runs``, a tuple
  of other weight types it takes when forced) and ``Config`` (a frozen dataclass of ints and enum strings);
* ``space()``: every config parameter and its allowed values (what the tuner searches);
* ``check(cfg, problem)``: ``None`` if the config can run the problem, else the reason;
* ``source(cfg, types)``: the full CUDA translation unit (CUTLASS-emitted kernel + our C ABI);
* ``heuristic(problem)``: a good config without tuning;
* ``launch(lib, cfg, x, w, bias)``: run the compiled library on torch's current stream, return y.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from ..errors import ConfigError

DTYPE_NAMES = ("f16", "bf16", "f32")
HALF_DTYPES = ("f16", "bf16")  # the input types of the tensor-core families (and the decode path)
SM_COUNT_H100 = 132  # SMs of an H100 SXM (and H200): the heuristics' wave estimates
SMEM_PER_SM_H100 = 233472  # shared memory per SM on the H100 (228 KB; CTAs also reserve 1 KB each)


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
    """The reason our pipelined sparse mainloop (``mma_pipe`` 1, templates/sparse_mainloop.cuh) cannot run a
    ``stages``-deep pipeline well: it holds each stage one k-tile longer, so below 3 stages the producer starves
    (measured: 128x256x128, 2 stages, ran 14-22 % slower pipelined; results/h100/sptc24_pipe.md)."""
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


class Family(Protocol):
    name: str
    arch: str
    weight: type
    Config: type

    def space(self) -> dict[str, tuple[Any, ...]]: ...

    def check(self, cfg: Any, problem: Problem) -> str | None: ...

    def source(self, cfg: Any, types: KernelTypes) -> str: ...

    def heuristic(self, problem: Problem) -> Any: ...

    def launch(self, lib: Any, cfg: Any, x: Any, w: Any, bias: Any) -> Any: ...
