// cutlass_nm: FP8 (e4m3) 2:4 SpMM on Hopper Sparse Tensor Cores, scales fused in the epilogue, C ABI launcher.
// Generated from cutlass_nm/families/sptc24_fp8_sm90/kernel.cu; the kernel type comes from cutlass_library's emitter.
// D(M x N, col-major) = sw[M] * sx[N] * (A(M x K, 2:4, e4m3) * B(K x N, e4m3)) [+ bias[M]], i.e.
// y(m x n_out) = (x * W^T) scaled per token of x and per output channel of W; either scale may be one scalar.
#include <cstdint>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/util/packed_stride.hpp"

${sm90_plan}${quantize_rows}

namespace cnm_fp8 {
using namespace cutlass::epilogue::fusion;
using TileShape = ${tile_shape};
using ElementD = ${element_d};
using ElementBias = ${element_bias};
constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;
// x's scale per column of D (a token) or one scalar; W's per row of D (an output channel) or one scalar
using ScaleX = Sm90RowBroadcast<0, TileShape, float, float, cute::Stride<cute::_0, bool, int64_t>>;
using ScaleW = Sm90ColBroadcast<0, TileShape, float, float, cute::Stride<bool, cute::_0, int64_t>>;
using Bias = Sm90ColBroadcast<0, TileShape, ElementBias, float, cute::Stride<cute::_1, cute::_0, int64_t>>;
using AccX = Sm90EVT<Sm90Compute<cutlass::multiplies, float, float, kRound>, ScaleX, Sm90AccFetch>;
using NoBias = Sm90EVT<Sm90Compute<cutlass::multiplies, ElementD, float, kRound>, ScaleW, AccX>;
using WithBias = Sm90EVT<Sm90Compute<cutlass::multiply_add, ElementD, float, kRound>, ScaleW, AccX, Bias>;
constexpr bool kHasBias = ${has_bias};
using Fusion = cute::conditional_t<kHasBias, WithBias, NoBias>;
}  // namespace cnm_fp8

${operation}

namespace {
using Emitted = ${name};
using Kernel = cutlass::gemm::kernel::GemmUniversal<typename Emitted::ProblemShape, typename Emitted::CollectiveMainloop,
                                                    typename Emitted::CollectiveEpilogue,
                                                    typename Emitted::TileSchedulerTag>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
using Mainloop = typename Kernel::CollectiveMainloop;
using SparseConfig = typename Mainloop::SparseConfig;
using ElementA = typename Mainloop::ElementA;
using ElementB = typename Mainloop::ElementB;
using ElementE = typename Mainloop::ElementE;

template <class Args>
void set_scales(Args& args, const float* sw, bool sw_vector, const float* sx, bool sx_vector, const void* bias) {
  auto& fused = args.epilogue.thread;  // {ScaleW, AccX = {ScaleX, acc, op}, [Bias,] op}
  fused.op_0 = {sw, 0.f, {sw_vector, cute::_0{}, int64_t(0)}};
  fused.op_1.op_0 = {sx, 0.f, {cute::_0{}, sx_vector, int64_t(0)}};
  if constexpr (cnm_fp8::kHasBias) {
    fused.op_2 = {static_cast<cnm_fp8::ElementBias const*>(bias)};
  }
}

typename Gemm::Arguments make_args(const void* a, const void* e, const void* b, void* d, const float* sw,
                                   int sw_vector, const float* sx, int sx_vector, const void* bias, int M, int N,
                                   int K, int sm_count, int swizzle, int raster) {
  auto problem = cute::make_shape(M, N, K, 1);
  auto stride_b = cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, cute::make_shape(N, K, 1));
  auto stride_d = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, cute::make_shape(M, N, 1));
  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      problem,
      {static_cast<ElementA const*>(a), SparseConfig::fill_layoutA(problem), static_cast<ElementB const*>(b), stride_b,
       static_cast<ElementE const*>(e), SparseConfig::fill_layoutE(problem)},
      {{}, nullptr, stride_d, static_cast<typename Kernel::CollectiveEpilogue::ElementD*>(d), stride_d}};
  set_scales(args, sw, sw_vector != 0, sx, sx_vector != 0, bias);
  args.hw_info.sm_count = sm_count;
  args.scheduler.max_swizzle_size = swizzle;
  using Raster = decltype(args.scheduler.raster_order);
  args.scheduler.raster_order = raster == 1 ? Raster::AlongM : raster == 2 ? Raster::AlongN : Raster::Heuristic;
  return args;
}

