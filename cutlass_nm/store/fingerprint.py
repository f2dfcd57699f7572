"""The environment a measurement belongs to, and the problem key it answers.

Hard fields (GPU, compute capability, SMs, L2, CUTLASS, nvcc, our template hash) must match for a
record to be used; soft fields (driver, torch) may differ, with one warning.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict, dataclass

STATUSES = ("ok", "invalid", "compile_error", "runtime_error", "timeout")
HARD = ("gpu", "compute_capability", "sm_count", "l2_bytes", "cutlass_version", "nvcc_version", "template_hash")
SOFT = ("driver", "torch_version")


@dataclass(frozen=True)
class EnvFields:
    gpu: str
    compute_capability: str
    sm_count: int
    l2_bytes: int
    cutlass_version: str
    nvcc_version: str
    template_hash: str
    driver: str
    torch_version: str

    @property
    def hard_key(self) -> str:
        return _digest({f: getattr(self, f) for f in HARD})

    @property
    def soft_key(self) -> str:
        return _digest({f: getattr(self, f) for f in SOFT})

    def to_dict(self) -> dict:
        return asdict(self)


def _digest(fields: dict) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:32]


def normalize_gpu(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100-80gb-hbm3'."""
    name = name.lower().replace("nvidia", "").strip()
    return "-".join(name.split())


@functools.cache
def template_hash(family: str) -> str:
    """Hash of exactly what shapes ``family``'s kernels and choices: its module and the templates it declares
    (``Family.fingerprint_files``). Per family, so another family's change leaves this family's records valid."""
    from ..families import get_family
    from ..families.base import package_file

    h = hashlib.sha256()
    for path in get_family(family).fingerprint_files():
        h.update(path.encode())
        h.update(package_file(path).read_bytes())
    return h.hexdigest()[:32]


def all_template_hashes() -> set[str]:
    """The template hashes of every family built into this version (any other hash is stale)."""
    from ..families import FAMILIES

    return {template_hash(name) for name in FAMILIES}


def _driver() -> str:
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # NVML missing or unusable: the driver is a soft field
        return "unknown"


@functools.cache
def _machine(device: int) -> dict:
    import torch

    from ..build.compiler import cutlass_version, nvcc_version

    p = torch.cuda.get_device_properties(device)
    cc = f"{p.major}.{p.minor}" + ("a" if (p.major, p.minor) == (9, 0) else "")
    return dict(gpu=normalize_gpu(p.name), compute_capability=cc, sm_count=p.multi_processor_count,
                l2_bytes=int(getattr(p, "L2_cache_size", 0)), cutlass_version=cutlass_version(),
                nvcc_version=nvcc_version(), driver=_driver(), torch_version=torch.__version__)


def current_environment(family: str, device: int = 0) -> EnvFields:
    """The fingerprint of this process's GPU ``device``, toolchain and ``family``'s templates."""
    return EnvFields(**_machine(device), template_hash=template_hash(family))


def m_bucket(m: int) -> int:
    """Next power of two >= m: tuning is keyed by bucket, lookups fall back to the nearest bucket."""
    return 1 << max(0, (m - 1).bit_length())


def alignment(n: int, k: int) -> int:
    """Largest power-of-two element alignment (<= 16) shared by n and k."""
    a = 16
    while a > 1 and (n % a or k % a):
        a //= 2
    return a


@dataclass(frozen=True)
class ProblemKey:
    family: str
    pattern: str
    m_bucket: int
    n: int
    k: int
    dtype: str
    out_dtype: str
    layout: str
    bias: bool
    alignment: int

    @classmethod
    def of(cls, family: str, problem, pattern: str | None = None) -> ProblemKey:
        t = problem.types
        pattern = pattern or getattr(problem, "pattern", "2:4")
        return cls(family, pattern, m_bucket(problem.m), problem.n, problem.k, t.dtype, t.out_dtype, "tn", t.bias,
                   alignment(problem.n, problem.k))

    def to_dict(self) -> dict:
        return asdict(self)
