// cutlass_nm: one-token decode of an FP8 (e4m3) 2:4 weight on CUDA cores, C ABI launcher.
// Generated from cutlass_nm/families/decode24_fp8/kernel.cu. y(1 x n) = sx * (x(1 x k) . W^T) * sw (+ bias), with
//   values [n][k / 2]  e4m3, the two kept weights of every group of 4 (formats/fp8.py)
//   meta   [n][k / 8]  two groups per byte: group 2 j in bits 0-3, 2 j + 1 in bits 4-7; in each nibble bits 0-1
//                      hold the first kept position, bits 2-3 the second
//   sw     [n]         float32 per output channel; sx one float32 (an e4m3 x's scale) or null (16-bit x)
// A warp owns kRows rows; lane l streams chunks l, l + 32, ... of 16 nonzeros (8 groups, 32 columns of x): 16 value
// bytes and 4 meta bytes a chunk, both loaded past L1, kAhead chunks a row in flight. x (read by every row) comes
// through L1. Each group's kept pair of x is picked with one byte permute; products are summed in fp32, the warp
// reduces, and lane 0 scales, adds the bias and writes y.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

namespace {
using XT = ${x_type};      // __half, __nv_bfloat16, or uint8_t (e4m3 bytes)
using OutT = ${out_type};  // __half or __nv_bfloat16
constexpr int kWarps = ${warps};
constexpr int kRows = ${rows};
constexpr int kAhead = ${ahead};
constexpr bool kHasBias = ${has_bias};
constexpr bool kFp8X = sizeof(XT) == 1;
constexpr int kXWords = kFp8X ? 8 : 16;  // 32 columns of x as 32-bit words

${stream_loads}
__device__ __forceinline__ float2 fp8x2_to_float2(uint32_t pair) {  // the low 16 bits: two e4m3 values
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair & 0xFFFFu), __NV_E4M3);
  return __half22float2(__half2(h));
}
__device__ __forceinline__ float2 pair_to_float2(uint32_t u, __half) {
  __half2 h; *reinterpret_cast<uint32_t*>(&h) = u; return __half22float2(h);
}
__device__ __forceinline__ float2 pair_to_float2(uint32_t u, __nv_bfloat16) {
  __nv_bfloat162 h; *reinterpret_cast<uint32_t*>(&h) = u; return __bfloat1622float2(h);
}
__device__ __forceinline__ float2 pair_to_float2(uint32_t u, uint8_t) { return fp8x2_to_float2(u); }

__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// x's two kept columns of group g (positions p0 < p1 within it) as one 32-bit word of two x elements.
__device__ __forceinline__ uint32_t pick(const uint32_t (&xw)[kXWords], int g, uint32_t p0, uint32_t p1) {
  if constexpr (kFp8X) {
    return __byte_perm(xw[g], 0u, p0 | (p1 << 4));
  } else {  // half p at bytes 2p, 2p + 1 of the group's 8 bytes
    return __byte_perm(xw[2 * g], xw[2 * g + 1], (0x10u + 0x22u * p0) | ((0x10u + 0x22u * p1) << 8));
  }
}

// One chunk: 8 groups of x (32 columns from `col`) against 16 e4m3 values and their 4 meta bytes.
__device__ __forceinline__ float chunk_dot(const XT* __restrict__ x, int col, uint4 v, uint32_t meta) {
  uint32_t xw[kXWords];
  const uint4* at = reinterpret_cast<const uint4*>(x + col);
#pragma unroll
  for (int q = 0; q < kXWords / 4; ++q) {
    const uint4 u = __ldg(at + q);
    xw[4 * q] = u.x; xw[4 * q + 1] = u.y; xw[4 * q + 2] = u.z; xw[4 * q + 3] = u.w;
  }
  const uint32_t vw[4] = {v.x, v.y, v.z, v.w};
  float acc = 0.f;
#pragma unroll
  for (int g = 0; g < 8; ++g) {
    const uint32_t nib = (meta >> (4 * g)) & 0xFu;
    const float2 xv = pair_to_float2(pick(xw, g, nib & 3u, nib >> 2), XT());
    const float2 wv = fp8x2_to_float2(vw[g >> 1] >> (16 * (g & 1)));
    acc = fmaf(xv.x, wv.x, fmaf(xv.y, wv.y, acc));
  }
  return acc;
}

__global__ void __launch_bounds__(kWarps * 32)
decode24_fp8_kernel(const XT* __restrict__ x, const uint8_t* __restrict__ values, const uint8_t* __restrict__ meta,
                    const float* __restrict__ sw, const float* __restrict__ sx, const OutT* __restrict__ bias,
                    OutT* __restrict__ y, int n, int k) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int row0 = (blockIdx.x * kWarps + warp) * kRows;
  if (row0 >= n) return;
  const int chunks = k / 32;
  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.f;
  for (int base = lane; base < chunks; base += 32 * kAhead) {
    uint4 v[kAhead][kRows];
    uint32_t mt[kAhead][kRows];
#pragma unroll
    for (int a = 0; a < kAhead; ++a) {
      const int c = base + 32 * a;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int64_t row = min(row0 + r, n - 1);  // rows past n compute what is never stored
        if (c < chunks) {
          v[a][r] = ld_stream16(values + row * (k / 2) + c * 16);
          mt[a][r] = ld_stream4(meta + row * (k / 8) + c * 4);
        }
      }
    }
#pragma unroll
    for (int a = 0; a < kAhead; ++a) {
      const int c = base + 32 * a;
      if (c < chunks) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[r] += chunk_dot(x, c * 32, v[a][r], mt[a][r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
  }
  if (lane == 0) {
    const float scale_x = sx ? *sx : 1.f;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int row = row0 + r;
      if (row < n) {
        float out = acc[r] * scale_x * sw[row];
        if constexpr (kHasBias) out += to_float(bias[row]);
        store(y + row, out);
      }
    }
  }
}
}  // namespace

extern "C" {
// y = sx * (x . W^T) * sw (+ bias) for one token; sx may be null (x in 16 bits), bias null without a fused bias.
// Returns 0, or 1000 + the CUDA error.
int cnm_decode(const void* x, const void* values, const void* meta, const float* sw, const float* sx,
               const void* bias, void* y, int n, int k, cudaStream_t stream) {
  const int rows_per_cta = kWarps * kRows;
  const dim3 grid((n + rows_per_cta - 1) / rows_per_cta);
  decode24_fp8_kernel<<<grid, kWarps * 32, 0, stream>>>(
      static_cast<const XT*>(x), static_cast<const uint8_t*>(values), static_cast<const uint8_t*>(meta), sw, sx,
      static_cast<const OutT*>(bias), static_cast<OutT*>(y), n, k);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : 1000 + int(err);
}
}
