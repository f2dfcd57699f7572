// cutlass_nm: memory-bound N:M SpMM for decoding (m <= ${max_tokens} tokens) on CUDA cores, C ABI launcher.
// Generated from cutlass_nm/codegen/templates/nm_decode.cu. y(m x n) = x(m x k) * W^T (+ bias), W in the
// general N:M format (formats/nm.py) with each row's nonzeros padded to a multiple of 8:
//   values  [n][stride]             the kept weights of row r, group by group (N per group of M)
//   indices [ceil(n / vector)][stride]  uint8 offset within the group, shared by `vector` consecutive rows
// One warp streams one row with 16-byte loads (8 values, 8 indices per lane per step); x stays in L1/L2.
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace {
using Element = ${element};
constexpr int kMaxTokens = ${max_tokens};
constexpr int kWarps = ${warps};

__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }

template <class Out>
__global__ void __launch_bounds__(kWarps * 32)
nm_decode_kernel(const Element* __restrict__ x, const Element* __restrict__ values,
                 const uint8_t* __restrict__ indices, const Element* __restrict__ bias, Out* __restrict__ y,
                 int m, int n, int k, int keep, int group, int vector, int stride) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (row >= n) return;
  const Element* vrow = values + static_cast<int64_t>(row) * stride;
  const uint8_t* irow = indices + static_cast<int64_t>(row / vector) * stride;
  float acc[kMaxTokens];
#pragma unroll
  for (int t = 0; t < kMaxTokens; ++t) acc[t] = 0.f;
  for (int j0 = lane * 8; j0 < stride; j0 += 32 * 8) {
    const uint4 vv = *reinterpret_cast<const uint4*>(vrow + j0);      // 8 values
    const uint2 ii = *reinterpret_cast<const uint2*>(irow + j0);      // 8 offsets
    const Element* v8 = reinterpret_cast<const Element*>(&vv);
    const uint8_t* i8 = reinterpret_cast<const uint8_t*>(&ii);
    int g = j0 / keep, r = j0 - g * keep;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      int col = g * group + i8[e];
      col = col < k ? col : k - 1;  // padding (value 0) may point past k
      const float w = to_float(v8[e]);
#pragma unroll
      for (int t = 0; t < kMaxTokens; ++t) {
        if (t < m) acc[t] += w * to_float(__ldg(x + static_cast<int64_t>(t) * k + col));
      }
      if (++r == keep) { r = 0; ++g; }
    }
  }
#pragma unroll
  for (int t = 0; t < kMaxTokens; ++t) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc[t] += __shfl_xor_sync(0xffffffffu, acc[t], off);
  }
  if (lane == 0) {
    const float b = bias ? to_float(bias[row]) : 0.f;
#pragma unroll
    for (int t = 0; t < kMaxTokens; ++t) {
      if (t < m) store(y + static_cast<int64_t>(t) * n + row, acc[t] + b);
    }
  }
}
}  // namespace

extern "C" {

int cnm_abi_version() { return 1; }

// out_kind: 0 = same type as the input, 1 = float. 0 on success, else 1000 + cudaError_t (or 2: bad args).
int cnm_run(const void* x, const void* values, const void* indices, const void* bias, void* y, int m, int n, int k,
            int keep, int group, int vector, int stride, int out_kind, cudaStream_t stream) {
  if (m < 1 || m > kMaxTokens || stride % 8 || keep < 1 || group < keep || vector < 1) return 2;
  dim3 block(kWarps * 32), grid((n + kWarps - 1) / kWarps);
  auto xs = static_cast<const Element*>(x);
  auto vs = static_cast<const Element*>(values);
  auto is = static_cast<const uint8_t*>(indices);
  auto bs = static_cast<const Element*>(bias);
  if (out_kind == 1) {
    nm_decode_kernel<float><<<grid, block, 0, stream>>>(xs, vs, is, bs, static_cast<float*>(y), m, n, k, keep, group,
                                                         vector, stride);
  } else {
    nm_decode_kernel<Element><<<grid, block, 0, stream>>>(xs, vs, is, bs, static_cast<Element*>(y), m, n, k, keep,
                                                           group, vector, stride);
  }
  cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : 1000 + int(err);
}

}  // extern "C"
