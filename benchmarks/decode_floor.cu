// The floor under one decode call per launch (issue 6): a kernel that moves exactly a decode call's bytes and does
// no arithmetic, chained the way `bench_nm_decode.py` times the calls (a CUDA graph of back-to-back launches over
// buffers rotated past L2), with and without programmatic dependent launch (PDL).
//
// Each call: every CTA streams its share of the "weight" bytes into shared memory (cp.async.bulk, issued before
// griddepcontrol.wait, so under PDL it overlaps the previous call's tail), waits for the previous call, reads all of
// x (k fp16 values, as the decode kernels stage it), reads its staged bytes back, and writes its share of y (n fp16).
// The weight slices are summed into y so nothing can be elided. What this reaches at a size is the most any decode
// kernel launched once per call can: if it is under 0.8 of copy bandwidth, so is every such kernel.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -o decode_floor benchmarks/decode_floor.cu
//   ./decode_floor [--json FILE]       (prints a table; rows: n, k, weight bytes of each N:M density at m = 1)
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define CHECK(x)                                                                                      \
  do {                                                                                                \
    cudaError_t e_ = (x);                                                                             \
    if (e_ != cudaSuccess) {                                                                          \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));         \
      std::exit(1);                                                                                   \
    }                                                                                                 \
  } while (0)

constexpr int kThreads = 256;
constexpr int kChunk = 16384;  // bytes a bulk copy moves

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// One call. w: this call's weight bytes (share = bytes a CTA streams, a multiple of 16); x: k halves; y: n halves.
// slots: shared-memory chunks a CTA holds (all of its share when it fits: then the whole share is requested before
// the wait). pdl: 1 = wait for the previous grid before reading x, and let the next grid launch at once.
__global__ void __launch_bounds__(kThreads) floor_call(const uint8_t* __restrict__ w, long long bytes, long long share,
                                                       const __half* __restrict__ x, int k, __half* __restrict__ y,
                                                       int n, int slots, int pdl) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t full[64];
  __shared__ float xsum[kThreads / 32];
  const long long begin = blockIdx.x * share;
  const long long end = begin + share < bytes ? begin + share : bytes;
  const int chunks = begin < end ? static_cast<int>((end - begin + kChunk - 1) / kChunk) : 0;
  if (pdl) asm volatile("griddepcontrol.launch_dependents;");
  if (threadIdx.x == 0) {
    for (int s = 0; s < slots; ++s)
      asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(smem_addr(&full[s])));
    asm volatile("fence.mbarrier_init.release.cluster;");
  }
  __syncthreads();
  auto issue = [&](int c) {  // chunk c of the share into slot c % slots
    const int s = c % slots;
    const long long off = begin + static_cast<long long>(c) * kChunk;
    const uint32_t len = static_cast<uint32_t>(min(static_cast<long long>(kChunk), end - off));
    asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(smem_addr(&full[s])), "r"(len));
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_addr(smem + s * kChunk)),
                 "l"(w + off), "r"(len), "r"(smem_addr(&full[s]))
                 : "memory");
  };
  if (threadIdx.x == 0)
    for (int c = 0; c < min(slots, chunks); ++c) issue(c);
  if (pdl) asm volatile("griddepcontrol.wait;" ::: "memory");
  // x after the previous call: every CTA reads all of it (16-byte loads), as a decode kernel stages it
  float acc = 0.f;
  for (int i = threadIdx.x * 8; i < k; i += kThreads * 8) {
    const float4 v = *reinterpret_cast<const float4*>(x + i);
    const __half2* h = reinterpret_cast<const __half2*>(&v);
    for (int j = 0; j < 4; ++j) acc += __low2float(h[j]) + __high2float(h[j]);
  }
  for (int c = 0; c < chunks; ++c) {
    const int s = c % slots;
    const uint32_t parity = (c / slots) & 1;
    asm volatile(
        "{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared.b64 p, [%0], %1;\n @!p bra W;\n}\n" ::"r"(
            smem_addr(&full[s])),
        "r"(parity)
        : "memory");
    const long long off = begin + static_cast<long long>(c) * kChunk;
    const int len = static_cast<int>(min(static_cast<long long>(kChunk), end - off));
    for (int i = threadIdx.x * 16; i < len; i += kThreads * 16) {
      const float4 v = *reinterpret_cast<const float4*>(smem + s * kChunk + i);
      acc += v.x + v.y + v.z + v.w;
    }
    __syncthreads();  // the slot is free again
    if (threadIdx.x == 0 && c + slots < chunks) issue(c + slots);
  }
  for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (threadIdx.x % 32 == 0) xsum[threadIdx.x / 32] = acc;
  __syncthreads();
  float total = 0.f;
  for (int i = 0; i < kThreads / 32; ++i) total += xsum[i];
  const int rows = (n + gridDim.x - 1) / gridDim.x;  // this CTA's share of y
  for (int r = blockIdx.x * rows + threadIdx.x; r < min(n, (blockIdx.x + 1) * rows); r += kThreads)
    y[r] = __float2half(total);
}