// A prepared call for one (weight, bias, M, N, K, scheduler) with a 16-bit x, no workspace: the kernel's Params,
// built once on the plan's own e4m3 x (q) and per-token scales, which each call first fills from x by quantize_rows;
// a call patches D's TMA descriptor when y's address changed. The caller keeps q and scale for one stream.
struct Plan {
  typename Kernel::Params params;
  void* d;
  void* q;
  float* scale;
  int tokens;
  int k;
  int x_bf16;
};
}  // namespace

extern "C" {

// x (m x k, bf16 when x_bf16 else fp16) -> q (m x k, e4m3) and scale (m floats). 0 on success, else 1000 + cudaError_t.
int cnm_quantize_rows(const void* x, void* q, float* scale, int m, int k, int x_bf16, cudaStream_t stream) {
  return cnm::quantize_rows(x, q, scale, m, k, x_bf16, stream);
}

int cnm_abi_version() { return 3; }

int cnm_meta_atom_k() { return int(cute::size<1>(typename SparseConfig::TensorEAtom{})); }

// 0 on success; otherwise a cutlass::Status (< 1000) or 1000 + cudaError_t. sw: n_out floats (sw_vector) or one;
// sx: m floats (sx_vector) or one.
int cnm_run(const void* a, const void* e, const void* b, void* d, const float* sw, int sw_vector, const float* sx,
            int sx_vector, const void* bias, int M, int N, int K, int sm_count, int swizzle, int raster,
            void* workspace, cudaStream_t stream) {
  auto args = make_args(a, e, b, d, sw, sw_vector, sx, sx_vector, bias, M, N, K, sm_count, swizzle, raster);
  Gemm gemm;
  cutlass::Status st = gemm.can_implement(args);
  if (st != cutlass::Status::kSuccess) return int(st);
  st = gemm.initialize(args, workspace, stream);
  if (st != cutlass::Status::kSuccess) return int(st);
  st = gemm.run(stream);
  if (st != cutlass::Status::kSuccess) return int(st);
  cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : 1000 + int(err);
}

// Bytes of a caller-owned buffer that holds one Plan (any alignment).
size_t cnm_plan_bytes() { return sizeof(Plan) + alignof(Plan); }

// Fills the plan in buf: W (a, e, sw) against x quantized per token into q (N x K e4m3) and scale (N floats), both
// caller-owned, writing d. 0 on success; otherwise a cutlass::Status (< 1000) or 1000 + cudaError_t.
int cnm_plan(void* buf, const void* a, const void* e, void* q, void* d, const float* sw, int sw_vector, float* scale,
             const void* bias, int M, int N, int K, int sm_count, int swizzle, int raster, int x_bf16) {
  if (cnm::replace_address_fn() == nullptr) return int(cutlass::Status::kErrorNotSupported);
  auto args = make_args(a, e, q, d, sw, sw_vector, scale, 1, bias, M, N, K, sm_count, swizzle, raster);
  if (Gemm::get_workspace_size(args) != 0) return int(cutlass::Status::kErrorWorkspaceNull);
  cutlass::Status st = Gemm::can_implement(args);
  if (st != cutlass::Status::kSuccess) return int(st);
  if (int err = cnm::set_attributes<Kernel>()) return err;
  Plan* plan = cnm::aligned_plan<Plan>(buf);
  plan->params = Kernel::to_underlying_arguments(args, nullptr);
  if (!cnm::grid_fits_clusters<Kernel, Gemm>(plan->params)) return int(cutlass::Status::kErrorInvalidProblem);
  plan->d = d;
  plan->q = q;
  plan->scale = scale;
  plan->tokens = N;
  plan->k = K;
  plan->x_bf16 = x_bf16;
  return 0;
}

// One call of a plan: x (16-bit, N x K) quantized into the plan's q and scale, then the GEMM into d.
int cnm_launch(void* buf, const void* x, void* d, cudaStream_t stream) {
  Plan* plan = cnm::aligned_plan<Plan>(buf);
  if (int err = cnm::quantize_rows(x, plan->q, plan->scale, plan->tokens, plan->k, plan->x_bf16, stream)) return err;
  if (d != plan->d) {
    if (!cnm::replace_address(plan->params.epilogue.tma_store_d.get_tma_descriptor(), d)) return 1000 + 1;
    plan->d = d;
  }
  return cnm::launch_plan<Kernel, Gemm>(plan->params, stream);
}

}  // extern "C"
