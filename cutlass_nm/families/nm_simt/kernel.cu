// cutlass_nm: general N:M SpMM on CUDA cores (fp32 FMA), C ABI launcher; the template of families/nm_simt.
// y(m x n) = x(m x k) * W^T (+ bias), W in the general N:M format (formats/nm.py), in family.py's simt_layout:
//   wt   [nnz_pad][n_pad] float  the kept weights, compressed-k major (a CTA's rows are contiguous)
//   cols [n_pad / vector][nnz_pad] int32  column of each kept weight *within its k-tile* (shared by a vector
//        of rows); nnz_pad = G_pad * N with the group count padded to a multiple of the k-tile's groups
// A CTA owns kBR rows of W x kBT tokens; each k-tile is `kgroups` groups of M columns of x staged in shared
// memory and `kgroups * N` compressed steps. A thread owns kTR consecutive rows x kTT tokens; a warp is 4 row
// groups x 8 token groups, so with vector >= kTR every thread needs one column per step and the lanes of a row
// group read x as a broadcast. Modes: 1 (16-byte cp.async of token-major x, compile-time pitch), 2 (x_transposed:
// x^T [k][m] from a prep kernel, staged column-major, a thread's tokens read as float4s) and 0 (general: any k
// alignment, any M, vector < kTR; runtime geometry, scalar x loads). With kTma (mode 2, sm_90) a producer warp
// fills each stage's x^T tile, kept weights and column indices by three TMA copies (the indices by cp.async where
// their rows are not 16-byte multiples), completing on the stage's full mbarrier, and the computing warps release
// stages on empty mbarriers (no CTA-wide barrier in the k loop).
// Per-config numbers that family.py also uses are substituted from it and re-derived here by static_assert.
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <cuda.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cutlass/arch/memory_sm80.h>
#include <cutlass/cuda_host_adapter.hpp>

