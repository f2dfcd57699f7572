"""Runtime helpers shared by the families' launchers: dtypes, device facts, workspace, status codes."""

from __future__ import annotations

import ctypes
import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import LaunchError

_TORCH = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
_NAMES = {v: k for k, v in _TORCH.items()}
_CUTLASS_STATUS = {
    1: "misaligned operand", 2: "invalid problem", 3: "not supported", 4: "workspace null",
    5: "internal error", 6: "error arch mismatch", 7: "insufficient driver", 8: "invalid", 9: "unknown",
}


def torch_dtype(name: str) -> torch.dtype:
    return _TORCH[name]


def dtype_name(dtype: torch.dtype) -> str:
    return _NAMES[dtype]


@dataclass(frozen=True)
class DeviceInfo:
    sm_count: int
    capability: tuple[int, int]
    name: str


@functools.cache
def device_info(device: torch.device) -> DeviceInfo:
    p = torch.cuda.get_device_properties(device)
    return DeviceInfo(p.multi_processor_count, (p.major, p.minor), p.name)


_WORKSPACES: dict[torch.device, torch.Tensor] = {}


def workspace_buffer(device: torch.device, nbytes: int) -> torch.Tensor | None:
    """The per-device scratch buffer, at least ``nbytes`` (None when none is needed). It grows by replacement: a
    launcher that keeps a pointer into it keeps the tensor too (:class:`Prepared`), so that pointer stays valid."""
    if nbytes == 0:
        return None
    buf = _WORKSPACES.get(device)
    if buf is None or buf.numel() < nbytes:
        buf = torch.empty(max(nbytes, 1 << 20), dtype=torch.uint8, device=device)
        _WORKSPACES[device] = buf
    return buf


def workspace(device: torch.device, nbytes: int) -> int | None:
    """Pointer to a per-device scratch buffer of at least ``nbytes`` (None when none is needed)."""
    buf = workspace_buffer(device, nbytes)
    return None if buf is None else buf.data_ptr()


def _public_stream(index: int) -> int:
    return torch.cuda.current_stream(index).cuda_stream


# cudaStream_t of torch's current stream on a device index, as an int: torch's own accessor (what its generated
# code calls: no Stream object is built), else the public API
stream_handle: Callable[[int], int] = getattr(torch._C, "_cuda_getCurrentRawStream", None) or _public_stream
vp = ctypes.c_void_p  # pointer arguments of the steady-state calls (made without argtypes: no per-call from_param)
_TOKENS = itertools.count()


def launcher_token() -> int:
    """A number unique to one launcher: its part of the keys under which it keeps :class:`Prepared` entries."""
    return next(_TOKENS)


def fast_function(lib: Any, name: str) -> Any:
    """A second handle on ``lib``'s C function ``name`` with no argtypes (the library's own attribute keeps its
    checked signature): called with ``vp`` pointers and Python ints, ctypes converts nothing per argument."""
    if not hasattr(type(lib), "__getitem__"):  # a stand-in library (tests): its attribute
        return getattr(lib, name)
    fn = lib[name]
    fn.restype = ctypes.c_int
    return fn


class Prepared:
    """What a launcher's steady-state call on one weight at one m needs and a call does not change: pointers into
    the weight's kernel layouts (as ``vp``), sizes, the launch plan, the workspace. Built on the first call and kept
    in the weight's layout cache (``CompressedWeight.layout``), beside the layouts it points into and for as long
    as they live; ``values`` is the weight's values tensor it was built for (a weight given new values is prepared
    again). ``keep`` holds the tensors the pointers need alive (a workspace that has since been replaced by a larger
    one). A pickled or copied weight drops it: the copy prepares its own on first use."""

    __slots__ = ("args", "keep", "values")

    def __init__(self, values: torch.Tensor | None = None, args: tuple = (), keep: tuple = ()) -> None:
        self.values, self.args, self.keep = values, args, keep

    def __reduce__(self) -> tuple:
        return Prepared, ()


NO_LAYOUTS: dict = {}


def prepared(w: Any, key: tuple) -> Prepared | None:
    """The :class:`Prepared` entry ``key`` of weight ``w``, or None (never prepared, or prepared for other values)."""
    entry = w.__dict__.get("_layouts", NO_LAYOUTS).get(key)
    return entry if entry is not None and entry.values is w.values else None


def remember(w: Any, key: tuple, entry: Prepared) -> Prepared:
    """Keep ``entry`` in ``w``'s layout cache under ``key``; returns it."""
    w.__dict__.setdefault("_layouts", {})[key] = entry
    return entry


def check_status(status: int, family: str, mnk: tuple[int, int, int]) -> None:
    if status == 0:
        return
    if status >= 1000:
        raise LaunchError(f"{family}: CUDA error {status - 1000} launching (m, n, k) = {mnk}")
    raise LaunchError(f"{family}: CUTLASS refused (m, n, k) = {mnk}: {_CUTLASS_STATUS.get(status, status)}")
