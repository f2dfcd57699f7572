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