namespace {
using Element = ${element};  // input/bias type; x is widened to float first when it is not float
constexpr int kBR = ${block_rows};
constexpr int kBT = ${block_tokens};
constexpr int kTR = ${thread_rows};
constexpr int kTT = ${thread_tokens};
constexpr int kKC = ${k_cols};  // target dense columns per k-tile
constexpr int kStages = ${stages};
constexpr int kSplit = ${split_k};
constexpr bool kTransposed = ${x_transposed};  // mode 2 where the fast path applies
constexpr bool kTma = ${tma};  // mode 2: stages filled by TMA where the GPU has it (sm_90)
constexpr int kMaxGroup = ${max_group};  // the largest M the launcher accepts
// split-K sums (split_reduce): 0 = partials in the workspace + the split_reduce kernel; 1 = every split adds into y
// (fp32, zeroed first); 2 = the split's CTAs run as one thread block cluster and sum the tile through distributed
// shared memory (sm_90), each storing a 1 / kSplit slice of it (before sm_90: as 0, Params::cluster false);
// 3 = only the last partial wave splits: with T tiles and S CTAs resident at once, the first floor(T / S) x S tiles
// (Params::dp) run their whole k and store, the rest split k kSplit ways and add into y as with 1 (T <= S: all split)
constexpr bool kTailSplit = kSplit > 1 && ${split_reduce} == 3;
constexpr bool kAtomicSplit = kSplit > 1 && (${split_reduce} == 1 || kTailSplit);
constexpr bool kClusterSplit = kSplit > 1 && ${split_reduce} == 2;
// k_warps: groups of warps that each cover the whole CTA tile and split every k-tile's kept steps between them (group
// g takes the g-th run of steps, a multiple of 4 long); after the k loop the groups' sums meet in shared memory and
// group 0 writes the tile.
constexpr int kKWarps = ${k_warps};
constexpr int kWarpRows = 4 * kTR, kWarpTokens = 8 * kTT;
constexpr int kWarpsR = kBR / kWarpRows, kWarpsT = kBT / kWarpTokens;
constexpr int kGroupWarps = kWarpsR * kWarpsT;  // the warps of one k group
constexpr int kThreads = 32 * kGroupWarps * kKWarps;
// two CTAs per SM where 128 registers per thread hold the tile (the compiler may otherwise take more and
// halve the resident warps); family.py: ctas_per_sm
constexpr int kMinBlocks = ${min_blocks};
static_assert(kMinBlocks == (kTR * kTT <= 64 && kThreads <= 256 ? 2 : 1), "family.py's ctas_per_sm drifted");
// kTma at one CTA per SM: a producer warpgroup after the computing warps fills the stages (one warp of it works).
// A 9th warp alone would put 3 warps on one scheduler and cap every thread at 168 registers (a sub-partition's
// 16384 / 96), spilling the 8 x 16 tile's ~210; so the producer is a whole warpgroup that gives its registers back
// (setmaxnreg 40) and the computing warpgroups take kConsumerRegs. Two CTAs per SM (128-register tiles) or other
// than 128 or 256 computing threads (512 would leave them < 128 registers): computing warp 0 fills the stages.
// family.py: producer_threads
constexpr int kProducerThreads = ${producer_threads};
constexpr bool kOwnProducer = kProducerThreads > 0;
static_assert(kOwnProducer == (kTma && kMinBlocks == 1 && (kThreads == 128 || kThreads == 256)) &&
              kProducerThreads == (kOwnProducer ? 128 : 0), "family.py's producer_threads drifted");
constexpr int kProducerRegs = 40;
// setmaxnreg moves registers within the CTA's launch allocation (ptxas's count, a multiple of 8 up to 65536 / threads):
// the computing warps may take only what the producer group gives back, or setmaxnreg.inc waits forever
constexpr int kEntryRegs = std::min(255, 65536 / (kThreads + 128)) / 8 * 8;
constexpr int kConsumerRegs =
    kOwnProducer ? std::min(240, (kEntryRegs * (kThreads + 128) - 128 * kProducerRegs) / kThreads / 8 * 8) : 0;
static_assert(!kOwnProducer || kConsumerRegs >= 200, "the computing warps' register tile needs ~210 registers");
static_assert(!kOwnProducer || kThreads * kConsumerRegs + 128 * kProducerRegs <= kEntryRegs * (kThreads + 128),
              "setmaxnreg cannot hand out more registers than the CTA was launched with");
// Chained k-tiles in the TMA loop (below): always for 16-row thread tiles (one k group), for 8 x 16 tiles with chain.
constexpr bool kChain = kKWarps == 1 && (kTR >= 16 || (${chain} && kTR * kTT == 128));
// Shared memory: the config's terms of family.py's smem_bound (which states the whole formula); cnm_run adds the
// pattern's and vector's stage size at run time.
constexpr int kPitchFast = ${pitch_fast};  // mode 1: floats per token row; = 4 mod 8 words: 8 tokens, 8 bank groups
constexpr int kPitchT = ${pitch_t};        // mode 2: floats per column of the x^T tile (TMA boxes: unpadded)
constexpr int kSumTileBytes = ${sum_tile_bytes};  // the tile of sums that reuses the stages after the k loop
constexpr int kBarrierBytes = ${barrier_bytes};   // per stage: kTma's full and empty mbarriers
static_assert(kPitchFast == kKC + 4 && kPitchT == (kTma ? kBT : kBT + 4), "family.py's pitches drifted");
static_assert(kSumTileBytes == (kClusterSplit || kKWarps > 1 ? kBR * kBT * 4 : 0), "family.py's sum_tile drifted");
static_assert(kBarrierBytes == (kTma ? 16 : 0), "family.py's barrier bytes drifted");
static_assert(kTT % 4 == 0, "mode 2 reads a thread's tokens as float4s");
static_assert(kBR % kWarpRows == 0 && kBT % kWarpTokens == 0, "tile must be a whole number of warps");
static_assert(kTR % 4 == 0, "thread rows are read as float4");
static_assert(kKC % 8 == 0, "k_cols must be a multiple of 8");

struct Params {
  const float* x;  // m x k, row-major (modes 0, 1); mode 2: x^T, k x m_pad
  int m_pad;
  const float* wt;
  const int* cols;
  const Element* bias;
  void* y;         // m x n (Out) or the split-K partials [kSplit][m][n] float
  int m, n, k, keep, group, vector, kgroups, ktd, ktc, pitch, nvb, n_pad, nnz_pad, ktiles;
  int x_bytes, w_bytes, stage_bytes;
  int idx_tma;     // kTma: the column indices by TMA (tma_c: ktc % 4 == 0, cols 16-byte aligned), else by cp.async
  int bar_offset;  // kTma: bytes from the start of shared memory to the stages' mbarriers (past kClusterSplit's tile)
  bool cluster;    // kClusterSplit on a GPU with clusters (sm_90+): the split's CTAs sum through DSMEM, else partials
  int tiles_x;     // kTailSplit: row tiles (CTA b's tile is b, or dp + (b - dp) / kSplit, row tile first)
  int dp;          // kTailSplit: tiles run whole (a multiple of the resident CTAs)
  CUtensorMap tma_x, tma_w;  // kTma: x^T (k x m_pad, boxes kBT x ktd) and the kept weights (nnz_pad x n_pad, kBR x ktc)
  CUtensorMap tma_c;         // idx_tma: the column indices (n_pad / vector x nnz_pad int32, boxes ktc x nvb)
};

// CNM_TRACE (benchmarks/trace_nm_simt.py only; never defined by the library): with tma, per CTA and k-tile, the SM
// clock when warp 0 issued the tile's copies (0), when warp 1 began waiting for it (1) and when the wait ended (2),
// into cnm_trace_buf[CTA][tile], read back by cnm_trace_read; the last tile slot holds the CTA's entry and exit
// (warp 1 after its epilogue) on the SM clock and its entry on the global timer (ns).
#ifdef CNM_TRACE
constexpr int kTraceCtas = 1024, kTraceTiles = 128;
__device__ long long cnm_trace_buf[kTraceCtas][kTraceTiles][3];
__device__ __forceinline__ void trace_mark(int tile, int what) {
  const int cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  if (cta < kTraceCtas && tile < kTraceTiles) cnm_trace_buf[cta][tile][what] = clock64();
}
__device__ __forceinline__ void trace_cta(int what) {  // 0: entry, 1: exit (SM clock); 2: entry (global timer)
  const int cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  long long now;
  if (what == 2)
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  else
    now = clock64();
  if (cta < kTraceCtas) cnm_trace_buf[cta][kTraceTiles - 1][what] = now;
}
#else
__device__ __forceinline__ void trace_mark(int, int) {}
__device__ __forceinline__ void trace_cta(int) {}
#endif

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// A thread's kTR weights of one k step (16-byte shared-memory loads).
__device__ __forceinline__ void load_w(const float* w, float (&wv)[kTR]) {
#pragma unroll
  for (int a = 0; a < kTR; a += 4) {
    const float4 w4 = *reinterpret_cast<const float4*>(w + a);
    wv[a] = w4.x; wv[a + 1] = w4.y; wv[a + 2] = w4.z; wv[a + 3] = w4.w;
  }
}

// A thread's kTT x values at column ``col`` of the stage (xs already offset to the thread's first token):
// mode 2 reads float4s along a column-major x^T tile, mode 1 scalars along token-major rows.
template <int kMode>
__device__ __forceinline__ void load_x(const float* xs, int col, float (&xv)[kTT]) {
  if constexpr (kMode == 2) {
    const float* xp = xs + col * kPitchT;
#pragma unroll
    for (int b = 0; b < kTT; b += 4) {
      const float4 x4 = *reinterpret_cast<const float4*>(xp + b * 8);
      xv[b] = x4.x; xv[b + 1] = x4.y; xv[b + 2] = x4.z; xv[b + 3] = x4.w;
    }
  } else {
    const float* xp = xs + col;
#pragma unroll
    for (int b = 0; b < kTT; ++b) xv[b] = xp[b * 8 * kPitchFast];
  }
}

// kAtomicSplit: add into fp32 y (one vector reduction of 16 bytes on sm_90, four scalar ones before).
__device__ __forceinline__ void add4(float* p, float a, float b, float c, float d) {
#if __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
#else
  atomicAdd(p, a); atomicAdd(p + 1, b); atomicAdd(p + 2, c); atomicAdd(p + 3, d);
#endif
}

// Four consecutive outputs as one store: 16 bytes of float, 8 of a 16-bit type.
__device__ __forceinline__ void store4(float* p, float a, float b, float c, float d) {
  *reinterpret_cast<float4*>(p) = make_float4(a, b, c, d);
}
template <class T>
__device__ __forceinline__ void store4(T* p, float a, float b, float c, float d) {
  alignas(8) T v[4];
  store(v, a); store(v + 1, b); store(v + 2, c); store(v + 3, d);
  *reinterpret_cast<uint2*>(p) = *reinterpret_cast<const uint2*>(v);
}

#if __CUDA_ARCH__ >= 900
__device__ __forceinline__ void cluster_sync() {  // every thread of every CTA of the cluster
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
#else
__device__ __forceinline__ void cluster_sync() {}
#endif

// Programmatic dependent launch (sm_90+): cnm_run launches the GEMM (and split_reduce) with it after a kernel of its
// own, so the next grid's launch and prologue overlap this grid's tail. A kernel lets the next one launch at entry
// (its CTAs then take the SMs this grid leaves) and waits, before reading or writing global memory, until the previous
// grid finished and its writes are visible. Both are no-ops in a kernel launched without the attribute.
__device__ __forceinline__ void pdl_enter() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// kClusterSplit: a CTA's tile of sums in its shared memory, [kBT][kBR] floats, each token's 16-byte chunks of rows
// XOR-swizzled so that a warp's float4 stores (mode 2: 8 token lanes 4 tokens apart x 4 row groups) cover all 8 bank
// groups evenly; the float offset of (token t, row r), r a multiple of 4.
template <int kMode>
__device__ __forceinline__ int tile_at(int t, int r) {
  static_assert(kBR % 32 == 0, "the swizzle permutes groups of 8 chunks of a token's rows");
  const int key = kMode == 2 ? (t >> 2) & 7 : t & 7;
  return t * kBR + (((r >> 2) ^ key) << 2);
}

// kClusterSplit: the thread's accumulators into the CTA's tile (token order as write_tile's). Each value goes out as
// acc + 0 (an FADD into a fresh register, as write_tile's bias add): a float4 of the accumulators themselves makes
// ptxas keep acc[a..a+3][b] in four consecutive registers through the k loop, whose FFMAs then read an x register
// and an accumulator of the same register bank about twice as often (SASS of the 128 x 256 cluster kernel: 0.39 bank
// conflicts an FFMA in the quad loop against the atomic kernel's 0.17; with the add, 0.18).
template <int kMode>
__device__ __forceinline__ void stash_tile(float* tile, int rloc, int tloc, const float (&acc)[kTR][kTT]) {
#pragma unroll
  for (int b = 0; b < kTT; ++b) {
    const int t = tloc + (kMode == 2 ? (b / 4) * 32 + b % 4 : 8 * b);
#pragma unroll
    for (int a = 0; a < kTR; a += 4)
      *reinterpret_cast<float4*>(tile + tile_at<kMode>(t, rloc + a)) =
          make_float4(acc[a][b] + 0.f, acc[a + 1][b] + 0.f, acc[a + 2][b] + 0.f, acc[a + 3][b] + 0.f);
  }
}

// kKWarps > 1: group 1's sums (stashed as stash_tile does) added into this group-0 thread's accumulators.
template <int kMode>
__device__ __forceinline__ void add_tile(const float* tile, int rloc, int tloc, float (&acc)[kTR][kTT]) {
#pragma unroll
  for (int b = 0; b < kTT; ++b) {
    const int t = tloc + (kMode == 2 ? (b / 4) * 32 + b % 4 : 8 * b);
#pragma unroll
    for (int a = 0; a < kTR; a += 4) {
      const float4 v = *reinterpret_cast<const float4*>(tile + tile_at<kMode>(t, rloc + a));
      acc[a][b] += v.x; acc[a + 1][b] += v.y; acc[a + 2][b] += v.z; acc[a + 3][b] += v.w;
    }
  }
}

// The thread's tile to y (m x n, row-major; ``bias`` may be null): for each of its tokens, its kTR consecutive
// rows are consecutive in y, so they go out as kTR / 4 vector stores when n is a multiple of 4, y is 16-byte
// aligned and all kTR rows exist (one scalar store per element took a sector per 4 bytes); else element-wise.
template <int kMode, bool kAdd = false, class T>
__device__ __forceinline__ void write_tile(T* y, const Params& p, const Element* bias, int r0, int t0,
                                           const float (&acc)[kTR][kTT]) {
  static_assert(!kAdd || std::is_same_v<T, float>, "split sums are added into an fp32 output");
  const bool vec = (p.n & 3) == 0 && (reinterpret_cast<uintptr_t>(y) & 15) == 0 && r0 + kTR <= p.n;
  float bv[kTR];
#pragma unroll
  for (int a = 0; a < kTR; ++a) bv[a] = bias && r0 + a < p.n ? to_float(bias[r0 + a]) : 0.f;
#pragma unroll
  for (int b = 0; b < kTT; ++b) {
    const int t = t0 + (kMode == 2 ? (b / 4) * 32 + b % 4 : 8 * b);
    if (t >= p.m) continue;
    T* row = y + static_cast<int64_t>(t) * p.n + r0;
    if (vec) {
#pragma unroll
      for (int a = 0; a < kTR; a += 4) {
        if constexpr (kAdd)
          add4(row + a, acc[a][b] + bv[a], acc[a + 1][b] + bv[a + 1], acc[a + 2][b] + bv[a + 2],
               acc[a + 3][b] + bv[a + 3]);
        else
          store4(row + a, acc[a][b] + bv[a], acc[a + 1][b] + bv[a + 1], acc[a + 2][b] + bv[a + 2],
                 acc[a + 3][b] + bv[a + 3]);
      }
    } else {
#pragma unroll
      for (int a = 0; a < kTR; ++a) {
        if (r0 + a >= p.n) continue;
        if constexpr (kAdd) atomicAdd(row + a, acc[a][b] + bv[a]);
        else store(row + a, acc[a][b] + bv[a]);
      }
    }
  }
}

// kClusterSplit, after the cluster's tiles are stashed: this CTA (cluster rank = split) sums tokens [rank x per,
// (rank + 1) x per) of the tile over the kSplit CTAs' shared memories in rank order (deterministic), adds the bias
// and stores them to y; a warp reads 32 consecutive 16-byte chunks of a token's rows from each CTA.
template <int kMode, class Out>
__device__ __forceinline__ void cluster_reduce(const Params& p, const float* tile, int row0, int tok0) {
#if __CUDA_ARCH__ >= 900
  constexpr int kChunks = kBR / 4;
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  const uint32_t local = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
  uint32_t peer[kSplit];
#pragma unroll
  for (int q = 0; q < kSplit; ++q)
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(peer[q]) : "r"(local), "r"(q));
  const int per = (kBT + kSplit - 1) / kSplit;
  const int t0 = int(rank) * per, t1 = min(kBT, t0 + per);
  Out* y = static_cast<Out*>(p.y);
  const bool vec = (p.n & 3) == 0 && (reinterpret_cast<uintptr_t>(y) & (4 * sizeof(Out) - 1)) == 0;
  for (int u = threadIdx.x; u < (t1 - t0) * kChunks; u += kThreads) {
    const int t = t0 + u / kChunks, c = u % kChunks;
    const int tok = tok0 + t, r = row0 + 4 * c;
    if (tok >= p.m || r >= p.n) continue;
    const uint32_t off = 4u * tile_at<kMode>(t, 4 * c);
    float s[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int q = 0; q < kSplit; ++q) {
      float v0, v1, v2, v3;
      asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
                   : "=f"(v0), "=f"(v1), "=f"(v2), "=f"(v3) : "r"(peer[q] + off) : "memory");
      s[0] += v0; s[1] += v1; s[2] += v2; s[3] += v3;
    }
#pragma unroll
    for (int a = 0; a < 4; ++a)
      if (p.bias && r + a < p.n) s[a] += to_float(p.bias[r + a]);
    Out* out = y + static_cast<int64_t>(tok) * p.n + r;
    if (vec && r + 4 <= p.n) {
      store4(out, s[0], s[1], s[2], s[3]);
    } else {
#pragma unroll
      for (int a = 0; a < 4; ++a)
        if (r + a < p.n) store(out + a, s[a]);
    }
  }
#endif
}

