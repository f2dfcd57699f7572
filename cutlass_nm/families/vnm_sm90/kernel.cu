// cutlass_nm: V:N:M (VENOM) SpMM on Hopper Sparse Tensor Cores (wgmma.sp), C ABI launcher.
// Generated from cutlass_nm/families/vnm_sm90/kernel.cu.
//
// GEMM view: D(n x m, col-major = y row-major) = Wg(n x Kg, 2:4 over gathered columns) * Bg(Kg x m), where for
// the V-block b of a CTA's rows, Bg[c, t] = xT[gidx[b, c], t] (xT = x transposed, padded_k x m_pad).
// One CTA computes TM rows (inside one V-block) x TN tokens. Warp-specialized:
//   * producer warpgroup: one thread issues the TMA loads of the compressed values A and the metadata E of a
//     stage (CUTLASS's sparse-collective descriptors); all 128 threads gather the B rows of the stage with 16-byte
//     cp.async (zero-filled past the gather row / token tail), a batch of index loads then that batch's copies back
//     to back, into the swizzled MN-major layout wgmma reads, and arrive on the stage's full barrier when their
//     copies land (cp.async.mbarrier.arrive.noinc);
//   * consumer warpgroup(s): CUTLASS's sparse collective mma() or ours (mma_pipe = 1, codegen/sparse_mainloop.cuh:
//     one wgmma.sp batch kept in flight), from shared memory, then a predicated
//     register epilogue (bias per row, conversion, tails in n and m), or, kGlu = 1, the SwiGLU epilogue: the
//     tile's first half of rows is a gate block, its second half the up block that shares its gathered columns,
//     and the CTA writes h = silu(gate) * up transposed (hidden x ldx, the layout the next V:N:M GEMM gathers).
#include <cstdint>
#include <cuda.h>
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
namespace cnm_vnm {
using namespace cute;

using Element = ${element};
using ElementOut = ${element_out};
constexpr int kTileM = ${tile_m};
constexpr int kTileN = ${tile_n};
constexpr int kTileK = ${tile_k};
constexpr int kStages = ${stages};
constexpr int kConsumers = ${consumers};
constexpr bool kHasBias = ${has_bias};
// 0: CUTLASS's sparse consumer mainloop (drains each k-tile's wgmma.sp batch); 1: cnm::PipelinedSparseMma.
constexpr int kMmaPipe = ${mma_pipe};
// 0: y(m x n) = x Wg^T (+ bias). 1: SwiGLU over a fused gate/up weight whose V = kTileM blocks are [gate rows of
// block b; up rows of block b]: hT[b * kTileM / 2 + r][tok] = silu(D[r][tok]) * D[r + kTileM / 2][tok] for every
// tok < ldx. Two cooperative consumer warpgroups tile 256 rows as two 128-row MMA tiles, so a thread's
// accumulators at MMA_M = 0 and 1 are rows r and r + 128: the pair is thread-local (CNM_GLU_PROBE checks).
constexpr int kGlu = ${glu};
// CTA order. 0: blockIdx.x walks the weight tiles, blockIdx.y the token tiles (the original: a wave spans ~132
// weight tiles, so each weight tile comes back from DRAM for every token tile once the weight exceeds L2).
// 1: token tiles in groups whose slice of xt fits a third of L2 (raster_group), and inside a group each weight tile
// with all of the group's token tiles in a row: the weight is read from DRAM once per group, xt once.
constexpr int kRaster = ${raster};
// CTAs per cluster along the tokens (1 or 2): the cluster's CTAs compute one weight tile for adjacent token tiles
// and each brings half of A and E by TMA multicast to both, so A and E cross L2 once per cluster, not per CTA.
constexpr int kClusterN = ${cluster};
using ClusterShape = Shape<_1, Int<kClusterN>, _1>;

constexpr int kThreads = 128 * (1 + kConsumers);
using TileShape = Shape<Int<kTileM>, Int<kTileN>, Int<kTileK>>;
using Schedule = cute::conditional_t<kConsumers == 2, cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                                     cutlass::gemm::KernelTmaWarpSpecialized>;
// A: K-major compressed 2:4 (CUTLASS layout); B: N-major (tokens contiguous), i.e. rows of xT.
using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassSparseTensorOp, Element, cutlass::layout::RowMajor, 16, Element,
    cutlass::layout::RowMajor, 8, float, TileShape, ClusterShape,
    cutlass::gemm::collective::StageCount<kStages>, Schedule>::CollectiveOp;
using TiledMma = typename Mainloop::TiledMma;
using Pipeline = typename Mainloop::MainloopPipeline;
using PipeState = typename Mainloop::PipelineState;
using SparseConfig = typename Mainloop::SparseConfig;
static_assert(kTileN % 64 == 0 && kTileK % 4 == 0 && kTileK / 4 <= 32, "gather tiling");
static_assert(size(TiledMma{}) == 128 * kConsumers, "one consumer warpgroup per MMA warpgroup");
static_assert(kGlu == 0 || (kTileM == 256 && kConsumers == 2 && !kHasBias), "SwiGLU: 256-row tiles, 2 consumers");

struct alignas(1024) SharedStorage {
  typename Mainloop::TensorStorage tensors;
  typename Mainloop::PipelineStorage pipeline;
  int gidx[2][kTileK];
};
// The family plans with its own sizes (smem_per_stage, smem_bytes in family.py): they must be these.
static_assert(sizeof(typename Mainloop::TensorStorage) == size_t(kStages) * ${stage_bytes},
              "family.py's smem_per_stage differs from the collective's shared storage per stage");
static_assert(sizeof(SharedStorage) == ${smem_bytes}, "family.py's smem_bytes differs from sizeof(SharedStorage)");

struct Params {
  typename Mainloop::Params mainloop;
  const int* gidx;     // blocks x kg, -1 past the gathered columns
  const Element* xt;   // padded_k x ldx
  const Element* bias; // n, or null
  ElementOut* y;       // m x n; kGlu = 1: hT, (n / 2) x ldx
  int n, m, ldx, kg, tiles_per_block, padded_k;
  // weight tiles, token tiles (a multiple of kClusterN), token tiles per group (kRaster = 1; a multiple of kClusterN)
  int m_tiles, n_tiles, raster_group;
};

// B's shared-memory address without CuTe's per-element swizzled-pointer arithmetic: CuTe's layout of
// smem_B without its swizzle is a sum over (token, row, stage), and the rows a thread copies, r0 + i * kStep with
// r0 < kStep, never carry into r0's digits (kStep divides 8 or is a multiple of it), so each copy's offset is the
// thread's (token, r0) part + a compile-time row part + the stage's part; the 128B swizzle (bits 4-6 ^= bits 7-9)
// then applies to the absolute address (smem_B is 1024-byte aligned). CNM_HOST_PROBE below checks this against
// CuTe for every element of every stage.
constexpr int kStep = 128 / (kTileN / 8);  // gathered rows the producer warpgroup covers per pass
constexpr int kPasses = kTileK / kStep;
using SmemLayoutB = typename Mainloop::SmemLayoutB;
static_assert(cute::is_same_v<typename Mainloop::SmemLayoutAtomB, GMMA::Layout_MN_SW128_Atom<Element>>,
              "the producer computes MN-major 128B-swizzled addresses");
static_assert(kStep % 8 == 0 || 8 % kStep == 0, "no carries between a thread's first row and its pass offsets");

CUTE_HOST_DEVICE uint32_t b_offset(int n, int k, int s) {  // elements, unswizzled
  return uint32_t(get_nonswizzle_portion(SmemLayoutB{})(n, k, s));
}

CUTE_HOST_DEVICE uint32_t b_swizzle(uint32_t byte_addr) { return byte_addr ^ ((byte_addr >> 3) & 0x70u); }

// This thread's 16-byte chunk (tokens tok..tok+7) of rows r0 + i * kStep of one stage: the batch's index loads
// first (independent shared-memory loads), then its cp.async back to back. idx holds each gathered row's element
// offset in xt (row * ldx, < 2^31: the family checks), -1 past the gathered columns.
__device__ __forceinline__ void gather_rows(Params const& p, const int* idx, uint32_t thread_base, int r0, int tok,
                                            bool tok_ok) {
  constexpr int kBatch = kPasses < 8 ? kPasses : 8;
  static_assert(kPasses % kBatch == 0, "gather batches");
  const Element* xt_tok = p.xt + (tok_ok ? tok : 0);
  CUTLASS_PRAGMA_UNROLL
  for (int b = 0; b < kPasses; b += kBatch) {
    int rows[kBatch];
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kBatch; ++i) rows[i] = idx[r0 + (b + i) * kStep];
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kBatch; ++i) {
      const bool valid = tok_ok && rows[i] >= 0;
      const Element* src = xt_tok + uint32_t(valid ? rows[i] : 0);
      const uint32_t dst = b_swizzle(thread_base + b_offset(0, (b + i) * kStep, 0) * uint32_t(sizeof(Element)));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
    }
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
  // kClusterN = 2: this CTA's half of A and E, multicast to the cluster (both CTAs share m_tile)
  auto cta_layout = make_layout(ClusterShape{});
  auto cta_coord = cta_layout.get_flat_coord(int(cute::block_rank_in_cluster()));
  const uint16_t mcast = kClusterN == 1 ? 0 : create_tma_multicast_mask<1>(cta_layout, cta_coord);
  auto tma_a = ml.tma_load_a.get_slice(get<1>(cta_coord));
  auto tma_e = ml.tma_load_e.get_slice(get<1>(cta_coord));
  Tensor tAgA = tma_a.partition_S(gA);
  Tensor tAsA = tma_a.partition_D(sA);
  Tensor tEgE = tma_e.partition_S(gE);
  Tensor tEsE = tma_e.partition_D(sE);

