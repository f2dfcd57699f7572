// cutlass_nm: memory-bound N:M SpMM for decoding (m <= ${max_tokens} tokens), C ABI launcher.
// Generated from cutlass_nm/families/nm_decode/kernel.cu. y(m x n) = x(m x k) * W^T (+ bias), W in the
// general N:M format (formats/nm.py) with each row's nonzeros padded to a multiple of 8:
//   values  [n][stride]                 the kept weights of row r, group by group (N per group of M)
//   indices [ceil(n / vector)][stride]  uint8 offset within the group, shared by `vector` consecutive rows
//
// or, with kMeta24 (mode 0 only), a 2:4 weight read in place (formats/sparse24.py, k % 16 == 0):
//   values  [n][k / 2]                  the two kept weights of every group of 4, ascending position
//   indices [k / 64][pitch]             its packed metadata (formats/meta_sm90.py): a nibble per group, bits 0-1
//                                       first kept position, 2-3 second; 16 columns of a row in one uint16
//
// Grid (split, row blocks); a cluster of `split` CTAs shares one block of kBlockRows rows and splits its
// nonzeros along k. Each CTA stages the x columns its k-range touches in shared memory (one token on CUDA cores:
// x is read directly). mode = 0 (nm_decode_kernel): lane l of a warp streams chunks l, l + 32, ... of 8 nonzeros
// of its kRows rows with 16-byte value loads (8-byte index loads, once for all rows when they share indices; 4-byte
// meta loads with kMeta24; both bypass L1), kAhead chunks in flight in registers (issued before x is staged), and keeps kRows x kMaxTokens fp32
// sums. Warp shuffles, then the cluster (distributed shared memory), reduce them; rank 0 adds the bias and writes
// y. Modes 2 and 3 (nm_decode_mma_kernel): a warp's 32 rows on (sparse) tensor cores, below.
#include <cstdint>
#include <type_traits>
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace {
namespace cg = cooperative_groups;
using Element = ${element};
constexpr int kMaxTokens = ${max_tokens};
constexpr int kWarps = ${warps};
constexpr int kRows = ${rows};  // rows per warp
constexpr int kMode = ${mode};  // 0: lanes along k, 2: tensor cores, 3: sparse tensor cores
static_assert(kMode == 0 || kMode == 2 || kMode == 3, "mode is 0, 2 or 3");
// modes 2 and 3: kWsplit warps share one 32-row block and split each x piece's steps (their sums added in
// shared memory), so a CTA owns kWarps * 32 / kWsplit rows and needs no cluster to fill the GPU.
constexpr int kWsplit = ${wsplit};
constexpr int kBlockRows = kMode ? kWarps * 32 / kWsplit : kWarps * kRows;
constexpr int kAhead = ${ahead};  // chunks of 8 nonzeros each lane keeps in flight
constexpr bool kTranspose = ${transpose};  // gather neighbouring nonzeros across lanes (see below)
// kMeta24: the index stream is a 2:4 weight's packed metadata (a uint16 of 4 nibbles per chunk of 8 nonzeros, one
// row each: vector 1, the `vector` argument carrying the metadata's slab pitch instead) rather than one uint8
// offset per nonzero; keep = 2 and group = 4 are then compile-time.
constexpr bool kMeta24 = ${meta24};
static_assert(!kMeta24 || kMode == 0, "2:4 meta bytes are read by mode 0 (lanes along k) only");
constexpr int kTransposeBytes = kTranspose ? kRows * 256 * (sizeof(${element}) + 1) : 0;  // per warp
// reduction buffer, one slot per warp and row (kWsplit slots per block row), 16-byte aligned
constexpr int kRedOwnBytes = (kBlockRows * kWsplit * kMaxTokens * 4 + 15) / 16 * 16;
// kPush (a cluster of split > 1 CTAs): each CTA pushes its sums into the owning CTA's receive buffer by st.async
// (split x ceil(elements / split) sums: at most kBlockRows * kMaxTokens * 4 + 112 bytes) and the owner waits on its
// mbarrier (the 8 bytes after those), instead of a cluster barrier, remote loads and a second barrier.
constexpr bool kPush = ${push};
constexpr int kRecvBytes = kPush ? kBlockRows * kMaxTokens * 4 + 128 : 0;
constexpr int kRedBytes = kRedOwnBytes + kRecvBytes;  // everything before the rings, transposes and staged x
// The host plans shared memory from the same sizes (family.py: Config.red_bytes, transpose_bytes, ring_bytes).
static_assert(kRedBytes == ${red_bytes}, "reduction bytes differ from the host's Config.red_bytes");
static_assert(kTransposeBytes == ${transpose_bytes}, "transpose bytes differ from the host's Config.transpose_bytes");
constexpr bool kStage = ${stage_x};  // x columns staged in shared memory (always for several tokens)
// mode 2 on sm_90: each warp streams its values and index bytes by TMA bulk copies (one 16-position step, 1040
// bytes, per copy) into a ring of kDepth steps in shared memory, instead of register loads (kAhead steps).
constexpr bool kBulk = ${bulk};
constexpr int kDepth = 2 * kAhead;
static_assert(kWarps % kWsplit == 0 && (kWsplit == 1 || (kMode >= 2 && !kBulk)),
              "wsplit: warps a multiple of it, modes 2 and 3 with values in registers");
// modes 2 and 3 without bulk, sm_90: each warp keeps its next kPrefetch steps requested into L2 by bulk prefetches
// (one instruction per step, lane 0), so DRAM streams while x is staged and beyond the kAhead steps in registers.
constexpr int kPrefetch = ${prefetch};
// modes 2 and 3: the CTAs per SM the registers must allow (0: the compiler's choice). At 3 a grid of 256 CTAs of
// 8 warps stays in one wave on 132 SMs whatever registers ptxas would pick.
constexpr int kMinCtas = ${min_ctas};
// modes 2 and 3 under programmatic dependent launch: kEarlyRelease lets the next kernel launch as soon as this one
// starts (its CTAs take free slots, issue their weight loads and wait for this grid to finish), instead of once
// every CTA's weight stream is done.
constexpr bool kEarlyRelease = ${early_release};
constexpr int kRingBytes = kBulk ? (kWarps * kDepth * (1024 + 16 + 8) + 15) / 16 * 16 : 0;  // values, indices, barriers
static_assert(kRingBytes == ${ring_bytes}, "bulk ring bytes differ from the host's Config.ring_bytes");
// Programmatic dependent launch (sm_90, the host's `pdl` flag): the kernel may start while the previous kernel on
// the stream runs. It reads weights (values, indices) before wait_for_inputs(), and x and bias, and writes y, only
// after it. Without the launch attribute both instructions return at once.

__device__ __forceinline__ void wait_for_inputs() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// CNM_TRACE (benchmarks/trace_nm_decode.py only; never defined by the library): thread 0 of each CTA stamps the
// global timer at entry (0), x staged (1), its warp's weight stream done (2), cluster synced (3) and y written (4),
// its SM (5), and the moment the previous grid's results were visible (6, griddepcontrol.wait returned; modes 2
// and 3 with values in registers), into cnm_trace_buf[CTA], read back by cnm_trace_read.
#ifdef CNM_TRACE
__device__ unsigned long long cnm_trace_buf[16384][7];
__device__ __forceinline__ void trace_mark(int i) {
  if (threadIdx.x != 0) return;
  unsigned long long t;
  if (i == 5) {
    unsigned int sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    t = sm;
  } else {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  }
  const int cta = blockIdx.y * gridDim.x + blockIdx.x;
  if (cta < 16384) cnm_trace_buf[cta][i] = t;
}
#else
__device__ __forceinline__ void trace_mark(int) {}
#endif

__device__ __forceinline__ void allow_next_launch() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float2 to_float2(uint32_t u, __half) {
  __half2 h; *reinterpret_cast<uint32_t*>(&h) = u; return __half22float2(h);
}
__device__ __forceinline__ float2 to_float2(uint32_t u, __nv_bfloat16) {
  __nv_bfloat162 h; *reinterpret_cast<uint32_t*>(&h) = u; return __bfloat1622float2(h);
}
__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }

// Staged x: column c's tokens in units of kUnit elements (one shared-memory load each: 4, 8 or 16 bytes); unit u
// = c * kUnitsPerCol + q sits at u ^ (row % kUnitsPerRow), row = u / kUnitsPerRow (a 128-byte line holds
// kUnitsPerRow units). The XOR stays inside the line, so the layout is a bijection; it spreads columns that share
// a line's bank pattern, which neighbouring gathers (transposed) would otherwise hit.
constexpr int kUnit = kMaxTokens < 8 ? kMaxTokens : 8;
constexpr int kUnitsPerCol = kMaxTokens / kUnit;
constexpr int kUnitsPerRow = 64 / kUnit;
__device__ __forceinline__ int xs_offset(int c, int q) {
  if constexpr (kMaxTokens == 1) {
    return c;
  } else {
    const int u = c * kUnitsPerCol + q;
    return (u ^ ((u / kUnitsPerRow) % kUnitsPerRow)) * kUnit;
  }
}

// The kMaxTokens tokens of staged column c, as floats.
__device__ __forceinline__ void load_column(const Element* xs, int c, float (&xv)[kMaxTokens]) {
  if constexpr (kMaxTokens == 1) {
    xv[0] = to_float(xs[c]);
  } else if constexpr (kMaxTokens == 2) {
    float2 f = to_float2(*reinterpret_cast<const uint32_t*>(xs + xs_offset(c, 0)), Element());
    xv[0] = f.x; xv[1] = f.y;
  } else if constexpr (kMaxTokens == 4) {
    uint2 u = *reinterpret_cast<const uint2*>(xs + xs_offset(c, 0));
    float2 a = to_float2(u.x, Element()), b = to_float2(u.y, Element());
    xv[0] = a.x; xv[1] = a.y; xv[2] = b.x; xv[3] = b.y;
  } else {
#pragma unroll
    for (int q = 0; q < kMaxTokens / 8; ++q) {
      uint4 u = *reinterpret_cast<const uint4*>(xs + xs_offset(c, q));
      const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        float2 f = to_float2(w[h], Element());
        xv[q * 8 + 2 * h] = f.x; xv[q * 8 + 2 * h + 1] = f.y;
      }
    }
  }
}

// Columns [c0, c0 + ncols) of x into xs[col][token]; zeros past k and past m (padding values may point there).
// Each thread loads kBatch columns before storing any, so about 16 loads per thread are in flight.
constexpr int kBatch = kMaxTokens >= 16 ? 1 : 16 / kMaxTokens;
__device__ __forceinline__ void stage_x(const Element* __restrict__ x, Element* xs, int m, int k, int c0, int ncols) {
  for (int base = threadIdx.x; base < ncols; base += blockDim.x * kBatch) {
    __align__(16) Element v[kBatch][kMaxTokens];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int col = c0 + base + b * blockDim.x;
      const bool in = base + b * blockDim.x < ncols && col < k;
#pragma unroll
      for (int t = 0; t < kMaxTokens; ++t) {
        v[b][t] = (in && t < m) ? x[static_cast<int64_t>(t) * k + col] : Element(0.f);
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int c = base + b * blockDim.x;
      if (c >= ncols) break;
      if constexpr (kMaxTokens >= 8) {
#pragma unroll
        for (int q = 0; q < kMaxTokens / 8; ++q) {
          *reinterpret_cast<uint4*>(xs + xs_offset(c, q)) = reinterpret_cast<const uint4*>(v[b])[q];
        }
      } else {
#pragma unroll
        for (int t = 0; t < kMaxTokens; ++t) xs[xs_offset(c, 0) + t] = v[b][t];
      }
    }
  }
}

${stream_loads}
// One chunk's index bytes as loaded: 8 uint8 offsets, or (kMeta24) its 4 groups' nibbles, one a byte.
using ChunkIndex = std::conditional_t<kMeta24, uint32_t, uint2>;

// The index bytes of the chunk at position j0 of `row`: 8 offsets of the row's index row (row / vector), or the
// uint16 of a row's 2:4 metadata that holds the chunk's 16 columns, in the sm90 atom of 64 rows x 64 columns
// (rows m0 + 8 m1 + 16 m2, the chunk's 16-column steps k1 + 2 k2 within its slab; `pitch` bytes a slab), its
// nibbles spread to a byte each. It goes through L1: the warps of a CTA share its 32-byte sectors.
__device__ __forceinline__ void load_index(uint2& i, const uint8_t* __restrict__ indices, int row, int vector,
                                           int stride, int j0) {
  i = ld_stream8(indices + static_cast<int64_t>(row / vector) * stride + j0);
}
__device__ __forceinline__ void load_index(uint32_t& i, const uint8_t* __restrict__ indices, int row, int pitch, int,
                                           int j0) {
  const int c = j0 >> 3;
  const int64_t at = static_cast<int64_t>(c >> 2) * pitch + (row >> 6) * 512 + (row & 7) * 8 +
                     ((row >> 3) & 1) * 2 + ((row >> 4) & 3) * 128 + (c & 1) * 64 + ((c >> 1) & 1) * 4;
  const uint32_t b = __ldg(reinterpret_cast<const unsigned short*>(indices + at));
  i = __byte_perm(b & 0x0F0Fu, (b >> 4) & 0x0F0Fu, 0x5140);  // groups 0, 1, 2, 3 in bytes 0, 1, 2, 3
}

// One lane's weights for one chunk of 8 nonzeros of its kRows rows.
struct Chunk {
  uint4 v[kRows];
  ChunkIndex i[kRows];
};

// A chunk's 8 offsets within their groups, byte e for nonzero e. 2:4 meta: nonzero 2 g + j of the chunk sits at
// offset (meta byte g >> 2 j) & 3 of group g.
__device__ __forceinline__ uint2 offsets(uint2 idx) { return idx; }
__device__ __forceinline__ uint2 offsets(uint32_t meta) {
  const uint32_t first = meta & 0x03030303u, second = (meta >> 2) & 0x03030303u;  // byte g: group g's positions
  return make_uint2(__byte_perm(first, second, 0x5140), __byte_perm(first, second, 0x7362));
}

__device__ __forceinline__ void load_chunk(Chunk& ch, const Element* __restrict__ values,
                                           const uint8_t* __restrict__ indices, int row0, int n, int index_arg,
                                           int stride, bool shared_idx, int j0) {
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int row = min(row0 + r, n - 1);  // rows past n compute garbage that is never stored
    ch.v[r] = ld_stream16(values + static_cast<int64_t>(row) * stride + j0);
    if (r == 0 || !shared_idx) {
      load_index(ch.i[r], indices, row, index_arg, stride, j0);
    } else {
      ch.i[r] = ch.i[0];
    }
  }
}