// acc += wv ⊗ xv: one k step of the thread's kTR x kTT register tile, along the longer side of the tile with every
// other line reversed, so consecutive FMAs always share one operand register (the reuse cache's) and each line starts
// on the register the line before ended on. Chained 8 x 16 tiles walk tokens from the last, rows alternately down
// and up (fewer register-bank conflicts in their SASS than the row order).
__device__ __forceinline__ void outer_fma(const float (&wv)[kTR], const float (&xv)[kTT], float (&acc)[kTR][kTT]) {
  constexpr bool kFromLast = kTR < kTT && kChain;        // token lines from the last
  constexpr bool kByToken = kTR > kTT || kFromLast;      // lines of one token (else of one row)
  constexpr int kLines = kByToken ? kTT : kTR, kLength = kByToken ? kTR : kTT;
#pragma unroll
  for (int l = 0; l < kLines; ++l)
#pragma unroll
    for (int e = 0; e < kLength; ++e) {
      const int line = kFromLast ? kLines - 1 - l : l, along = (l & 1) ? kLength - 1 - e : e;
      const int a = kByToken ? along : line, b = kByToken ? line : along;
      acc[a][b] = fmaf(wv[a], xv[b], acc[a][b]);
    }
}

// Steps 0-2 of a quad of kept steps whose step 0 fragments are in (xa, wa): steps 1-3's fragments (columns c1-c3 of
// the stage, weights from w + kBR) are read under the FMAs of the step before. The caller then reads the next quad's
// step 0 into (xa, wa) and runs step 3 (outer_fma(wb, xb, acc)).
template <int kMode>
__device__ __forceinline__ void quad_head(const float* xs, const float* w, int c1, int c2, int c3, float (&xa)[kTT],
                                          float (&wa)[kTR], float (&xb)[kTT], float (&wb)[kTR],
                                          float (&acc)[kTR][kTT]) {
  load_x<kMode>(xs, c1, xb);
  load_w(w + kBR, wb);
  outer_fma(wa, xa, acc);
  load_x<kMode>(xs, c2, xa);
  load_w(w + 2 * kBR, wa);
  outer_fma(wb, xb, acc);
  load_x<kMode>(xs, c3, xb);
  load_w(w + 3 * kBR, wb);
  outer_fma(wa, xa, acc);
}

// One k-tile into one pipeline stage: x (mode 2: x^T [ktd][kPitchT]; else token-major [kBT][pitch]), W [ktc][kBR],
// cols [nvb][ktc]; out-of-range tokens and columns are zero-filled. The copy plan is computed once per thread:
// every source address of k-tile kt is a base pointer moved by kt tiles plus a fixed stride per chunk, so a
// chunk costs a pointer add, a compare and the cp.async (recomputing each address from its indices cost ~28
// instructions per 16-byte chunk). Mode 0 (any alignment) copies x by 4-byte elements.
template <int kMode>
struct TileCopier {
  static constexpr int kChunks = kBT / 4;        // mode 2: 16-byte chunks per row of the x^T tile
  static constexpr int kRowStep = kThreads / kChunks;
  static constexpr int kWChunks = kBR / 4;       // 16-byte chunks per compressed step of W
  static constexpr int kWStep = kThreads / kWChunks;
  static_assert(kMode != 2 || kThreads % kChunks == 0, "mode 2: threads must cover whole x^T rows");
  static_assert(kThreads % kWChunks == 0, "threads must cover whole W steps");

  const float* x0;   // this thread's first x chunk at k-tile 0
  int64_t x_step;    // elements between this thread's successive x chunks (rows of x^T or tokens)
  int x_first, x_stride, x_limit;  // mode 2: first row, row step, rows; mode 1: first token, token step, tokens
  int x_dst, x_dst_step;           // floats into the stage
  int x_col;                       // mode 1: the chunk's column within the tile (-1: this thread copies no x)
  bool tok_ok;                     // mode 2: the chunk's tokens exist
  const float* w0;
  int64_t w_step;
  int w_first, w_dst;
  const int* c0;
  int row0_, vb0_;

  __device__ TileCopier(const Params& p, int row0, int tok0, int vb0) {
    const int t = threadIdx.x;
    if (kMode == 2) {
      const int c = (t % kChunks) * 4;
      x_first = t / kChunks; x_stride = kRowStep; x_limit = p.ktd;
      x0 = p.x + static_cast<int64_t>(x_first) * p.m_pad + tok0 + c;
      x_step = static_cast<int64_t>(kRowStep) * p.m_pad;
      x_dst = x_first * kPitchT + c; x_dst_step = kRowStep * kPitchT;
      tok_ok = tok0 + c < p.m_pad; x_col = 0;
    } else if (kMode == 1) {  // chunk column x_col of every x_stride-th token from x_first
      const int cpr = p.ktd / 4, step = kThreads / cpr;
      x_col = t < step * cpr ? (t % cpr) * 4 : -1;
      x_first = t / cpr; x_stride = step; x_limit = kBT;
      x0 = p.x + static_cast<int64_t>(tok0 + x_first) * p.k + max(x_col, 0);
      x_step = static_cast<int64_t>(step) * p.k;
      x_dst = x_first * kPitchFast + x_col; x_dst_step = step * kPitchFast;
      tok_ok = true;
    } else {  // mode 0: element loop in issue()
      x0 = p.x; x_step = 0; x_first = x_stride = x_limit = x_dst = x_dst_step = 0; x_col = -1; tok_ok = true;
    }
    w_first = t / kWChunks;
    const int r = (t % kWChunks) * 4;
    w0 = p.wt + static_cast<int64_t>(w_first) * p.n_pad + row0 + r;
    w_step = static_cast<int64_t>(kWStep) * p.n_pad;
    w_dst = w_first * kBR + r;
    c0 = p.cols + static_cast<int64_t>(vb0) * p.nnz_pad;
    row0_ = row0;
    vb0_ = vb0;
  }

