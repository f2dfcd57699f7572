"""Exception types raised by cutlass_nm. Each message says what was wrong and what to do."""

from __future__ import annotations


class CutlassNMError(Exception):
    """Base class of every error cutlass_nm raises on purpose."""


class PatternError(CutlassNMError, ValueError):
    """A sparsity pattern string or value that cannot exist (e.g. ``"5:4"``)."""


class SparsityError(CutlassNMError, ValueError):
    """A weight that does not satisfy its declared N:M pattern."""


class InputError(CutlassNMError, ValueError):
    """A tensor with the wrong dtype, device, layout or alignment."""


class ShapeError(CutlassNMError, ValueError):
    """A problem shape that no kernel of the chosen family can take."""


class ConfigError(CutlassNMError, ValueError):
    """A kernel config outside its family's space (rejected before code generation)."""


class BuildError(CutlassNMError, RuntimeError):
    """nvcc failed to compile an emitted kernel; the log path is in the message."""


class LaunchError(CutlassNMError, RuntimeError):
    """A compiled kernel refused the problem or failed to launch."""


class StoreError(CutlassNMError, RuntimeError):
    """A tuning database that cannot be used: unreachable, not ours, corrupt, or a records file that is not one."""


class DeviceError(CutlassNMError, RuntimeError):
    """No usable CUDA GPU where the operation needs one (e.g. tuning or timing on a CPU-only machine)."""


class CheckpointError(CutlassNMError, ValueError):
    """A checkpoint that cannot be loaded as what it claims: not safetensors, truncated, foreign, a newer format
    version, tensors that disagree with its metadata, or layers that do not fit the model they are loaded into."""
