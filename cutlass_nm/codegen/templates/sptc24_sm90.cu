// cutlass_nm: 2:4 SpMM on Hopper Sparse Tensor Cores (wgmma.sp), C ABI launcher.
// Generated from cutlass_nm/codegen/templates/sptc24_sm90.cu; the kernel type comes from
// cutlass_library's emitter. Computes D(M x N, col-major) = A(M x K, 2:4, compressed) * B(K x N, col-major)
// [+ bias per row], i.e. y(m x n_out) = x(m x k) * W^T with M = n_out, N = m.
#include <cstdint>
#include <cuda_runtime.h>

#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/util/packed_stride.hpp"

// CUTLASS 4.2's sparse mainloop (MainloopSm90TmaGmmaWarpSpecializedSparse) keeps no wgmma.sp batch in flight
// across k-tiles (K_PIPE_MMAS = 0): it issues a k-tile's batch, waits for it to finish, then loads the next k-tile's
// metadata into the same registers, so the tensor pipe drains once per k-tile. cnm::PipelinedSparseMma reuses that
// collective whole (types, TMA descriptors, shared storage, producer) and replaces the consumer side only: metadata
// in two register buffers used on alternate k-tiles, warpgroup_wait<1> so that k-tile t + 1's batch is issued
// while k-tile t's runs, and each stage released once the batch that read it has completed.
namespace cnm {
using namespace cute;

// (M, K) -> ((ThrV, (ThrM, ThrK)), (FrgV, (RestM, RestK))): CuTe's A-operand tiling of a TiledMMA
// (TiledMMA::thrfrg_A), applied with the atom's metadata layout (Traits::ELayout) in place of its A layout.
template <class Mma, class LayoutMK>
CUTE_HOST_DEVICE constexpr auto meta_tiles(Mma const& mma, LayoutMK const& mk) {
  using AtomMNK = typename Mma::AtomShape_MNK;
  auto permuted = logical_divide(mk, make_tile(mma.template permutation_mnk<0>(), mma.template permutation_mnk<2>()));
  auto atoms = zipped_divide(permuted, make_tile(make_layout(size<0>(AtomMNK{})), make_layout(size<2>(AtomMNK{}))));
  auto thr_vals = atoms.compose(typename Mma::Atom::Traits::ELayout{}, _);
  auto const& vmnk = mma.thr_layout_vmnk_;
  return zipped_divide(thr_vals, make_tile(_, make_tile(make_layout(size<1>(vmnk)), make_layout(size<3>(vmnk)))));
}

// (thread index, value) -> (M, K) over the TiledMMA's (M, K) tile: the layout a tiled smem -> register copy of the
// metadata needs (threads along N, of which a sparse TiledMMA has one, read the same values).
template <class Mma>
CUTE_HOST_DEVICE constexpr auto meta_layout_tv(Mma const& mma) {
  auto const& vmnk = mma.thr_layout_vmnk_;
  auto to_vmnk = make_tile(_, make_tile(make_layout(make_shape(size<1>(vmnk), size<2>(vmnk)),
                                                    make_stride(Int<1>{}, Int<0>{})), _));
  auto ref = make_layout(make_shape(tile_size<0>(mma), tile_size<2>(mma)));
  return meta_tiles(mma, ref).compose(to_vmnk, _).compose(right_inverse(vmnk), _);
}

// One thread's metadata values of an (M, K, ...) tensor: (MMA, MMA_M, MMA_K, ...), as ThrMMA::partition_A.
template <class ThrMma, class Tensor_>
CUTE_HOST_DEVICE constexpr auto meta_partition(ThrMma const& thr, Tensor_&& e) {
  auto tiles = make_tensor(static_cast<Tensor_&&>(e).data(), meta_tiles(thr, e.layout()));
  auto vmk = make_coord(get<0>(thr.thr_vmnk_), make_coord(get<1>(thr.thr_vmnk_), get<3>(thr.thr_vmnk_)));
  return tiles(vmk, make_coord(_, repeat<rank<1, 1>(tiles)>(_)));
}

template <class Base>
struct PipelinedSparseMma : Base {
  using typename Base::ElementEMma;
  using typename Base::MainloopPipeline;
  using typename Base::Params;
  using typename Base::PipelineState;
  using typename Base::SmemLayoutA;
  using typename Base::SmemLayoutB;
  using typename Base::SmemLayoutE;
  using typename Base::TensorStorage;
  using typename Base::TiledMma;