struct Setup {
  int ctas_per_sm, slots;
  bool pdl;
};

// Median ms per call of `calls` back-to-back launches in one graph, replayed `reps` times after a warm-up.
static float time_chain(int sms, long long bytes, int n, int k, const Setup& st, std::vector<uint8_t*>& ws,
                        std::vector<__half*>& xs, std::vector<__half*>& ys, int reps) {
  const int grid = sms * st.ctas_per_sm;
  long long share = (bytes + grid - 1) / grid;
  share = std::max(16LL, (share + 15) / 16 * 16);
  const int chunks = static_cast<int>((share + kChunk - 1) / kChunk);
  const int slots = std::max(1, std::min(st.slots, chunks));
  const size_t smem = static_cast<size_t>(slots) * kChunk;
  CHECK(cudaFuncSetAttribute(floor_call, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const int calls = static_cast<int>(ws.size());
  cudaGraph_t graph;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < calls; ++i) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = st.pdl ? 1 : 0;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    // call i reads the previous call's y as its x where shapes allow (n == k), as a layer chain would
    const __half* x = (n == k && i > 0) ? ys[i - 1] : xs[i];
    CHECK(cudaLaunchKernelEx(&cfg, floor_call, static_cast<const uint8_t*>(ws[i]), bytes, share, x, k, ys[i], n,
                             slots, st.pdl ? 1 : 0));
  }
  CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) CHECK(cudaGraphLaunch(exec, stream));
  std::vector<float> t;
  for (int r = 0; r < reps; ++r) {
    CHECK(cudaEventRecord(a, stream));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaEventRecord(b, stream));
    CHECK(cudaEventSynchronize(b));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms / calls);
  }
  CHECK(cudaGetLastError());
  std::sort(t.begin(), t.end());
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaStreamDestroy(stream));
  return t[t.size() / 2];
}

// Device copy bandwidth (bytes read + written per second) of a 256 MB cudaMemcpyAsync, as bench_nm_decode measures it.
static double copy_bandwidth() {
  const size_t n = size_t(1) << 28;
  void *a, *b;
  CHECK(cudaMalloc(&a, n));
  CHECK(cudaMalloc(&b, n));
  CHECK(cudaMemset(a, 1, n));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  std::vector<float> t;
  for (int r = 0; r < 33; ++r) {
    CHECK(cudaEventRecord(e0));
    CHECK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice));
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (r >= 3) t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  return 2.0 * n / (t[t.size() / 2] * 1e-3);
}