  // kTma, called by the producer warp only: lane 0 arms the stage's full barrier with the bytes of its boxes and issues
  // the copies of x^T and the kept weights (out-of-range rows and tokens of x^T arrive as zeros) and, with
  // Params::idx_tma, of the column indices [nvb][ktc] (rows vb0 .. vb0 + nvb - 1, steps kt x ktc ..; the barrier
  // counts 1 arrival), so that every write to the stage goes through the async proxy; else the 32 lanes copy the
  // indices by cp.async, each lane's copies completing as one arrival on the same barrier (it counts 1 + 32).
  __device__ __forceinline__ void issue_tma(const Params& p, char* stage, uint32_t full, int kt, int tok0) const {
#if __CUDA_ARCH__ >= 900
    const int lane = threadIdx.x & 31;
    if (lane == 0) {
      const uint32_t xs = static_cast<uint32_t>(__cvta_generic_to_shared(stage));
      const uint32_t ws = xs + p.x_bytes, cs = ws + p.w_bytes;
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(full),
                   "r"(p.x_bytes + p.w_bytes + (p.idx_tma ? p.nvb * p.ktc * 4 : 0))
                   : "memory");
      asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
                   "[%4];" ::"r"(xs), "l"(reinterpret_cast<uint64_t>(&p.tma_x)), "r"(tok0), "r"(kt * p.ktd), "r"(full)
                   : "memory");
      asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
                   "[%4];" ::"r"(ws), "l"(reinterpret_cast<uint64_t>(&p.tma_w)), "r"(row0_), "r"(kt * p.ktc), "r"(full)
                   : "memory");
      if (p.idx_tma)
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}],"
                     " [%4];" ::"r"(cs), "l"(reinterpret_cast<uint64_t>(&p.tma_c)), "r"(kt * p.ktc), "r"(vb0_),
                     "r"(full)
                     : "memory");
    }
    if (!p.idx_tma) {
      issue_indices(p, stage, kt, lane, 32);
      asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(full) : "memory");
    }
#endif
  }

  __device__ __forceinline__ void issue(const Params& p, char* stage, int kt, int tok0) const {
    float* xs = reinterpret_cast<float*>(stage);
    float* ws = reinterpret_cast<float*>(stage + p.x_bytes);
    const int k0 = kt * p.ktd, j0 = kt * p.ktc;
    if constexpr (kMode == 2) {  // rows k0 + r of x^T, out-of-range rows or tokens zero-filled
      const float* src = x0 + static_cast<int64_t>(k0) * p.m_pad;
      float* dst = xs + x_dst;
      for (int r = x_first; r < x_limit; r += x_stride, src += x_step, dst += x_dst_step) {
        const bool ok = tok_ok && k0 + r < p.k;
        cutlass::arch::cp_async_zfill<16, cutlass::arch::CacheOperation::Global>(dst, ok ? src : p.x, ok);
      }
    } else if (kMode == 1) {
      if (x_col >= 0) {  // tokens tok0 + t, columns k0 + x_col .. + 4
        const bool col_ok = k0 + x_col < p.k;
        const float* src = x0 + k0;
        float* dst = xs + x_dst;
        for (int t = x_first; t < x_limit; t += x_stride, src += x_step, dst += x_dst_step) {
          const bool ok = col_ok && tok0 + t < p.m;
          cutlass::arch::cp_async_zfill<16, cutlass::arch::CacheOperation::Global>(dst, ok ? src : p.x, ok);
        }
      }
    } else {  // a warp copies 32 columns of one token
      for (int e = threadIdx.x; e < kBT * p.ktd; e += kThreads) {
        const int t = e / p.ktd, c = e - t * p.ktd;
        const int gt = tok0 + t, gk = k0 + c;
        const bool ok = gt < p.m && gk < p.k;
        const float* src = ok ? p.x + static_cast<int64_t>(gt) * p.k + gk : p.x;
        cutlass::arch::cp_async_zfill<4>(xs + t * p.pitch + c, src, ok);
      }
    }
    {  // kept weights: always in range (the layout pads rows and steps)
      const float* src = w0 + static_cast<int64_t>(j0) * p.n_pad;
      float* dst = ws + w_dst;
      for (int j = w_first; j < p.ktc; j += kWStep, src += w_step, dst += kWStep * kBR)
        cutlass::arch::cp_async<16, cutlass::arch::CacheOperation::Global>(dst, src);
    }
    issue_indices(p, stage, kt, threadIdx.x, kThreads);
  }

  // The stage's column indices [nvb][ktc] (element e = v * ktc + j) by 4-byte cp.async, elements first, first +
  // stride, ...: every thread (threadIdx.x by kThreads) for cp.async stages, warp 0's lanes (by 32) for kTma's.
  __device__ __forceinline__ void issue_indices(const Params& p, char* stage, int kt, int first, int stride) const {
    int* cs = reinterpret_cast<int*>(stage + p.x_bytes + p.w_bytes);
    const int j0 = kt * p.ktc, dv = stride / p.ktc, dj = stride - dv * p.ktc;
    int v = first / p.ktc, j = first - v * p.ktc;
    for (int e = first; e < p.nvb * p.ktc; e += stride) {
      cutlass::arch::cp_async<4>(cs + e, c0 + static_cast<int64_t>(v) * p.nnz_pad + j0 + j);
      j += dj; v += dv;
      if (j >= p.ktc) { j -= p.ktc; ++v; }
    }
  }
};

