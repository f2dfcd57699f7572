// cutlass_nm: FP8 (e4m3) V:N:M (VENOM) SpMM on Hopper Sparse Tensor Cores (wgmma.sp e4m3), scales fused in the
// epilogue, C ABI launcher. Generated from cutlass_nm/families/vnm_fp8_sm90/kernel.cu.
//
// GEMM view: D(n x m) = sw[row] * sx[tok] * (Wg(n x Kg, 2:4 over gathered columns) * Bg(Kg x m)) (+ bias[row]),
// where for the V-block b of a CTA's rows Bg[c, t] = xT[gidx[b, c], t] (xT = x transposed, e4m3, padded_k x ldx).
// An 8-bit wgmma reads B K-major (a token's gathered columns contiguous), while the gather picks rows of xT
// (tokens contiguous): the producer transposes on the way. One CTA computes TM rows (inside one V-block) x TN
// tokens. Warp-specialized:
//   * producer warpgroup: one thread issues the TMA loads of the compressed values A and the metadata E of a
//     stage (CUTLASS's sparse-collective descriptors); each of the 128 threads loads 16 gathered rows x W tokens
//     (W = 16 or 8 bytes a row, all 16 loads in flight at once) into registers, transposes them with byte permutes
//     into W tokens x 16 bytes, stores those as 16-byte chunks of the K-major 128B-swizzled layout wgmma reads,
//     fences them for the async proxy and arrives on the stage's full barrier;
//   * consumer warpgroup(s): CUTLASS's sparse collective mma() (FP8 fast accumulation) or ours (mma_pipe = 1,
//     codegen/sparse_mainloop.cuh), then a predicated register epilogue (scales, bias, conversion, tails).
#include <cstdint>
#include <cuda.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/arch/reg_reconfig.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/pipeline/pipeline.hpp"
#include "cutlass/numeric_conversion.h"
#include "cutlass/util/packed_stride.hpp"