int main(int argc, char** argv) {
  const char* json = nullptr;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--json") json = argv[i + 1];
  int sms;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const double bw = copy_bandwidth();
  std::printf("%s, %d SMs, copy bandwidth %.2f TB/s\n", prop.name, sms, bw / 1e12);
  // (n, k) and the kept fraction of each N:M pattern the decode acceptance times (1:8 / 4:32, 1:4 / 2:8 / 8:32,
  // 5:16, 3:7, 16:32); weight bytes = fp16 values + one index byte per value and 32 rows (bench_nm_decode)
  const int shapes[][2] = {{4096, 4096}, {11008, 4096}, {4096, 11008}, {8192, 8192}};
  // "none": no weight bytes at all, x read and y written: the chain's own cost per call
  const struct { const char* name; double density; } pats[] = {
      {"none", 0.0}, {"1:8", 1.0 / 8}, {"2:8", 2.0 / 8}, {"5:16", 5.0 / 16}, {"3:7", 3.0 / 7}, {"16:32", 0.5}};
  // shared memory: 13 chunks of 16 KB for 1 CTA an SM, 6 for 2, 3 for 4, 1 for 8 (all of a share that fits): a
  // call's CTAs fill the SM. The "half" setups leave half of it free, so the next call's CTAs (PDL, released at
  // entry) fit beside this call's and start their weight copies while it runs.
  const Setup setups[] = {{1, 13, true}, {2, 6, true}, {4, 3, true}, {8, 1, true}, {1, 13, false}, {2, 6, false},
                          {1, 6, true}, {2, 3, true}, {2, 2, true}, {4, 1, true}};
  const char* setup_names[] = {"1 CTA/SM, PDL", "2 CTAs/SM, PDL", "4 CTAs/SM, PDL", "8 CTAs/SM, PDL",
                               "1 CTA/SM, no PDL", "2 CTAs/SM, no PDL", "half: 1 CTA/SM x 6 chunks, PDL",
                               "half: 2 CTAs/SM x 3 chunks, PDL", "half: 2 CTAs/SM x 2 chunks, PDL",
                               "half: 4 CTAs/SM x 1 chunk, PDL"};
  constexpr int kSetups = sizeof(setups) / sizeof(setups[0]);
  const long long l2 = prop.l2CacheSize;
  FILE* out = json ? std::fopen(json, "w") : nullptr;
  if (out) std::fprintf(out, "{\"gpu\": \"%s\", \"copy_bandwidth\": %.6g, \"rows\": [\n", prop.name, bw);
  bool first = true;
  std::printf("%-13s %-6s %10s  %s\n", "n x k", "pattern", "MB", "us and fraction of copy BW: PDL at 1, 2, 4, 8 CTAs/SM; no PDL at 1, 2; half the SM: 1x6, 2x3, 2x2, 4x1");
  for (auto& sh : shapes) {
    const int n = sh[0], k = sh[1];
    for (auto& p : pats) {
      const long long kept = static_cast<long long>(static_cast<double>(n) * k * p.density);
      const long long wbytes = (kept * 2 + kept / 32 + 15) / 16 * 16;
      if (p.density == 0.0 && n != k) continue;  // the empty chain once per square shape
      const long long moved = wbytes + 2LL * k + 2LL * n;
      const int calls = wbytes ? static_cast<int>(std::max<long long>(8, (3 * l2 + wbytes - 1) / wbytes)) : 64;
      std::vector<uint8_t*> ws(calls);
      std::vector<__half*> xs(calls), ys(calls);
      for (int i = 0; i < calls; ++i) {
        CHECK(cudaMalloc(&ws[i], std::max(wbytes, 16LL)));
        CHECK(cudaMemset(ws[i], 0x3c, std::max(wbytes, 16LL)));
        CHECK(cudaMalloc(&xs[i], 2LL * k));
        CHECK(cudaMemset(xs[i], 0x3c, 2LL * k));
        CHECK(cudaMalloc(&ys[i], 2LL * n));
      }
      std::printf("%5d x %-5d %-6s %10.2f ", n, k, p.name, wbytes / 1e6);
      for (int s = 0; s < kSetups; ++s) {
        const float ms = time_chain(sms, wbytes, n, k, setups[s], ws, xs, ys, 50);
        const double frac = moved / (ms * 1e-3) / bw;
        std::printf(" %.3f us %.2f", ms * 1e3, frac);
        if (out)
          std::fprintf(out, "%s  {\"n\": %d, \"k\": %d, \"pattern\": \"%s\", \"weight_bytes\": %lld, \"moved_bytes\": %lld, "
                       "\"setup\": \"%s\", \"ms\": %.6g, \"fraction_of_copy_bw\": %.4f}",
                       first ? "" : ",\n", n, k, p.name, wbytes, moved, setup_names[s], ms, frac);
        first = false;
      }
      std::printf("\n");
      for (int i = 0; i < calls; ++i) {
        CHECK(cudaFree(ws[i]));
        CHECK(cudaFree(xs[i]));
        CHECK(cudaFree(ys[i]));
      }
    }
  }
  if (out) {
    std::fprintf(out, "\n]}\n");
    std::fclose(out);
  }
  return 0;
}
