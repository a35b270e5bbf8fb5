// T = 1, 4-bit: block-wide cp.async pipeline (variants 29..32 of qgemv.cu). Included by qgemv.cu inside its
// anonymous namespace, after the helpers it shares (GemvArgs, stage_xq, load_x_chunk, chunk_dot_idot, the
// smem limits and the wave sizing); not a header of its own.
//
// Why: every other T = 1 kernel holds the weight bytes in flight in registers. bench/read_probe.py (session 4)
// showed the stream needs ~128 KB in flight per SM to approach the copy bandwidth (3.3 TB/s at 64 KB, 3.8 at
// 128 KB), and registers cannot hold that next to the arithmetic: variants with more bytes per warp lost the
// occupancy they paid for (session 4 call 4, session 5 call 2). Here the bytes in flight sit in shared memory
// (H200: 227 KB per SM), landed by cp.async.cg (L2 only, no registers, no L1 allocation):
//   * A block owns tiles of RB consecutive rows and walks K in stages of kc chunks (pipe_geom: at most one per
//     thread, balanced over the stages; thread t owns chunk t of every stage). A stage holds RB x kc 16-byte code pieces (row r's pieces are
//     4 KB contiguous in global memory, copied by consecutive threads) and the stage's scales of those rows
//     (16-byte copies, the last one cut short by cp.async's source size).
//   * The stages of all the block's tiles form one sequence, S - 1 of them in flight ahead of the one being
//     used, straight across tile boundaries. One cp.async group per stage (empty ones too), so "S - 2 groups
//     pending" means the oldest stage has landed; one barrier per stage makes every thread's copies visible
//     and frees the slot read one stage earlier for the next copy.
//   * x is staged once per block as 16-bit integer planes (stage_xq: the integer-dot arithmetic of variants
//     20..28), each x chunk read once per RB rows.
//   * A tile's sums: each thread holds RB partial sums over its chunks; warp shuffles, then a fixed-order sum
//     over the warps in shared memory. Deterministic: no atomics, the same order every run.
//   * The grid is one balanced wave of BPS blocks per SM; S is the deepest ring the shared memory allows.
// Shapes whose scale rows are not 16-byte multiples (K / group % 8 != 0: no shape of the supported models)
// or whose pointers are not 16-byte aligned are refused (the caller falls back to variant 4).
constexpr int kPipeMaxStages = 16;