template <int kMode, class Out, bool kUseTma = false>
__global__ void __launch_bounds__(kThreads + (kUseTma ? kProducerThreads : 0), kMinBlocks)
nm_simt_kernel(__grid_constant__ const Params p) {
  static_assert(!kUseTma || kMode == 2, "TMA fills mode 2's stages only");
  constexpr bool kFast = kMode != 0;
  extern __shared__ __align__(16) char smem[];
  if (threadIdx.x == 0) {
    trace_cta(0);
    trace_cta(2);
  }
  pdl_enter();  // x^T (or widened x) and the zeroed y come from the kernel before
  // the CTA's tile and split of k; kTailSplit: a 1-D grid, `whole` tiles first
  int tile_x = blockIdx.x, tile_y = blockIdx.y, split = blockIdx.z;
  bool whole = kSplit == 1;
  if constexpr (kTailSplit) {
    const int b = blockIdx.x;
    whole = b < p.dp;
    const int tile = whole ? b : p.dp + (b - p.dp) / kSplit;
    split = whole ? 0 : (b - p.dp) % kSplit;
    tile_x = tile % p.tiles_x;
    tile_y = tile / p.tiles_x;
  }
  const int row0 = tile_x * kBR, tok0 = tile_y * kBT;
  const int vb0 = row0 / p.vector;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int group = warp / kGroupWarps, gwarp = warp % kGroupWarps;  // k group (kKWarps) and warp within it
  const int rloc = (gwarp % kWarpsR) * kWarpRows + (lane >> 3) * kTR;  // first of kTR consecutive rows
  // tokens: modes 0/1 tloc + 8 b; mode 2 tloc + 32 (b / 4) + b % 4 (4 consecutive tokens per float4)
  const int tloc = (gwarp / kWarpsR) * kWarpTokens + (lane & 7) * (kMode == 2 ? 4 : 1);
  const int pitch = kFast ? kPitchFast : p.pitch;

  // this thread's column-index row(s) within the stage
  int vrow[kTR];
#pragma unroll
  for (int a = 0; a < kTR; ++a) vrow[a] = ((row0 + rloc + a) / p.vector - vb0) * p.ktc;

  // k-tiles of this split
  const int per = whole ? p.ktiles : (p.ktiles + kSplit - 1) / kSplit;
  const int kt0 = split * per;
  const int kt1 = min(p.ktiles, kt0 + per);
  const int count = max(0, kt1 - kt0);

  float acc[kTR][kTT];
#pragma unroll
  for (int a = 0; a < kTR; ++a)
#pragma unroll
    for (int b = 0; b < kTT; ++b) acc[a][b] = 0.f;

  const TileCopier<kMode> copier(p, row0, tok0, vb0);
  // this thread's k group's steps of every k-tile: [step0, step0 + steps)
  const int group_steps = kKWarps == 1 ? p.ktc : min(p.ktc, (p.ktc + 4 * kKWarps - 1) / (4 * kKWarps) * 4);
  const int step0 = min(p.ktc, group * group_steps);
  const int steps = kKWarps == 1 ? p.ktc : min(p.ktc - step0, group_steps);
  // One k-tile from its stage into the accumulators (this group's steps of it).
  auto compute = [&](const char* stage) {
    if (steps <= 0) return;
    const float* xs = reinterpret_cast<const float*>(stage) + (kMode == 2 ? tloc : tloc * pitch);
    const float* ws = reinterpret_cast<const float*>(stage + p.x_bytes) + rloc + step0 * kBR;
    const int* cs = reinterpret_cast<const int*>(stage + p.x_bytes + p.w_bytes) + step0;
    if (kFast) {
      // Register double buffering: step j + 1's x and w fragments, and step j + 2's column, are read from
      // shared memory while step j's FMAs run, so no step waits on the index -> address -> load chain.
      const int* cp = cs + vrow[0];
      const int ktc = steps;
      float xa[kTT], wa[kTR], xb[kTT], wb[kTR];  // fragments of even (a) and odd (b) steps
      load_x<kMode>(xs, cp[0], xa);
      load_w(ws, wa);
      if (ktc % 4 == 0) {
        // Four steps per iteration (every pattern of the acceptance set at k_cols 32 / 64): their columns are
        // read one iteration ahead, the weights at fixed offsets from one pointer, so the loop costs ~7
        // non-FMA instructions per step (the two-step loop below: ~17).
        int c1 = cp[1], c2 = cp[2], c3 = cp[3];
        for (int j = 0; j < ktc; j += 4) {
          const int ahead = j + 4 < ktc ? j + 4 : j;  // the last iteration re-reads its own step (unused)
          const int n0 = cp[ahead], n1 = cp[ahead + 1], n2 = cp[ahead + 2], n3 = cp[ahead + 3];
          const float* w = ws + j * kBR;
          quad_head<kMode>(xs, w, c1, c2, c3, xa, wa, xb, wb, acc);
          load_x<kMode>(xs, n0, xa);
          load_w(ws + ahead * kBR, wa);
          outer_fma(wb, xb, acc);
          c1 = n1; c2 = n2; c3 = n3;
        }
        return;
      }
      int col = cp[min(1, ktc - 1)];
      int j = 0;
      for (; j + 2 < ktc; j += 2) {  // steps j + 1 and j + 2 exist: no guards in the steady state
        load_x<kMode>(xs, col, xb);
        load_w(ws + (j + 1) * kBR, wb);
        col = cp[j + 2];
        outer_fma(wa, xa, acc);
        load_x<kMode>(xs, col, xa);
        load_w(ws + (j + 2) * kBR, wa);
        col = cp[min(j + 3, ktc - 1)];
        outer_fma(wb, xb, acc);
      }
      if (j + 1 < ktc) {  // two steps left
        load_x<kMode>(xs, col, xb);
        load_w(ws + (j + 1) * kBR, wb);
        outer_fma(wa, xa, acc);
        outer_fma(wb, xb, acc);
      } else {
        outer_fma(wa, xa, acc);
      }
    } else {
      for (int j = 0; j < steps; ++j) {
        float wv[kTR];
        load_w(ws + j * kBR, wv);
#pragma unroll
        for (int a = 0; a < kTR; ++a) {
          const float* xp = xs + cs[vrow[a] + j];
#pragma unroll
          for (int b = 0; b < kTT; ++b) acc[a][b] = fmaf(wv[a], xp[b * 8 * pitch], acc[a][b]);
        }
      }
    }
  };

  if constexpr (kUseTma) {
#if __CUDA_ARCH__ >= 900
    // Per stage a full barrier (TMA bytes; without idx_tma also the producer lanes' index copies: issue_tma) and an
    // empty one (one arrival per computing warp once it has read the stage). The producer (kOwnProducer: a
    // warpgroup's first warp, else computing warp 0) refills a stage after every computing warp has released it; no
    // CTA-wide barrier in the loop, so a warp runs ahead of the others by up to kStages - 1 tiles. Measured
    // (trace_nm_simt.py): a computing warp 0 that also fills the stages falls ~2 tiles behind the others, which then
    // wait for its refills.
    const uint32_t bars = static_cast<uint32_t>(__cvta_generic_to_shared(smem + p.bar_offset));
    auto full = [&](int s) { return bars + 16 * s; };
    auto empty = [&](int s) { return bars + 16 * s + 8; };
    auto wait = [](uint32_t bar, int phase) {
      asm volatile("{\n.reg .pred p;\nWAIT_%=:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra WAIT_%=;\n}"
                   ::"r"(bar), "r"(phase) : "memory");
    };
    if (threadIdx.x == 0) {
#pragma unroll
      for (int s = 0; s < kStages; ++s) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(full(s)), "r"(p.idx_tma ? 1 : 33));
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(empty(s)), "r"(kThreads / 32));
      }
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    auto produce = [&](int i) {  // tile i into stage i % kStages, once the computing warps released its last tile
      const int s = i % kStages;
      if (i >= kStages) wait(empty(s), (i / kStages - 1) & 1);
      copier.issue_tma(p, smem + s * p.stage_bytes, full(s), kt0 + i, tok0);
      if (lane == 0) trace_mark(i, 0);
    };
    if constexpr (kOwnProducer) {
      if (warp >= kThreads / 32) {  // the producer warpgroup: its first warp fills every stage, the others leave
#ifdef __CUDA_ARCH_FEAT_SM90_ALL  // sm_90a (the build's Hopper target); plain sm_90 runs capped at 168 registers
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kProducerRegs));
#endif
        if (warp == kThreads / 32)
          for (int i = 0; i < count; ++i) produce(i);
        if (kClusterSplit && p.cluster) {  // the cluster's two barriers count every thread of its CTAs
          cluster_sync();
          cluster_sync();
        }
        return;  // the copies complete on the full barriers, which the computing warps wait for
      }
#ifdef __CUDA_ARCH_FEAT_SM90_ALL
      asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kConsumerRegs));
#endif
    } else if (warp == 0) {
      for (int i = 0; i < kStages && i < count; ++i) produce(i);
    }
    auto release = [&](int i) {  // tile i's stage read by this warp: the producer may refill it
      __syncwarp();
      if (lane == 0) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(empty(i % kStages)) : "memory");
      if (!kOwnProducer && warp == 0 && i + kStages < count) produce(i + kStages);
    };
    auto await = [&](int i) {  // tile i's stage filled
      if (warp == 1 && lane == 0) trace_mark(i, 1);
      wait(full(i % kStages), (i / kStages) & 1);
      if (warp == 1 && lane == 0) trace_mark(i, 2);
    };
    if (kChain && p.ktc % 4 == 0) {
      // Chained tiles (every pattern of the acceptance set): a tile's last four steps also read the next tile's
      // first x and w fragments and columns from its stage, so the index -> x -> FMA chain a tile starts with runs
      // under the last FMAs of the tile before (compute() below restarts it every tile), and the next stage's
      // full barrier is waited for one quad ahead.
      const int ktc = p.ktc;
      auto xs_of = [&](int i) {
        return reinterpret_cast<const float*>(smem + (i % kStages) * p.stage_bytes) + tloc;
      };
      auto ws_of = [&](int i) {
        return reinterpret_cast<const float*>(smem + (i % kStages) * p.stage_bytes + p.x_bytes) + rloc;
      };
      auto cp_of = [&](int i) {
        return reinterpret_cast<const int*>(smem + (i % kStages) * p.stage_bytes + p.x_bytes + p.w_bytes) + vrow[0];
      };
      float xa[kTT], wa[kTR], xb[kTT], wb[kTR];  // fragments of even (a) and odd (b) steps
      int c1 = 0, c2 = 0, c3 = 0;                 // the columns of the quad's steps 1-3
      if (count > 0) {
        await(0);
        const int* cp = cp_of(0);
        load_x<kMode>(xs_of(0), cp[0], xa);
        load_w(ws_of(0), wa);
        c1 = cp[1]; c2 = cp[2]; c3 = cp[3];
      }
      for (int i = 0; i < count; ++i) {
        const float* xs = xs_of(i);
        const float* ws = ws_of(i);
        const int* cp = cp_of(i);
        int j = 0;
        for (; j + 4 < ktc; j += 4) {  // quads followed by another of this tile
          const int n0 = cp[j + 4], n1 = cp[j + 5], n2 = cp[j + 6], n3 = cp[j + 7];
          const float* w = ws + j * kBR;
          quad_head<kMode>(xs, w, c1, c2, c3, xa, wa, xb, wb, acc);
          load_x<kMode>(xs, n0, xa);
          load_w(w + 4 * kBR, wa);
          outer_fma(wb, xb, acc);
          c1 = n1; c2 = n2; c3 = n3;
        }
        const float* w = ws + j * kBR;  // the tile's last quad
        quad_head<kMode>(xs, w, c1, c2, c3, xa, wa, xb, wb, acc);
        if (i + 1 < count) {  // the next tile's first step, under this quad's last FMAs
          await(i + 1);
          const int* ncp = cp_of(i + 1);
          const int n0 = ncp[0];
          c1 = ncp[1]; c2 = ncp[2]; c3 = ncp[3];
          load_x<kMode>(xs_of(i + 1), n0, xa);
          load_w(ws_of(i + 1), wa);
        }
        outer_fma(wb, xb, acc);
        release(i);
      }
    } else {
      for (int i = 0; i < count; ++i) {
        await(i);
        compute(smem + (i % kStages) * p.stage_bytes);
        release(i);
      }
    }
