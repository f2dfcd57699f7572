"""Read bandwidth out of L2 and out of HBM, measured with one streaming-read kernel (16-byte ``ld.global.cg``).

    python3 benchmarks/probe_l2_bandwidth.py [--out results.json]

Buffers that fit in L2 (8-32 MB of the H100's 50 MB) are read over and over by every SM: the rate is what L2
delivers to the SMs, the ceiling for kernels whose operand traffic comes out of L2 (V:N:M's gathered x rows).
A 2 GB buffer gives the HBM read rate. Bytes counted: bytes read; the kernel writes nothing measurable.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
from pathlib import Path

import torch

from cutlass_nm.bench.env import environment
from cutlass_nm.build import build

SOURCE = r"""
#include <cstdint>
#include <cuda_runtime.h>
__global__ void read_kernel(const int4* __restrict__ p, size_t n16, int iters, int4* out) {
  int4 acc = make_int4(0, 0, 0, 0);
  size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x, stride = size_t(gridDim.x) * blockDim.x;
  for (int it = 0; it < iters; ++it) {
#pragma unroll 4
    for (size_t i = tid; i < n16; i += stride) {
      int4 v = __ldcg(p + i);
      acc.x ^= v.x; acc.y ^= v.y; acc.z ^= v.z; acc.w ^= v.w;
    }
  }
  if ((acc.x & acc.y & acc.z & acc.w) == 0x7fffffff) out[tid] = acc;  // keeps the loads; never true here
}
extern "C" int cnm_probe_read(const void* p, size_t bytes, int iters, void* out, int blocks, int threads,
                              cudaStream_t s) {
  read_kernel<<<blocks, threads, 0, s>>>(static_cast<const int4*>(p), bytes / 16, iters, static_cast<int4*>(out));
  return int(cudaGetLastError());
}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    lib = ctypes.CDLL(str(build(SOURCE, "sm_90a", "probe_l2_read").path))
    lib.cnm_probe_read.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                                   ctypes.c_int, ctypes.c_void_p]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for mb, iters in ((8, 200), (16, 100), (24, 70), (32, 50), (2048, 2)):
        nbytes = mb << 20
        buf = torch.randint(-(1 << 30), 1 << 30, (nbytes // 4,), dtype=torch.int32, device="cuda")
        for blocks_per_sm, threads in ((4, 512), (8, 256), (16, 256)):
            blocks = blocks_per_sm * sms
            out = torch.empty(blocks * threads * 4, dtype=torch.int32, device="cuda")
            stream = torch.cuda.current_stream().cuda_stream

            def launch(buf=buf, out=out, blocks=blocks, threads=threads, iters=iters, nbytes=nbytes, stream=stream):
                rc = lib.cnm_probe_read(buf.data_ptr(), nbytes, iters, out.data_ptr(), blocks, threads, stream)
                if rc:
                    raise RuntimeError(f"probe launch failed: cudaError {rc}")

            for _ in range(3):
                launch()
            times = []
            for _ in range(15):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                launch()
                e.record()
                e.synchronize()
                times.append(s.elapsed_time(e))
            ms = statistics.median(times)
            rows.append({"buffer_mb": mb, "blocks": blocks, "threads": threads, "iters": iters, "median_ms": ms,
                         "tb_per_s": nbytes * iters / ms / 1e9})
            print(f"{mb:5d} MB  {blocks:5d}x{threads:<4d}  {rows[-1]['tb_per_s']:.2f} TB/s", flush=True)
        del buf
    best_l2 = max(r["tb_per_s"] for r in rows if r["buffer_mb"] <= 32)
    best_hbm = max(r["tb_per_s"] for r in rows if r["buffer_mb"] > 32)
    print(f"best read rate: L2 {best_l2:.2f} TB/s, HBM {best_hbm:.2f} TB/s")
    if args.out:
        args.out.write_text(json.dumps({"environment": environment(), "rows": rows,
                                        "best_l2_tb_per_s": best_l2, "best_hbm_tb_per_s": best_hbm}, indent=1))


if __name__ == "__main__":
    main()