  // The gather index of a k-tile is staged in shared memory (double-buffered), loaded one k-tile ahead by
  // the first kTileK producer threads so its latency hides behind the previous tile's copies (loading it 4 k-tiles
  // ahead measured no faster).
  const int* gi = p.gidx + size_t(m_tile / p.tiles_per_block) * p.kg;
  const int tok0 = n_tile * kTileN;
  constexpr int kChunks = kTileN / 8;  // 16-byte chunks per gathered row
  const int k_tiles = p.kg / kTileK;
  int next_row = tid < kTileK ? __ldg(gi + tid) : 0;
  PipeState write = cutlass::make_producer_start_state<Pipeline>();
  for (int kt = 0; kt < k_tiles; ++kt) {
    int* idx = smem.gidx[kt & 1];
    if (tid < kTileK) {
      idx[tid] = next_row < 0 ? next_row : next_row * p.ldx;  // xt element offsets
      if (kt + 1 < k_tiles) next_row = __ldg(gi + (kt + 1) * kTileK + tid);
    }
    cutlass::arch::NamedBarrier::sync(128, 1);
    pipeline.producer_acquire(write);
    auto* bar = pipeline.producer_get_barrier(write);
    int stage = write.index();
    if (tid == 0) {
      copy(ml.tma_load_a.with(*bar, mcast), tAgA(_, _, _, kt), tAsA(_, _, _, stage));
      copy(ml.tma_load_e.with(*bar, mcast), tEgE(_, _, _, kt), tEsE(_, _, _, stage));
    }
    const int j = tid % kChunks;
    const int tok = tok0 + j * 8;
    const bool tok_ok = tok < p.ldx;
    const int r0 = tid / kChunks;
    const uint32_t base = cute::cast_smem_ptr_to_uint(smem.tensors.smem_B.begin()) +
                          (b_offset(j * 8, r0, 0) + b_offset(0, 0, stage)) * uint32_t(sizeof(Element));
    gather_rows(p, idx, base, r0, tok, tok_ok);
    cutlass::arch::cpasync_barrier_arrive_noinc(reinterpret_cast<uint64_t const*>(bar));
    ++write;
  }
  // kClusterN = 2: stay until both CTAs' consumers have released every stage (the peer multicasts into this CTA's
  // shared memory and its consumers arrive on this CTA's empty barriers)
  if (kClusterN > 1 && tid == 0) pipeline.producer_tail(write);
}