${sparse_mainloop}
${gathered_tiles}
${quantize_rows}
namespace cnm_vnm8 {
using namespace cute;

using Element = cutlass::float_e4m3_t;
using ElementOut = ${element_out};
constexpr int kTileM = ${tile_m};
constexpr int kTileN = ${tile_n};
constexpr int kTileK = 128;  // gathered columns (bytes) per stage: one 128-byte swizzle row of B per token
constexpr int kStages = ${stages};
constexpr int kConsumers = ${consumers};
constexpr bool kHasBias = ${has_bias};
constexpr int kMmaPipe = ${mma_pipe};
// CTA order, as vnm_sm90's: 0 weight tiles fastest; 1 token tiles in L2-sized groups, each weight tile with all of
// its group's token tiles in a row.
constexpr int kRaster = ${raster};
// CTAs per cluster along the tokens (1 or 2): A and E multicast to both.
constexpr int kClusterN = ${cluster};
using ClusterShape = Shape<_1, Int<kClusterN>, _1>;

constexpr int kThreads = 128 * (1 + kConsumers);
using TileShape = Shape<Int<kTileM>, Int<kTileN>, Int<kTileK>>;
using Schedule = cute::conditional_t<kConsumers == 2, cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8FastAccum,
                                     cutlass::gemm::KernelTmaWarpSpecializedFP8FastAccum>;
// A: K-major compressed 2:4 (CUTLASS layout); B: K-major (ColumnMajor B: a token's gathered columns contiguous).
using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassSparseTensorOp, Element, cutlass::layout::RowMajor, 32, Element,
    cutlass::layout::ColumnMajor, 16, float, TileShape, ClusterShape,
    cutlass::gemm::collective::StageCount<kStages>, Schedule>::CollectiveOp;
using TiledMma = typename Mainloop::TiledMma;
using Pipeline = typename Mainloop::MainloopPipeline;
using PipeState = typename Mainloop::PipelineState;
using SparseConfig = typename Mainloop::SparseConfig;
static_assert(kTileN % 8 == 0 && kTileN <= 256, "token tiles of 8-token blocks");
static_assert(size(TiledMma{}) == 128 * kConsumers, "one consumer warpgroup per MMA warpgroup");

struct alignas(1024) SharedStorage {
  typename Mainloop::TensorStorage tensors;
  typename Mainloop::PipelineStorage pipeline;
  int gidx[2][kTileK];
};
static_assert(sizeof(typename Mainloop::TensorStorage) == size_t(kStages) * ${stage_bytes},
              "family.py's smem_per_stage differs from the collective's shared storage per stage");
static_assert(sizeof(SharedStorage) == ${smem_bytes}, "family.py's smem_bytes differs from sizeof(SharedStorage)");

struct Params {
  typename Mainloop::Params mainloop;
  const int* gidx;      // blocks x kg, -1 past the gathered columns
  const uint8_t* xt;    // padded_k x ldx e4m3
  const float* sw;      // n: per output channel
  const float* sx;      // m (sx_vector) or 1
  const ElementOut* bias;  // n, or null
  ElementOut* y;        // m x n
  int n, m, ldx, kg, tiles_per_block, padded_k, sx_vector;
  int m_tiles, n_tiles, raster_group;
};

// B's shared memory, K-major with the 128B swizzle: token n's 128 gathered bytes of a stage form one 128-byte row,
// whose 16-byte chunk c sits at chunk c ^ (n % 8) (bits 4-6 ^= bits 7-9 of the 1024-byte aligned address).
// CNM_HOST_PROBE below checks b_offset + b_swizzle against CuTe for every element of every stage.
using SmemLayoutB = typename Mainloop::SmemLayoutB;
static_assert(cute::is_same_v<typename Mainloop::SmemLayoutAtomB, GMMA::Layout_K_SW128_Atom<Element>>,
              "the producer computes K-major 128B-swizzled addresses");

// Tokens a producer thread moves per block: 16 (16-byte loads) where that makes one block per thread, else 8.
constexpr int kW = kTileN >= 256 ? 16 : 8;

CUTE_HOST_DEVICE uint32_t b_offset(int n, int k, int s) {  // bytes, unswizzled
  return uint32_t(get_nonswizzle_portion(SmemLayoutB{})(n, k, s));
}

CUTE_HOST_DEVICE uint32_t b_swizzle(uint32_t byte_addr) { return byte_addr ^ ((byte_addr >> 3) & 0x70u); }

// 4 x 4 bytes transposed: a[r] byte c -> o[c] byte r.
__device__ __forceinline__ void transpose4(uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t& o0,
                                           uint32_t& o1, uint32_t& o2, uint32_t& o3) {
  const uint32_t t0 = __byte_perm(a0, a1, 0x5140), t1 = __byte_perm(a0, a1, 0x7362);
  const uint32_t t2 = __byte_perm(a2, a3, 0x5140), t3 = __byte_perm(a2, a3, 0x7362);
  o0 = __byte_perm(t0, t2, 0x5410);
  o1 = __byte_perm(t0, t2, 0x7632);
  o2 = __byte_perm(t1, t3, 0x5410);
  o3 = __byte_perm(t1, t3, 0x7632);
}

// One block of a stage: gathered rows 16c..16c+15 x tokens tok..tok+W-1 of xt (W = 8 or 16), stored as the W tokens'
// 16-byte chunks c. idx holds each gathered row's byte offset in xt (row * ldx, < 2^31: the family checks), -1 past
// the gathered columns; tok_ok: the W tokens lie inside ldx. The 16 loads are unconditional (a row or token past
// the end reads row 0 / token 0, then zero), so all of them are in flight before the first value is used.
template <int W>
__device__ __forceinline__ void gather_block(Params const& p, const int* idx, uint32_t chunk_base, int c, int tok,
                                             bool tok_ok) {
  using Vec = cute::conditional_t<W == 16, uint4, uint2>;
  constexpr int kWords = W / 4;
  int rows[16];
  CUTLASS_PRAGMA_UNROLL
  for (int q = 0; q < 4; ++q) *reinterpret_cast<int4*>(&rows[4 * q]) = reinterpret_cast<const int4*>(idx + 16 * c)[q];
  const uint8_t* xt_tok = p.xt + (tok_ok ? tok : 0);
  uint32_t v[16][kWords];
  CUTLASS_PRAGMA_UNROLL
  for (int r = 0; r < 16; ++r) {
    const bool ok = tok_ok && rows[r] >= 0;
    Vec raw = __ldg(reinterpret_cast<const Vec*>(xt_tok + uint32_t(ok ? rows[r] : 0)));
    const uint32_t* words = reinterpret_cast<const uint32_t*>(&raw);
    CUTLASS_PRAGMA_UNROLL
    for (int w = 0; w < kWords; ++w) v[r][w] = ok ? words[w] : 0u;
  }
  uint32_t o[W][4];  // token j of the block, word q: gathered rows 4q..4q+3
  CUTLASS_PRAGMA_UNROLL
  for (int q = 0; q < 4; ++q) {
    CUTLASS_PRAGMA_UNROLL
    for (int w = 0; w < kWords; ++w) {
      transpose4(v[4 * q][w], v[4 * q + 1][w], v[4 * q + 2][w], v[4 * q + 3][w], o[4 * w][q], o[4 * w + 1][q],
                 o[4 * w + 2][q], o[4 * w + 3][q]);
    }
  }
  CUTLASS_PRAGMA_UNROLL
  for (int j = 0; j < W; ++j) {
    const uint32_t dst = b_swizzle(chunk_base + b_offset(j, 0, 0));
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(o[j][0]), "r"(o[j][1]), "r"(o[j][2]),
                 "r"(o[j][3]));
  }
}

