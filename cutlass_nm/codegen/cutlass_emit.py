"""Build ``cutlass_library`` operation descriptions and emit their C++ through CUTLASS's emitters."""

from __future__ import annotations

from dataclasses import dataclass
from string import Template

from cutlass_library import library as L
from cutlass_library.gemm_operation import EmitGemmUniversal3xInstance, EmitSparseGemmInstance, GemmOperation

DTYPES = {"f16": L.DataType.f16, "bf16": L.DataType.bf16, "f32": L.DataType.f32, "e4m3": L.DataType.e4m3}
CPP_TYPES = {"f16": "cutlass::half_t", "bf16": "cutlass::bfloat16_t", "f32": "float", "e4m3": "cutlass::float_e4m3_t"}
SM90_SCHEDULES = {
    "cooperative": (L.KernelScheduleType.TmaWarpSpecializedCooperative,
                    L.EpilogueScheduleType.TmaWarpSpecializedCooperative),
    "pingpong": (L.KernelScheduleType.TmaWarpSpecializedPingpong, L.EpilogueScheduleType.TmaWarpSpecialized),
}
# FP8 without CUTLASS's promotion of the tensor cores' partial sums into separate fp32 registers every k-block
SM90_FP8_FAST_SCHEDULES = {
    "cooperative": (L.KernelScheduleType.TmaWarpSpecializedCooperativeFP8FastAccum,
                    L.EpilogueScheduleType.TmaWarpSpecializedCooperative),
    "pingpong": (L.KernelScheduleType.TmaWarpSpecializedPingpongFP8FastAccum,
                 L.EpilogueScheduleType.TmaWarpSpecialized),
}


@dataclass(frozen=True)
class _PerRowBias:
    """Epilogue D = acc + bias[row] (bias per output feature), for the 3.x emitter."""

    out: str
    bias: str

    def emit_declaration(self) -> str:
        return (f"cutlass::epilogue::fusion::LinCombPerRowBias<{CPP_TYPES[self.out]}, float, "
                f"{CPP_TYPES[self.bias]}, void, float>")


def _alignment(dtype: str) -> int:
    return 128 // L.DataTypeSize[DTYPES[dtype]]


@dataclass(frozen=True)
class _ScaledFp8:
    """Epilogue D = sw[row] * sx[col] * acc (+ bias[row]): the EVT ``cnm_fp8::Fusion`` the FP8 template defines."""

    def emit_declaration(self) -> str:
        return "cnm_fp8::Fusion"


