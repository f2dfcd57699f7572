// What the gathered-B V:N:M kernels (vnm_sm90, vnm_fp8_sm90) share around their producers and consumers: the CTA
// order, the mainloop pipeline, the launch (clusters of kClusterN CTAs along the tokens), the raster group's size
// and the per-(weight, m) launch plan. Each kernel's Params has int members m_tiles, n_tiles and raster_group.
// Warpgroup 0 produces; the other kConsumers warpgroups consume.
namespace cnm {

// This CTA's (weight tile, token tile). kRaster 0: blockIdx.x walks the weight tiles, blockIdx.y the token tiles.
// kRaster 1: a 1-D order (blockIdx.x, or with clusters blockIdx.z * kClusterN + blockIdx.y: the cluster along y,
// as the kernels' ClusterShape says) over token tiles in groups of raster_group, each weight tile with all of its
// group's token tiles in a row; group sizes are multiples of kClusterN, so a cluster shares its weight tile.
template <int kRaster, int kClusterN, class Params>
__device__ __forceinline__ void cta_tile(Params const& p, int& m_tile, int& n_tile) {
  m_tile = blockIdx.x;
  n_tile = blockIdx.y;
  if constexpr (kRaster == 1) {
    const int linear = kClusterN == 1 ? int(blockIdx.x) : int(blockIdx.z * kClusterN + blockIdx.y);
    const int span = p.m_tiles * p.raster_group;  // CTAs of a full group
    const int group = linear / span, first = group * p.raster_group;
    const int size = min(p.raster_group, p.n_tiles - first), r = linear - group * span;
    m_tile = r / size;
    n_tile = first + r % size;
  }
}

// The CTA's mainloop pipeline (wg: this thread's warpgroup): one TMA thread (A and E, arrive.expect_tx) plus one
// arrival per producer thread fill a stage. With clusters, every CTA's barriers are initialised before a peer
// signals them.
template <class Mainloop, int kConsumers, int kClusterN, class ClusterShape, class Storage>
__device__ __forceinline__ typename Mainloop::MainloopPipeline gathered_pipeline(Storage& storage, int wg) {
  using Pipeline = typename Mainloop::MainloopPipeline;
  typename Pipeline::Params pp;
  pp.transaction_bytes = Mainloop::TmaTransactionBytesMK;
  pp.role = wg == 0 ? Pipeline::ThreadCategory::Producer : Pipeline::ThreadCategory::Consumer;
  pp.is_leader = threadIdx.x == 0;
  pp.num_consumers = 128 * kConsumers;
  pp.num_producers = 129;
  Pipeline pipeline(storage, pp, ClusterShape{});
  if constexpr (kClusterN > 1) {
    cute::cluster_arrive_relaxed();
    cute::cluster_wait();
  } else {
    __syncthreads();
  }
  return pipeline;
}

// Token tiles per raster group: a group's slice of xt (raster_group tiles of tile_bytes a row x padded_k rows)
// within 16 MB, a third of the H100's L2; a multiple of cluster_n.
inline int raster_group(int n_tiles, int cluster_n, size_t tile_bytes, int padded_k) {
  const int fit = max(1, min(n_tiles, int(size_t(16u << 20) / (tile_bytes * size_t(padded_k)))));
  return max(cluster_n, fit / cluster_n * cluster_n);
}

// Launches kernel(p) over p's tiles on stream: kThreads threads and smem bytes of dynamic shared memory a CTA,
// clusters of kClusterN CTAs along y. 0 on success, else 1000 + cudaError_t.
template <int kRaster, int kClusterN, int kThreads, class Params>
int launch_tiles(void (*kernel)(Params), Params const& p, int smem, cudaStream_t stream) {
  static int smem_set = 0;
  if (!smem_set) {
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return 1000 + int(err);
    smem_set = 1;
  }
  const int ctas = p.m_tiles * p.n_tiles;
  dim3 grid = kRaster == 0 ? dim3(p.m_tiles, p.n_tiles) : kClusterN == 1 ? dim3(ctas) : dim3(1, kClusterN, ctas / kClusterN);
  if (grid.y > 65535 || grid.z > 65535) return 1000 + int(cudaErrorInvalidConfiguration);
  cudaError_t err;
  if constexpr (kClusterN == 1) {
    kernel<<<grid, kThreads, smem, stream>>>(p);
    err = cudaGetLastError();
  } else {
    cudaLaunchConfig_t config = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 1;
    attr[0].val.clusterDim.y = kClusterN;
    attr[0].val.clusterDim.z = 1;
    config.gridDim = grid;
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = size_t(smem);
    config.stream = stream;
    config.attrs = attr;
    config.numAttrs = 1;
    err = cudaLaunchKernelEx(&config, kernel, p);
    if (err == cudaSuccess) err = cudaGetLastError();
  }
  return err == cudaSuccess ? 0 : 1000 + int(err);
}

// A launch plan: the parameters (with A's and E's TMA descriptors) built once per (weight, m), and x's k, in a
// caller-owned buffer of plan_bytes (any alignment).
template <class Params>
struct Plan {
  Params p;
  int k;
};

template <class Params>
constexpr size_t plan_bytes() {
  return sizeof(Plan<Params>) + alignof(Plan<Params>);
}

template <class Params>
Plan<Params>* aligned_plan(void* buf) {
  constexpr uintptr_t align = alignof(Plan<Params>);
  return reinterpret_cast<Plan<Params>*>((reinterpret_cast<uintptr_t>(buf) + align - 1) / align * align);
}

}  // namespace cnm