__device__ void produce(Params const& p, Pipeline& pipeline, SharedStorage& smem, int m_tile, int n_tile) {
  int tid = threadIdx.x;
  auto const& ml = p.mainloop;
  using X = Underscore;
  Tensor mA = ml.tma_load_a.get_tma_tensor(ml.layout_a.shape());
  Tensor mE = ml.tma_load_e.get_tma_tensor(ml.layout_e.shape());
  Tensor gA = local_tile(mA, TileShape{}, make_coord(_, _, _), Step<_1, X, _1>{})(_, _, m_tile, _, 0);
  Tensor gE = local_tile(mE, TileShape{}, make_coord(_, _, _), Step<_1, X, _1>{})(_, _, m_tile, _, 0);
  Tensor sA = make_tensor(make_smem_ptr(smem.tensors.smem_A.begin()), typename Mainloop::SmemLayoutA{});
  Tensor sE = make_tensor(make_smem_ptr(smem.tensors.smem_E.begin()), typename Mainloop::SmemLayoutE{});
  auto cta_layout = make_layout(ClusterShape{});
  auto cta_coord = cta_layout.get_flat_coord(int(cute::block_rank_in_cluster()));
  const uint16_t mcast = kClusterN == 1 ? 0 : create_tma_multicast_mask<1>(cta_layout, cta_coord);
  auto tma_a = ml.tma_load_a.get_slice(get<1>(cta_coord));
  auto tma_e = ml.tma_load_e.get_slice(get<1>(cta_coord));
  Tensor tAgA = tma_a.partition_S(gA);
  Tensor tAsA = tma_a.partition_D(sA);
  Tensor tEgE = tma_e.partition_S(gE);
  Tensor tEsE = tma_e.partition_D(sE);

  const int* gi = p.gidx + size_t(m_tile / p.tiles_per_block) * p.kg;
  const int tok0 = n_tile * kTileN;
  const int k_tiles = p.kg / kTileK;
  // thread -> (16-row block c of the stage's 128 gathered rows, kW-token blocks tb, tb + 16, ...)
  const int c = tid % 8, tb = tid / 8;
  constexpr int kTokenBlocks = kTileN / kW;
  constexpr int kPasses = (kTokenBlocks + 15) / 16;
  const uint32_t smem_b = cute::cast_smem_ptr_to_uint(smem.tensors.smem_B.begin());
  int next_row = tid < kTileK ? __ldg(gi + tid) : 0;
  PipeState write = cutlass::make_producer_start_state<Pipeline>();
  for (int kt = 0; kt < k_tiles; ++kt) {
    int* idx = smem.gidx[kt & 1];
    if (tid < kTileK) {
      idx[tid] = next_row < 0 ? next_row : next_row * p.ldx;  // xt byte offsets
      if (kt + 1 < k_tiles) next_row = __ldg(gi + (kt + 1) * kTileK + tid);
    }
    cutlass::arch::NamedBarrier::sync(128, 1);
    pipeline.producer_acquire(write);
    auto* bar = pipeline.producer_get_barrier(write);
    const int stage = write.index();
    if (tid == 0) {
      copy(ml.tma_load_a.with(*bar, mcast), tAgA(_, _, _, kt), tAsA(_, _, _, stage));
      copy(ml.tma_load_e.with(*bar, mcast), tEgE(_, _, _, kt), tEsE(_, _, _, stage));
    }
    CUTLASS_PRAGMA_UNROLL
    for (int pass = 0; pass < kPasses; ++pass) {
      const int blk = tb + 16 * pass;
      if (kTokenBlocks % 16 == 0 || blk < kTokenBlocks) {
        const int tok = tok0 + blk * kW;
        gather_block<kW>(p, idx, smem_b + b_offset(blk * kW, 16 * c, stage), c, tok, tok < p.ldx);
      }
    }
    // the generic-proxy stores are read by wgmma (async proxy): fence them before the arrival publishes them
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    cutlass::arch::ClusterBarrier::arrive(reinterpret_cast<uint64_t const*>(bar));
    ++write;
  }
  if (kClusterN > 1 && tid == 0) pipeline.producer_tail(write);
}