#endif
  } else {
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < count) copier.issue(p, smem + s * p.stage_bytes, kt0 + s, tok0);
      cutlass::arch::cp_async_fence();
    }
    for (int i = 0; i < count; ++i) {
      cutlass::arch::cp_async_wait<kStages - 2>();
      __syncthreads();
      const int next = i + kStages - 1;
      if (next < count) copier.issue(p, smem + (next % kStages) * p.stage_bytes, kt0 + next, tok0);
      cutlass::arch::cp_async_fence();
      compute(smem + (i % kStages) * p.stage_bytes);
    }
    cutlass::arch::cp_async_wait<0>();
  }

  if constexpr (kKWarps > 1) {  // group 1's sums into group 0's accumulators through the (now free) stage memory
    asm volatile("bar.sync 1, %0;" ::"n"(kThreads) : "memory");  // every computing warp is done with the stages
    float* tile = reinterpret_cast<float*>(smem);
    if (group == 1) stash_tile<kMode>(tile, rloc, tloc, acc);
    asm volatile("bar.sync 1, %0;" ::"n"(kThreads) : "memory");
    if (group == 0) add_tile<kMode>(tile, rloc, tloc, acc);  // each thread reads only what it overwrites below
  }
  const bool writer = kKWarps == 1 || group == 0;  // the threads holding the CTA's sums
  // epilogue: straight to y (with bias), summed over the cluster (kClusterSplit), added into y (kAtomicSplit: the
  // first split adds the bias) or to this split's partial sums
  if (kClusterSplit && p.cluster) {
    // every computing warp is done with the stages before the tile overwrites them (the producer warpgroup waits at
    // the cluster barrier); then the cluster's tiles are complete before any CTA reads them, and no CTA exits (its
    // shared memory gone) before every CTA has read it
    asm volatile("bar.sync 1, %0;" ::"n"(kThreads) : "memory");
    float* tile = reinterpret_cast<float*>(smem);
    if (writer) stash_tile<kMode>(tile, rloc, tloc, acc);
    cluster_sync();
    cluster_reduce<kMode, Out>(p, tile, row0, tok0);
    cluster_sync();
  } else if (writer) {
    if (kAtomicSplit && !whole)
      write_tile<kMode, true>(static_cast<float*>(p.y), p, split == 0 ? p.bias : nullptr, row0 + rloc, tok0 + tloc,
                              acc);
    else if (kSplit > 1 && !kAtomicSplit)
      write_tile<kMode>(static_cast<float*>(p.y) + static_cast<int64_t>(split) * p.m * p.n, p, nullptr,
                        row0 + rloc, tok0 + tloc, acc);
    else
      write_tile<kMode>(static_cast<Out*>(p.y), p, p.bias, row0 + rloc, tok0 + tloc, acc);
  }
  if (warp == 1 && lane == 0) trace_cta(1);
}

template <class Out>
__global__ void split_reduce(const float* part, const Element* bias, Out* y, int m, int n) {
  pdl_enter();
  const int64_t total = static_cast<int64_t>(m) * n;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    float s = bias ? to_float(bias[i % n]) : 0.f;
#pragma unroll
    for (int z = 0; z < kSplit; ++z) s += part[z * total + i];
    store(y + i, s);
  }
}

// The prep kernels below also zero the fp32 output that kAtomicSplit's splits add into (zero: the first float of y
// to zero, or null; count floats), so that no memset sits between them and the GEMM: the whole grid's threads
// stride over it.
__device__ __forceinline__ void zero_output(float* y, int64_t count) {
  if (y == nullptr) return;
  const int64_t threads = int64_t(gridDim.x) * gridDim.y * blockDim.x * blockDim.y;
  const int64_t first = (int64_t(blockIdx.y) * gridDim.x + blockIdx.x) * blockDim.x * blockDim.y +
                        threadIdx.y * blockDim.x + threadIdx.x;
  const int64_t vecs = (reinterpret_cast<uintptr_t>(y) & 15) == 0 ? count / 4 : 0;
  for (int64_t i = first; i < vecs; i += threads) reinterpret_cast<float4*>(y)[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int64_t i = 4 * vecs + first; i < count; i += threads) y[i] = 0.f;
}

__global__ void widen(const Element* x, float* out, int64_t count, float* zero, int64_t zero_count) {
  pdl_enter();
  zero_output(zero, zero_count);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = to_float(x[i]);
}

// x (m x k, Element) -> x^T (k x m_pad, float), 32 x 32 tiles through shared memory
__global__ void transpose_widen(const Element* x, float* xt, int m, int k, int m_pad, float* zero, int64_t zero_count) {
  __shared__ float tile[32][33];
  pdl_enter();
  zero_output(zero, zero_count);
  const int k0 = blockIdx.x * 32, t0 = blockIdx.y * 32;
  for (int r = threadIdx.y; r < 32; r += 8) {
    const int t = t0 + r, c = k0 + threadIdx.x;
    if (t < m && c < k) tile[r][threadIdx.x] = to_float(x[static_cast<int64_t>(t) * k + c]);
  }
  __syncthreads();
  for (int r = threadIdx.y; r < 32; r += 8) {
    const int c = k0 + r, t = t0 + threadIdx.x;
    if (c < k && t < m) xt[static_cast<int64_t>(c) * m_pad + t] = tile[threadIdx.x][r];
  }
}

// fp32 x with 16-byte aligned rows (k % 4 == 0) -> x^T: 32 x 32 tiles as in transpose_widen, one 16-byte load and
// one 16-byte store per thread (256 threads); the bank of tile[c + i][r] is 4 (c / 4) + r + i: conflict-free both
// ways. Tokens m .. m_pad - 1 of x^T are written as zeros.
__global__ void transpose4(const float* x, float* xt, int m, int k, int m_pad, float* zero, int64_t zero_count) {
  __shared__ float tile[32][33];
  pdl_enter();
  zero_output(zero, zero_count);
  const int k0 = blockIdx.x * 32, t0 = blockIdx.y * 32;
  const int r = threadIdx.x / 8, c = (threadIdx.x % 8) * 4;
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
  if (t0 + r < m && k0 + c < k) v = *reinterpret_cast<const float4*>(x + static_cast<int64_t>(t0 + r) * k + k0 + c);
  tile[c][r] = v.x; tile[c + 1][r] = v.y; tile[c + 2][r] = v.z; tile[c + 3][r] = v.w;
  __syncthreads();
  if (k0 + r < k && t0 + c < m_pad)
    *reinterpret_cast<float4*>(xt + static_cast<int64_t>(k0 + r) * m_pad + t0 + c) =
        make_float4(tile[r][c], tile[r][c + 1], tile[r][c + 2], tile[r][c + 3]);
}

