// cutlass_nm: V:N:M (VENOM) SpMM on Ampere Sparse Tensor Cores (mma.sp m16n8k32), C ABI launcher.
// Generated from cutlass_nm/families/vnm_sm80/kernel.cu; runs on sm_80 and newer (Hopper included).
//
// GEMM view, per V-block b of W's rows: D(n x m) = Wg(n x kg, 2:4 over gathered columns) * Bg(kg x m), where
// Bg[c, t] = xT[gidx[b, c], t] and xT (x transposed by this library, rows padded_k + 1, the last one zero) is
// row-major with tokens contiguous. D is y transposed, so the epilogue writes y(m x n) row-major directly.
// One CTA computes kTileM rows of W (inside one V-block, so one gather index) x kTileN tokens:
//   * mainloop: CUTLASS's SparseMmaMultistage (cp.async multistage, warp-level mma.sp, metadata iterator) over
//     CUTLASS's DefaultSparseMmaCore for row-major A and row-major B; the B iterator is CUTLASS's
//     PredicatedTileAccessIterator with its Gather flag, which replaces the strided (K) coordinate of every
//     access by indices[k]: indices = this CTA's V-block row of gidx;
//   * epilogue: predicated register epilogue (bias per row, conversion, tails in n and m) from the warp-level
//     accumulator layout (CUTLASS's MmaTensorOpAccumulatorTileIterator documents it).
#include <cstdint>
#include <cuda_runtime.h>

#include "cutlass/cutlass.h"
#include "cutlass/gemm/gemm.h"
#include "cutlass/gemm/threadblock/default_mma_core_sparse_sm80.h"
#include "cutlass/gemm/threadblock/mma_sparse_multistage.h"
#include "cutlass/gemm/threadblock/threadblock_swizzle.h"
#include "cutlass/numeric_conversion.h"
#include "cutlass/transform/threadblock/predicated_tile_access_iterator.h"

namespace cnm_vnm80 {

using Element = ${element};
using ElementOut = ${element_out};
constexpr int kTileM = ${tile_m};
constexpr int kTileN = ${tile_n};
constexpr int kTileK = ${tile_k};
constexpr int kWarpM = ${warp_m};
constexpr int kWarpN = ${warp_n};
constexpr int kStages = ${stages};
constexpr bool kHasBias = ${has_bias};
using Swizzle = cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<${swizzle}>;

using RowMajor = cutlass::layout::RowMajor;
using TbShape = cutlass::gemm::GemmShape<kTileM, kTileN, kTileK>;
using WarpShape = cutlass::gemm::GemmShape<kWarpM, kWarpN, kTileK>;
using InstShape = cutlass::gemm::GemmShape<16, 8, 32>;
constexpr int kAccess = 128 / cutlass::sizeof_bits<Element>::value;  // 16-byte cp.async

using MmaCore = cutlass::gemm::threadblock::DefaultSparseMmaCore<
    TbShape, WarpShape, InstShape, Element, RowMajor, Element, RowMajor, float, RowMajor,
    cutlass::arch::OpClassTensorOp, kStages, cutlass::arch::OpMultiplyAdd, false,
    cutlass::arch::CacheOperation::Global, cutlass::arch::CacheOperation::Global>;
constexpr int kSparse = MmaCore::kSparse;
constexpr int kElementsPerE = MmaCore::kElementsPerElementE;

using IteratorA = cutlass::transform::threadblock::PredicatedTileAccessIterator<
    cutlass::MatrixShape<kTileM, kTileK / kSparse>, Element, RowMajor, 1, typename MmaCore::IteratorThreadMapA,
    cutlass::Array<Element, kAccess>>;
// Gather = true: the K coordinate of every access goes through the CTA's index row.
using IteratorB = cutlass::transform::threadblock::PredicatedTileAccessIterator<
    cutlass::MatrixShape<kTileK, kTileN>, Element, RowMajor, 0, typename MmaCore::IteratorThreadMapB,
    cutlass::Array<Element, kAccess>, true>;
using ElementE = typename MmaCore::ElementE;
using LayoutE = typename MmaCore::GmemLayoutE;
using IteratorE = cutlass::transform::threadblock::PredicatedTileAccessIterator<
    cutlass::MatrixShape<kTileM, kTileK / kSparse / kElementsPerE>, ElementE, LayoutE, 1,
    typename MmaCore::IteratorThreadMapE, cutlass::Array<ElementE, 128 / cutlass::sizeof_bits<ElementE>::value>>;

using Mma = cutlass::gemm::threadblock::SparseMmaMultistage<
    TbShape, IteratorA, typename MmaCore::SmemIteratorA, MmaCore::kCacheOpA, IteratorB,
    typename MmaCore::SmemIteratorB, MmaCore::kCacheOpB, float, RowMajor, IteratorE,
    typename MmaCore::SmemIteratorE, MmaCore::kCacheOpE, typename MmaCore::MmaPolicy, kStages>;
using WarpCount = typename MmaCore::WarpCount;
constexpr int kThreads = MmaCore::kThreads;
static_assert(WarpCount::kK == 1, "one warp along K");
static_assert(kTileM % 32 == 0, "metadata rows are reordered in groups of 32");

struct Params {
  cutlass::gemm::GemmCoord tiled;
  int swizzle_log;
  typename IteratorA::Params pa;
  typename IteratorB::Params pb;
  typename IteratorE::Params pe;
  const Element* a;     // n x kg/2 compressed values
  const Element* xt;    // (padded_k + 1) x ldx
  const ElementE* e;    // sm80 metadata, e_rows padded
  const int* gidx;      // blocks x kg
  const Element* bias;  // n, or null
  ElementOut* y;        // m x n
  int n, m, ldx, kg, e_rows, v;
};

__device__ __forceinline__ void store_tile(Params const& p, typename Mma::FragmentC const& acc, int row0,
                                           int tok0, int warp_idx, int lane) {
  // Accumulator of mma (mi, ni) sits at 4 * (ni * kMmaM + mi): rows quad + {0, 8}, tokens 2 * (lane % 4) + {0, 1}.
  constexpr int kMmaM = kWarpM / 16, kMmaN = kWarpN / 8;
  const int wm = warp_idx % WarpCount::kM, wn = warp_idx / WarpCount::kM;
  const int r0 = row0 + wm * kWarpM + lane / 4;
  const int t0 = tok0 + wn * kWarpN + 2 * (lane % 4);
  cutlass::NumericConverter<ElementOut, float> convert;
  CUTLASS_PRAGMA_UNROLL
  for (int mi = 0; mi < kMmaM; ++mi) {
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < 2; ++r) {
      const int row = r0 + mi * 16 + r * 8;
      if (row >= p.n) continue;
      float b = 0.f;
      if constexpr (kHasBias) b = float(p.bias[row]);
      CUTLASS_PRAGMA_UNROLL
      for (int ni = 0; ni < kMmaN; ++ni) {
        CUTLASS_PRAGMA_UNROLL
        for (int c = 0; c < 2; ++c) {
          const int tok = t0 + ni * 8 + c;
          if (tok < p.m) p.y[size_t(tok) * p.n + row] = convert(acc[4 * (ni * kMmaM + mi) + 2 * r + c] + b);
        }
      }
    }
  }
}