// This CTA's share [first, end) of a row's `units` (chunks or steps): the cluster's ranks split them evenly.
__device__ __forceinline__ int2 cta_share(int units) {
  const int split = gridDim.x, s = blockIdx.x;
  return make_int2(static_cast<int>(static_cast<int64_t>(units) * s / split),
                   static_cast<int>(static_cast<int64_t>(units) * (s + 1) / split));
}

// At 16 tokens the reduction reads 4 consecutive tokens of a row at once (one 16-byte load per slot and peer): one
// pass over a cluster's sums instead of two (0-5 % a call). At 8 tokens there is one pass either way and 16-byte
// loads were 2-10 % slower a call.
constexpr int kRedVec = kMaxTokens == 16 ? 4 : 1;
using RedVec = std::conditional_t<kRedVec == 4, float4, float>;
__device__ __forceinline__ void add_to(float& a, float b) { a += b; }
__device__ __forceinline__ void add_to(float4& a, const float4& b) { a.x += b.x; a.y += b.y; a.z += b.z; a.w += b.w; }
__device__ __forceinline__ float lane_of(float v, int) { return v; }
__device__ __forceinline__ float lane_of(const float4& v, int j) { return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w; }

// Block row r's sums for tokens t .. t + kRedVec - 1 over the kWsplit warps that split its steps, in warp order:
// warp slot u of the row's 32-row block sits at red[(r / 32 * kWsplit + u) * 32 + r % 32][t] (red[r][t] at kWsplit 1).
__device__ __forceinline__ RedVec slot_sum(const float* red, int r, int t) {
  const RedVec* at = reinterpret_cast<const RedVec*>(red + ((r / 32 * kWsplit) * 32 + r % 32) * kMaxTokens + t);
  RedVec part[kWsplit];
#pragma unroll
  for (int u = 0; u < kWsplit; ++u) part[u] = at[u * 32 * kMaxTokens / kRedVec];
  RedVec v = part[0];
#pragma unroll
  for (int u = 1; u < kWsplit; ++u) add_to(v, part[u]);
  return v;
}

// Row `row`'s outputs for tokens t .. t + kRedVec - 1 (those below m), plus the bias.
template <class Out>
__device__ __forceinline__ void store_row(Out* __restrict__ y, const Element* __restrict__ bias, const RedVec& v,
                                          int t, int m, int n, int row) {
  const float b = bias ? to_float(bias[row]) : 0.f;
#pragma unroll
  for (int j = 0; j < kRedVec; ++j) {
    if (t + j < m) store(y + static_cast<int64_t>(t + j) * n + row, lane_of(v, j) + b);
  }
}

constexpr int kPerRow = kMaxTokens / kRedVec, kTotal = kBlockRows * kPerRow;  // sums of kRedVec tokens a block

// kPush: the receive buffer (split slots of ceil(kTotal / split) sums, one per sending rank) and its mbarrier.
__device__ __forceinline__ RedVec* recv_buffer(float* red) {
  return reinterpret_cast<RedVec*>(reinterpret_cast<unsigned char*>(red) + kRedOwnBytes);
}
__device__ __forceinline__ uint32_t recv_barrier(float* red) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(red)) + kRedOwnBytes + kRecvBytes - 16;
}

// kPush, at entry: thread 0 arms this CTA's receive barrier for the bytes its peers (and itself) will push (sum i
// goes to rank i % split), and every thread arrives on the cluster barrier that reduce_store waits on before the
// first push, so no CTA writes into a peer whose barrier is not initialized.
__device__ __forceinline__ void push_init(float* red) {
#if __CUDA_ARCH__ >= 900
  if constexpr (kPush) {
    const int split = gridDim.x, s = blockIdx.x;
    if (split == 1) return;
    if (threadIdx.x == 0) {
      const uint32_t bar = recv_barrier(red);
      const uint32_t bytes = split * ((kTotal - s + split - 1) / split) * static_cast<uint32_t>(sizeof(RedVec));
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar));
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
    }
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
  }
#endif
}

#if __CUDA_ARCH__ >= 900
__device__ __forceinline__ void push_sum(uint32_t addr, float v, uint32_t bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];" ::"r"(addr), "f"(v),
               "r"(bar) : "memory");
}
__device__ __forceinline__ void push_sum(uint32_t addr, const float4& v, uint32_t bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];"
               ::"r"(addr), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(bar) : "memory");
}
__device__ __forceinline__ uint32_t peer_address(uint32_t addr, int rank) {
  uint32_t out;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(out) : "r"(addr), "r"(rank));
  return out;
}
#endif

// The cluster's CTAs sum their partial sums red[kBlockRows x kWsplit][kMaxTokens] (each CTA a slice of the
// elements, the peers' values loaded together, then added in rank order: deterministic), add the bias and write y.
// kPush: the peers push the values to the slice's owner instead of it loading them (same sums, same order).
template <class Out>
__device__ __forceinline__ void reduce_store(float* red, const Element* __restrict__ bias, Out* __restrict__ y, int m,
                                             int n) {
  const int split = gridDim.x, s = blockIdx.x;
  wait_for_inputs();    // (a CTA with no steps has not waited yet) bias is read and y written below
  allow_next_launch();  // the weight stream is done: the next kernel's CTAs may take this SM's free slots
#if __CUDA_ARCH__ >= 900  // split > 1 (a cluster) is only launched on sm_90+
  cg::cluster_group cluster = cg::this_cluster();
  if (kPush && split > 1) {
    // each CTA's sums (its warp slots added) go to their owner, rank i % split, slot s; the owner adds the split
    // slots in rank order (the same order and so the same results as the loads below)
    const int per_rank = (kTotal + split - 1) / split;
    RedVec* recv = recv_buffer(red);
    const uint32_t recv_s = static_cast<uint32_t>(__cvta_generic_to_shared(recv)), bar = recv_barrier(red);
    __syncthreads();  // every warp's sums are in red
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");  // every peer's barrier is armed
    for (int i = threadIdx.x; i < kTotal; i += blockDim.x) {
      const int r = i / kPerRow, t = (i - r * kPerRow) * kRedVec, owner = i % split;
      const uint32_t at = recv_s + static_cast<uint32_t>((s * per_rank + i / split) * sizeof(RedVec));
      push_sum(peer_address(at, owner), slot_sum(red, r, t), peer_address(bar, owner));
    }
    asm volatile("{\n.reg .pred p;\nWAIT_%=:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n@!p bra WAIT_%=;\n}"
                 ::"r"(bar) : "memory");
    trace_mark(3);
    for (int j = threadIdx.x; j * split + s < kTotal; j += blockDim.x) {
      const int i = j * split + s, r = i / kPerRow, t = (i - r * kPerRow) * kRedVec, row = blockIdx.y * kBlockRows + r;
      if (t >= m || row >= n) continue;
      RedVec v = recv[j];
      for (int q = 1; q < split; ++q) add_to(v, recv[q * per_rank + j]);
      store_row(y, bias, v, t, m, n, row);
    }
    trace_mark(4);
    return;
  }
  if (split > 1) {
    cluster.sync();
    trace_mark(3);
    for (int i = s * blockDim.x + threadIdx.x; i < kTotal; i += split * blockDim.x) {
      const int r = i / kPerRow, t = (i - r * kPerRow) * kRedVec, row = blockIdx.y * kBlockRows + r;
      if (t >= m || row >= n) continue;
      RedVec part[8];  // MAX_SPLIT
#pragma unroll
      for (int q = 0; q < 8; ++q) part[q] = q < split ? slot_sum(cluster.map_shared_rank(red, q), r, t) : RedVec{};
      RedVec v = part[0];
#pragma unroll
      for (int q = 1; q < 8; ++q) add_to(v, part[q]);
      store_row(y, bias, v, t, m, n, row);
    }
    cluster.sync();  // peers' shared memory stays alive until every slice is read
    trace_mark(4);
    return;
  }
#endif
  __syncthreads();
  trace_mark(3);
  for (int i = threadIdx.x; i < kTotal; i += blockDim.x) {
    const int r = i / kPerRow, t = (i - r * kPerRow) * kRedVec, row = blockIdx.y * kBlockRows + r;
    if (t >= m || row >= n) continue;
    store_row(y, bias, slot_sum(red, r, t), t, m, n, row);
  }
  trace_mark(4);
}