// A launch configuration with, in attrs (two entries), the split's cluster (cluster_z > 1) and programmatic dependent
// launch (pdl: a kernel of cnm_run's own runs before this one on the stream; sm_90+ only).
cudaLaunchConfig_t launch_config(dim3 grid, unsigned threads, size_t smem, int cluster_z, bool pdl, cudaStream_t stream,
                                 cudaLaunchAttribute* attrs) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attrs;
  if (cluster_z > 1) {
    attrs[config.numAttrs].id = cudaLaunchAttributeClusterDimension;
    attrs[config.numAttrs].val.clusterDim.x = 1;
    attrs[config.numAttrs].val.clusterDim.y = 1;
    attrs[config.numAttrs].val.clusterDim.z = cluster_z;
    ++config.numAttrs;
  }
  if (pdl) {
    attrs[config.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[config.numAttrs].val.programmaticStreamSerializationAllowed = 1;
    ++config.numAttrs;
  }
  return config;
}

// Threads a CTA of the variant launches: the computing warps (+ the producer warpgroup).
constexpr unsigned cta_threads(bool use_tma) { return kThreads + (use_tma ? kProducerThreads : 0); }

// The variant's dynamic shared memory opted in up to the device's limit (once per process and variant).
template <int kMode, class Out, bool kUseTma>
cudaError_t opt_in(size_t smem, int limit) {
  static int allowed = 0;
  if (int(smem) > allowed) {
    cudaError_t err =
        cudaFuncSetAttribute(nm_simt_kernel<kMode, Out, kUseTma>, cudaFuncAttributeMaxDynamicSharedMemorySize, limit);
    if (err != cudaSuccess) return err;
    allowed = limit;
  }
  return cudaSuccess;
}

// kTailSplit: CTAs of the (fp32-output) variant resident on the GPU at once with `smem` bytes each (SMs x the
// occupancy calculator's blocks per SM; at least one per SM), cached per shared-memory size (the current device at
// the first call, as cnm_run's shared-memory limit).
template <int kMode, bool kUseTma>
int resident_ctas(size_t smem, int limit) {
  static size_t cached_smem = 0;
  static int cached = 0;
  if (smem != cached_smem) {
    int blocks = 0, sms = 0, dev = 0;
    if (opt_in<kMode, float, kUseTma>(smem, limit) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, nm_simt_kernel<kMode, float, kUseTma>,
                                                      cta_threads(kUseTma), smem) != cudaSuccess)
      blocks = 1;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    cached = std::max(1, blocks) * std::max(1, sms);
    cached_smem = smem;
  }
  return cached;
}

template <int kMode, class Out, bool kUseTma = false>
cudaError_t launch(const Params& p, size_t smem, int limit, bool pdl, cudaStream_t stream) {
  auto kernel = nm_simt_kernel<kMode, Out, kUseTma>;
  cudaError_t err = opt_in<kMode, Out, kUseTma>(smem, limit);
  if (err != cudaSuccess) return err;
  const int tiles_y = (p.m + kBT - 1) / kBT, tiles = p.tiles_x * tiles_y;
  const dim3 grid = kTailSplit ? dim3(p.dp + (tiles - p.dp) * kSplit) : dim3(p.tiles_x, tiles_y, kSplit);
  const unsigned threads = cta_threads(kUseTma);
  cudaLaunchAttribute attrs[2];
  // kClusterSplit: the split's CTAs (blockIdx.z) form one cluster
  const cudaLaunchConfig_t config =
      launch_config(grid, threads, smem, kClusterSplit && p.cluster ? kSplit : 1, pdl, stream, attrs);
  return cudaLaunchKernelEx(&config, kernel, p);
}

// mode 2's launch: the TMA-filled kernel where the binary has it and the GPU runs it, else cp.async.
template <class Out>
cudaError_t launch_mode(int mode, bool use_tma, const Params& p, size_t smem, int limit, bool pdl,
                        cudaStream_t stream) {
  if constexpr (kTma) {
    if (use_tma) return launch<2, Out, true>(p, smem, limit, pdl, stream);
  }
  return mode == 2 ? launch<2, Out>(p, smem, limit, pdl, stream)
       : mode == 1 ? launch<1, Out>(p, smem, limit, pdl, stream) : launch<0, Out>(p, smem, limit, pdl, stream);
}

// kTailSplit: resident_ctas of the variant launch_mode would launch.
int resident_for(int mode, bool use_tma, size_t smem, int limit) {
  if constexpr (kTma) {
    if (use_tma) return resident_ctas<2, true>(smem, limit);
  }
  return mode == 2 ? resident_ctas<2, false>(smem, limit)
       : mode == 1 ? resident_ctas<1, false>(smem, limit) : resident_ctas<0, false>(smem, limit);
}

