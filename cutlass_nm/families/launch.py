"""Runtime helpers shared by the families' launchers: dtypes, device facts, workspace, status codes."""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import LaunchError

_TORCH = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "e4m3": torch.float8_e4m3fn}
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


_WORKSPACES: dict[tuple[torch.device, int], torch.Tensor] = {}
MAX_WORKSPACES = 16  # (device, stream) scratch buffers kept; the oldest goes first (a stream per request must not leak)


def workspace_buffer(device: torch.device, nbytes: int, stream: int | None = None) -> torch.Tensor | None:
    """The scratch buffer of torch's current stream on ``device`` (``stream``: its raw handle, when the caller has
    it), at least ``nbytes`` (None when none is needed):
    launches on one stream share it (stream order keeps them apart), each stream has its own (the last
    ``MAX_WORKSPACES`` streams' are kept). A larger request replaces it (at least doubling); a launch that keeps its
    address holds the tensor, so it stays valid."""
    if nbytes == 0:
        return None
    key = (device, _raw_stream(device.index) if stream is None else stream)
    buf = _WORKSPACES.get(key)
    if buf is None or buf.numel() < nbytes:  # the old one is freed on this same stream: stream-ordered reuse
        buf = torch.empty(max(nbytes, 1 << 20, 0 if buf is None else 2 * buf.numel()), dtype=torch.uint8,
                          device=device)
        _WORKSPACES.pop(key, None)
        while len(_WORKSPACES) >= MAX_WORKSPACES:  # launches that kept an address hold their tensor
            del _WORKSPACES[next(iter(_WORKSPACES))]
        _WORKSPACES[key] = buf
    return buf


def call_scratch(device: torch.device, nbytes: int, stream: int | None = None) -> torch.Tensor | None:
    """Scratch for one per-call launch: the stream's workspace (``workspace_buffer``), or while torch's current stream
    captures a CUDA graph a tensor of its own, from the graph's pool (a graph must not bake in an eager scratch)."""
    if nbytes and capturing():
        return torch.empty(nbytes, dtype=torch.uint8, device=device)
    return workspace_buffer(device, nbytes, stream)


# torch's check (without its wrapper: a repeat that holds a stream's scratch asks it each call); never, in a build
# without CUDA
_stream_capturing = torch._C._cuda_isCurrentStreamCapturing if torch.backends.cuda.is_built() else lambda: False


def capturing() -> bool:
    """Whether torch's current stream is capturing a CUDA graph (a scratch that no launch holds is then allocated
    per call, in the graph's own pool)."""
    return _stream_capturing()


def _stream_by_object(index: int) -> int:
    return torch.cuda.current_stream(index).cuda_stream


# torch's own cheap accessor (what its compiled code launches on); the public API where a build lacks it
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", _stream_by_object)


def gil_holding(lib: ctypes.CDLL, name: str, restype: type, *argtypes: type) -> Callable[..., int]:
    """``lib``'s C function ``name``, called with the GIL held (a PYFUNCTYPE): a launcher that patches a plan and
    launches it in that one call is atomic for Python threads."""
    return ctypes.PYFUNCTYPE(restype, *argtypes)((name, lib))


def packed_launch(lib: ctypes.CDLL, args: type[ctypes.Structure], family: str, entry: str = "cnm_launch"
                  ) -> Callable[..., int]:
    """``lib``'s ``entry(packed, x, y, stream)`` (GIL held), after checking that the kernel's packed arguments
    (``cnm_run_args_bytes``) have the size of ``args``, their ctypes mirror: a kernel built with another layout is
    refused, not misread."""
    lib.cnm_run_args_bytes.restype = ctypes.c_size_t
    if lib.cnm_run_args_bytes() != ctypes.sizeof(args):
        raise LaunchError(f"{family}: the kernel's packed arguments ({lib.cnm_run_args_bytes()} bytes) do not match "
                          f"the launcher's ({ctypes.sizeof(args)}); rebuild the kernel cache")
    vp = ctypes.c_void_p
    return gil_holding(lib, entry, ctypes.c_int, vp, vp, vp, vp)


class Plans(dict):
    """A kernel's launch plans by key (weight addresses and shape); all dropped past ``limit`` (a few hundred
    bytes each)."""

    def __init__(self, limit: int = 4096) -> None:
        super().__init__()
        self.limit = limit

    def keep(self, key: tuple, plan: Any) -> Any:
        if len(self) >= self.limit:
            self.clear()
        self[key] = plan
        return plan


def stream_of(x: torch.Tensor) -> int:
    """The raw handle of torch's current CUDA stream on ``x``'s device: what a launch takes."""
    return _raw_stream(x.get_device())


def steady_call(launch: Callable[..., int], first: Any, keep: tuple, family: str, mnk: tuple[int, int, int],
                on: tuple[int, Callable[..., None]] | None = None) -> Callable[..., None]:
    """A remembered call's launcher, ``go(x, w, bias, y)``: ``launch(first, x, y, stream)`` with ``first`` (a plan,
    or the call's other arguments packed) fixed for one (weight, bias, m). ``keep``: the tensors ``first`` points
    into, held by ``go`` so that their memory outlives it. ``on`` = (stream, launcher): ``first`` holds that stream's
    workspace, so a call on another stream, or on that one while it captures a CUDA graph (whose replays must not
    share an eager scratch), goes to the launcher instead (with x and y as 2-D views). ``go`` reads
    only x's and y's addresses (``any_shape``): contiguous tensors of the call's rows, in any shape, will do."""
    stream_only, other = on or (None, None)

    def go(x: torch.Tensor, w: Any, bias: torch.Tensor | None, y: torch.Tensor) -> None:
        status = launch(first, x.data_ptr(), y.data_ptr(), _raw_stream(x.get_device()))
        if status:
            check_status(status, family, mnk)

    def go_on_its_stream(x: torch.Tensor, w: Any, bias: torch.Tensor | None, y: torch.Tensor) -> None:
        stream = _raw_stream(x.get_device())
        if stream != stream_only or _stream_capturing():
            other(x.view(-1, x.shape[-1]), w, bias, y.view(-1, y.shape[-1]))
            return
        status = launch(first, x.data_ptr(), y.data_ptr(), stream)
        if status:
            check_status(status, family, mnk)

    chosen = go if on is None else go_on_its_stream
    chosen.keep = keep  # type: ignore[attr-defined]
    chosen.any_shape = True  # type: ignore[attr-defined]
    # what a C++ caller needs to make the same launch (cutlass_nm.fastcall)
    chosen.launch = launch  # type: ignore[attr-defined]
    chosen.first_address = _address(first)  # type: ignore[attr-defined]
    chosen.stream_only = stream_only  # type: ignore[attr-defined]  # None: any stream (0 is the default stream)
    chosen.what = f"{family} (m, n, k) = {mnk}"  # type: ignore[attr-defined]
    return chosen


def _address(first: Any) -> int | None:
    """A launch's first argument as an address: an int is one, a ctypes buffer or structure has one; else None."""
    if isinstance(first, int):
        return first
    return ctypes.addressof(first) if isinstance(first, ctypes.Array | ctypes.Structure) else None


def check_status(status: int, family: str, mnk: tuple[int, int, int]) -> None:
    if status == 0:
        return
    if status >= 1000:
        raise LaunchError(f"{family}: CUDA error {status - 1000} launching (m, n, k) = {mnk}")
    raise LaunchError(f"{family}: CUTLASS refused (m, n, k) = {mnk}: {_CUTLASS_STATUS.get(status, status)}")