// kMeta24 at one token (x not staged): a chunk is 4 whole groups, 16 consecutive columns of x. The lane loads those
// 16 values (two 16-byte loads through L1, where every row's warps find them) and picks each group's two kept
// columns with one byte permute whose selector comes from the group's meta byte: bytes 2 p, 2 p + 1 hold column p.
template <class C>  // Chunk: instantiated only where kMeta24 calls it
__device__ __forceinline__ void consume24_one_token(const C& ch, const Element* __restrict__ x, int cc,
                                                    float (&acc)[kRows][kMaxTokens]) {
  const uint4* at = reinterpret_cast<const uint4*>(x) + 2 * cc;
  const uint4 lo = __ldg(at), hi = __ldg(at + 1);
  const uint32_t xw[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};  // columns 2 i, 2 i + 1 in word i
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const uint32_t vw[4] = {ch.v[r].x, ch.v[r].y, ch.v[r].z, ch.v[r].w};  // group g's two kept values in word g
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      const uint32_t b = ch.i[r] >> (8 * g);  // bits 0-1 first position, 2-3 second
      const uint32_t sel = 0x1010u + 0x22u * (b & 3u) + 0x880u * (b & 0xcu);  // nibbles 2 p0, 2 p0 + 1, 2 p1, ...
      const float2 xv = to_float2(__byte_perm(xw[2 * g], xw[2 * g + 1], sel), Element());
      const float2 wv = to_float2(vw[g], Element());
      acc[r][0] = fmaf(wv.x, xv.x, acc[r][0]);
      acc[r][0] = fmaf(wv.y, xv.y, acc[r][0]);
    }
  }
}

template <class Out>
__global__ void __launch_bounds__(kWarps * 32)
nm_decode_kernel(const Element* __restrict__ x, const Element* __restrict__ values,
                 const uint8_t* __restrict__ indices, const Element* __restrict__ bias, Out* __restrict__ y,
                 int m, int n, int k, int keep, int group, int vector, int stride, int piece) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int index_arg = vector;  // kMeta24: the metadata's slab pitch; else the rows sharing an index row
  if constexpr (kMeta24) {  // the 2:4 format fixes them: the compiler folds the group arithmetic below
    keep = 2;
    group = 4;
    vector = 1;
  }
  float* red = reinterpret_cast<float*>(smem);                                   // [kBlockRows][kMaxTokens]
  push_init(red);
  unsigned char* tbuf = smem + kRedBytes;                                        // [kWarps][kTransposeBytes]
  Element* xs = reinterpret_cast<Element*>(tbuf + kWarps * kTransposeBytes);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row0 = blockIdx.y * kBlockRows + warp * kRows;
  const bool shared_idx = vector % kRows == 0;  // a warp's rows start at a multiple of kRows
  const int chunks = stride / 8;
  const int step_g = 32 / keep, step_q = 32 - step_g * keep;  // 32 positions = step_g groups + step_q
  const int2 share = cta_share(chunks);
  const int cb = share.x, ce = share.y;

  float acc[kRows][kMaxTokens];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < kMaxTokens; ++t) acc[r][t] = 0.f;

  for (int p0 = cb; p0 < ce; p0 += piece) {
    const int p1 = min(p0 + piece, ce);
    const int g0 = p0 * 8 / keep, g1 = (p1 * 8 - 1) / keep;  // groups this piece touches
    const int c0 = g0 * group;
    Chunk buf[kAhead];  // this lane's chunks p0 + lane + 32 a, in flight (issued before x is staged)
#pragma unroll
    for (int a = 0; a < kAhead; ++a) {
      const int cc = p0 + lane + 32 * a;
      if (cc < p1) load_chunk(buf[a], values, indices, row0, n, index_arg, stride, shared_idx, cc * 8);
    }
    wait_for_inputs();  // the weights above are already in flight; x is read below
    if constexpr (kStage) {
      __syncthreads();  // the previous piece's columns are no longer read
      stage_x(x, xs, m, k, c0, (g1 - g0 + 1) * group);
      __syncthreads();
    }
    auto consume = [&](const Chunk& cur, int cc) {
      if constexpr (kMeta24 && !kStage) {
        consume24_one_token(cur, x, cc, acc);
        return;
      }
      uint2 off[kRows];  // offsets within the groups (row 0's alone are read where rows share them)
#pragma unroll
      for (int r = 0; r < kRows; ++r) off[r] = offsets(cur.i[r]);
      const int j0 = cc * 8;
      int g = j0 / keep, q = j0 - g * keep;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int col0 = g * group - c0;
        if (!kStage) {  // one token: x straight from L1/L2, one load per kept column per row
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            const int col = c0 + col0 + reinterpret_cast<const uint8_t*>(&off[shared_idx ? 0 : r])[e];
            const float xv = col < k ? to_float(__ldg(x + col)) : 0.f;
            const float w = to_float(reinterpret_cast<const Element*>(&cur.v[r])[e]);
            acc[r][0] = fmaf(w, xv, acc[r][0]);
          }
        } else if (shared_idx) {
          float xv[kMaxTokens];
          load_column(xs, col0 + reinterpret_cast<const uint8_t*>(&off[0])[e], xv);
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            const float w = to_float(reinterpret_cast<const Element*>(&cur.v[r])[e]);
#pragma unroll
            for (int t = 0; t < kMaxTokens; ++t) acc[r][t] = fmaf(w, xv[t], acc[r][t]);
          }
        } else {
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            float xv[kMaxTokens];
            load_column(xs, col0 + reinterpret_cast<const uint8_t*>(&off[r])[e], xv);
            const float w = to_float(reinterpret_cast<const Element*>(&cur.v[r])[e]);
#pragma unroll
            for (int t = 0; t < kMaxTokens; ++t) acc[r][t] = fmaf(w, xv[t], acc[r][t]);
          }
        }
        if (++q == keep) { q = 0; ++g; }
      }
    };
    // kTranspose: the warp's 32 chunks go through shared memory so that in gather e lane l takes nonzero
    // 32 e + l of the warp's 256: the lanes' x columns are then neighbours (a few cache lines per gather)
    // instead of 256 nonzeros apart. Element e of lane l's chunk sits at (8 l + e) in the buffer.
    auto consume_transposed = [&](const Chunk& cur, bool valid, int base) {
      Element* tv = reinterpret_cast<Element*>(tbuf + warp * kTransposeBytes);  // [kRows][256]
      uint8_t* ti = reinterpret_cast<uint8_t*>(tv + kRows * 256);                // [kRows or 1][256]
      __syncwarp();
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        reinterpret_cast<uint4*>(tv + r * 256)[lane] = valid ? cur.v[r] : make_uint4(0, 0, 0, 0);
        if (r == 0 || !shared_idx) {
          reinterpret_cast<uint2*>(ti + r * 256)[lane] = valid ? offsets(cur.i[r]) : make_uint2(0, 0);
        }
      }
      __syncwarp();
      const int j = base * 8 + lane;  // this lane's first position; the next is 32 further
      int g = j / keep, q = j - g * keep;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int col0 = g * group - c0;
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const int pos = 32 * e + lane;
          const int col = c0 + col0 + ti[(shared_idx ? 0 : r) * 256 + pos];
          const float w = to_float(tv[r * 256 + pos]);
          float xv[kMaxTokens];
          if constexpr (kStage) {  // positions past the piece (idle lanes) have no staged column
            if (j + 32 * e < p1 * 8) {
              load_column(xs, col - c0, xv);
            } else {
#pragma unroll
              for (int t = 0; t < kMaxTokens; ++t) xv[t] = 0.f;
            }
          } else {
            xv[0] = col < k ? to_float(__ldg(x + col)) : 0.f;
          }
