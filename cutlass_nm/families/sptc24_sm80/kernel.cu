// cutlass_nm: 2:4 SpMM on Ampere Sparse Tensor Cores (mma.sp m16n8k32), C ABI launcher.
// Generated from cutlass_nm/families/sptc24_sm80/kernel.cu; the kernel type comes from
// cutlass_library's emitter. Computes D(M x N, row-major) = A(M x K, 2:4, compressed) * B(K x N, col-major),
// i.e. y^T(n_out x m) = W * x^T with M = n_out, N = m; D's leading dimension ldd >= N, a multiple of 8. E is reordered metadata, ColumnMajorInterleaved<2>.
#include <cstdint>
#include <cuda_runtime.h>

#include "cutlass/cutlass.h"
#include "cutlass/gemm/device/gemm_sparse.h"

${operation}

namespace {
using Gemm = Operation_${name};
using ElementA = typename Gemm::ElementA;
using ElementB = typename Gemm::ElementB;
using ElementC = typename Gemm::ElementC;
using ElementE = typename Gemm::ElementE;
using LayoutE = typename Gemm::LayoutE;

typename Gemm::Arguments make_args(const void* a, const void* e, const void* b, void* d,
                                   int M, int N, int K, int ldd, int e_rows) {
  cutlass::gemm::GemmCoord problem(M, N, K);
  typename Gemm::TensorRefA ref_a(static_cast<ElementA*>(const_cast<void*>(a)), typename Gemm::LayoutA(K / Gemm::kSparse));
  typename Gemm::TensorRefB ref_b(static_cast<ElementB*>(const_cast<void*>(b)), typename Gemm::LayoutB(K));
  cutlass::TensorRef<ElementC, typename Gemm::LayoutC> ref_d(static_cast<ElementC*>(d), typename Gemm::LayoutC(ldd));
  cutlass::TensorRef<ElementE, LayoutE> ref_e(static_cast<ElementE*>(const_cast<void*>(e)), LayoutE(e_rows * 2));
  return typename Gemm::Arguments(problem, ref_a, ref_b, ref_d, ref_d, ref_e, {1.0f, 0.0f}, 1);
}
}  // namespace

extern "C" {

int cnm_abi_version() { return 1; }

int cnm_elements_per_meta() { return Gemm::kElementsPerElementE; }

size_t cnm_workspace_size(int M, int N, int K, int e_rows) {
  return Gemm::get_workspace_size(make_args(nullptr, nullptr, nullptr, nullptr, M, N, K, N, e_rows));
}

// 0 on success; otherwise a cutlass::Status (< 1000) or 1000 + cudaError_t.
int cnm_run(const void* a, const void* e, const void* b, void* d, int M, int N, int K, int ldd, int e_rows,
            void* workspace, cudaStream_t stream) {
  auto args = make_args(a, e, b, d, M, N, K, ldd, e_rows);
  Gemm gemm;
  cutlass::Status st = gemm.can_implement(args);
  if (st != cutlass::Status::kSuccess) return int(st);
  st = gemm.initialize(args, workspace, stream);
  if (st != cutlass::Status::kSuccess) return int(st);
  st = gemm(stream);
  if (st != cutlass::Status::kSuccess) return int(st);
  cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : 1000 + int(err);
}

}  // extern "C"