// kGlu = 1: h = silu(gate) * up, written transposed (row-major hT, tokens contiguous) as pairs of tokens: a
// thread's accumulators 2i and 2i + 1 are tokens t, t + 1 of one row, t even, and ldx % 8 == 0.
template <class Accum>
__device__ void epilogue_glu(Params const& p, Accum const& accum, int thread_idx, int m_tile, int n_tile) {
  TiledMma tiled_mma;
  auto thr = tiled_mma.get_thread_slice(thread_idx);
  Tensor coords = thr.partition_C(make_identity_tensor(make_shape(Int<kTileM>{}, Int<kTileN>{})));
  static_assert(kGlu == 0 || size<1>(decltype(coords){}) == 2, "two 128-row MMA tiles: gate, then up");
  const int row0 = m_tile * (kTileM / 2), tok0 = n_tile * kTileN;
  CUTLASS_PRAGMA_UNROLL
  for (int j = 0; j < size<2>(accum); ++j) {
    CUTLASS_PRAGMA_UNROLL
    for (int v = 0; v < size<0>(accum); v += 2) {
      const int row = row0 + get<0>(coords(v, 0, j));
      const int tok = tok0 + get<1>(coords(v, 0, j));
      if (tok < p.ldx) {
        cutlass::Array<ElementOut, 2> h;
        CUTLASS_PRAGMA_UNROLL
        for (int e = 0; e < 2; ++e) {
          const float g = accum(v + e, 0, j), u = accum(v + e, 1, j);
          // fast division: IEEE `/` takes a slow path (a called subroutine, ~100 instructions per warp) whenever
          // a lane's 1 + exp(-g) overflows past 2^126 (g < -87); __fdividef returns 0 there, silu's limit.
          h[e] = ElementOut(__fdividef(g, 1.0f + __expf(-g)) * u);
        }
        *reinterpret_cast<cutlass::Array<ElementOut, 2>*>(p.y + size_t(row) * p.ldx + tok) = h;
      }
    }
  }
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
    int row = row0 + get<0>(coords(i));
    int tok = tok0 + get<1>(coords(i));
    if (row < p.n && tok < p.m) {
      float v = accum(i);
      if constexpr (kHasBias) v += float(p.bias[row]);
      p.y[size_t(tok) * p.n + row] = convert(v);
    }
  }
}

