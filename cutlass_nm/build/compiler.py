"""The build lifecycle in one place: key -> look in cache -> lock -> look again -> nvcc -> atomic rename.

The cache key hashes the source, the nvcc flags, the nvcc version, the target arch and the CUTLASS
version, so a toolkit or CUTLASS upgrade never reuses a stale binary. A regenerated but identical source
maps to the same key and never rebuilds.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import platformdirs
from filelock import FileLock

from ..errors import BuildError

ARCH_FLAGS = {
    "sm_90a": ["-gencode=arch=compute_90a,code=sm_90a"],
    # sm_80 SASS does not run on sm_90: also build sm_90a SASS (__CUDA_ARCH__ = 900 with the arch-specific features,
    # e.g. setmaxnreg for nm_simt's producer warpgroup), so a kernel can use Hopper features where it runs there.
    "sm_80": ["-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90a,code=sm_90a"],
}
# -fno-gnu-unique: a static local of a header's template or inline function (a "shared memory set" flag, say) is
# the library's own. GCC's default binding (STB_GNU_UNIQUE) merges such a variable across every library loaded in the
# process, so one kernel's first launch would skip another's attribute call.
COMMON_FLAGS = ["-std=c++17", "-O3", "-shared", "-Xcompiler=-fPIC", "-Xcompiler=-fno-gnu-unique",
                "--expt-relaxed-constexpr", "-DNDEBUG", "-lineinfo"]


@dataclass(frozen=True)
class Artifact:
    """A compiled kernel library: where it is, and its cache key."""

    key: str
    path: Path
    built: bool  # False when it came from the cache


@dataclass(frozen=True)
class BuildEvent:
    """One finished job of ``build_many``: how many are done of how many, which, and its outcome."""

    done: int
    total: int
    name: str
    result: Artifact | BuildError
    elapsed: float  # seconds since build_many started

    @property
    def verdict(self) -> str:
        """'built', 'cached' or 'FAILED'."""
        if isinstance(self.result, Exception):
            return "FAILED"
        return "built" if self.result.built else "cached"


def cache_dir() -> Path:
    """Kernel cache folder: ``$CUTLASS_NM_CACHE`` or the user cache dir."""
    root = os.environ.get("CUTLASS_NM_CACHE") or platformdirs.user_cache_dir("cutlass_nm")
    path = Path(root) / "kernels"
    path.mkdir(parents=True, exist_ok=True)
    return path


def nvcc_path() -> str:
    found = shutil.which("nvcc")
    if found is None:
        home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
        candidate = Path(home) / "bin" / "nvcc"
        if candidate.exists():
            return str(candidate)
        raise BuildError("nvcc not found: install the CUDA toolkit (12.3+, sm_90a needs it) or set CUDA_HOME")
    return found


@functools.cache
def nvcc_version() -> str:
    out = subprocess.run([nvcc_path(), "--version"], capture_output=True, text=True, check=True).stdout
    return out.strip().splitlines()[-1]


@functools.cache
def cutlass_include_dirs() -> tuple[str, ...]:
    import cutlass_library  # the pip package ships the CUTLASS/CuTe headers

    root = Path(cutlass_library.__file__).parent / "source"
    return (str(root / "include"), str(root / "tools" / "util" / "include"))


@functools.cache
def cutlass_version() -> str:
    """The installed ``nvidia-cutlass`` version: its headers are part of every kernel's source."""
    return metadata.version("nvidia-cutlass")


def cache_key(source: str, arch: str) -> str:
    """Content key of a compiled kernel: source, nvcc flags, nvcc version, target arch, CUTLASS version."""
    flags = " ".join(COMMON_FLAGS + ARCH_FLAGS[arch])
    h = hashlib.sha256()
    for part in (source, flags, nvcc_version(), arch, cutlass_version()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def is_cached(source: str, arch: str) -> bool:
    """True when ``build(source, arch)`` would load from the cache instead of compiling."""
    return (cache_dir() / f"{cache_key(source, arch)}.so").exists()


def build(source: str, arch: str, name: str = "kernel", timeout: float = 900.0) -> Artifact:
    """Compile ``source`` for ``arch`` unless the cache already holds it; return the library path."""
    if arch not in ARCH_FLAGS:
        raise BuildError(f"unknown arch {arch!r}; expected one of {sorted(ARCH_FLAGS)}")
    key = cache_key(source, arch)
    folder = cache_dir()
    lib = folder / f"{key}.so"  # keyed by content alone: runtime-only config fields share one binary
    if lib.exists():
        return Artifact(key, lib, built=False)
    with FileLock(str(folder / f"{key}.lock")):
        if lib.exists():
            return Artifact(key, lib, built=False)
        with tempfile.TemporaryDirectory(dir=folder, prefix=f".{key}-") as tmp:
            src = Path(tmp) / f"{name}.cu"
            src.write_text(source)
            out = Path(tmp) / "lib.so"
            cmd = [nvcc_path(), *COMMON_FLAGS, *ARCH_FLAGS[arch],
                   *[f"-I{d}" for d in cutlass_include_dirs()], str(src), "-o", str(out)]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            except subprocess.TimeoutExpired as exc:
                raise BuildError(f"nvcc timed out after {timeout:.0f} s compiling {name}") from exc
            if proc.returncode != 0:
                log = folder / f"{name}-{key}.log"
                log.write_text(" ".join(cmd) + "\n\n" + proc.stdout + proc.stderr)
                first = next((ln for ln in proc.stderr.splitlines() if "error" in ln), proc.stderr[:300])
                raise BuildError(f"nvcc failed for {name}: {first.strip()} (full log: {log})")
            (folder / f"{key}.cu").write_text(f"// {name}\n{source}")
            if proc.stderr.strip():  # ptxas performance warnings (e.g. C7510 wgmma serialization)
                (folder / f"{key}.log").write_text(proc.stderr)
            os.replace(out, lib)  # atomic: readers see no .so or a complete one
    return Artifact(key, lib, built=True)


def build_many(jobs: Iterable[tuple[str, str, str]], workers: int | None = None,
               progress: Callable[[BuildEvent], None] | None = None) -> list[Artifact | BuildError]:
    """Compile several ``(source, arch, name)`` jobs in parallel; failures come back as BuildError, in job order.
    ``progress`` is called in the calling thread as each job finishes (in completion order)."""
    jobs = list(jobs)
    workers = workers or max(1, os.cpu_count() or 1)
    t0 = time.monotonic()

    def one(job: tuple[str, str, str]) -> Artifact | BuildError:
        try:
            return build(*job)
        except BuildError as exc:
            return exc

    results: list[Artifact | BuildError | None] = [None] * len(jobs)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(one, job): i for i, job in enumerate(jobs)}
        try:
            for done, future in enumerate(as_completed(futures), start=1):
                i = futures[future]
                results[i] = future.result()
                if progress is not None:
                    progress(BuildEvent(done, len(jobs), jobs[i][2], results[i], time.monotonic() - t0))
        except BaseException:  # e.g. Ctrl-C: start no further compiles
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    return results  # type: ignore[return-value]  # every slot is filled