#pragma unroll
          for (int t = 0; t < kMaxTokens; ++t) acc[r][t] = fmaf(w, xv[t], acc[r][t]);
        }
        q += step_q; g += step_g;
        if (q >= keep) { q -= keep; ++g; }
      }
    };
    for (int cb0 = p0; cb0 < p1; cb0 += 32 * kAhead) {
#pragma unroll
      for (int a = 0; a < kAhead; ++a) {  // consume one chunk, refill its slot kAhead chunks further on
        const int base = cb0 + 32 * a;  // warp-uniform: the warp's first chunk of this step
        if (base >= p1) break;
        const int cc = base + lane;
        const Chunk cur = buf[a];
        if (cc + 32 * kAhead < p1) {
          load_chunk(buf[a], values, indices, row0, n, index_arg, stride, shared_idx, (cc + 32 * kAhead) * 8);
        }
        if constexpr (kTranspose) {
          consume_transposed(cur, cc < p1, base);
        } else if (cc < p1) {
          consume(cur, cc);
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < kMaxTokens; ++t) {
      float v = acc[r][t];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
      if (lane == 0) red[(warp * kRows + r) * kMaxTokens + t] = v;
    }
  reduce_store(red, bias, y, m, n);
}

// ---- mode = 2: tensor cores ----
// Warp w owns rows blockIdx.y * kBlockRows + 32 (w / kWsplit) .. + 31 (two m16 tiles, one index row: vector % 32
// == 0) and walks its part (w % kWsplit of kWsplit) of each x piece of the CTA's k-range in steps of 16 nonzero
// positions: mma.m16n8k16 with A = the tile's values (loaded in
// fragment order, formats/nm.py decode_mma_layout: one 16-byte load per lane and tile) and B = the 16 x columns
// of those positions, gathered from the staged x ([col][kTok] fp16) by ldmatrix.trans with one column address per
// lane. kTok = 8 or 16 tokens (one or two n8 tiles). Modes 2 and 3 with fewer than 8 tokens stage exactly that
// many (narrow x: a CTA that walks a whole row's k, wsplit, stages 8 / kMaxTokens times less) and build the B
// fragment from scalar shared loads instead (narrow_b).
constexpr bool kNarrow = kMode >= 2 && kMaxTokens < 8;
constexpr int kTok = kNarrow ? kMaxTokens : kMaxTokens < 8 ? 8 : kMaxTokens;
constexpr int kNTiles = kTok < 8 ? 1 : kTok / 8;
// Staged column c's kTok tokens sit in row xs_row(c) (c relative to the piece's first column): rows XOR-permuted
// inside each unit of 8 columns, so the staging's 2-byte stores (lanes: several units x tokens, one element of
// each unit at a time) fall in distinct banks. Unpermuted, one 16-byte row per column puts all of a warp's units on
// one bank (8-way at 4 tokens, 32-way at one token of an 8-token kernel): permuted, 2-8 tokens ran 4 % faster a
// call (geomean of 48 cells, up to 10 %). 32-byte rows (16 tokens) conflict 2-way; permuting them gained 2.5 % in
// mode 3 and lost up to 5 % in mode 2, so mode 2 keeps them.
constexpr int kXsSwizzle = kTok == 8 ? 7 : kTok == 16 && kMode == 3 ? 3 : 0;
__device__ __forceinline__ int xs_row(int c) { return c ^ ((c >> 3) & kXsSwizzle); }

// Columns [c0, c0 + ncols) of x into xs[col][token] (fp16/bf16, kTok per column; zeros past k). vec: c0, k and x
// are 8-column (16-byte) aligned, so a thread loads 8 columns of one token at once. Loads first (kLoads per
// thread), then the 2-byte scattered stores (one 16-byte store at one token).
// Only tokens < m are written: the rest of a column is left as it is, since B's token t only reaches the
// accumulators of token t, which are never stored for t >= m.
__device__ __forceinline__ void stage_x_tok(const Element* __restrict__ x, Element* xs, int m, int k, int c0,
                                            int ncols, bool vec) {
  if (vec) {
    constexpr int kLoads = 4;  // 8 spill registers at 16 tokens, 7-14 % slower a call
    const int units = (ncols + 7) / 8 * m;
    for (int u0 = threadIdx.x; u0 < units; u0 += blockDim.x * kLoads) {
      uint4 v[kLoads];
#pragma unroll
      for (int i = 0; i < kLoads; ++i) {
        const int u = u0 + i * blockDim.x, t = u % m, col = c0 + 8 * (u / m);
        v[i] = make_uint4(0u, 0u, 0u, 0u);
        if (u < units && col < k) v[i] = __ldg(reinterpret_cast<const uint4*>(x + static_cast<int64_t>(t) * k + col));
      }
#pragma unroll
      for (int i = 0; i < kLoads; ++i) {
        const int u = u0 + i * blockDim.x;
        if (u >= units) break;
        if constexpr (kTok == 1) {
          reinterpret_cast<uint4*>(xs)[u] = v[i];
        } else {
          const Element* e = reinterpret_cast<const Element*>(&v[i]);
          Element* dst = xs + u % m;
#pragma unroll
          for (int j = 0; j < 8; ++j) dst[xs_row(8 * (u / m) + j) * kTok] = e[j];
        }
      }
    }
  } else {
    for (int u = threadIdx.x; u < ncols * m; u += blockDim.x) {
      const int t = u % m, col = c0 + u / m;
      xs[xs_row(u / m) * kTok + t] = col < k ? x[static_cast<int64_t>(t) * k + col] : Element(0.f);
    }
  }
}

__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<Element, __half>) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// One 16-position step of a warp: the 16 x columns of its positions (one column address per lane) by
// ldmatrix.trans, then mma over the warp's two 16-row tiles and kNTiles 8-token tiles.
// Narrow x: the B fragment of an mma with kRegs k-halves of 8 (2 for m16n8k16, 4 for m16n8k32): lane l holds
// token l / 4 at positions 8 j + 2 (l % 4) + {0, 1} in register j, whose columns the lanes of those positions
// computed (lane p holds position p's column); tokens past kTok are zero.
template <int kRegs>
__device__ __forceinline__ void narrow_b(uint32_t (&b)[4], const Element* xs, int col) {
  const int lane = threadIdx.x & 31, p = 2 * (lane & 3), t = lane >> 2;
  int c[2 * kRegs];
#pragma unroll
  for (int i = 0; i < 2 * kRegs; ++i) c[i] = __shfl_sync(0xffffffffu, col, p + 8 * (i / 2) + i % 2);
  const unsigned short* xh = reinterpret_cast<const unsigned short*>(xs) + t;
  uint32_t h[2 * kRegs];
#pragma unroll
  for (int i = 0; i < 2 * kRegs; ++i) h[i] = t < kTok ? xh[c[i] * kTok] : 0u;
#pragma unroll
  for (int j = 0; j < kRegs; ++j) b[j] = h[2 * j] | h[2 * j + 1] << 16;
}

