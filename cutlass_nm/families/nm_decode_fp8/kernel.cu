// cutlass_nm: one-token decode of an FP8 (e4m3) N:M or V:N:M weight on CUDA cores, C ABI launcher.
// Generated from cutlass_nm/families/nm_decode_fp8/kernel.cu. y(1 x n) = sx * (x(1 x k) . W^T) * sw (+ bias), with
// the weight read as element-wise N:M (a V:N:M weight as 2:M), N a power of two, M <= 16, in 32-row blocks:
//   values [n / 32][kv / 16][32][16]  e4m3: chunk c of row r holds that row's kept values 16 c .. 16 c + 15
//   pos    [n / 32][kv / 16][32][8]   the same values' offsets within their group of M, one nibble each (value 2 i
//                                     in the low nibble of byte i); [n / 32][kv / 16][8] where the 32 rows of a
//                                     block share their positions (an N:M weight of vector % 32 == 0: shared = 1)
//   sw     [n] float32 per output channel; sx one float32 (an e4m3 x's scale) or null (16-bit x)
// Kept value j of a row sits in group j / N, so x column (j / N) * M + its nibble. Lane l of a warp owns row l of the
// block: for a chunk, every lane reads the same group's window of at most 16 x values from shared memory (no bank
// conflict), and a warp's load of a chunk is 512 contiguous value bytes and 256 position bytes. The warps of a CTA
// split the chunks of one row block, kAhead chunks a batch, and add their partial sums in shared memory; a warp issues
// its next batch's loads (of this row block or the next) before computing the current one. CTAs stay resident and
// walk the row blocks, so x is converted to float into shared memory once per CTA, while the first batch loads.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

namespace {
using XT = ${x_type};      // __half, __nv_bfloat16, or uint8_t (e4m3 bytes)
using OutT = ${out_type};  // __half or __nv_bfloat16
constexpr int kWarps = ${warps};
constexpr int kAhead = ${ahead};
constexpr bool kHasBias = ${has_bias};
constexpr int kChunk = 16;  // kept values a lane takes per load

${stream_loads}
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(uint8_t v) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(v), __NV_E4M3)));
}
__device__ __forceinline__ float2 fp8x2_to_float2(uint32_t pair) {  // the low 16 bits: two e4m3 values
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair & 0xFFFFu), __NV_E4M3);
  return __half22float2(__half2(h));
}
__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// One chunk of one row: 16 e4m3 values against x at their columns; xs points at the chunk's first group, off[i] is
// value i's group start within the chunk.
__device__ __forceinline__ float chunk_dot(const float* xs, const int (&off)[kChunk], uint4 v, uint2 p) {
  const uint32_t vw[4] = {v.x, v.y, v.z, v.w};
  const uint32_t pw[2] = {p.x, p.y};
  float a0 = 0.f, a1 = 0.f;
#pragma unroll
  for (int h = 0; h < kChunk / 2; ++h) {
    const float2 w = fp8x2_to_float2(vw[h >> 1] >> (16 * (h & 1)));
    const uint32_t nib = pw[h >> 2] >> (8 * (h & 3));
    a0 = fmaf(xs[off[2 * h] + (nib & 0xFu)], w.x, a0);
    a1 = fmaf(xs[off[2 * h + 1] + ((nib >> 4) & 0xFu)], w.y, a1);
  }
  return a0 + a1;
}

// The loads of one batch: chunks base, base + kWarps, ... (kAhead of them) of row block b, lane = row.
__device__ __forceinline__ void load_batch(const uint8_t* __restrict__ values, const uint8_t* __restrict__ pos,
                                           int64_t b, int base, int chunks, int lane, bool shared, uint4 (&v)[kAhead],
                                           uint2 (&p)[kAhead]) {
#pragma unroll
  for (int a = 0; a < kAhead; ++a) {
    const int c = base + kWarps * a;
    if (c < chunks) {
      const int64_t slot = (b * chunks + c) * 32 + lane;
      v[a] = ld_stream16(values + slot * 16);
      p[a] = ld_stream8(pos + (shared ? b * chunks + c : slot) * 8);
    }
  }
}

// x (k elements) as float into xs[0, xcols), zeros past k: 16-byte loads (x is 16-byte aligned), then the tail.
__device__ __forceinline__ void fill_x(const XT* __restrict__ x, float* xs, int k, int xcols) {
  constexpr int kVec = 16 / sizeof(XT);
  const int vecs = k / kVec;
#pragma unroll 4
  for (int i = threadIdx.x; i < vecs; i += blockDim.x) {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(x) + i);
    const XT* e = reinterpret_cast<const XT*>(&u);
#pragma unroll
    for (int j = 0; j < kVec; ++j) xs[i * kVec + j] = to_float(e[j]);
  }
  for (int i = vecs * kVec + threadIdx.x; i < xcols; i += blockDim.x) xs[i] = i < k ? to_float(x[i]) : 0.f;
}

