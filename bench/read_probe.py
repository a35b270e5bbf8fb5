"""The memory side of the T = 1 GEMV alone: how fast can the H200 stream a gate_up-sized 4-bit matrix
(34816 x 5120, 89 MB of codes) with the GEMV's access pattern but no arithmetic? If the pattern alone runs at
the copy bandwidth, the GEMV's shortfall is in its instructions; if not, it is in the pattern.

    python3 bench/read_probe.py [--reps 50]

Kernels (CuPy RawKernel, compiled at run time; XOR of everything loaded, so nothing is optimised away):
  flat      every thread strides over the buffer in 16-byte loads, 4 in flight (the ideal stream)
  rowpair   the GEMV's pattern: a warp owns 2 rows at a time, lane l loads 16 bytes at chunk l + 32 u of each
            (512 contiguous bytes per row per warp instruction), U = 2 chunks per row in flight, persistent
            grid, L1::no_allocate (variant 6 of csrc/cuda/qgemv.cu without the arithmetic)
  rowpair4  the same with U = 4 (each row walked in 2 KB runs)
"""

from __future__ import annotations

import argparse
import json

SRC = r"""
extern "C" __device__ __forceinline__ uint4 ldna(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
extern "C" __global__ void flat(const uint4* __restrict__ a, long long n16, unsigned* out) {
  unsigned x = 0;
  long long stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    uint4 v0 = ldna(a + i), v1 = ldna(a + i + stride), v2 = ldna(a + i + 2 * stride), v3 = ldna(a + i + 3 * stride);
    x ^= v0.x ^ v0.y ^ v0.z ^ v0.w ^ v1.x ^ v1.y ^ v1.z ^ v1.w ^ v2.x ^ v2.y ^ v2.z ^ v2.w ^ v3.x ^ v3.y ^ v3.z ^ v3.w;
  }
  for (; i < n16; i += stride) { uint4 v = ldna(a + i); x ^= v.x ^ v.y ^ v.z ^ v.w; }
  if (x == 0x12345678u) out[0] = x;
}
template <int U>
__device__ void rowpair_t(const uint4* __restrict__ a, int N, int rowb16, unsigned* out) {
  const int lane = threadIdx.x & 31;
  const int nwarps = gridDim.x * (blockDim.x >> 5);
  unsigned x = 0;
  for (int p = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); 2 * p < N; p += nwarps) {
    const uint4* r0 = a + (size_t)(2 * p) * rowb16;
    const uint4* r1 = r0 + rowb16;
    for (int c = lane; c < rowb16; c += 32 * U) {
      uint4 v[2][U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (c + 32 * u < rowb16) { v[0][u] = ldna(r0 + c + 32 * u); v[1][u] = ldna(r1 + c + 32 * u); }
        else { v[0][u] = make_uint4(0, 0, 0, 0); v[1][u] = v[0][u]; }
      }
#pragma unroll
      for (int u = 0; u < U; ++u)
        x ^= v[0][u].x ^ v[0][u].y ^ v[0][u].z ^ v[0][u].w ^ v[1][u].x ^ v[1][u].y ^ v[1][u].z ^ v[1][u].w;
    }
  }
  if (x == 0x12345678u) out[0] = x;
}
extern "C" __global__ void rowpair(const uint4* __restrict__ a, int N, int rowb16, unsigned* out) {
  rowpair_t<2>(a, N, rowb16, out);
}
extern "C" __global__ void rowpair4(const uint4* __restrict__ a, int N, int rowb16, unsigned* out) {
  rowpair_t<4>(a, N, rowb16, out);
}
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    import cupy as cp
    mod = cp.RawModule(code=SRC, options=("-std=c++17",), name_expressions=None)
    N, K = 34816, 5120
    rowb = K // 2
    nbytes = N * rowb
    buf = cp.random.randint(0, 2**31 - 1, size=nbytes // 4, dtype=cp.int32)
    out = cp.zeros(1, dtype=cp.uint32)
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    res = {"bytes": nbytes, "shape": [N, K], "kernels": {}}
    for name, grid, block, kargs in [
        ("flat", sms * 8, 256, (buf, cp.int64(nbytes // 16), out)),
        ("rowpair", sms * 4, 256, (buf, cp.int32(N), cp.int32(rowb // 16), out)),
        ("rowpair4", sms * 4, 256, (buf, cp.int32(N), cp.int32(rowb // 16), out)),
    ]:
        k = mod.get_function(name)
        for _ in range(3):
            k((grid,), (block,), kargs)
        start.record()
        for _ in range(args.reps):
            k((grid,), (block,), kargs)
        stop.record()
        stop.synchronize()
        us = cp.cuda.get_elapsed_time(start, stop) * 1000 / args.reps
        res["kernels"][name] = {"us": round(us, 2), "gbs": round(nbytes / us / 1e3, 1)}
        print(f"{name:9s} {us:7.2f} us  {nbytes / us / 1e3:7.1f} GB/s", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