// xt(padded_k x ldx) = x(m x k)^T, zero past m and k: the token-contiguous rows the GEMM gathers.
constexpr int kTr = 64;
__device__ __forceinline__ uint4 load_x8(const Element* x, int m, int k, int t, int kc, bool vec) {
  alignas(16) Element v[8];
  if (vec && t < m && kc < k) return __ldg(reinterpret_cast<const uint4*>(x + size_t(t) * k + kc));
  CUTLASS_PRAGMA_UNROLL
  for (int j = 0; j < 8; ++j) v[j] = (t < m && kc + j < k) ? x[size_t(t) * k + kc + j] : Element(0.f);
  return *reinterpret_cast<uint4*>(v);
}

// The transpose's shared-memory tile: [k][token], unpadded (128-byte rows of eight 16-byte chunks), chunk q of row
// r stored at q ^ swz(r). A warp loads 16 tokens x 32 contiguous bytes of k (one sector per token) and stores, per element,
// 2 rows r, r + 8 x 16 tokens: swz differs between them in bits 1-2, so the 4 chunks touched are distinct (one
// wavefront). The read side moves whole 16-byte chunks, 4 full rows per warp (4 wavefronts for 512 bytes).
__device__ __forceinline__ int tr_swz(int r) { return (r ^ ((r >> 3) << 1)) & 7; }