template <class Accum>
__device__ void epilogue(Params const& p, Accum const& accum, int thread_idx, int m_tile, int n_tile) {
  TiledMma tiled_mma;
  auto thr = tiled_mma.get_thread_slice(thread_idx);
  Tensor coords = thr.partition_C(make_identity_tensor(make_shape(Int<kTileM>{}, Int<kTileN>{})));
  const int row0 = m_tile * kTileM, tok0 = n_tile * kTileN;
  cutlass::NumericConverter<ElementOut, float> convert;
  CUTLASS_PRAGMA_UNROLL
  for (int i = 0; i < size(accum); ++i) {
    const int row = row0 + get<0>(coords(i));
    const int tok = tok0 + get<1>(coords(i));
    if (row < p.n && tok < p.m) {
      float v = accum(i) * __ldg(p.sw + row) * __ldg(p.sx + (p.sx_vector ? tok : 0));
      if constexpr (kHasBias) v += float(p.bias[row]);
      p.y[size_t(tok) * p.n + row] = convert(v);
    }
  }
}

// xt(padded_k x ldx) = x(m x k)^T in bytes, zero past m and k (ldx % 16 == 0). A thread moves a 16-token x 16-column
// block through registers: 16 loads of 16 bytes (a token's columns; lane pairs read 32 contiguous bytes), a 16 x 16
// byte transpose, 16 stores of 16 bytes (a column's tokens; 16 lanes write 256 contiguous bytes of one xt row).
constexpr int kTrThreads = 256;
constexpr int kTrTokens = 256, kTrCols = 256;  // a CTA's block: lanes (col half, token block), warps along columns