// kTma's tensor maps: x^T (k rows of m_pad tokens; boxes of kBT tokens x ktd rows, zeros past k and m_pad), the kept
// weights (nnz_pad steps of n_pad rows; boxes of kBR rows x ktc steps) and, where a TMA box can hold it, the column
// indices (n_pad / vector index rows of nnz_pad; boxes of ktc steps x nvb rows, never out of range): a box's rows
// must be 16-byte multiples and the source 16-byte aligned with 16-byte multiple strides (ktc % 4 == 0, which
// nnz_pad % 4 == 0 follows from, and cols 16-byte aligned); the box lands 128-byte aligned (x_bytes and w_bytes
// are multiples of 128: kBT % 32 == 0, ktc % 4 == 0 and kBR % 16 == 0). Sets p.idx_tma; else cnm_run copies the
// indices by cp.async. False if the driver refuses x^T's or the weights' map.
bool encode_maps(Params& p) {
  const cuuint32_t unit[2] = {1, 1};
  const cuuint64_t x_dims[2] = {cuuint64_t(p.m_pad), cuuint64_t(p.k)}, x_stride[1] = {cuuint64_t(p.m_pad) * 4};
  const cuuint32_t x_box[2] = {cuuint32_t(kBT), cuuint32_t(p.ktd)};
  const cuuint64_t w_dims[2] = {cuuint64_t(p.n_pad), cuuint64_t(p.nnz_pad)}, w_stride[1] = {cuuint64_t(p.n_pad) * 4};
  const cuuint32_t w_box[2] = {cuuint32_t(kBR), cuuint32_t(p.ktc)};
  CUresult a = CUTLASS_CUDA_DRIVER_WRAPPER_CALL(cuTensorMapEncodeTiled)(
      &p.tma_x, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, const_cast<float*>(p.x), x_dims, x_stride, x_box, unit,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  CUresult b = CUTLASS_CUDA_DRIVER_WRAPPER_CALL(cuTensorMapEncodeTiled)(
      &p.tma_w, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, const_cast<float*>(p.wt), w_dims, w_stride, w_box, unit,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  p.idx_tma = 0;
  if (p.ktc % 4 == 0 && p.nnz_pad % 4 == 0 && (reinterpret_cast<uintptr_t>(p.cols) & 15) == 0 && p.ktc <= 256 &&
      p.nvb <= 256) {
    const cuuint64_t c_dims[2] = {cuuint64_t(p.nnz_pad), cuuint64_t(p.n_pad / p.vector)};
    const cuuint64_t c_stride[1] = {cuuint64_t(p.nnz_pad) * 4};
    const cuuint32_t c_box[2] = {cuuint32_t(p.ktc), cuuint32_t(p.nvb)};
    p.idx_tma = CUTLASS_CUDA_DRIVER_WRAPPER_CALL(cuTensorMapEncodeTiled)(
                    &p.tma_c, CU_TENSOR_MAP_DATA_TYPE_INT32, 2, const_cast<int*>(p.cols), c_dims, c_stride, c_box,
                    unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                    CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
  }
  return a == CUDA_SUCCESS && b == CUDA_SUCCESS;
}

// Compute capability major of the (first) device, read once.
int device_major() {
  static int major = 0;
  if (major == 0) {
    int dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  }
  return major;
}

// Whether split-K sums go through partials in the workspace and the split_reduce kernel: split_reduce 0, and 2 on a
// GPU without thread block clusters.
bool partial_sums() { return kSplit > 1 && !kAtomicSplit && (!kClusterSplit || device_major() < 9); }

int grid_for(int64_t total) { return int(std::min<int64_t>((total + 255) / 256, 132 * 16)); }

// split_reduce after the GEMM (programmatic dependent launch on sm_90+).
template <class Out>
cudaError_t launch_reduce(const float* partials, const Element* bias, Out* y, int m, int n, cudaStream_t stream) {
  cudaLaunchAttribute attrs[2];
  const cudaLaunchConfig_t config =
      launch_config(dim3(grid_for(int64_t(m) * n)), 256, 0, 1, device_major() >= 9, stream, attrs);
  return cudaLaunchKernelEx(&config, split_reduce<Out>, partials, bias, y, m, n);
}

}  // namespace

extern "C" {

#ifdef CNM_TRACE
int cnm_trace_read(void* host, int ctas) {
  return int(cudaMemcpyFromSymbol(host, cnm_trace_buf, sizeof(long long) * 3 * kTraceTiles * ctas));
}
#endif

int cnm_abi_version() { return 3; }

// Bytes of scratch cnm_run needs (widened x, split-K partials); 0 if none.
long long cnm_workspace(int m, int n, int k) {
  long long bytes = 0;
  if (sizeof(Element) != sizeof(float)) bytes += ((int64_t(m) * k * 4 + 255) / 256) * 256;
  if (kTransposed) bytes += ((int64_t(k) * ((m + 3) / 4 * 4) * 4 + 255) / 256) * 256;
  if (partial_sums()) bytes += ((int64_t(kSplit) * m * n * 4 + 255) / 256) * 256;
  return bytes;
}

// keep:group = N:M; vector: rows sharing an index row; kgroups: groups per k-tile (the layout's);
// out_kind: 0 = the input type, 1 = float. x_aligned: x is 16-byte aligned. 0 on success, 2: bad arguments,
// 3: does not fit in shared memory, else 1000 + cudaError_t.
int cnm_run(const void* x, const void* wt, const void* cols, const void* bias, void* y,
            void* workspace, int m, int n, int k, int keep, int group, int vector, int kgroups, int n_pad,
            int nnz_pad, int out_kind, int x_aligned, cudaStream_t stream) {
  if (m < 1 || n < 1 || k < 1 || keep < 1 || group <= keep || group > kMaxGroup || vector < 1 || kgroups < 1 ||
      n_pad % kBR || n_pad % vector || nnz_pad % (kgroups * keep))
    return 2;
  if (kAtomicSplit && out_kind != 1 && sizeof(Element) != sizeof(float)) return 2;  // adds into fp32 y only
  Params p{};
  p.wt = static_cast<const float*>(wt);
  p.cols = static_cast<const int*>(cols);
  p.bias = static_cast<const Element*>(bias);
  p.m = m; p.n = n; p.k = k; p.keep = keep; p.group = group; p.vector = vector; p.kgroups = kgroups;
  p.ktd = kgroups * group; p.ktc = kgroups * keep; p.n_pad = n_pad; p.nnz_pad = nnz_pad;
  p.ktiles = nnz_pad / p.ktc;
  p.nvb = kBR >= vector ? kBR / vector : 1;
  // workspace: [x widened (half inputs)][x^T (x_transposed)][split-K partials], as cnm_workspace sizes it
  char* ws = static_cast<char*>(workspace);
  const bool half = sizeof(Element) != sizeof(float);
  char* widened = ws;
  if (half) ws += ((int64_t(m) * k * 4 + 255) / 256) * 256;
  char* transposed = ws;
  p.m_pad = (m + 3) / 4 * 4;
  if (kTransposed) ws += ((int64_t(k) * p.m_pad * 4 + 255) / 256) * 256;
  static int limit = 0;  // opt-in shared memory per block of the (first) device
  if (limit == 0) {
    int dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  }
  const int major = device_major();
  enum Prep { kNone, kTranspose4, kTransposeWiden, kWiden };
  Prep prep = kNone;  // the prep kernel that runs just before the GEMM (launched below): the GEMM runs under PDL
  int mode;
  if (kTransposed && p.ktd <= kKC && vector >= kTR) {
    mode = 2;
    prep = !half && x_aligned && k % 4 == 0 ? kTranspose4 : kTransposeWiden;
    p.x = reinterpret_cast<const float*>(transposed);
  } else {
    if (half) {
      prep = kWiden;
      p.x = reinterpret_cast<const float*>(widened);
      x_aligned = 1;
    } else {
      p.x = static_cast<const float*>(x);
    }
    mode = x_aligned && k % 4 == 0 && p.ktd % 4 == 0 && p.ktd <= kKC && vector >= kTR ? 1 : 0;
  }
  p.pitch = mode == 1 ? kPitchFast : ((p.ktd + 7) / 8) * 8 + 4;
  p.x_bytes = mode == 2 ? p.ktd * kPitchT * 4 : kBT * p.pitch * 4;
  p.w_bytes = p.ktc * kBR * 4;
  p.stage_bytes = ((p.x_bytes + p.w_bytes + p.nvb * p.ktc * 4 + 127) / 128) * 128;
  // family.py's smem_bound, at run time: the tile of sums reuses the stages' memory after the k loop
  p.bar_offset = std::max(p.stage_bytes * kStages, kSumTileBytes);
  const size_t smem = size_t(p.bar_offset) + kBarrierBytes * kStages;
  if (smem > size_t(limit)) return 3;
  p.cluster = kClusterSplit && major >= 9;
  const bool partials_used = partial_sums();
  const bool use_tma = kTma && mode == 2 && major >= 9;
  if (use_tma && !encode_maps(p)) return 1000 + int(cudaErrorInvalidValue);
  // kTailSplit: whole waves of tiles unsplit (CTA order: row tiles first, then token tiles)
  p.tiles_x = (n + kBR - 1) / kBR;
  const int tiles = p.tiles_x * ((m + kBT - 1) / kBT);
  if (kTailSplit) {
    const int slots = resident_for(mode, use_tma, smem, limit);
    p.dp = tiles > slots ? tiles / slots * slots : 0;
  }
  // kAtomicSplit adds into a zeroed fp32 y (kTailSplit: from the first token row of the split tiles): the prep kernel
  // zeroes it where one runs, else a memset
  const int64_t zero_from = kTailSplit ? std::min(int64_t(m) * n, int64_t(p.dp / p.tiles_x) * kBT * n) : 0;
  const int64_t zero_count = int64_t(m) * n - zero_from;
  float* zero = kAtomicSplit && zero_count > 0 ? static_cast<float*>(y) + zero_from : nullptr;
  if (prep == kTranspose4 || prep == kTransposeWiden) {
    const dim3 grid((k + 31) / 32, (m + 31) / 32);
    if (prep == kTranspose4)
      transpose4<<<grid, 256, 0, stream>>>(static_cast<const float*>(x), const_cast<float*>(p.x), m, k, p.m_pad, zero,
                                           zero_count);
    else
      transpose_widen<<<grid, dim3(32, 8), 0, stream>>>(static_cast<const Element*>(x), const_cast<float*>(p.x), m,
                                                        k, p.m_pad, zero, zero_count);
  } else if (prep == kWiden) {
    const int64_t count = int64_t(m) * k;
    widen<<<grid_for(count), 256, 0, stream>>>(static_cast<const Element*>(x), const_cast<float*>(p.x), count, zero,
                                               zero_count);
  }
  float* partials = reinterpret_cast<float*>(ws);  // each split's sums, then summed by split_reduce
  p.y = partials_used ? static_cast<void*>(partials) : y;
  if (partials_used) ws += ((int64_t(kSplit) * m * n * 4 + 255) / 256) * 256;
  // kAtomicSplit: the splits add into zeros (zeroed by the prep kernel, if one ran)
  cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess && zero != nullptr && prep == kNone)
    err = cudaMemsetAsync(zero, 0, size_t(zero_count) * 4, stream);
  const bool pdl = prep != kNone && major >= 9;
  if (err == cudaSuccess)
    err = partials_used || out_kind == 1 ? launch_mode<float>(mode, use_tma, p, smem, limit, pdl, stream)
                                      : launch_mode<Element>(mode, use_tma, p, smem, limit, pdl, stream);
  if (err == cudaSuccess && partials_used)
    err = out_kind == 1 ? launch_reduce<float>(partials, p.bias, static_cast<float*>(y), m, n, stream)
                        : launch_reduce<Element>(partials, p.bias, static_cast<Element*>(y), m, n, stream);
  return err == cudaSuccess ? 0 : 1000 + int(err);
}

// cnm_run's arguments other than x, y and the stream, packed once per (weight, bias, m) by the caller: the
// steady-state call passes four arguments instead of eighteen (x 16-byte aligned: matmul's steady state checks it).
struct RunArgs {
  const void* wt;
  const void* cols;
  const void* bias;
  void* workspace;
  int m, n, k, keep, group, vector, kgroups, n_pad, nnz_pad, out_kind;
};

size_t cnm_run_args_bytes() { return sizeof(RunArgs); }

int cnm_launch(const void* packed, const void* x, void* y, cudaStream_t stream) {
  const RunArgs& a = *static_cast<const RunArgs*>(packed);
  return cnm_run(x, a.wt, a.cols, a.bias, y, a.workspace, a.m, a.n, a.k, a.keep, a.group, a.vector, a.kgroups,
                 a.n_pad, a.nnz_pad, a.out_kind, 1, stream);
}

}  // extern "C"