__global__ void __launch_bounds__(256) transpose_swizzled(const Element* __restrict__ x, Element* __restrict__ xt,
                                                          int m, int k, int padded_k, int ldx) {
  __shared__ alignas(16) Element tile[kTr * kTr];  // [k][token], swizzled 16-byte chunks
  const int t0 = blockIdx.x * kTr, k0 = blockIdx.y * kTr;
  const bool vec = k % 8 == 0;
  uint4 v[2];
  CUTLASS_PRAGMA_UNROLL
  for (int it = 0; it < 2; ++it) {  // all loads in flight before the first store
    int i = it * 256 + threadIdx.x, rest = i / 32;
    int r = (rest % 4) * 16 + i % 16, c = ((rest / 4) * 2 + (i / 16) % 2) * 8;  // token r, k offset c
    v[it] = load_x8(x, m, k, t0 + r, k0 + c, vec);
  }
  CUTLASS_PRAGMA_UNROLL
  for (int it = 0; it < 2; ++it) {
    int i = it * 256 + threadIdx.x, rest = i / 32;
    int r = (rest % 4) * 16 + i % 16, c = ((rest / 4) * 2 + (i / 16) % 2) * 8;
    const Element* e = reinterpret_cast<const Element*>(&v[it]);
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < 8; ++j) {
      int kk = c + j;
      tile[kk * kTr + (((r >> 3) ^ tr_swz(kk)) << 3) + (r & 7)] = e[j];
    }
  }
  __syncthreads();
  CUTLASS_PRAGMA_UNROLL
  for (int it = 0; it < 2; ++it) {
    int i = it * 256 + threadIdx.x, kr = i / 8, q = i % 8;  // k row kr, token chunk q
    int kg = k0 + kr, t = t0 + q * 8;
    if (kg < padded_k && t < ldx) {
      *reinterpret_cast<uint4*>(xt + size_t(kg) * ldx + t) =
          *reinterpret_cast<const uint4*>(&tile[kr * kTr + ((q ^ tr_swz(kr)) << 3)]);
    }
  }
}

void transpose(const Element* x, Element* xt, int m, int k, int padded_k, int ldx, cudaStream_t stream) {
  dim3 grid((ldx + kTr - 1) / kTr, (padded_k + kTr - 1) / kTr);
  transpose_swizzled<<<grid, 256, 0, stream>>>(x, xt, m, k, padded_k, ldx);
}

__global__ void __launch_bounds__(kThreads, 1) vnm_kernel(__grid_constant__ const Params p) {
  extern __shared__ __align__(1024) char smem_raw[];
  SharedStorage& smem = *reinterpret_cast<SharedStorage*>(smem_raw);
  const int wg = threadIdx.x / 128;
  int m_tile, n_tile;
  cnm::cta_tile<kRaster, kClusterN>(p, m_tile, n_tile);

  Pipeline pipeline = cnm::gathered_pipeline<Mainloop, kConsumers, kClusterN, ClusterShape>(smem.pipeline, wg);

  if (wg == 0) {
    cutlass::arch::warpgroup_reg_dealloc<40>();
    if (threadIdx.x == 0) {
      cute::prefetch_tma_descriptor(p.mainloop.tma_load_a.get_tma_descriptor());
      cute::prefetch_tma_descriptor(p.mainloop.tma_load_e.get_tma_descriptor());
    }
    produce(p, pipeline, smem, m_tile, n_tile);
  } else {
    cutlass::arch::warpgroup_reg_alloc<232>();
    const int thread_idx = threadIdx.x - 128;
    TiledMma tiled_mma;
    Tensor accum = partition_fragment_C(tiled_mma, take<0, 2>(TileShape{}));
    cute::conditional_t<kMmaPipe == 1, cnm::PipelinedSparseMma<Mainloop>, Mainloop> collective;
    const int k_tiles = p.kg / kTileK;
    PipeState read;
    collective.mma(pipeline, read, accum, k_tiles, thread_idx, smem.tensors, p.mainloop);
    collective.mma_tail(pipeline, read, k_tiles);
    if constexpr (kGlu == 1) {
      epilogue_glu(p, accum, thread_idx, m_tile, n_tile);
    } else {
      epilogue(p, accum, thread_idx, m_tile, n_tile);
    }
  }
}
}  // namespace cnm_vnm

