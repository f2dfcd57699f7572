// cutlass_nm: 2:4 SpMM on Hopper Sparse Tensor Cores (wgmma.sp), C ABI launcher.
// Generated from cutlass_nm/families/sptc24_sm90/kernel.cu; the kernel type comes from
// cutlass_library's emitter. Computes D(M x N, col-major) = A(M x K, 2:4, compressed) * B(K x N, col-major)
// [+ bias per row], i.e. y(m x n_out) = x(m x k) * W^T with M = n_out, N = m.
#include <cstdint>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/util/packed_stride.hpp"

// One metadata layout for every config of a weight: a tile K >= 128 kernel reads the tile K 64 atom (two atoms a
// k-tile), which CUTLASS would otherwise make 128 columns wide, so that tile K 64 and 128 kernels share one copy.
namespace cutlass {
template <class ElementAMma_, class ElementEMma_>
struct Sm90GemmSparseConfig<ElementAMma_, cute::GMMA::Major::K, ElementEMma_, cute::Int<128>>
    : Sm90GemmSparseConfig<ElementAMma_, cute::GMMA::Major::K, ElementEMma_, cute::Int<64>> {};
}  // namespace cutlass

${sm90_plan}${sparse_mainloop}${operation}

namespace {
// mma_pipe = 0: CUTLASS's emitted kernel as is; 1: the same kernel with cnm::PipelinedSparseMma as its mainloop.
using Emitted = ${name};
// The family plans shared memory with its own count of CUTLASS's automatic stages (pipeline_stages in family.py).
static_assert(Emitted::CollectiveMainloop::DispatchPolicy::Stages == ${stages_expected},
              "family.py's pipeline_stages differs from the collective's stage count");
using Mainloop_ = cute::conditional_t<${mma_pipe} == 1, cnm::PipelinedSparseMma<typename Emitted::CollectiveMainloop>,
                                      typename Emitted::CollectiveMainloop>;
using Kernel = cutlass::gemm::kernel::GemmUniversal<typename Emitted::ProblemShape, Mainloop_,
                                                    typename Emitted::CollectiveEpilogue,
                                                    typename Emitted::TileSchedulerTag>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
using Mainloop = typename Kernel::CollectiveMainloop;
using SparseConfig = typename Mainloop::SparseConfig;
using ElementA = typename Mainloop::ElementA;
using ElementB = typename Mainloop::ElementB;
using ElementE = typename Mainloop::ElementE;
using ElementD = typename Kernel::CollectiveEpilogue::ElementD;
constexpr bool kHasBias = ${has_bias};

// A template, so that the branch not taken is never instantiated.
template <class Args>
void set_bias(Args& args, const void* bias) {
  if constexpr (kHasBias) {
    args.epilogue.thread.bias_ptr = static_cast<decltype(args.epilogue.thread.bias_ptr)>(bias);
  }
}

// The metadata's layout with `e_pitch` bytes from one 64-column slab to the next (0: CUTLASS's own, M rounded up to
// 64 rows x 8 bytes): a stacked weight's rows run on its one metadata copy, a column slice of the stack's.
auto layout_e_with_pitch(cute::Shape<int, int, int, int> problem, int64_t e_pitch) {
  auto layout = SparseConfig::fill_layoutE(problem);
  if (e_pitch == 0) return layout;
  auto s = layout.stride();
  auto pitched = cute::make_layout(
      layout.shape(), cute::make_stride(cute::get<0>(s), cute::make_stride(cute::get<1, 0>(s), e_pitch * 8),
                                        cute::get<2>(s)));
  static_assert(std::is_same_v<decltype(pitched), decltype(layout)>, "the pitched layout has CUTLASS's type");
  return pitched;
}

// The arguments of one problem (e_pitch: see layout_e_with_pitch).
typename Gemm::Arguments make_args(const void* a, const void* e, const void* b, void* d, const void* bias,
                                   int M, int N, int K, int sm_count, int swizzle, int raster, int64_t e_pitch = 0) {
  auto problem = cute::make_shape(M, N, K, 1);
  auto layout_a = SparseConfig::fill_layoutA(problem);
  auto layout_e = layout_e_with_pitch(problem, e_pitch);
  auto stride_b = cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, cute::make_shape(N, K, 1));
  auto stride_d = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, cute::make_shape(M, N, 1));
  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      problem,
      {static_cast<ElementA const*>(a), layout_a, static_cast<ElementB const*>(b), stride_b,
       static_cast<ElementE const*>(e), layout_e},
      {{}, nullptr, stride_d, static_cast<ElementD*>(d), stride_d}};
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  set_bias(args, bias);
  args.hw_info.sm_count = sm_count;
  args.scheduler.max_swizzle_size = swizzle;
  using Raster = decltype(args.scheduler.raster_order);
  args.scheduler.raster_order = raster == 1 ? Raster::AlongM : raster == 2 ? Raster::AlongN : Raster::Heuristic;
  return args;
}

