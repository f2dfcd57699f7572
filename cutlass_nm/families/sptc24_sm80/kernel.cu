// cutlass_nm: 2:4 SpMM on Ampere Sparse Tensor Cores (mma.sp m16n8k32), C ABI launcher.
// Generated from cutlass_nm/families/sptc24_sm80/kernel.cu; the kernel type comes from
// cutlass_library's emitter. Computes D(M x N, row-major) = A(M x K, 2:4, compressed) * B(K x N, col-major),
// i.e. y^T(n_out x m) = W * x^T with M = n_out, N = m, into a scratch D of leading dimension ldd = N rounded up
// to 8; a second kernel then writes y(m x n_out, row-major) = D^T (+ bias). E is reordered metadata,
// ColumnMajorInterleaved<2>.
#include <cstdint>
#include <new>
#include <cuda_runtime.h>

#include "cutlass/cutlass.h"
#include "cutlass/array.h"
#include "cutlass/gemm/device/gemm_sparse.h"

${operation}

namespace {
using Gemm = Operation_${name};
using GemmKernel = typename Gemm::GemmKernel;
using Params = typename GemmKernel::Params;
using ElementA = typename Gemm::ElementA;
using ElementB = typename Gemm::ElementB;
using ElementC = typename Gemm::ElementC;
using ElementE = typename Gemm::ElementE;
using LayoutE = typename Gemm::LayoutE;
using TileShape = typename Gemm::ThreadblockShape;

constexpr int kSmemBytes = int(sizeof(typename GemmKernel::SharedStorage));
constexpr int kMisaligned = int(cutlass::Status::kErrorMisalignedOperand);

int round_up8(int v) { return (v + 7) / 8 * 8; }

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

typename Gemm::Arguments make_args(const void* a, const void* e, const void* b, void* d,
                                   int M, int N, int K, int ldd, int e_rows) {
  cutlass::gemm::GemmCoord problem(M, N, K);
  typename Gemm::TensorRefA ref_a(static_cast<ElementA*>(const_cast<void*>(a)), typename Gemm::LayoutA(K / Gemm::kSparse));
  typename Gemm::TensorRefB ref_b(static_cast<ElementB*>(const_cast<void*>(b)), typename Gemm::LayoutB(K));
  cutlass::TensorRef<ElementC, typename Gemm::LayoutC> ref_d(static_cast<ElementC*>(d), typename Gemm::LayoutC(ldd));
  cutlass::TensorRef<ElementE, LayoutE> ref_e(static_cast<ElementE*>(const_cast<void*>(e)), LayoutE(e_rows * 2));
  return typename Gemm::Arguments(problem, ref_a, ref_b, ref_d, ref_d, ref_e, {1.0f, 0.0f}, 1);
}

// y(m x n, row-major) = yt(n x ldd, row-major)^T, plus bias[n] (x's dtype) when given, rounded once to the output
// type. A CTA moves 64 features x 64 tokens through shared memory: 16-byte loads of yt rows (ldd % 8 == 0, yt
// 16-byte aligned), 16-byte stores of y rows where y is 16-byte aligned (n % 32 == 0), element stores otherwise.
constexpr int kT = 64, kTrThreads = 256;
__global__ void __launch_bounds__(kTrThreads) transpose_bias(const ElementC* __restrict__ yt, ElementC* __restrict__ y,
                                                             const ElementB* __restrict__ bias, int m, int n, int ldd,
                                                             bool vec_store) {
  constexpr int kVec = 16 / int(sizeof(ElementC));  // elements per 16-byte access
  constexpr int kChunks = kT / kVec;                // accesses per tile row
  using Vec = cutlass::AlignedArray<ElementC, kVec>;
  __shared__ ElementC tile[kT][kT + 2];  // [feature][token]
  const int t0 = blockIdx.x * kT, f0 = blockIdx.y * kT;
  for (int c = threadIdx.x; c < kT * kChunks; c += kTrThreads) {
    const int r = c / kChunks, col = (c % kChunks) * kVec;  // feature r, tokens col..col+kVec-1
    const int f = f0 + r, t = t0 + col;
    if (f < n && t < m) {  // t < m <= ldd and t % kVec == 0: the access lies inside the row's ldd elements
      const Vec v = *reinterpret_cast<const Vec*>(yt + size_t(f) * ldd + t);
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kVec; ++j) tile[r][col + j] = v[j];
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < kT * kChunks; c += kTrThreads) {
    const int r = c / kChunks, col = (c % kChunks) * kVec;  // token r, features col..col+kVec-1
    const int t = t0 + r, f = f0 + col;
    if (t < m && f < n) {  // n % kVec == 0: the whole access is inside y's row
      Vec v;
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kVec; ++j) {
        float s = static_cast<float>(tile[col + j][r]);
        if (bias != nullptr) s += static_cast<float>(bias[f + j]);
        v[j] = ElementC(s);
      }
      ElementC* out = y + size_t(t) * n + f;
      if (vec_store) {
        *reinterpret_cast<Vec*>(out) = v;
      } else {
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < kVec; ++j) out[j] = v[j];
      }
    }
  }
}