__global__ void __launch_bounds__(kThreads) vnm80_kernel(Params p) {
  extern __shared__ __align__(16) char smem_raw[];
  auto& smem = *reinterpret_cast<typename Mma::SharedStorage*>(smem_raw);
  Swizzle swizzle;
  cutlass::gemm::GemmCoord tile = swizzle.get_tile_offset(p.swizzle_log);
  if (tile.m() >= p.tiled.m() || tile.n() >= p.tiled.n()) return;
  const int row0 = tile.m() * kTileM, tok0 = tile.n() * kTileN;
  const int tid = threadIdx.x;
  const int* indices = p.gidx + size_t(row0 / p.v) * p.kg;  // kTileM divides V: one block per CTA

  IteratorA it_a(p.pa, const_cast<Element*>(p.a), {p.n, p.kg / kSparse}, tid, {row0, 0});
  IteratorB it_b(p.pb, const_cast<Element*>(p.xt), {p.kg, p.ldx}, tid, {0, tok0}, indices);
  IteratorE it_e(p.pe, const_cast<ElementE*>(p.e), {p.e_rows, p.kg / kSparse / kElementsPerE}, tid, {row0, 0});
  const int warp_idx = cutlass::canonical_warp_idx_sync();
  const int lane = tid % 32;
  Mma mma(smem, tid, warp_idx, lane);
  typename Mma::FragmentC acc;
  acc.clear();
  mma(p.kg / kTileK, acc, it_a, it_b, it_e, acc);
  store_tile(p, acc, row0, tok0, warp_idx, lane);
}

