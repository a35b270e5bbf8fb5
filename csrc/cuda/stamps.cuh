// Warp timestamps of the decode step's kernels, for a diagnostic build only (MONORAIL_STAMPS=ON at build time: the
// CMake define of pyproject.toml). In the default build every macro below is empty, so the kernels' code is unchanged.
//
// Why: every GEMV of the step loses 2.5-6.5 us against the copy rate, and every schedule tried against that loss was
// judged by kernel-level timelines (CUPTI) or by standalone probes (bench/boundary_probe.cu --anatomy). This records,
// inside the real step, when each warp of each kernel began and ended (%globaltimer), on which SM, with the kernel's
// family and a key that tells its launches apart (the matrix, cache or state it reads), so that
// bench/step_anatomy.py can show per role how early a kernel's warps were resident, how its warps' ends spread (the
// tail) and how long after its predecessor's last warp its own last warp ended.
//
// Use: `MR_WARP_STAMP(family, key);` as a kernel's first statement (lane 0 of each warp takes a record; the record's
// end is written when the warp leaves the kernel's scope), and `MR_STAMPS_TU(name)` once in each .cu that has such
// kernels: each translation unit holds its own copy of the buffer pointer (the module is built without relocatable
// device code), which stamps_arm (stamps.cu) sets in every unit. pdl_wait() (pdl.cuh) also writes when its wait
// returned into the warp's record (`waited`): the constructor leaves the record's index in a shared-memory word of its
// warp, pdl_wait reads that word before it waits and stores the time after, so nothing but one store follows the
// release. Every kernel of an armed unit that calls pdl_wait() must therefore take a stamp first (all do; an index
// past the buffer is ignored).
#pragma once
#include <cstdint>

namespace monorail {

// One warp of one kernel launch: 40 bytes.
struct StampRecord {
  uint32_t family;  // StampFamily in bits 0-7, the warp's index in its block in bits 8-15
  uint32_t sm;      // %smid in bits 0-15, blockIdx.x in bits 16-31 (saturated at 0xffff)
  uint64_t key;     // a pointer the launch reads that differs from layer to layer where there is one
  uint64_t start;   // %globaltimer, ns
  uint64_t end;
  uint64_t waited;  // when its pdl_wait() returned (0: none noted; see above)
};
// Records of SM s go to rec[s * per_sm .. s * per_sm + count[s]); a full slice drops further records (count keeps
// counting, so the reader sees how many were dropped).
struct StampBuffer {
  StampRecord* rec = nullptr;
  unsigned* count = nullptr;
  unsigned per_sm = 0;
  unsigned capacity = 0;  // num_sms x per_sm records
};

enum StampFamily : uint32_t {
  kStampGemvGeneric = 1,  // qgemv_kernel
  kStampGemvPp = 2,       // qgemv_pp_kernel, qgemv_pp_wide_kernel
  kStampGemvCol = 3,      // qgemv_col_kernel
  kStampGemvSx = 4,       // qgemv4_sx_kernel
  kStampGemvSplit = 5,    // qgemv4_split_kernel
  kStampGemvWalk = 6,     // qgemv_walk_kernel
  kStampGemvRing = 7,     // qgemv_ring_kernel
  kStampGdnStep = 8,      // gdn_conv_decode_kernel, gdn_kernel
  kStampConv = 9,         // conv_kernel
  kStampAttnPrep = 10,
  kStampAttnSplit = 11,   // attn_split_kernel, attn_split_v4_kernel
  kStampAttnCombine = 12,
  kStampRmsnorm = 13,
  kStampEmbed = 14,
};

#if defined(MONORAIL_STAMPS) && defined(__CUDACC__)
static __device__ StampBuffer g_stamps;  // this translation unit's copy (see above)

// The record index of each warp of this block (lane 0 of warp w writes word w); one array a kernel that uses it.
__device__ __forceinline__ unsigned* stamp_record_of_warp() {
  __shared__ unsigned record_of_warp[32];
  return record_of_warp;
}

class WarpStamp {
 public:
  __device__ WarpStamp(uint32_t family, const void* key) {
    if ((threadIdx.x & 31) != 0 || g_stamps.rec == nullptr) return;
    const unsigned sm = smid();
    const unsigned i = atomicAdd(&g_stamps.count[sm], 1u);
    stamp_record_of_warp()[threadIdx.x >> 5] = i < g_stamps.per_sm ? sm * g_stamps.per_sm + i : ~0u;
    if (i >= g_stamps.per_sm) return;
    slot_ = sm * g_stamps.per_sm + i;
    StampRecord& r = g_stamps.rec[slot_];
    r.family = family | ((threadIdx.x >> 5) << 8);
    r.sm = sm | (min(blockIdx.x, 0xffffu) << 16);
    r.key = reinterpret_cast<uint64_t>(key);
    r.waited = 0;
    r.start = now();
  }
  __device__ ~WarpStamp() {
    if (slot_ != ~0u) g_stamps.rec[slot_].end = now();
  }
  // pdl_wait(): before the wait, this warp's record (lane 0; ~0u: none); after it, the time
  __device__ static unsigned wait_record() {
    if ((threadIdx.x & 31) != 0 || g_stamps.rec == nullptr) return ~0u;
    return stamp_record_of_warp()[threadIdx.x >> 5];
  }
  __device__ static void wait_returned(unsigned record) {
    if (record < g_stamps.capacity) g_stamps.rec[record].waited = now();
  }

 private:
  __device__ static uint64_t now() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
  }
  __device__ static unsigned smid() {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    return sm;
  }
  unsigned slot_ = ~0u;
};

#define MR_WARP_STAMP(family, key) ::monorail::WarpStamp mr_warp_stamp_((family), (key))
#define MR_STAMPED_WAIT(wait_statement)                                \
  do {                                                                  \
    const unsigned mr_wait_record_ = ::monorail::WarpStamp::wait_record(); \
    wait_statement;                                                     \
    ::monorail::WarpStamp::wait_returned(mr_wait_record_);              \
  } while (0)
#define MR_STAMPS_TU(name)                                                  \
  void stamps_set_##name(const StampBuffer& b) {                           \
    MR_CHECK(cudaMemcpyToSymbol(g_stamps, &b, sizeof b), "stamps_arm"); \
  }
#else
#define MR_WARP_STAMP(family, key) ((void)0)
#define MR_STAMPED_WAIT(wait_statement) wait_statement
#define MR_STAMPS_TU(name) \
  void stamps_set_##name(const StampBuffer&) {}
#endif

// The translation units' setters (MR_STAMPS_TU), called by stamps_arm.
void stamps_set_qgemv(const StampBuffer& b);
void stamps_set_qgemv_generic(const StampBuffer& b);
void stamps_set_gdn(const StampBuffer& b);
void stamps_set_attention(const StampBuffer& b);
void stamps_set_norm_embed(const StampBuffer& b);

// stamps.cu: whether this module was built with MONORAIL_STAMPS; arm every unit with one buffer (rec: num_sms x
// per_sm records, count: num_sms zeroed counters) or disarm them (rec = nullptr). Arming a module built without the
// stamps throws.
bool stamps_built();
void stamps_arm(StampRecord* rec, unsigned* count, unsigned per_sm);

}  // namespace monorail