def sm90_sparse_fp8_operation(*, tile: tuple[int, int, int], cluster: tuple[int, int], schedule: str,
                              out_dtype: str, streamk: bool = False, fast_accum: bool = False) -> GemmOperation:
    """A wgmma.sp e4m3 GEMM D(MxN, col-major) = A(MxK, row-major, 2:4) · B(KxN, col-major), fp32 accumulation,
    scales (and the optional bias) in the epilogue. ``fast_accum``: the tensor cores accumulate every k-block in
    place (CUTLASS's FP8FastAccum schedules) instead of promoting partial sums into separate fp32 registers."""
    kernel_schedule, epilogue_schedule = (SM90_FP8_FAST_SCHEDULES if fast_accum else SM90_SCHEDULES)[schedule]
    math = L.MathInstruction([64, tile[1], 64], L.DataType.e4m3, L.DataType.e4m3, L.DataType.f32,
                             L.OpcodeClass.SparseTensorOp, L.MathOperation.multiply_add)
    warps = [4, 1, 1] if schedule == "pingpong" else [tile[0] // 64, 1, 1]
    td = L.TileDescription(list(tile), 0, warps, math, 90, 90, [cluster[0], cluster[1], 1])
    a = L.TensorDescription(L.DataType.e4m3, L.LayoutType.RowMajor, 2 * _alignment("e4m3"))
    b = L.TensorDescription(L.DataType.e4m3, L.LayoutType.ColumnMajor, _alignment("e4m3"))
    c = L.TensorDescription(L.DataType.void, L.LayoutType.ColumnMajor, _alignment(out_dtype))
    d = L.TensorDescription(DTYPES[out_dtype], L.LayoutType.ColumnMajor, _alignment(out_dtype))
    return GemmOperation(L.GemmKind.SparseUniversal3x, 90, td, a, b, c, L.DataType.f32, _ScaledFp8(),
                         L.SwizzlingFunctor.Identity1, d, kernel_schedule, epilogue_schedule,
                         L.TileSchedulerType.StreamK if streamk else L.TileSchedulerType.Default)


def sm90_sparse_operation(*, tile: tuple[int, int, int], cluster: tuple[int, int], schedule: str,
                          stages: int, dtype: str, out_dtype: str, bias: bool, streamk: bool = False) -> GemmOperation:
    """A wgmma.sp GEMM D(MxN, col-major) = A(MxK, row-major, 2:4) · B(KxN, col-major)."""
    kernel_schedule, epilogue_schedule = SM90_SCHEDULES[schedule]
    math = L.MathInstruction([64, tile[1], 32], DTYPES[dtype], DTYPES[dtype], L.DataType.f32,
                             L.OpcodeClass.SparseTensorOp, L.MathOperation.multiply_add)
    warps = [4, 1, 1] if schedule == "pingpong" else [tile[0] // 64, 1, 1]
    td = L.TileDescription(list(tile), stages, warps, math, 90, 90, [cluster[0], cluster[1], 1])
    a = L.TensorDescription(DTYPES[dtype], L.LayoutType.RowMajor, 2 * _alignment(dtype))
    b = L.TensorDescription(DTYPES[dtype], L.LayoutType.ColumnMajor, _alignment(dtype))
    c = L.TensorDescription(L.DataType.void, L.LayoutType.ColumnMajor, _alignment(out_dtype))
    d = L.TensorDescription(DTYPES[out_dtype], L.LayoutType.ColumnMajor, _alignment(out_dtype))
    epilogue = _PerRowBias(out_dtype, dtype) if bias else L.EpilogueFunctor.LinearCombination
    return GemmOperation(L.GemmKind.SparseUniversal3x, 90, td, a, b, c, L.DataType.f32, epilogue,
                         L.SwizzlingFunctor.Identity1, d, kernel_schedule, epilogue_schedule,
                         L.TileSchedulerType.StreamK if streamk else L.TileSchedulerType.Default)


def emit_sm90(op: GemmOperation, launcher: Template, **subs: object) -> str:
    """Full translation unit for an sm90 sparse operation inside our C ABI ``launcher`` template."""
    emitter = EmitGemmUniversal3xInstance()
    # cutlass_library 4.2 reads a custom epilogue from the emitter, not the operation.
    emitter.epilogue_functor = op.epilogue_functor
    body = emitter.emit(op)
    return launcher.substitute(operation=body, name=op.procedural_name(), **subs)


def sm80_sparse_operation(*, tile: tuple[int, int, int], warp: tuple[int, int, int], stages: int,
                          dtype: str, out_dtype: str, swizzle: int) -> GemmOperation:
    """An mma.sp GEMM D(MxN, row-major) = A(MxK, row-major, 2:4) · B(KxN, col-major)."""
    math = L.MathInstruction([16, 8, 32], DTYPES[dtype], DTYPES[dtype], L.DataType.f32,
                             L.OpcodeClass.TensorOp, L.MathOperation.multiply_add)
    warps = [tile[i] // warp[i] for i in range(3)]
    td = L.TileDescription(list(tile), stages, warps, math, 80, 1024)
    a = L.TensorDescription(DTYPES[dtype], L.LayoutType.RowMajor, _alignment(dtype))
    b = L.TensorDescription(DTYPES[dtype], L.LayoutType.ColumnMajor, _alignment(dtype))
    c = L.TensorDescription(DTYPES[out_dtype], L.LayoutType.RowMajor, min(8, _alignment(out_dtype)))
    swz = {1: L.SwizzlingFunctor.Identity1, 2: L.SwizzlingFunctor.Identity2,
           4: L.SwizzlingFunctor.Identity4, 8: L.SwizzlingFunctor.Identity8}[swizzle]
    return GemmOperation(L.GemmKind.Sparse, 80, td, a, b, c, L.DataType.f32,
                         L.EpilogueFunctor.LinearCombination, swz)


def emit_sm80(op: GemmOperation, launcher: Template, **subs: object) -> str:
    """Full translation unit for an sm80 sparse operation inside our C ABI ``launcher`` template."""
    body = EmitSparseGemmInstance().emit(op)
    return launcher.substitute(operation=body, name=op.procedural_name(), **subs)