__global__ void __launch_bounds__(kTrThreads) transpose_bytes(const uint8_t* __restrict__ x, uint8_t* __restrict__ xt,
                                                             int m, int k, int padded_k, int ldx) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int t0 = blockIdx.x * kTrTokens + (lane / 2) * 16;
  const int c0 = blockIdx.y * kTrCols + warp * 32 + (lane % 2) * 16;
  if (t0 >= ldx || c0 >= padded_k) return;
  const bool vec = k % 16 == 0 && c0 + 16 <= k;
  uint4 in[16];
  CUTLASS_PRAGMA_UNROLL
  for (int i = 0; i < 16; ++i) {
    const int t = t0 + i;
    if (t < m && vec) {
      in[i] = __ldg(reinterpret_cast<const uint4*>(x + size_t(t) * k + c0));
    } else {
      alignas(16) uint8_t b[16];
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < 16; ++j) b[j] = (t < m && c0 + j < k) ? x[size_t(t) * k + c0 + j] : uint8_t(0);
      in[i] = *reinterpret_cast<uint4*>(b);
    }
  }
  // out[c] = column c0 + c of tokens t0..t0+15: 4 x 4 blocks (tokens 4a.., columns 4q..) transposed
  uint32_t out[16][4];
  CUTLASS_PRAGMA_UNROLL
  for (int a = 0; a < 4; ++a) {
    CUTLASS_PRAGMA_UNROLL
    for (int q = 0; q < 4; ++q) {
      const uint32_t* r0 = reinterpret_cast<const uint32_t*>(&in[4 * a]);
      const uint32_t* r1 = reinterpret_cast<const uint32_t*>(&in[4 * a + 1]);
      const uint32_t* r2 = reinterpret_cast<const uint32_t*>(&in[4 * a + 2]);
      const uint32_t* r3 = reinterpret_cast<const uint32_t*>(&in[4 * a + 3]);
      transpose4(r0[q], r1[q], r2[q], r3[q], out[4 * q][a], out[4 * q + 1][a], out[4 * q + 2][a], out[4 * q + 3][a]);
    }
  }
  CUTLASS_PRAGMA_UNROLL
  for (int cc = 0; cc < 16; ++cc) {
    if (c0 + cc < padded_k)
      *reinterpret_cast<uint4*>(xt + size_t(c0 + cc) * ldx + t0) = make_uint4(out[cc][0], out[cc][1], out[cc][2],
                                                                              out[cc][3]);
  }
}

void transpose(const uint8_t* x, uint8_t* xt, int m, int k, int padded_k, int ldx, cudaStream_t stream) {
  dim3 grid((ldx + kTrTokens - 1) / kTrTokens, (padded_k + kTrCols - 1) / kTrCols);
  transpose_bytes<<<grid, kTrThreads, 0, stream>>>(x, xt, m, k, padded_k, ldx);
}

// Registers a thread with two consumer warpgroups: the producer holds 16 x 16 bytes in flight plus their transpose
// (more than a TMA-only producer). setmaxnreg.inc takes registers only from those the CTA's decs release, so the
// producer's release must cover the consumers' requests from the launch's allocation (a 96 / 208 split deadlocked).
constexpr int kProducerRegs = 88, kConsumerRegs = 208;
constexpr int kLaunchRegs = 65536 / (128 * 3) / 8 * 8;  // what __launch_bounds__(384, 1) leaves a thread: 168
static_assert((kLaunchRegs - kProducerRegs) * 1 >= (kConsumerRegs - kLaunchRegs) * 2,
              "the consumers' setmaxnreg.inc would wait for registers the producer never releases");