// A prepared launch for one (weight, metadata, bias, M, N, K): the GEMM kernel's Params and grid, built once.
// Each launch patches the addresses of B (x) and of C/D (the scratch) into Params (TensorRef::reset: the layouts,
// hence the iterator parameters, do not depend on the addresses), then launches the GEMM and the transpose.
struct Plan {
  Params params;
  dim3 grid;
  const ElementB* bias;
  int m, n, ldd;
};

Plan* aligned_plan(void* buf) {
  auto p = reinterpret_cast<std::uintptr_t>(buf);
  return reinterpret_cast<Plan*>((p + alignof(Plan) - 1) / alignof(Plan) * alignof(Plan));
}

// Fills plan for y = x * W^T (+ bias): M = n_out (W's rows), N = m (tokens). 0 or a cutlass::Status.
// CUTLASS's rules on N (N % 8, the vector width of B and of D) are checked on ldd, N rounded up to 8; the kernel
// then runs with N itself: every load of B (x, m columns of K elements) is predicated on its column < N, and
// cp.async zero-fills the rest, so no row of x past m is read; every store of D is a vector of kAlignmentC
// elements starting at a multiple of kAlignmentC below N, so it ends below ldd, inside D's row. CUTLASS's other
// rules do not depend on N.
int init_plan(Plan& plan, const void* a, const void* e, const void* bias, int M, int N, int K, int e_rows) {
  if (M < 1 || N < 1 || K < 1) return int(cutlass::Status::kErrorInvalidProblem);
  const int ldd = round_up8(N);
  cutlass::Status st = Gemm::can_implement(make_args(a, e, nullptr, nullptr, M, ldd, K, ldd, e_rows));
  if (st != cutlass::Status::kSuccess) return int(st);
  auto args = make_args(a, e, nullptr, nullptr, M, N, K, ldd, e_rows);
  typename Gemm::ThreadblockSwizzle swizzle;
  cutlass::gemm::GemmCoord tiled =
      swizzle.get_tiled_shape(args.problem_size, {TileShape::kM, TileShape::kN, TileShape::kK}, 1);
  plan.params = Params{args.problem_size, tiled, args.ref_A.non_const_ref(), args.ref_B.non_const_ref(),
                       args.ref_C.non_const_ref(), args.ref_D, args.ref_E.non_const_ref(), args.epilogue, nullptr};
  plan.grid = swizzle.get_grid_shape(tiled);
  plan.bias = static_cast<const ElementB*>(bias);
  plan.m = N;
  plan.n = M;
  plan.ldd = ldd;
  return 0;
}

// The GEMM kernel's shared memory past the 48 KB default, on the current device. 0 or 1000 + cudaError_t.
int set_attributes() {
  if (kSmemBytes < (48 << 10)) return 0;
  cudaError_t err = cudaFuncSetAttribute(cutlass::Kernel<GemmKernel>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         kSmemBytes);
  return err == cudaSuccess ? 0 : 1000 + int(err);
}