__device__ inline void cp_async16_partial(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// wait_group takes an immediate; the ring depth is a launch argument, hence the (block-uniform) switch
__device__ inline void cp_async_wait_upto(int n) {
  switch (n) {
    case 0: asm volatile("cp.async.wait_group 0;" ::: "memory"); break;
    case 1: asm volatile("cp.async.wait_group 1;" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;" ::: "memory"); break;
    case 3: asm volatile("cp.async.wait_group 3;" ::: "memory"); break;
    case 4: asm volatile("cp.async.wait_group 4;" ::: "memory"); break;
    case 5: asm volatile("cp.async.wait_group 5;" ::: "memory"); break;
    case 6: asm volatile("cp.async.wait_group 6;" ::: "memory"); break;
    case 7: asm volatile("cp.async.wait_group 7;" ::: "memory"); break;
    case 8: asm volatile("cp.async.wait_group 8;" ::: "memory"); break;
    case 9: asm volatile("cp.async.wait_group 9;" ::: "memory"); break;
    case 10: asm volatile("cp.async.wait_group 10;" ::: "memory"); break;
    case 11: asm volatile("cp.async.wait_group 11;" ::: "memory"); break;
    case 12: asm volatile("cp.async.wait_group 12;" ::: "memory"); break;
    case 13: asm volatile("cp.async.wait_group 13;" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 14;" ::: "memory"); break;
  }
}

// Byte geometry of one stage, the same on host and device.
struct PipeGeom {
  int kc;         // chunks per stage
  int nks;        // stages per tile
  int scale_row;  // bytes of one row's scales in a stage (16-byte multiple)
  int stage;      // bytes of one stage: RB x kc x 16 codes, then RB x scale_row
  int xbytes;     // the integer x planes and their per-chunk metadata, rounded to 16
};
__host__ __device__ inline PipeGeom pipe_geom(int K, int gshift, int rb, int nthreads) {
  PipeGeom g;
  const int nch = K >> 5;
  // the fewest stages of at most nthreads chunks, balanced, kc a multiple of 16 (a stage's scales then start on a
  // 16-byte boundary for group 64 and 32); a short K leaves the threads past its chunks idle
  g.nks = (nch + nthreads - 1) / nthreads;
  g.kc = (((nch + g.nks - 1) / g.nks) + 15) & ~15;
  g.scale_row = ((g.kc << (6 - gshift)) + 15) & ~15;  // kc x 32 / group scales of 2 bytes
  g.stage = rb * g.kc * 16 + rb * g.scale_row;
  g.xbytes = (nch * kXqBytesPerChunk + 15) & ~15;
  return g;
}

template <int RB, int NW>
__global__ void __launch_bounds__(NW * 32) qgemv4_pipe_kernel(GemvArgs a, int S) {
  constexpr int NT = NW * 32;
  extern __shared__ uint4 xs[];  // x planes + metadata (stage_xq layout), then S stages
  __shared__ float red[NW][RB];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int nch = a.K >> 5;
  const PipeGeom geo = pipe_geom(a.K, a.gshift, RB, NT);
  const int ntiles = (a.N + RB - 1) / RB;
  const int my_tiles = blockIdx.x < ntiles ? (ntiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  const int total = my_tiles * geo.nks;  // stages this block uses
  const size_t rowb = (size_t)(a.K >> 1);
  const size_t scale_rowb = (size_t)(a.K >> a.gshift) * 2;
  const uint8_t* scale_bytes = reinterpret_cast<const uint8_t*>(a.scales);
  uint8_t* ring = reinterpret_cast<uint8_t*>(xs) + geo.xbytes;
  const uint32_t ring_s = smem_u32(ring);

  auto issue = [&](int q) {  // stage q of this block's sequence into slot q % S, then one commit group
    if (q < total) {
      const int tile = blockIdx.x + (q / geo.nks) * gridDim.x;
      const int k0 = (q % geo.nks) * geo.kc;
      const int n = min(geo.kc, nch - k0);
      const uint32_t st = ring_s + (q % S) * geo.stage;
      if (tid < n) {
#pragma unroll
        for (int r = 0; r < RB; ++r) {
          const int row = min(tile * RB + r, a.N - 1);  // last partial tile: re-read the last row
          cp_async16_partial(st + (r * geo.kc + tid) * 16, a.codes + row * rowb + (size_t)(k0 + tid) * 16, 16);
        }
      }
      const int sbytes = n << (6 - a.gshift);  // this stage's scale bytes per row
      const int pieces = (sbytes + 15) >> 4;
      for (int i = tid; i < RB * pieces; i += NT) {
        const int r = i / pieces, p = i - r * pieces;
        const int row = min(tile * RB + r, a.N - 1);
        const uint8_t* src = scale_bytes + row * scale_rowb + ((size_t)k0 << (6 - a.gshift)) + p * 16;
        cp_async16_partial(st + RB * geo.kc * 16 + r * geo.scale_row + p * 16, src, min(16, sbytes - p * 16));
      }
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  };

  for (int q = 0; q < S - 1; ++q) issue(q);
  pdl_wait();  // pdl.cuh: the first S - 1 stages of weights are in flight before the wait, x is read after it
  pdl_trigger();
  stage_xq(xs, a.x, nch, NT);  // made visible by the first barrier of the loop
  const int2* xmeta = reinterpret_cast<const int2*>(xs + 4 * nch);

  float acc[RB];
#pragma unroll
  for (int r = 0; r < RB; ++r) acc[r] = 0.f;
  for (int q = 0; q < total; ++q) {
    cp_async_wait_upto(S - 2);  // this thread's copies of stage q have landed
    __syncthreads();            // everyone's have; everyone is done with slot (q - 1) % S
    issue(q + S - 1);           // into slot (q - 1) % S
    const int ks = q % geo.nks;
    const int c = ks * geo.kc + tid;
    if (tid < geo.kc && c < nch) {
      const uint8_t* st = ring + (q % S) * geo.stage;
      uint4 xv[4];
      load_x_chunk(xs, c, xv);
      const int2 m = xmeta[c];
      const float xscale = __int_as_float(m.x);
      const __half* sc = reinterpret_cast<const __half*>(st + RB * geo.kc * 16) + ((tid * 32) >> a.gshift);
#pragma unroll
      for (int r = 0; r < RB; ++r) {
        const uint4 w = *reinterpret_cast<const uint4*>(st + (r * geo.kc + tid) * 16);
        const float s = __half2float(sc[r * (geo.scale_row >> 1)]);
        acc[r] = fmaf(__int2float_rn(chunk_dot_idot(w, xv, m.y)), s * xscale, acc[r]);
      }
    }
    if (ks == geo.nks - 1) {  // the tile's last stage: block-wide sums in a fixed order, then the epilogue
#pragma unroll
      for (int r = 0; r < RB; ++r) {
        const float v = warp_sum(acc[r]);
        if (lane == 0) red[warp][r] = v;
        acc[r] = 0.f;
      }
      __syncthreads();  // red is rewritten only after the next stage's barrier, which every reader passes first
      const int tile = blockIdx.x + (q / geo.nks) * gridDim.x;
      if (a.epi == GEMV_SWIGLU) {
        if (tid < RB / 2) {
          float gate = 0.f, up = 0.f;
          for (int w = 0; w < NW; ++w) {
            gate += red[w][2 * tid];
            up += red[w][2 * tid + 1];
          }
          const int pair = tile * (RB / 2) + tid;
          if (2 * pair + 1 < a.N) a.out_h[perm8(pair)] = __float2half(silu(gate) * up);
        }
      } else if (tid < RB) {
        float v = 0.f;
        for (int w = 0; w < NW; ++w) v += red[w][tid];
        const int row = tile * RB + tid;
        if (row < a.N) {
          if (a.epi == GEMV_STORE) a.out_f32[row] = v;
          else a.out_f32[row] += v;
        }
      }
    }
  }
  asm volatile("cp.async.wait_group 0;" ::: "memory");  // only empty groups can be pending; leave none at exit
}

// The dynamic shared-memory limit already set for one kernel: one per kernel, not per launcher, since launchers
// of different BPS share a kernel (one of them lowering the limit would fail the other's launch).
template <int RB, int NW>
size_t& pipe_smem_raised() {
  static size_t raised = 48 * 1024;
  return raised;
}

// BPS resident blocks per SM wanted; S = the deepest ring that leaves room for them (at least 3 stages, else 1
// block per SM with as many as fit). False when not even 3 stages fit, or the shape's scale rows or pointers
// do not allow 16-byte copies (the caller falls back).
template <int RB, int NW, int BPS>
bool launch_pipe(const GemvArgs& a, cudaStream_t st) {
  constexpr int NT = NW * 32;
  const int ngroups = a.K >> a.gshift;
  if (ngroups % 8 != 0 || (reinterpret_cast<uintptr_t>(a.scales) & 15) || (reinterpret_cast<uintptr_t>(a.codes) & 15))
    return false;
  auto kern = qgemv4_pipe_kernel<RB, NW>;
  const PipeGeom geo = pipe_geom(a.K, a.gshift, RB, NT);
  const SmemLimits& L = smem_limits();
  constexpr int kStaticBytes = NW * RB * 4;  // red
  auto stages_within = [&](long long budget) {
    const long long room = budget - kStaticBytes - geo.xbytes;
    return room > 0 ? (int)std::min<long long>(kPipeMaxStages, room / geo.stage) : 0;
  };
  int bps = BPS;
  int S = stages_within(std::min<long long>(L.per_block, L.per_sm / bps - L.reserved));
  if (S < 3) {
    bps = 1;
    S = stages_within(std::min<long long>(L.per_block, L.per_sm - L.reserved));
  }
  if (S < 3) return false;
  const size_t smem = (size_t)geo.xbytes + (size_t)S * geo.stage;
  if (!allow_dynamic_smem(kern, smem, pipe_smem_raised<RB, NW>(), "qgemv pipe smem attr")) return false;
  static bool carveout_set = false;
  if (!carveout_set) {  // the ring is the landing buffer in L1's place: the largest shared-memory carveout
    MR_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout, (int)cudaSharedmemCarveoutMaxShared),
             "qgemv pipe carveout");
    carveout_set = true;
  }
  static OccupancyCache occ;
  const int per_sm = std::min(bps, occ.get(kern, NT, smem));
  launch_pdl("qgemv", kern, dim3(wave_blocks((a.N + RB - 1) / RB, 1, per_sm, true)), dim3(NT), smem, st, a, S);
  return true;
}
