"""The memory side of the T = 1 GEMV alone: how fast can the H200 stream a gate_up-sized 4-bit matrix
(34816 x 5120, 89 MB of codes) with the GEMV's access pattern but no arithmetic? If the pattern alone runs at
the copy bandwidth, the GEMV's shortfall is in its instructions; if not, it is in the pattern.

    python3 bench/read_probe.py [--reps 50]

Kernels (CuPy RawKernel, compiled at run time; XOR of everything loaded, so nothing is optimised away; the launches
cycle through copies of the matrix past L2, session 6 on; the session-4 figures timed one copy):
  flat      every thread strides over the buffer in 16-byte loads, 4 in flight (the ideal stream)
  rowpair   the GEMV's pattern: a warp owns 2 rows at a time, lane l loads 16 bytes at chunk l + 32 u of each
            (512 contiguous bytes per row per warp instruction), U = 2 chunks per row in flight, persistent
            grid, L1::no_allocate (variant 6 of csrc/cuda/qgemv.cu without the arithmetic)
  rowpair4  the same with U = 4 (each row walked in 2 KB runs)
  rows4     R = 4 rows per warp, U = 2, 3 blocks per SM (variant 23's pattern); tiled4 the same bytes laid out so
            that each warp batch is one contiguous 4 KB run; rows2u4 / tiled2u4: R = 2, U = 4
  down ...  down's shape (5120 x 17408) with variant 4's grid (640 blocks of 4 warps: one pair per warp)
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
// R rows per warp, U chunks per row per batch; TILED: the weights laid out so that a warp's batch (R rows x U
// chunks x 512 bytes) is one contiguous run ([row group][batch][row][u][lane], the same bytes reordered)
template <int R, int U, bool TILED>
__device__ void rows_t(const uint4* __restrict__ a, int N, int rowb16, unsigned* out) {
  const int lane = threadIdx.x & 31;
  const int nwarps = gridDim.x * (blockDim.x >> 5);
  unsigned x = 0;
  for (int g = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); R * g < N; g += nwarps) {
    const uint4* base = a + (size_t)(R * g) * rowb16;
    for (int c = lane, b = 0; c < rowb16; c += 32 * U, ++b) {
      uint4 v[R][U];
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int cc = c + 32 * u;
          const int nb = min(32 * U, rowb16 - b * 32 * U);  // pieces per row in this batch (the last may be short)
          const size_t off = TILED ? (size_t)b * (R * U * 32) + r * nb + 32 * u + lane : (size_t)r * rowb16 + cc;
          v[r][u] = cc < rowb16 ? ldna(base + off) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int u = 0; u < U; ++u) x ^= v[r][u].x ^ v[r][u].y ^ v[r][u].z ^ v[r][u].w;
    }
  }
  if (x == 0x12345678u) out[0] = x;
}
extern "C" __global__ void rows4(const uint4* __restrict__ a, int N, int rowb16, unsigned* out) {
  rows_t<4, 2, false>(a, N, rowb16, out);
}
extern "C" __global__ void tiled4(const uint4* __restrict__ a, int N, int rowb16, unsigned* out) {
  rows_t<4, 2, true>(a, N, rowb16, out);
}
extern "C" __global__ void rows2u4(const uint4* __restrict__ a, int N, int rowb16, unsigned* out) {
  rows_t<2, 4, false>(a, N, rowb16, out);
}
extern "C" __global__ void tiled2u4(const uint4* __restrict__ a, int N, int rowb16, unsigned* out) {
  rows_t<2, 4, true>(a, N, rowb16, out);
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
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    res = {"kernels": {}}
    out = cp.zeros(1, dtype=cp.uint32)
    # (name, kernel, grid, block, shape): gate_up's shape, then down's (5120 x 17408) with the grid the GEMV has
    # there (one pair or quad per warp: 2560 / 1280 warps at work)
    runs = [("flat", "flat", sms * 8, 256, (34816, 5120)),
            ("rowpair", "rowpair", sms * 4, 256, (34816, 5120)),
            ("rowpair4", "rowpair4", sms * 4, 256, (34816, 5120)),
            ("rows4", "rows4", sms * 3, 256, (34816, 5120)),      # variant 23's pattern and grid
            ("tiled4", "tiled4", sms * 3, 256, (34816, 5120)),
            ("rows2u4", "rows2u4", sms * 4, 256, (34816, 5120)),
            ("tiled2u4", "tiled2u4", sms * 4, 256, (34816, 5120)),
            ("down flat", "flat", sms * 8, 256, (5120, 17408)),
            ("down rowpair", "rowpair", 640, 128, (5120, 17408)),   # variant 4's grid
            ("down rows2u4", "rows2u4", 640, 128, (5120, 17408)),
            ("down tiled2u4", "tiled2u4", 640, 128, (5120, 17408))]
    bufs = {}
    for label, name, grid, block, (N, K) in runs:
        rowb = K // 2
        nbytes = N * rowb
        copies = -(-(256 << 20) // nbytes)  # launches cycle through copies past L2 (50 MB), as in a decode step
        if (N, K) not in bufs:
            bufs[N, K] = cp.random.randint(0, 2**31 - 1, size=copies * nbytes // 4, dtype=cp.int32)
        buf = bufs[N, K]

        def kargs(i):
            b = buf[(i % copies) * (nbytes // 4):(i % copies + 1) * (nbytes // 4)]
            return (b, cp.int64(nbytes // 16), out) if name == "flat" else (b, cp.int32(N), cp.int32(rowb // 16), out)
        k = mod.get_function(name)
        for i in range(3):
            k((grid,), (block,), kargs(i))
        start.record()
        for i in range(args.reps):
            k((grid,), (block,), kargs(i))
        stop.record()
        stop.synchronize()
        us = cp.cuda.get_elapsed_time(start, stop) * 1000 / args.reps
        res["kernels"][label] = {"us": round(us, 2), "gbs": round(nbytes / us / 1e3, 1), "shape": [N, K],
                                 "grid": grid, "block": block}
        print(f"{label:14s} {us:7.2f} us  {nbytes / us / 1e3:7.1f} GB/s", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
