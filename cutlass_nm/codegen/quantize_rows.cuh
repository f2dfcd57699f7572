// Per-token FP8 quantization of the activations, one launch (spliced into the FP8 GEMM templates): one CTA per row
// of x (m x k, fp16/bf16), scale = max|x| / 448 (at least 1e-12), q = x / scale in e4m3, as formats/fp8.py's
// quantize_rows does with torch ops.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
namespace cnm {
constexpr int kQuantThreads = 256;

template <class T>
__global__ void __launch_bounds__(kQuantThreads) quantize_rows_kernel(const T* x, __nv_fp8_e4m3* q, float* scale,
                                                                       int k) {
  const T* row = x + size_t(blockIdx.x) * k;
  float amax = 0.f;
  for (int i = threadIdx.x; i < k; i += kQuantThreads) amax = fmaxf(amax, fabsf(float(row[i])));
  for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  __shared__ float warp_max[kQuantThreads / 32];
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = amax;
  __syncthreads();
  amax = 0.f;
  for (int w = 0; w < kQuantThreads / 32; ++w) amax = fmaxf(amax, warp_max[w]);
  const float s = fmaxf(amax / 448.f, 1e-12f);
  if (threadIdx.x == 0) scale[blockIdx.x] = s;
  __nv_fp8_e4m3* out = q + size_t(blockIdx.x) * k;
  for (int i = threadIdx.x; i < k; i += kQuantThreads) out[i] = __nv_fp8_e4m3(fminf(fmaxf(float(row[i]) / s, -448.f), 448.f));
}

// x (m x k, bf16 when x_bf16 else fp16) -> q (m x k, e4m3) and scale (m floats). 0 on success, else 1000 + cudaError_t.
inline int quantize_rows(const void* x, void* q, float* scale, int m, int k, int x_bf16, cudaStream_t stream) {
  if (m < 1 || k < 1) return 1000 + int(cudaErrorInvalidValue);
  auto* out = static_cast<__nv_fp8_e4m3*>(q);
  if (x_bf16) {
    quantize_rows_kernel<<<m, kQuantThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(x), out, scale, k);
  } else {
    quantize_rows_kernel<<<m, kQuantThreads, 0, stream>>>(static_cast<const __half*>(x), out, scale, k);
  }
  cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? 0 : 1000 + int(err);
}
}  // namespace cnm