// The GEMM on x into scratch (ElementC, n x ldd), then y = scratch^T (+ bias). 0, a cutlass::Status or
// 1000 + cudaError_t.
int launch_plan(Plan& plan, const void* x, void* y, void* scratch, cudaStream_t stream) {
  if (x == nullptr || y == nullptr || scratch == nullptr) return int(cutlass::Status::kErrorInvalidProblem);
  if (!aligned16(x) || !aligned16(scratch)) return kMisaligned;
  plan.params.ref_B.reset(static_cast<ElementB*>(const_cast<void*>(x)));
  plan.params.ref_C.reset(static_cast<ElementC*>(scratch));
  plan.params.ref_D.reset(static_cast<ElementC*>(scratch));
  cutlass::Kernel<GemmKernel><<<plan.grid, GemmKernel::kThreadCount, kSmemBytes, stream>>>(plan.params);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return 1000 + int(err);
  const dim3 grid((plan.m + kT - 1) / kT, (plan.n + kT - 1) / kT);
  transpose_bias<<<grid, kTrThreads, 0, stream>>>(static_cast<const ElementC*>(scratch), static_cast<ElementC*>(y),
                                                  plan.bias, plan.m, plan.n, plan.ldd, aligned16(y));
  err = cudaGetLastError();
  return err == cudaSuccess ? 0 : 1000 + int(err);
}
}  // namespace

extern "C" {

int cnm_abi_version() { return 2; }

int cnm_elements_per_meta() { return Gemm::kElementsPerElementE; }

// The GEMM's own workspace (serial split-K only; this family runs one K slice: 0).
size_t cnm_workspace_size(int M, int N, int K, int e_rows) {
  return Gemm::get_workspace_size(make_args(nullptr, nullptr, nullptr, nullptr, M, N, K, N, e_rows));
}

// Bytes of the scratch cnm_run and cnm_launch write y^T into: M x (N rounded up to 8) output elements.
size_t cnm_scratch_bytes(int M, int N) { return size_t(M) * size_t(round_up8(N)) * sizeof(ElementC); }

// y(N x M) = b(N x K) * A^T (+ bias), everything set up in this call: checks, parameters, the shared-memory
// attribute, the GEMM into scratch (cnm_scratch_bytes(M, N), 16-byte aligned) and the transpose.
// 0 on success; otherwise a cutlass::Status (< 1000) or 1000 + cudaError_t.
int cnm_run(const void* a, const void* e, const void* b, void* y, const void* bias, void* scratch, int M, int N,
            int K, int e_rows, cudaStream_t stream) {
  Plan plan;
  if (int st = init_plan(plan, a, e, bias, M, N, K, e_rows)) return st;
  if (int err = set_attributes()) return err;
  return launch_plan(plan, b, y, scratch, stream);
}

// Bytes of a caller-owned buffer that holds one Plan (any alignment).
size_t cnm_plan_bytes() { return sizeof(Plan) + alignof(Plan); }

// Fills the plan in buf for (a, e, bias, M, N, K) and sets the kernel's shared-memory attribute on the current
// device. 0 on success; otherwise a cutlass::Status (< 1000) or 1000 + cudaError_t.
int cnm_plan(void* buf, const void* a, const void* e, const void* bias, int M, int N, int K, int e_rows) {
  Plan* plan = new (aligned_plan(buf)) Plan();
  if (int st = init_plan(*plan, a, e, bias, M, N, K, e_rows)) return st;
  return set_attributes();
}

// Launches a plan on x (b) and y through scratch (cnm_scratch_bytes(M, N), 16-byte aligned). Eager streams only: the
// callers check for graph capture first and run cnm_run there, with a scratch of the graph's own. 0, a
// cutlass::Status (< 1000) or 1000 + cudaError_t.
int cnm_launch(void* buf, const void* b, void* y, void* scratch, cudaStream_t stream) {
  return launch_plan(*aligned_plan(buf), b, y, scratch, stream);
}

// A remembered call's arguments but x, y and the stream: its plan and its stream's y^T scratch.
struct RepeatArgs {
  void* plan;
  void* scratch;
};

size_t cnm_run_args_bytes() { return sizeof(RepeatArgs); }

// cnm_launch with a remembered call's packed arguments: the launch it repeats.
int cnm_repeat(const void* packed, const void* b, void* y, cudaStream_t stream) {
  const RepeatArgs& r = *static_cast<const RepeatArgs*>(packed);
  return cnm_launch(r.plan, b, y, r.scratch, stream);
}

}  // extern "C"
