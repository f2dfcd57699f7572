"""Remembered calls launched from C++ (``fastcall.cpp``): one call checks x, allocates y and launches, so an eager
steady-state call costs about a CUDA launch plus an allocation of host time.

The extension is built once per torch and Python version with the host C++ compiler against torch's headers (about
half a minute), kept in the kernel cache, and loaded from there. ``CUTLASS_NM_FASTCALL=off`` turns it off;
``on`` also builds it without a GPU (tests). Where it cannot be built it warns once, and calls take the Python path.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from filelock import FileLock

from ..build.compiler import cache_dir
from ..errors import BuildError, LaunchError

SOURCE = Path(__file__).with_name("fastcall.cpp")
MODULE = "_cnm_fastcall"
log = logging.getLogger("cutlass_nm.fastcall")
_state: dict[str, Any] = {}  # "module": the loaded extension, or None once it could not be had
_lock = threading.Lock()


def enabled() -> bool:
    """Whether remembered calls should take the C++ launch: ``CUTLASS_NM_FASTCALL`` (``off``/``on``; default: when
    CUDA is available)."""
    setting = os.environ.get("CUTLASS_NM_FASTCALL", "auto").lower()
    if setting in ("0", "off", "false", "no"):
        return False
    return setting in ("1", "on", "true", "yes") or torch.cuda.is_available()


def _with_cuda() -> bool:
    lib = Path(torch.__file__).parent / "lib"
    return torch.version.cuda is not None and any(lib.glob("libc10_cuda.so*"))


def _cuda_include() -> str | None:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    nvcc = shutil.which("nvcc")
    for root in (home, str(Path(nvcc).resolve().parent.parent) if nvcc else None, "/usr/local/cuda"):
        if root and (Path(root) / "include" / "cuda_runtime_api.h").exists():
            return str(Path(root) / "include")
    return None


def compile_command(out: Path) -> list[str]:
    """The compiler command that builds the extension into ``out``."""
    from torch.utils import cpp_extension

    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        raise BuildError("no C++ compiler on PATH (c++ or g++; or set CXX)")
    python_include = sysconfig.get_paths()["include"]
    if not (Path(python_include) / "Python.h").exists():
        raise BuildError(f"Python's C headers are missing ({python_include}/Python.h): install them (python3-dev, "
                         "python3-devel) or set CUTLASS_NM_FASTCALL=off")
    torch_lib = str(Path(torch.__file__).parent / "lib")
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    cmd = [cxx, "-O2", "-std=c++20", "-shared", "-fPIC", "-fvisibility=hidden", "-w",
           f"-D_GLIBCXX_USE_CXX11_ABI={abi}", f"-I{python_include}",
           *[f"-I{d}" for d in cpp_extension.include_paths()]]
    libs = ["-lc10", "-ltorch_cpu", "-ltorch_python"]
    if _with_cuda():
        include = _cuda_include()
        if include is None:
            raise BuildError("the CUDA headers (cuda_runtime_api.h) were not found: set CUDA_HOME")
        cmd += ["-DCNM_WITH_CUDA", f"-I{include}"]
        libs.append("-lc10_cuda")
    return [*cmd, str(SOURCE), f"-L{torch_lib}", *libs, f"-Wl,-rpath,{torch_lib}", "-o", str(out)]


def _key() -> str:
    h = hashlib.sha256(SOURCE.read_bytes())
    for part in (torch.__version__, str(torch.version.git_version), sys.version, str(_with_cuda())):
        h.update(part.encode() + b"\0")
    return "fastcall-" + h.hexdigest()[:20]


def build(timeout: float = 600.0) -> Path:
    """The extension's library, built into the kernel cache unless it is there already (a lock keeps concurrent
    builders to one)."""
    folder = cache_dir()
    key = _key()
    lib = folder / f"{key}.so"
    if lib.exists():
        return lib
    with FileLock(str(folder / f"{key}.lock")):
        if lib.exists():
            return lib
        failed = folder / f"{key}-failed.log"
        if failed.exists():
            raise BuildError(f"the C++ launch extension failed to build before (log: {failed}; delete it to retry)")
        log.warning("cutlass_nm: building the C++ launch extension once for torch %s (about half a minute)",
                    torch.__version__)
        with tempfile.TemporaryDirectory(dir=folder, prefix=f".{key}-") as tmp:
            out = Path(tmp) / "lib.so"
            cmd = compile_command(out)
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            except subprocess.TimeoutExpired as exc:
                raise BuildError(f"the C++ launch extension did not build in {timeout:.0f} s") from exc
            if proc.returncode != 0:
                failed.write_text(" ".join(cmd) + "\n\n" + proc.stdout + proc.stderr)
                raise BuildError(f"the C++ launch extension failed to build (full log: {failed})")
            (folder / f"{key}.cu").write_text(f"// fastcall\n{SOURCE.read_text()}")
            os.replace(out, lib)
    return lib


def load(path: Path) -> ModuleType:
    """Import the built extension from ``path``."""
    loader = importlib.machinery.ExtensionFileLoader(MODULE, str(path))
    spec = importlib.util.spec_from_file_location(MODULE, str(path), loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    module.set_error(LaunchError)
    return module


def module() -> ModuleType | None:
    """The extension, built and loaded on first use (one thread builds, the others wait); None when it is off or
    could not be had (warned once)."""
    if "module" not in _state:
        with _lock:
            if "module" not in _state:
                _state["module"] = _load_or_warn()
    return _state["module"]


def _load_or_warn() -> ModuleType | None:
    if not enabled():
        return None
    try:
        return load(build())
    except (BuildError, OSError, ImportError) as exc:
        warnings.warn(f"cutlass_nm: eager calls take the Python launch path: {exc}", RuntimeWarning, stacklevel=3)
        return None


def beside(work: Callable[[], Any]) -> Any:
    """``work()`` (a kernel build, say) with the extension built or loaded in a thread beside it; returns its result."""
    thread = threading.Thread(target=module, name="cutlass_nm-fastcall-build", daemon=True)
    thread.start()
    try:
        return work()
    finally:
        thread.join()


def status() -> str:
    """One line on how remembered calls launch in this process (builds the extension if it is on)."""
    if not enabled():
        return "eager calls launch from Python (CUTLASS_NM_FASTCALL=off)"
    if module() is None:
        return "eager calls launch from Python: the C++ launch extension could not be built (see the warning above)"
    return f"eager calls launch from C++ (the launch extension for torch {torch.__version__})"


def entry_address(launch: Any) -> int:
    """The C address of a ctypes function (what ``make`` takes as ``fn``)."""
    return ctypes.cast(launch, ctypes.c_void_p).value or 0


def fast_call(kernel: Any, x: torch.Tensor, y: torch.Tensor, guards: tuple = (),
              grad_bias: torch.Tensor | None = None) -> Callable[[torch.Tensor], torch.Tensor | None] | None:
    """``fast(x)``: the remembered call ``kernel`` (a launcher from ``families.launch.steady_call``) for tensors of
    x's signature, launched from C++; it returns y (y's shape and dtype), or None where x does not fit (another
    shape, dtype or device, not contiguous or 16-byte aligned, a guard broken, a gradient to record, or another
    stream for a call that holds its stream's scratch). None where the kernel has no C entry or the extension is
    off."""
    if getattr(kernel, "first_address", None) is None:
        return None
    ext = module()
    if ext is None:
        return None
    spec = ext.make(entry_address(kernel.launch), kernel.first_address, x, y, kernel.stream_only, kernel.what, guards,
                    grad_bias, kernel)
    return functools.partial(ext.call, spec)