__global__ void __launch_bounds__(kThreads, 1) vnm_fp8_kernel(__grid_constant__ const Params p) {
  extern __shared__ __align__(1024) char smem_raw[];
  SharedStorage& smem = *reinterpret_cast<SharedStorage*>(smem_raw);
  const int wg = threadIdx.x / 128;
  int m_tile, n_tile;
  cnm::cta_tile<kRaster, kClusterN>(p, m_tile, n_tile);

  Pipeline pipeline = cnm::gathered_pipeline<Mainloop, kConsumers, kClusterN, ClusterShape>(smem.pipeline, wg);

  if (wg == 0) {
    if constexpr (kConsumers == 2) cutlass::arch::warpgroup_reg_dealloc<kProducerRegs>();
    if (threadIdx.x == 0) {
      cute::prefetch_tma_descriptor(p.mainloop.tma_load_a.get_tma_descriptor());
      cute::prefetch_tma_descriptor(p.mainloop.tma_load_e.get_tma_descriptor());
    }
    produce(p, pipeline, smem, m_tile, n_tile);
  } else {
    if constexpr (kConsumers == 2) cutlass::arch::warpgroup_reg_alloc<kConsumerRegs>();
    const int thread_idx = threadIdx.x - 128;
    TiledMma tiled_mma;
    Tensor accum = partition_fragment_C(tiled_mma, take<0, 2>(TileShape{}));
    cute::conditional_t<kMmaPipe == 1, cnm::PipelinedSparseMma<Mainloop>, Mainloop> collective;
    const int k_tiles = p.kg / kTileK;
    PipeState read;
    collective.mma(pipeline, read, accum, k_tiles, thread_idx, smem.tensors, p.mainloop);
    collective.mma_tail(pipeline, read, k_tiles);
    epilogue(p, accum, thread_idx, m_tile, n_tile);
  }
}

Params make_params(const void* a, const void* e, const int* gidx, const void* xt, int n, int m, int padded_k,
                   int ldx, int kg, int v) {
  auto problem = cute::make_shape(n, ldx, kg, 1);
  typename Mainloop::Arguments args{
      static_cast<Element const*>(a), SparseConfig::fill_layoutA(problem), static_cast<Element const*>(xt),
      cutlass::make_cute_packed_stride(typename Mainloop::StrideB{}, cute::make_shape(ldx, kg, 1)),
      static_cast<typename Mainloop::ElementE const*>(e), SparseConfig::fill_layoutE(problem)};
  Params p{Mainloop::to_underlying_arguments(problem, args, nullptr),
           gidx,
           static_cast<const uint8_t*>(xt),
           nullptr,
           nullptr,
           nullptr,
           nullptr,
           n,
           m,
           ldx,
           kg,
           v / kTileM,
           padded_k,
           0,
           (n + kTileM - 1) / kTileM,
           ((m + kTileN - 1) / kTileN + kClusterN - 1) / kClusterN * kClusterN,
           1};
  p.raster_group = cnm::raster_group(p.n_tiles, kClusterN, kTileN, padded_k);  // e4m3: a byte a token
  return p;
}

int launch(Params const& p, cudaStream_t stream) {
  return cnm::launch_tiles<kRaster, kClusterN, kThreads>(vnm_fp8_kernel, p, int(sizeof(SharedStorage)), stream);
}

using Plan = cnm::Plan<Params>;
}  // namespace cnm_vnm8

using namespace cnm_vnm8;