namespace cnm_vnm {
// The kernel's parameters for a problem (x already transposed into xt, or xt filled before the launch).
Params make_params(const void* a, const void* e, const int* gidx, const void* xt, void* y, const void* bias, int n,
                   int m, int padded_k, int ldx, int kg, int v) {
  auto problem = cute::make_shape(n, ldx, kg, 1);
  typename Mainloop::Arguments args{
      static_cast<Element const*>(a), SparseConfig::fill_layoutA(problem), static_cast<Element const*>(xt),
      cutlass::make_cute_packed_stride(typename Mainloop::StrideB{}, cute::make_shape(ldx, kg, 1)),
      static_cast<typename Mainloop::ElementE const*>(e), SparseConfig::fill_layoutE(problem)};
  Params p{Mainloop::to_underlying_arguments(problem, args, nullptr),
           gidx,
           static_cast<Element const*>(xt),
           static_cast<Element const*>(bias),
           static_cast<ElementOut*>(y),
           n,
           m,
           ldx,
           kg,
           v / kTileM,
           padded_k,
           (n + kTileM - 1) / kTileM,
           ((m + kTileN - 1) / kTileN + kClusterN - 1) / kClusterN * kClusterN,
           1};
  p.raster_group = cnm::raster_group(p.n_tiles, kClusterN, kTileN * sizeof(Element), padded_k);
  return p;
}

// Launches the kernel on p. 0 on success, else 1000 + cudaError_t.
int launch(Params const& p, cudaStream_t stream) {
  return cnm::launch_tiles<kRaster, kClusterN, kThreads>(vnm_kernel, p, int(sizeof(SharedStorage)), stream);
}

using Plan = cnm::Plan<Params>;
}  // namespace cnm_vnm

using namespace cnm_vnm;

extern "C" {

int cnm_abi_version() { return 4; }

// Logical K columns of one metadata atom: the weight's sm90 layout must have been built for this.
int cnm_meta_atom_k() { return int(cute::size<1>(typename SparseConfig::TensorEAtom{})); }

int cnm_smem_bytes() { return int(sizeof(SharedStorage)); }

// The per-call transpose alone (for profiling): xt(padded_k x ldx) = x(m x k)^T. 0 on success.
int cnm_transpose(const void* x, void* xt, int m, int k, int padded_k, int ldx, cudaStream_t stream) {
  transpose(static_cast<Element const*>(x), static_cast<Element*>(xt), m, k, padded_k, ldx, stream);
  cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : 1000 + int(err);
}

// y(m x n) = gather(x) * Wg^T. a: n x kg/2 values, e: sm90 metadata, gidx: blocks x kg, x: m x k, xt: scratch of
// padded_k x ldx (ldx = m rounded up to 8), filled here; x null: xt already holds x transposed (zeros in rows past
// k that the gather index names). kGlu = 1: y is hT ((n / 2) x ldx). 0 on success, else 1000 + cudaError_t.
int cnm_run(const void* a, const void* e, const int* gidx, const void* x, void* xt, void* y, const void* bias, int n,
            int m, int k, int padded_k, int ldx, int kg, int v, cudaStream_t stream) {
  if (x != nullptr) transpose(static_cast<Element const*>(x), static_cast<Element*>(xt), m, k, padded_k, ldx, stream);
  return launch(make_params(a, e, gidx, xt, y, bias, n, m, padded_k, ldx, kg, v), stream);
}

// Bytes of a caller-owned buffer that holds one Plan (any alignment).
size_t cnm_plan_bytes() { return cnm::plan_bytes<Params>(); }

// Fills the plan in buf: cnm_run's weight and shape arguments; xt only shapes B's (unused) TMA descriptor.
int cnm_plan(void* buf, const void* a, const void* e, const int* gidx, const void* xt, int n, int m, int k,
             int padded_k, int ldx, int kg, int v) {
  Plan* plan = cnm::aligned_plan<Params>(buf);
  plan->p = make_params(a, e, gidx, xt, nullptr, nullptr, n, m, padded_k, ldx, kg, v);
  plan->k = k;
  return 0;
}

// cnm_run from a plan: only x, xt, y and bias change per call (plain pointers of the parameters).
int cnm_launch(void* buf, const void* x, void* xt, void* y, const void* bias, cudaStream_t stream) {
  Plan* plan = cnm::aligned_plan<Params>(buf);
  Params& p = plan->p;
  if (x != nullptr)
    transpose(static_cast<Element const*>(x), static_cast<Element*>(xt), p.m, plan->k, p.padded_k, p.ldx, stream);
  p.xt = static_cast<Element const*>(xt);
  p.y = static_cast<ElementOut*>(y);
  p.bias = static_cast<Element const*>(bias);
  return launch(p, stream);
}

// A remembered call's arguments but x, y and the stream: its plan, its stream's transpose scratch and the bias.
struct RepeatArgs {
  void* plan;
  void* xt;
  const void* bias;
};

size_t cnm_run_args_bytes() { return sizeof(RepeatArgs); }

// cnm_launch with a remembered call's packed arguments: the launch it repeats.
int cnm_repeat(const void* packed, const void* x, void* y, cudaStream_t stream) {
  const RepeatArgs& r = *static_cast<const RepeatArgs*>(packed);
  return cnm_launch(r.plan, x, r.xt, y, r.bias, stream);
}

}  // extern "C"