__device__ __forceinline__ void mma_step(float (&acc)[2][kNTiles][4], const uint32_t (&af)[2][4], const Element* xs,
                                         int col, int my_tok) {
  uint32_t b[4];
  if constexpr (kNarrow) {
    narrow_b<2>(b, xs, col);
  } else if constexpr (kNTiles == 2) {
    const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(xs + xs_row(col) * kTok + my_tok));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3]) : "r"(addr));
  } else {
    const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(xs + xs_row(col) * kTok + my_tok));
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(b[0]), "=r"(b[1]) : "r"(addr));
  }
#pragma unroll
  for (int t = 0; t < 2; ++t) {
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) mma_16816(acc[t][nt], af[t], b[2 * nt], b[2 * nt + 1]);
  }
}

// ---- mode = 3: V:N:M weights on sparse tensor cores ----
// A warp's 32 rows lie in one V-block (V % 32 == 0), so they gather the same 4 columns of every group of M: a step
// is 8 groups, 32 gathered x columns (k of mma.sp.m16n8k32), whose 2:4-compressed values (16 per row) are A and
// whose 2-bit positions are the metadata. Per warp and step the layout (formats/vnm.py decode_vnm_layout) holds
// 1024 bytes of A fragments (one 16-byte load per lane and 16-row tile, as in mode 2) then 32 metadata words:
// lane 4 g + 2 t + h holds groups 4 h .. 4 h + 3 of rows g and g + 8 of tile t, read by the tile's mma with sparsity
// selector t (lanes 4 g + 2 t and 4 g + 2 t + 1).
constexpr int kStepHalves = kMode == 3 ? 576 : 512;  // values (+ metadata) per warp and step, in halves

__device__ __forceinline__ void mma_sp_16832(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[4],
                                             uint32_t e, int tile) {
  // the selector is an immediate: tile 0 takes lanes 4 g + 0, 1; tile 1 lanes 4 g + 2, 3
#define CNM_MMA_SP(SEL, TYPE)                                                                                    \
  asm volatile("mma.sp.sync.aligned.m16n8k32.row.col.f32." TYPE "." TYPE ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "  \
               "{%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, " #SEL ";\n"                                               \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                                  \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e))
  if constexpr (std::is_same_v<Element, __half>) {
    if (tile == 0) { CNM_MMA_SP(0x0, "f16"); } else { CNM_MMA_SP(0x1, "f16"); }
  } else {
    if (tile == 0) { CNM_MMA_SP(0x0, "bf16"); } else { CNM_MMA_SP(0x1, "bf16"); }
  }
#undef CNM_MMA_SP
}

// One 8-group step of a warp on sparse tensor cores: the 32 gathered x columns (lane l addresses column l) by
// ldmatrix.x4.trans per 8-token tile, then mma.sp over the two 16-row tiles.
__device__ __forceinline__ void mma_sp_step(float (&acc)[2][kNTiles][4], const uint32_t (&af)[2][4], uint32_t e,
                                            const Element* xs, int col) {
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
    uint32_t b[4];
    if constexpr (kNarrow) {
      narrow_b<4>(b, xs, col);
    } else {
      const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(xs + xs_row(col) * kTok + nt * 8));
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                   : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3]) : "r"(addr));
    }
#pragma unroll
    for (int t = 0; t < 2; ++t) mma_sp_16832(acc[t][nt], af[t], b, e, t);
  }
}