  template <class Accum>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState read, Accum& accum, int k_tiles, int thread_idx,
                          TensorStorage& smem, Params const&) {
    Tensor sA = make_tensor(make_smem_ptr(smem.smem_A.begin()), SmemLayoutA{});  // (BLK_M, BLK_K, PIPE)
    Tensor sB = make_tensor(make_smem_ptr(smem.smem_B.begin()), SmemLayoutB{});  // (BLK_N, BLK_K, PIPE)
    Tensor sE = as_position_independent_swizzle_tensor(make_tensor(make_smem_ptr(smem.smem_E.begin()), SmemLayoutE{}));
    constexpr int kWarpGroups = size(TiledMma{}) / cutlass::NumThreadsPerWarpGroup;
    const int wg = __shfl_sync(0xffffffff, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);
    TiledMma tiled_mma;
    auto thr = tiled_mma.get_thread_slice(make_layout(Int<kWarpGroups>{}, Int<cutlass::NumThreadsPerWarpGroup>{})(wg));
    Tensor tCrA = thr.make_fragment_A(thr.partition_A(sA));  // descriptors (MMA, MMA_M, MMA_K, PIPE)
    Tensor tCrB = thr.make_fragment_B(thr.partition_B(sB));
    Tensor tCrE0 = make_fragment_like<ElementEMma>(meta_partition(thr, sE(_, _, Int<0>{})));  // (MMA, MMA_M, MMA_K)
    Tensor tCrE1 = make_fragment_like<ElementEMma>(tCrE0);
    auto copy_e = make_tiled_copy_impl(Copy_Atom<AutoVectorizingCopy, uint32_t>{}, meta_layout_tv(tiled_mma),
                                       make_shape(tile_size<0>(tiled_mma), tile_size<2>(tiled_mma)));
    auto thr_copy_e = copy_e.get_thread_slice(thread_idx);
    Tensor tEsE = thr_copy_e.partition_S(sE);  // (ECPY, ECPY_M, ECPY_K, PIPE)
    Tensor tErE0 = thr_copy_e.retile_D(tCrE0);
    Tensor tErE1 = thr_copy_e.retile_D(tCrE1);

    // Wait for the stage, load its metadata into `e`, issue its batch (the first MMA of the tile overwrites accum).
    tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
    auto issue = [&](auto& e) {
      pipeline.consumer_wait(read, pipeline.consumer_try_wait(read));
      const int stage = read.index();
      copy(copy_e, tEsE(_, _, _, stage), e);
      warpgroup_fence_operand(accum);
      warpgroup_arrive();
      CUTLASS_PRAGMA_UNROLL
      for (int kb = 0; kb < size<2>(tCrA); ++kb) {
        cute::gemm(tiled_mma, make_zip_tensor(tCrA(_, _, kb, stage), e(_, _, kb)), tCrB(_, _, kb, stage), accum);
        tiled_mma.accumulate_ = GMMA::ScaleOut::One;
      }
      warpgroup_commit_batch();
      ++read;
    };
    // After k-tile t's batch is issued: wait until only it is in flight, then free k-tile t - 1's stage.
    PipelineState release = read;
    auto retire_previous = [&]() {
      warpgroup_wait<1>();
      warpgroup_fence_operand(accum);
      pipeline.consumer_release(release);
      ++release;
    };
    if (k_tiles > 0) issue(tErE0);
    int t = 1;
    CUTLASS_PRAGMA_NO_UNROLL
    for (; t + 1 < k_tiles; t += 2) {  // two k-tiles per trip: register buffers are named, never indexed
      issue(tErE1);
      retire_previous();
      issue(tErE0);
      retire_previous();
    }
    if (t < k_tiles) {
      issue(tErE1);
      retire_previous();
    }
    warpgroup_fence_operand(accum);
  }

  // The last k-tile's batch is still in flight: wait for it and free its stage.
  CUTLASS_DEVICE void mma_tail(MainloopPipeline pipeline, PipelineState release, int k_tiles) {
    warpgroup_wait<0>();
    if (k_tiles > 0) {
      release.advance(k_tiles - 1);
      pipeline.consumer_release(release);
    }
  }
};
}  // namespace cnm

${operation}

namespace {
// mma_pipe = 0: CUTLASS's emitted kernel as is; 1: the same kernel with cnm::PipelinedSparseMma as its mainloop.
using Emitted = ${name};
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

typename Gemm::Arguments make_args(const void* a, const void* e, const void* b, void* d, const void* bias,
                                   int M, int N, int K, int sm_count, int swizzle, int raster) {
  auto problem = cute::make_shape(M, N, K, 1);
  auto layout_a = SparseConfig::fill_layoutA(problem);
  auto layout_e = SparseConfig::fill_layoutE(problem);
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
}  // namespace

extern "C" {

int cnm_abi_version() { return 2; }

// Logical K columns of one metadata atom: the weight's sm90 layout must have been built for this.
int cnm_meta_atom_k() { return int(cute::size<1>(typename SparseConfig::TensorEAtom{})); }

// Stream-K needs a workspace that depends on the problem and on the scheduler arguments.
size_t cnm_workspace_size(int M, int N, int K, int sm_count, int swizzle, int raster) {
  return Gemm::get_workspace_size(
      make_args(nullptr, nullptr, nullptr, nullptr, nullptr, M, N, K, sm_count, swizzle, raster));
}

// 0 on success; otherwise a cutlass::Status (< 1000) or 1000 + cudaError_t.
int cnm_run(const void* a, const void* e, const void* b, void* d, const void* bias, int M, int N, int K,
            int sm_count, int swizzle, int raster, void* workspace, cudaStream_t stream) {
  auto args = make_args(a, e, b, d, bias, M, N, K, sm_count, swizzle, raster);
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

}  // extern "C"