#ifdef CNM_GLU_PROBE
// nvcc -DCNM_GLU_PROBE ... -o probe && ./probe: prints the number of (thread, accumulator) pairs that break what
// epilogue_glu assumes (0 expected: MMA_M = 1 is row + 128 at the same token; accumulators 2i, 2i + 1 are
// tokens t, t + 1 with t even), then the number checked.
#include <cstdio>
int main() {
  TiledMma tiled_mma;
  long bad = 0, checked = 0;
  for (int t = 0; t < 128 * kConsumers; ++t) {
    auto thr = tiled_mma.get_thread_slice(t);
    Tensor c = thr.partition_C(make_identity_tensor(make_shape(Int<kTileM>{}, Int<kTileN>{})));
    for (int j = 0; j < size<2>(c); ++j)
      for (int v = 0; v < size<0>(c); ++v) {
        auto g = c(v, 0, j), u = c(v, 1, j), first = c(v & ~1, 0, j);
        bad += get<0>(u) != get<0>(g) + kTileM / 2 || get<1>(u) != get<1>(g) || get<0>(g) >= kTileM / 2;
        bad += get<0>(first) != get<0>(g) || get<1>(g) != get<1>(first) + (v & 1) || get<1>(first) % 2;
        ++checked;
      }
  }
  printf("%ld %ld\n", bad, checked);
  return 0;
}
#endif

#ifdef CNM_HOST_PROBE
// nvcc -DCNM_HOST_PROBE ... -o probe && ./probe: prints the number of B elements whose batched-producer address
// differs from CuTe's swizzled layout (0 expected), over every token chunk, thread row, pass and stage.
#include <cstdio>
int main() {
  const uintptr_t base = 1u << 20;  // any 1024-byte aligned shared-memory address
  Tensor sB = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(base)), SmemLayoutB{});
  long bad = 0, checked = 0;
  for (int s = 0; s < kStages; ++s)
    for (int r0 = 0; r0 < kStep; ++r0)
      for (int i = 0; i < kPasses; ++i)
        for (int n = 0; n < kTileN; ++n) {
          uint32_t thread_base = uint32_t(base) + (b_offset(n / 8 * 8, r0, 0) + b_offset(0, 0, s)) * sizeof(Element);
          uint32_t mine = b_swizzle(thread_base + b_offset(0, i * kStep, 0) * sizeof(Element)) + (n % 8) * sizeof(Element);
          uint32_t cute_addr = uint32_t(reinterpret_cast<uintptr_t>(raw_pointer_cast(&sB(n, r0 + i * kStep, s))));
          bad += mine != cute_addr;
          ++checked;
        }
  printf("%ld %ld\n", bad, checked);
  return 0;
}
#endif