__global__ void __launch_bounds__(kWarps * 32)
nm_decode_fp8_kernel(const XT* __restrict__ x, const uint8_t* __restrict__ values, const uint8_t* __restrict__ pos,
                     const float* __restrict__ sw, const float* __restrict__ sx, const OutT* __restrict__ bias,
                     OutT* __restrict__ y, int n, int k, int kv, int log2n, int group_m, bool shared) {
  extern __shared__ float smem[];
  const int chunks = kv / kChunk;
  const int chunk_cols = (kChunk >> log2n) * group_m;  // x columns one chunk spans
  const int xcols = chunks * chunk_cols;
  float* xs = smem;            // x as float, zeros from k to xcols
  float* part = smem + xcols;  // [kWarps][32] partial sums
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int blocks = (n + 31) / 32;
  // A warp walks (row block, batch) items in order; every warp takes at least one batch (maybe empty) per row block,
  // so all reach the block's two barriers. The next item's loads are issued before the current one is computed.
  int b = blockIdx.x, base = warp;
  uint4 v[kAhead], vn[kAhead];
  uint2 p[kAhead], pn[kAhead];
  if (b < blocks) load_batch(values, pos, b, base, chunks, lane, shared, vn, pn);  // in flight while x is filled
  fill_x(x, xs, k, xcols);
  int off[kChunk];
#pragma unroll
  for (int i = 0; i < kChunk; ++i) off[i] = (i >> log2n) * group_m;
  const float scale_x = sx ? *sx : 1.f;
  __syncthreads();
  float acc = 0.f;
  while (b < blocks) {
#pragma unroll
    for (int a = 0; a < kAhead; ++a) { v[a] = vn[a]; p[a] = pn[a]; }
    const int cur = base;
    const bool last = base + kWarps * kAhead >= chunks;  // this warp's last batch of row block b
    const int nb = last ? b + gridDim.x : b;
    base = last ? warp : base + kWarps * kAhead;
    if (nb < blocks) load_batch(values, pos, nb, base, chunks, lane, shared, vn, pn);
#pragma unroll
    for (int a = 0; a < kAhead; ++a) {
      const int c = cur + kWarps * a;
      if (c < chunks) acc += chunk_dot(xs + c * chunk_cols, off, v[a], p[a]);
    }
    if (last) {
      part[warp * 32 + lane] = acc;
      acc = 0.f;
      __syncthreads();
      if (warp == 0) {
        float sum = 0.f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) sum += part[w * 32 + lane];
        const int row = b * 32 + lane;
        if (row < n) {
          float out = sum * scale_x * sw[row];
          if constexpr (kHasBias) out += to_float(bias[row]);
          store(y + row, out);
        }
      }
      __syncthreads();  // part is written again for the next row block
    }
    b = nb;
  }
}

int g_smem_set = 0;  // dynamic shared memory the kernel is allowed so far
int g_occupancy_smem = -1, g_occupancy = 1;  // CTAs per SM at that shared memory
}  // namespace

extern "C" {
// Shared memory bytes a launch of these arguments takes (x as float plus the partial sums).
int cnm_smem_bytes(int kv, int log2n, int group_m) {
  return (kv / kChunk) * ((kChunk >> log2n) * group_m) * 4 + kWarps * 32 * 4;
}

// y = sx * (x . W^T) * sw (+ bias) for one token; sx may be null (x in 16 bits), bias null without a fused bias.
// kv: values per row (a multiple of 16); N = 2^log2n kept of every group_m; shared: positions one set per 32-row
// block. Returns 0, or 1000 + the CUDA error.
int cnm_decode(const void* x, const void* values, const void* pos, const float* sw, const float* sx,
               const void* bias, void* y, int n, int k, int kv, int log2n, int group_m, int shared, int sm_count,
               cudaStream_t stream) {
  const int smem = cnm_smem_bytes(kv, log2n, group_m);
  cudaError_t err = cudaSuccess;
  if (smem > g_smem_set) {
    err = cudaFuncSetAttribute(nm_decode_fp8_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return 1000 + int(err);
    g_smem_set = smem;
  }
  if (smem != g_occupancy_smem) {
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&g_occupancy, nm_decode_fp8_kernel, kWarps * 32, smem);
    if (err != cudaSuccess) return 1000 + int(err);
    if (g_occupancy < 1) g_occupancy = 1;
    g_occupancy_smem = smem;
  }
  const int blocks = (n + 31) / 32;
  const int grid = blocks < g_occupancy * sm_count ? blocks : g_occupancy * sm_count;
  nm_decode_fp8_kernel<<<grid, kWarps * 32, smem, stream>>>(
      static_cast<const XT*>(x), static_cast<const uint8_t*>(values), static_cast<const uint8_t*>(pos), sw, sx,
      static_cast<const OutT*>(bias), static_cast<OutT*>(y), n, k, kv, log2n, group_m, shared != 0);
  err = cudaGetLastError();
  return err == cudaSuccess ? 0 : 1000 + int(err);
}
}