template <class Out>
__global__ void __launch_bounds__(kWarps * 32, kMinCtas > 0 ? kMinCtas : 1)
nm_decode_mma_kernel(const Element* __restrict__ x, const Element* __restrict__ values,
                     const uint8_t* __restrict__ indices, const Element* __restrict__ bias, Out* __restrict__ y,
                     int m, int n, int k, int keep, int group, int vector, int stride, int piece) {
  extern __shared__ __align__(16) unsigned char smem[];
  trace_mark(0);
  trace_mark(5);
  if constexpr (kEarlyRelease) allow_next_launch();
  float* red = reinterpret_cast<float*>(smem);  // [kBlockRows x kWsplit][kMaxTokens]
  push_init(red);
  Element* xs = reinterpret_cast<Element*>(smem + kRedBytes + kRingBytes);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // this warp's 32 rows (past n: the last block's), and its part of each piece's steps (kWsplit warps a block)
  const int block = min(blockIdx.y * (kWarps / kWsplit) + warp / kWsplit, (n - 1) / 32), part = warp % kWsplit;
  const int steps = stride / 16;
  const int2 share = cta_share(steps);
  const int cb = share.x, ce = share.y;
  auto my_part = [part](int p0, int p1) {
    return make_int2(p0 + (p1 - p0) * part / kWsplit, p0 + (p1 - p0) * (part + 1) / kWsplit);
  };
  // + step * kStepHalves + tile * 256; mode 3's metadata word of the lane at + step * kStepHalves + 512 + 2 lane
  const Element* vals = values + static_cast<int64_t>(block) * steps * kStepHalves + lane * 8;
  const uint32_t* meta = reinterpret_cast<const uint32_t*>(values + static_cast<int64_t>(block) * steps * kStepHalves +
                                                           512) + lane;
  // mode 3: the V-block's gathered columns, 32 per step (4 per group), 2 stride bytes per V-block
  const uint8_t* idx = indices + static_cast<int64_t>(min(block * 32, n - 1) / vector) * stride * (kMode == 3 ? 2 : 1);
  const bool vec = k % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  // ldmatrix.x4.trans: lane l addresses row l % 8 of matrix l / 8 = (k half (l / 8) % 2, n tile l / 16).
  const int my_pos = (lane >> 3 & 1) * 8 + (lane & 7), my_tok = kNTiles == 2 ? (lane >> 4) * 8 : 0;

  float acc[2][kNTiles][4];
#pragma unroll
  for (int t = 0; t < 2; ++t)
#pragma unroll
    for (int j = 0; j < kNTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[t][j][e] = 0.f;

#if __CUDA_ARCH__ >= 900
  if constexpr (kBulk) {
    unsigned char* ring = smem + kRedBytes;
    const uint32_t ring_v = static_cast<uint32_t>(__cvta_generic_to_shared(ring)) + warp * kDepth * 1024;
    const uint32_t ring_i = static_cast<uint32_t>(__cvta_generic_to_shared(ring)) + kWarps * kDepth * 1024 +
                            warp * kDepth * 16;
    const uint32_t bars = static_cast<uint32_t>(__cvta_generic_to_shared(ring)) + kWarps * kDepth * 1040 +
                          warp * kDepth * 8;
    const Element* vals_g = values + static_cast<int64_t>(block) * steps * 512;
    if (lane == 0) {
#pragma unroll
      for (int d = 0; d < kDepth; ++d) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bars + 8 * d));
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncwarp();
    // step s into slot (s - cb) % kDepth: one thread arms the slot's barrier and issues both copies
    auto issue = [&](int s) {
      const int d = (s - cb) % kDepth;
      if (lane == 0) {
        const uint32_t bar = bars + 8 * d;
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the slot's earlier reads come first
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], 1040;" ::"r"(bar) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 1024, [%2];"
                     ::"r"(ring_v + 1024 * d), "l"(vals_g + static_cast<int64_t>(s) * 512), "r"(bar) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 16, [%2];"
                     ::"r"(ring_i + 16 * d), "l"(idx + s * 16), "r"(bar) : "memory");
      }
    };
    for (int s = cb; s < min(cb + kDepth, ce); ++s) issue(s);
    for (int p0 = cb; p0 < ce; p0 += piece) {
      const int p1 = min(p0 + piece, ce);
      const int g0 = p0 * 16 / keep, g1 = (p1 * 16 - 1) / keep;  // groups this piece touches
      const int c0 = (g0 * group) & ~7;
      __syncthreads();  // the previous piece's columns are no longer read
      wait_for_inputs();  // the weights above are already in flight
      stage_x_tok(x, xs, m, k, c0, (g1 + 1) * group - c0, vec);
      __syncthreads();
      int j = p0 * 16 + my_pos, g = j / keep, q = j - g * keep;  // this lane's position, its group and place
      const int dg = 16 / keep, dq = 16 - dg * keep;
      for (int c = p0; c < p1; ++c) {
        const int d = (c - cb) % kDepth;
        const uint32_t phase = ((c - cb) / kDepth) & 1;
        asm volatile("{\n.reg .pred p;\nWAIT_%=:\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra WAIT_%=;\n}"
                     ::"r"(bars + 8 * d), "r"(phase) : "memory");
        uint32_t af[2][4];
        asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(af[0][0]), "=r"(af[0][1]), "=r"(af[0][2]),
                     "=r"(af[0][3]) : "r"(ring_v + 1024 * d + 16 * lane));
        asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(af[1][0]), "=r"(af[1][1]), "=r"(af[1][2]),
                     "=r"(af[1][3]) : "r"(ring_v + 1024 * d + 512 + 16 * lane));
        uint32_t ib;
        asm volatile("ld.shared.u8 %0, [%1];" : "=r"(ib) : "r"(ring_i + 16 * d + my_pos));
        __syncwarp();
        if (c + kDepth < ce) issue(c + kDepth);
        const int col = g * group + static_cast<int>(ib) - c0;
        mma_step(acc, af, xs, col, my_tok);
        q += dq; g += dg;
        if (q >= keep) { q -= keep; ++g; }
      }
    }
  } else
#endif
  {
    // mode 3: lane l gathers column l of a step (group 8 step + l / 4, its (l % 4)-th kept column)
    constexpr int kIdxPerStep = kMode == 3 ? 32 : 16;
    const int my_idx = kMode == 3 ? lane : my_pos;
    // steps [s0, s1) of this warp's values (and mode 3's metadata) into L2
    auto prefetch_l2 = [&](int s0, int s1) {
#if __CUDA_ARCH__ >= 900
      if (kPrefetch && lane == 0 && s1 > s0) {
        const Element* at = values + (static_cast<int64_t>(block) * steps + s0) * kStepHalves;
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(at), "r"((s1 - s0) * kStepHalves * 2)
                     : "memory");
      }
#endif
    };
    {  // with kWsplit > 1 a warp's steps are its parts of the pieces: the window stays inside the part
      const int2 first = my_part(cb, min(cb + piece, ce));
      prefetch_l2(first.x, min(first.x + kPrefetch, kWsplit > 1 ? first.y : ce));
    }
    for (int p0 = cb; p0 < ce; p0 += piece) {
      const int p1 = min(p0 + piece, ce);
      const int g0 = p0 * 16 / keep, g1 = (p1 * 16 - 1) / keep;  // groups this piece touches
      const int c0 = (g0 * group) & ~7;
      const int2 mine = my_part(p0, p1);  // this warp's steps [q0, q1) of the piece
      const int q0 = mine.x, q1 = mine.y, pe = kWsplit > 1 ? q1 : ce;
      uint4 ab[kAhead][2];  // this warp's steps p0 + a and their index bytes, in flight (issued before x is staged)
      int ib[kAhead];
      uint32_t eb[kAhead];  // mode 3: the lane's metadata word
      auto fetch = [&](int a, int step) {
        ab[a][0] = ld_stream16(vals + static_cast<int64_t>(step) * kStepHalves);
        ab[a][1] = ld_stream16(vals + static_cast<int64_t>(step) * kStepHalves + 256);
        ib[a] = __ldg(idx + step * kIdxPerStep + my_idx);
        if constexpr (kMode == 3) eb[a] = __ldg(meta + static_cast<int64_t>(step) * (kStepHalves / 2));
      };
#pragma unroll
      for (int a = 0; a < kAhead; ++a) {
        if (q0 + a < q1) fetch(a, q0 + a);
      }
      __syncthreads();  // the previous piece's columns are no longer read
      wait_for_inputs();  // the weights above are already in flight
      if (p0 == cb) trace_mark(6);
      stage_x_tok(x, xs, m, k, c0, (g1 + 1) * group - c0, vec);
      __syncthreads();
      if (p0 == cb) trace_mark(1);
      int j = q0 * 16 + my_pos, g = j / keep, q = j - g * keep;  // mode 2: this lane's position, its group and place
      const int dg = 16 / keep, dq = 16 - dg * keep;
      for (int c = q0; c < q1; c += kAhead) {
#pragma unroll
        for (int a = 0; a < kAhead; ++a) {
          const int cc = c + a;
          if (cc >= q1) break;
          uint32_t af[2][4];
#pragma unroll
          for (int t = 0; t < 2; ++t) {
            af[t][0] = ab[a][t].x; af[t][1] = ab[a][t].y; af[t][2] = ab[a][t].z; af[t][3] = ab[a][t].w;
          }
          const uint32_t e = kMode == 3 ? eb[a] : 0u;
          const int col = (kMode == 3 ? cc * 8 + lane / 4 : g) * group + ib[a] - c0;
          if (cc + kAhead < q1) fetch(a, cc + kAhead);
          if (cc + kPrefetch < pe) prefetch_l2(cc + kPrefetch, cc + kPrefetch + 1);
          if constexpr (kMode == 3) {
            mma_sp_step(acc, af, e, xs, col);
          } else {
            mma_step(acc, af, xs, col, my_tok);
            q += dq; g += dg;
            if (q >= keep) { q -= keep; ++g; }
          }
        }
      }
    }
  }
  trace_mark(2);
  // C fragment: c0, c1 = (row lane / 4, tokens 2 (lane % 4) + 0, 1), c2, c3 = row + 8.