// A prepared launch for one (weight, bias, M, N, K, scheduler) with no workspace: the kernel's Params, built once.
// Each call patches the addresses of B (x) and D (y) into their TMA descriptors when they changed, then launches
// (launch_plan): no descriptor encoding, no can_implement, no function attribute calls on the steady-state path.
struct Plan {
  typename Kernel::Params params;
  const void* b;
  void* d;
};

}  // namespace

extern "C" {

int cnm_abi_version() { return 4; }

// Logical K columns of one metadata atom: the weight's sm90 layout must have been built for this.
int cnm_meta_atom_k() { return int(cute::size<1>(typename SparseConfig::TensorEAtom{})); }

// Stream-K needs a workspace that depends on the problem and on the scheduler arguments.
size_t cnm_workspace_size(int M, int N, int K, int sm_count, int swizzle, int raster) {
  return Gemm::get_workspace_size(
      make_args(nullptr, nullptr, nullptr, nullptr, nullptr, M, N, K, sm_count, swizzle, raster));
}

// 0 on success; otherwise a cutlass::Status (< 1000) or 1000 + cudaError_t.
// e_pitch: bytes from one 64-column metadata slab to the next (0: the weight's own, 8 x M rounded up to 64).
int cnm_run(const void* a, const void* e, const void* b, void* d, const void* bias, int M, int N, int K,
            int sm_count, int swizzle, int raster, void* workspace, int64_t e_pitch, cudaStream_t stream) {
  // CUTLASS's can_implement compares the metadata layout with its own: it checks the unpitched arguments
  cutlass::Status st = Gemm::can_implement(make_args(a, e, b, d, bias, M, N, K, sm_count, swizzle, raster));
  if (st != cutlass::Status::kSuccess) return int(st);
  auto args = make_args(a, e, b, d, bias, M, N, K, sm_count, swizzle, raster, e_pitch);
  Gemm gemm;
  st = gemm.initialize(args, workspace, stream);
  if (st != cutlass::Status::kSuccess) return int(st);
  st = gemm.run(stream);
  if (st != cutlass::Status::kSuccess) return int(st);
  cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : 1000 + int(err);
}

// Bytes of a caller-owned buffer that holds one Plan (any alignment).
size_t cnm_plan_bytes() { return sizeof(Plan) + alignof(Plan); }

// Fills the plan in buf for these operands (the problem needs no workspace: cnm_workspace_size is 0).
// 0 on success; otherwise a cutlass::Status (< 1000) or 1000 + cudaError_t.
int cnm_plan(void* buf, const void* a, const void* e, const void* b, void* d, const void* bias, int M, int N, int K,
             int sm_count, int swizzle, int raster, int64_t e_pitch) {
  if (cnm::replace_address_fn() == nullptr) return int(cutlass::Status::kErrorNotSupported);
  cutlass::Status st = Gemm::can_implement(make_args(a, e, b, d, bias, M, N, K, sm_count, swizzle, raster));
  if (st != cutlass::Status::kSuccess) return int(st);  // as in cnm_run: checked unpitched
  auto args = make_args(a, e, b, d, bias, M, N, K, sm_count, swizzle, raster, e_pitch);
  if (Gemm::get_workspace_size(args) != 0) return int(cutlass::Status::kErrorWorkspaceNull);
  if (int err = cnm::set_attributes<Kernel>()) return err;  // function attributes of the current device: set per plan
  Plan* plan = cnm::aligned_plan<Plan>(buf);
  plan->params = Kernel::to_underlying_arguments(args, nullptr);
  if (!cnm::grid_fits_clusters<Kernel, Gemm>(plan->params))
    return int(cutlass::Status::kErrorInvalidProblem);  // what the cluster launcher checks on each launch
  plan->b = b;
  plan->d = d;
  return 0;
}

// Launches a plan on x (b) and y (d), patching their descriptors first when their addresses changed.
int cnm_launch(void* buf, const void* b, void* d, cudaStream_t stream) {
  Plan* plan = cnm::aligned_plan<Plan>(buf);
  if (b != plan->b) {
    if (!cnm::replace_address(plan->params.mainloop.tma_load_b.get_tma_descriptor(), b)) return 1000 + 1;
    plan->b = b;
  }
  if (d != plan->d) {
    if (!cnm::replace_address(plan->params.epilogue.tma_store_d.get_tma_descriptor(), d)) return 1000 + 1;
    plan->d = d;
  }
  return cnm::launch_plan<Kernel, Gemm>(plan->params, stream);
}

}  // extern "C"