// xt(rows x ldx) = x(m x k)^T, zero past m and k (rows = padded_k + 1: the last row is the zero row padding
// gather entries point at). A CTA moves a 64-token x 64-column block through shared memory: 16-byte loads of x
// rows where k % 8 == 0 (element loads otherwise), 16-byte stores of xt rows (ldx % 8 == 0).
constexpr int kT = 64, kVec = 8, kTrThreads = 256;
__global__ void __launch_bounds__(kTrThreads) transpose_kernel(const Element* __restrict__ x,
                                                               Element* __restrict__ xt, int m, int k, int rows,
                                                               int ldx) {
  __shared__ alignas(16) Element tile[kT][kT + kVec];  // [column of x][token]
  const int t0 = blockIdx.x * kT, c0 = blockIdx.y * kT;
  const bool vec = k % kVec == 0;
  CUTLASS_PRAGMA_UNROLL
  for (int it = 0; it < kT * kT / kVec / kTrThreads; ++it) {
    const int chunk = threadIdx.x + it * kTrThreads;
    const int tok = chunk / (kT / kVec), col = (chunk % (kT / kVec)) * kVec;
    const int t = t0 + tok, c = c0 + col;
    cutlass::AlignedArray<Element, kVec> v;
    if (vec && t < m && c < k) {
      v = *reinterpret_cast<const cutlass::AlignedArray<Element, kVec>*>(x + size_t(t) * k + c);
    } else {
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kVec; ++j) v[j] = (t < m && c + j < k) ? x[size_t(t) * k + c + j] : Element(0.f);
    }
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < kVec; ++j) tile[col + j][tok] = v[j];
  }
  __syncthreads();
  CUTLASS_PRAGMA_UNROLL
  for (int it = 0; it < kT * kT / kVec / kTrThreads; ++it) {
    const int chunk = threadIdx.x + it * kTrThreads;
    const int col = chunk / (kT / kVec), tok = (chunk % (kT / kVec)) * kVec;
    const int c = c0 + col, t = t0 + tok;
    if (c < rows && t < ldx) {
      *reinterpret_cast<uint4*>(xt + size_t(c) * ldx + t) = *reinterpret_cast<const uint4*>(&tile[col][tok]);
    }
  }
}

}  // namespace cnm_vnm80

using namespace cnm_vnm80;

extern "C" {

int cnm_abi_version() { return 2; }

int cnm_smem_bytes() { return int(sizeof(typename Mma::SharedStorage)); }

// y(m x n) = gather(x) * Wg^T (+ bias). a: n x kg/2 values; e: sm80 metadata with e_rows (padded) rows;
// gidx: blocks x kg; x: m x k; xt: scratch of (padded_k + 1) x ldx, filled here (ldx = m rounded up to 8).
// 0 on success; 2 (cutlass kErrorInvalidProblem) if kTileM does not divide v; else 1000 + cudaError_t.
int cnm_run(const void* a, const void* e, const int* gidx, const void* x, void* xt, void* y, const void* bias, int n,
            int m, int k, int padded_k, int ldx, int kg, int e_rows, int v, cudaStream_t stream) {
  if (v % kTileM || kg % kTileK || ldx % kAccess) return int(cutlass::Status::kErrorInvalidProblem);
  dim3 tgrid((ldx + kT - 1) / kT, (padded_k + 1 + kT - 1) / kT);
  transpose_kernel<<<tgrid, kTrThreads, 0, stream>>>(static_cast<const Element*>(x), static_cast<Element*>(xt), m, k,
                                                 padded_k + 1, ldx);
  Swizzle swizzle;
  cutlass::gemm::GemmCoord tiled =
      swizzle.get_tiled_shape({n, ldx, kg}, {kTileM, kTileN, kTileK}, 1);
  Params p{tiled,
           swizzle.get_log_tile(tiled),
           typename IteratorA::Params(RowMajor(kg / kSparse)),
           typename IteratorB::Params(RowMajor(ldx)),
           typename IteratorE::Params(LayoutE(e_rows * MmaCore::kInterleavedE)),
           static_cast<const Element*>(a),
           static_cast<const Element*>(xt),
           static_cast<const ElementE*>(e),
           gidx,
           static_cast<const Element*>(bias),
           static_cast<ElementOut*>(y),
           n,
           m,
           ldx,
           kg,
           e_rows,
           v};
  const int smem = int(sizeof(typename Mma::SharedStorage));
  static int smem_set = 0;
  if (!smem_set) {
    if (smem >= 48 * 1024) {
      cudaError_t err = cudaFuncSetAttribute(vnm80_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
      if (err != cudaSuccess) return 1000 + int(err);
    }
    smem_set = 1;
  }
  vnm80_kernel<<<swizzle.get_grid_shape(tiled), kThreads, smem, stream>>>(p);
  cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : 1000 + int(err);
}

// cnm_run's arguments but x, y and the stream, packed once per (weight, bias, m, stream) by the launcher.
struct RunArgs {
  const void* a;
  const void* e;
  const int* gidx;
  const void* bias;
  void* xt;
  int n, m, k, padded_k, ldx, kg, e_rows, v;
};

size_t cnm_run_args_bytes() { return sizeof(RunArgs); }

// cnm_run with the packed arguments: the launch a remembered call repeats.
int cnm_launch(const void* packed, const void* x, void* y, cudaStream_t stream) {
  const RunArgs& p = *static_cast<const RunArgs*>(packed);
  return cnm_run(p.a, p.e, p.gidx, x, p.xt, y, p.bias, p.n, p.m, p.k, p.padded_k, p.ldx, p.kg, p.e_rows, p.v, stream);
}

}  // extern "C"
