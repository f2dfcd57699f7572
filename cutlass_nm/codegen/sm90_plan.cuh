// Launching a CUTLASS 3.x sm90 kernel from a plan (spliced into sptc24_sm90's and sptc24_fp8_sm90's launchers): the
// kernel's Params are built once per problem, a later launch patches the addresses of its TMA descriptors that changed
// and launches with the same grid, block, shared memory and cluster as GemmUniversalAdapter::run, without its
// per-launch function attribute calls. The kernel source includes <cuda.h> and <cudaTypedefs.h> before CUTLASS's
// headers, which include the latter inside a namespace.
#include <cstdint>
#include <cuda_runtime.h>

namespace cnm {

// A plan of type Plan inside a caller-owned buffer of sizeof(Plan) + alignof(Plan) bytes (any alignment).
template <class Plan>
Plan* aligned_plan(void* buf) {
  auto p = reinterpret_cast<std::uintptr_t>(buf);
  return reinterpret_cast<Plan*>((p + alignof(Plan) - 1) / alignof(Plan) * alignof(Plan));
}

template <class Kernel>
constexpr bool one_cta_cluster() {
  using ClusterShape = typename Kernel::DispatchPolicy::ClusterShape;
  return cute::is_static_v<ClusterShape> && cute::size(ClusterShape{}) == 1;
}

// The kernel's function attributes for this device: its shared memory (past the 48 KB default) and, for clusters,
// what CUTLASS's cluster launcher sets before each launch (NonPortableClusterSizeAllowed). 0 or 1000 + cudaError_t.
template <class Kernel>
int set_attributes() {
  const void* kernel = reinterpret_cast<const void*>(cutlass::device_kernel<Kernel>);
  cudaError_t err = cudaSuccess;
  if (Kernel::SharedStorageSize >= (48 << 10))
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Kernel::SharedStorageSize));
  if (err == cudaSuccess && !one_cta_cluster<Kernel>())
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  return err == cudaSuccess ? 0 : 1000 + int(err);
}

// Whether the grid of these Params divides into the kernel's clusters (what the cluster launcher checks each launch).
template <class Kernel, class Gemm>
bool grid_fits_clusters(typename Kernel::Params const& params) {
  using ClusterShape = typename Kernel::DispatchPolicy::ClusterShape;
  const dim3 grid = Gemm::get_grid_shape(params);
  return grid.x % cute::size<0>(ClusterShape{}) == 0 && grid.y % cute::size<1>(ClusterShape{}) == 0;
}

// Gemm::run(params, stream) without its per-launch attribute call (set_attributes, once per plan, sets it): one
// cudaLaunchKernelExC with the cluster's shape. 0, a cutlass::Status (< 1000) or 1000 + cudaError_t.
template <class Kernel, class Gemm>
int launch_plan(typename Kernel::Params& params, cudaStream_t stream) {
  if constexpr (one_cta_cluster<Kernel>()) {
    cutlass::Status st = Gemm::run(params, stream);  // cutlass::kernel_launch: no attribute calls
    if (st != cutlass::Status::kSuccess) return int(st);
  } else {
    using ClusterShape = typename Kernel::DispatchPolicy::ClusterShape;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = cute::size<0>(ClusterShape{});
    attr[0].val.clusterDim.y = cute::size<1>(ClusterShape{});
    attr[0].val.clusterDim.z = cute::size<2>(ClusterShape{});
    cudaLaunchConfig_t config = {};
    config.gridDim = Gemm::get_grid_shape(params);
    config.blockDim = Kernel::get_block_shape();
    config.dynamicSmemBytes = size_t(Kernel::SharedStorageSize);
    config.stream = stream;
    config.attrs = attr;
    config.numAttrs = 1;
    void* args[] = {&params};
    cudaError_t err = cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(cutlass::device_kernel<Kernel>), args);
    if (err != cudaSuccess) return 1000 + int(err);
  }
  cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : 1000 + int(err);
}

using ReplaceAddress = PFN_cuTensorMapReplaceAddress_v12000;

// The driver's cuTensorMapReplaceAddress, or nullptr where the driver lacks it (plans are then refused).
inline ReplaceAddress replace_address_fn() {
  static const ReplaceAddress fn = [] {
    void* pfn = nullptr;
    cudaDriverEntryPointQueryResult found;
#if __CUDACC_VER_MAJOR__ > 12
    cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapReplaceAddress", &pfn, 12000, cudaEnableDefault,
                                                       &found);
#else
    cudaError_t err = cudaGetDriverEntryPoint("cuTensorMapReplaceAddress", &pfn, cudaEnableDefault, &found);
#endif
    return err == cudaSuccess && found == cudaDriverEntryPointSuccess ? reinterpret_cast<ReplaceAddress>(pfn)
                                                                      : nullptr;
  }();
  return fn;
}

// Points a TMA descriptor of a plan's Params at ptr (same shape and strides). False when the driver refused.
inline bool replace_address(cute::TmaDescriptor const* desc, const void* ptr) {
  ReplaceAddress fn = replace_address_fn();
  return fn != nullptr && fn(const_cast<CUtensorMap*>(reinterpret_cast<CUtensorMap const*>(desc)),
                             const_cast<void*>(ptr)) == CUDA_SUCCESS;
}

}  // namespace cnm