#pragma unroll
  for (int t = 0; t < 2; ++t)
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = warp * 32 + t * 16 + lane / 4 + (e >> 1) * 8, tok = nt * 8 + 2 * (lane % 4) + (e & 1);
        if (tok < kMaxTokens) red[r * kMaxTokens + tok] = acc[t][nt][e];
      }
  reduce_store(red, bias, y, m, n);
}


template <class Out>
constexpr auto kernel() {
  if constexpr (kMode >= 2) {
    return nm_decode_mma_kernel<Out>;
  } else {
    return nm_decode_kernel<Out>;
  }
}
// Grid (split, row blocks) and, in attrs (two entries), the cluster (split > 1, sm_90 only: the host asks for it
// only there) and programmatic dependent launch (pdl, on sm_90+ devices).
cudaLaunchConfig_t launch_config(int split, int n, int smem_bytes, int pdl, cudaStream_t stream,
                                 cudaLaunchAttribute* attrs) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(split, (n + kBlockRows - 1) / kBlockRows);
  cfg.blockDim = dim3(kWarps * 32);
  cfg.dynamicSmemBytes = smem_bytes;
  cfg.stream = stream;
  cfg.attrs = attrs;
  if (split > 1) {
    attrs[cfg.numAttrs].id = cudaLaunchAttributeClusterDimension;
    attrs[cfg.numAttrs].val.clusterDim.x = split;
    attrs[cfg.numAttrs].val.clusterDim.y = 1;
    attrs[cfg.numAttrs].val.clusterDim.z = 1;
    ++cfg.numAttrs;
  }
  static const int major = [] {
    int dev = 0, v = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, dev);
    return v;
  }();
  if (pdl && major >= 9) {
    attrs[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[cfg.numAttrs].val.programmaticStreamSerializationAllowed = 1;
    ++cfg.numAttrs;
  }
  return cfg;
}

// Opt in to smem_bytes of dynamic shared memory (a function attribute: set once per size increase).
cudaError_t allow_smem(int smem_bytes, int out_kind) {
  static int smem_set[2] = {0, 0};
  if (smem_bytes <= smem_set[out_kind == 1]) return cudaSuccess;
  const cudaError_t err =
      out_kind == 1
          ? cudaFuncSetAttribute(kernel<float>(), cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes)
          : cudaFuncSetAttribute(kernel<Element>(), cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  if (err == cudaSuccess) smem_set[out_kind == 1] = smem_bytes;
  return err;
}
}  // namespace

extern "C" {

int cnm_abi_version() { return 3; }

#ifdef CNM_TRACE
// Copies the first `ctas` rows of the trace buffer (7 uint64 each) to host memory; 0 on success.
int cnm_trace_read(void* host, int ctas) {
  return int(cudaMemcpyFromSymbol(host, cnm_trace_buf, sizeof(unsigned long long) * 7 * ctas));
}
#endif

int cnm_block_rows() { return kBlockRows; }

// split: CTAs per cluster along k (1-8); piece: chunks of 8 nonzeros per staged x piece; smem_bytes: dynamic
// shared memory (reduction buffer + staged columns). out_kind: 0 = input type, 1 = float. pdl: launch with
// programmatic dependent launch (sm_90+; the weights must not be written by the kernel before this one).
// 0 on success, else 1000 + cudaError_t (or 2: bad args).
int cnm_run(const void* x, const void* values, const void* indices, const void* bias, void* y, int m, int n, int k,
            int keep, int group, int vector, int stride, int split, int piece, int smem_bytes, int out_kind, int pdl,
            cudaStream_t stream) {
  if (m < 1 || m > kMaxTokens || stride % 8 || keep < 1 || group < keep || group > 256 || vector < 1 || split < 1 ||
      split > 8 || piece < 1) {
    return 2;
  }
  cudaLaunchAttribute attrs[2];
  const cudaLaunchConfig_t cfg = launch_config(split, n, smem_bytes, pdl, stream, attrs);
  auto xs = static_cast<const Element*>(x);
  auto vs = static_cast<const Element*>(values);
  auto is = static_cast<const uint8_t*>(indices);
  auto bs = static_cast<const Element*>(bias);
  cudaError_t err = allow_smem(smem_bytes, out_kind);
  if (err != cudaSuccess) return 1000 + int(err);
  if (out_kind == 1) {
    err = cudaLaunchKernelEx(&cfg, kernel<float>(), xs, vs, is, bs, static_cast<float*>(y), m, n, k, keep, group,
                             vector, stride, piece);
  } else {
    err = cudaLaunchKernelEx(&cfg, kernel<Element>(), xs, vs, is, bs, static_cast<Element*>(y), m, n, k, keep, group,
                             vector, stride, piece);
  }
  if (err == cudaSuccess) err = cudaGetLastError();
  return err == cudaSuccess ? 0 : 1000 + int(err);
}

// cnm_run's arguments other than x, y and the stream, packed once per (weight, bias, m) by the caller: the
// steady-state call passes four arguments instead of eighteen.
struct RunArgs {
  const void* values;
  const void* indices;
  const void* bias;
  int m, n, k, keep, group, vector, stride, split, piece, smem_bytes, out_kind, pdl;
};

size_t cnm_run_args_bytes() { return sizeof(RunArgs); }

int cnm_launch(const void* packed, const void* x, void* y, cudaStream_t stream) {
  const RunArgs& a = *static_cast<const RunArgs*>(packed);
  return cnm_run(x, a.values, a.indices, a.bias, y, a.m, a.n, a.k, a.keep, a.group, a.vector, a.stride, a.split,
                 a.piece, a.smem_bytes, a.out_kind, a.pdl, stream);
}

// How many clusters of `split` CTAs (CTAs, for split = 1) of this kernel can be resident at once on the current
// device with smem_bytes of dynamic shared memory; -(1000 + cudaError_t) on failure. A grid with more than this
// runs in more than one wave.
int cnm_max_active_clusters(int split, int smem_bytes, int out_kind) {
  cudaError_t err = allow_smem(smem_bytes, out_kind);
  int count = 0;
  if (err == cudaSuccess && split == 1) {
    int dev = 0, sms = 0;
    err = cudaGetDevice(&dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (err == cudaSuccess) {
      err = out_kind == 1
                ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(&count, kernel<float>(), kWarps * 32, smem_bytes)
                : cudaOccupancyMaxActiveBlocksPerMultiprocessor(&count, kernel<Element>(), kWarps * 32, smem_bytes);
    }
    count *= sms;
  } else if (err == cudaSuccess) {
    cudaLaunchAttribute attrs[2];
    const cudaLaunchConfig_t cfg = launch_config(split, 1, smem_bytes, 0, nullptr, attrs);
    err = out_kind == 1 ? cudaOccupancyMaxActiveClusters(&count, kernel<float>(), &cfg)
                        : cudaOccupancyMaxActiveClusters(&count, kernel<Element>(), &cfg);
  }
  return err == cudaSuccess ? count : -(1000 + int(err));
}

}  // extern "C"