extern "C" {

int cnm_abi_version() { return 2; }

int cnm_meta_atom_k() { return int(cute::size<1>(typename SparseConfig::TensorEAtom{})); }

int cnm_smem_bytes() { return int(sizeof(SharedStorage)); }

// x (m x k, bf16 when x_bf16 else fp16) -> q (m x k, e4m3) and scale (m floats), per token.
int cnm_quantize_rows(const void* x, void* q, float* scale, int m, int k, int x_bf16, cudaStream_t stream) {
  return cnm::quantize_rows(x, q, scale, m, k, x_bf16, stream);
}

// Bytes of a caller-owned buffer that holds one Plan (any alignment).
size_t cnm_plan_bytes() { return cnm::plan_bytes<Params>(); }

// Fills the plan in buf: a: n x kg/2 e4m3 values, e: sm90 e4m3 metadata, gidx: blocks x kg, sw: n floats; xt only
// shapes B's (unused) TMA descriptor.
int cnm_plan(void* buf, const void* a, const void* e, const int* gidx, const float* sw, const void* xt, int n, int m,
             int k, int padded_k, int ldx, int kg, int v) {
  Plan* plan = cnm::aligned_plan<Params>(buf);
  plan->p = make_params(a, e, gidx, xt, n, m, padded_k, ldx, kg, v);
  plan->p.sw = sw;
  plan->k = k;
  return 0;
}

// y(m x n) = sw * sx * (gather(x) * Wg^T) (+ bias) from a plan. x: m x k e4m3, transposed into xt (padded_k x ldx,
// ldx = m rounded up to 16) here; x null: xt already holds it. sx: m floats (sx_vector) or one. 0 on success, else
// 1000 + cudaError_t.
int cnm_launch(void* buf, const void* x, void* xt, const float* sx, int sx_vector, void* y, const void* bias,
               cudaStream_t stream) {
  Plan* plan = cnm::aligned_plan<Params>(buf);
  Params& p = plan->p;
  if (x != nullptr) {
    transpose(static_cast<const uint8_t*>(x), static_cast<uint8_t*>(xt), p.m, plan->k, p.padded_k, p.ldx, stream);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return 1000 + int(err);
  }
  p.xt = static_cast<const uint8_t*>(xt);
  p.sx = sx;
  p.sx_vector = sx_vector;
  p.y = static_cast<ElementOut*>(y);
  p.bias = static_cast<const ElementOut*>(bias);
  return launch(p, stream);
}

// A 16-bit x's call, packed once per (weight, bias, m, stream): its plan and the stream's scratch it runs through.
struct QuantizedCall {
  void* plan;
  void* q;      // m x k e4m3
  float* scale;  // m
  void* xt;     // padded_k x ldx e4m3
  const void* bias;
  int x_bf16;
};

size_t cnm_run_args_bytes() { return sizeof(QuantizedCall); }

// x (m x k, fp16/bf16) quantized per token into the call's q and scale, transposed into its xt, then the GEMM into
// y: one C call, three launches. 0 on success, else 1000 + cudaError_t.
int cnm_launch_quantized(const void* packed, const void* x, void* y, cudaStream_t stream) {
  const QuantizedCall& c = *static_cast<const QuantizedCall*>(packed);
  Plan* plan = cnm::aligned_plan<Params>(c.plan);
  if (int err = cnm::quantize_rows(x, c.q, c.scale, plan->p.m, plan->k, c.x_bf16, stream)) return err;
  return cnm_launch(c.plan, c.q, c.xt, c.scale, 1, y, c.bias, stream);
}

}  // extern "C"

#ifdef CNM_HOST_PROBE
// nvcc -DCNM_HOST_PROBE ... -o probe && ./probe: prints the number of B elements whose producer address differs from
// CuTe's swizzled layout (0 expected), over every token, gathered column and stage; then the number checked.
#include <cstdio>
int main() {
  const uintptr_t base = 1u << 20;  // any 1024-byte aligned shared-memory address
  Tensor sB = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(base)), SmemLayoutB{});
  long bad = 0, checked = 0;
  for (int s = 0; s < kStages; ++s)
    for (int n = 0; n < kTileN; ++n)
      for (int k = 0; k < kTileK; ++k) {
        // the producer's address: its block's chunk base (token block, column block, stage), the token's chunk, the
        // byte inside the chunk
        const uint32_t chunk_base = uint32_t(base) + b_offset(n / kW * kW, k / 16 * 16, s);
        const uint32_t mine = b_swizzle(chunk_base + b_offset(n % kW, 0, 0)) + k % 16;
        const uint32_t cute_addr = uint32_t(reinterpret_cast<uintptr_t>(raw_pointer_cast(&sB(n, k, s))));
        bad += mine != cute_addr;
        ++checked;
      }
  printf("%ld %ld\n", bad, checked);
  return 0;
}
#endif
