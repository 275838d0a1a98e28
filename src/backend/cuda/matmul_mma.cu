// backend/cuda/matmul_mma.cu — Q8_0 products of many activation rows (prefill chunks) on the tensor
// cores, with the bits of numerics/quant_ref.h's vec_dot_q8_0 for every element.
//
// Why it is exact. A block's contribution is v_b = (f16(w.d) · a.d) · (float)isum_b, isum_b the exact
// int32 sum of its 32 int8 products: one mma.sync.m16n8k32.s32.s8.s8.s32 from zero accumulators gives
// isum_b for 16 weight rows × 8 activation rows at once (int32 sums of int8 products are exact in any
// order). The float part then runs per output element in the reference order: partial[l] is the chain
// +0 + v_l + v_{l+32} + … (ascending), and the result Partials32::reduce's tree over the 32 partials.
//
// The order of the blocks: the reference tree's post-order, leaf by leaf (mma_fold.cuh), so an element
// holds its chain and at most five finished subtrees instead of 32 partials.
//
// Layout. A CTA of 4 warps computes 64 weight rows × 32 activation rows: warp w rows 16w … 16w + 15, all
// 32 activation rows as 4 n8 tiles, so a thread holds 16 elements (rows g, g + 8 of its warp's 16 with
// g = lane / 4; activation rows 2·(lane % 4) and + 1 of each tile). Per block, the CTA's 64 weight
// blocks (34 bytes, only 2-byte aligned: a misaligned word is two aligned loads and a funnel shift) and
// 32 activation blocks are loaded into registers one block ahead, stored to the other of two shared
// stages (rows 12 words apart: the fragment reads of 8 rows × 4 words hit 32 distinct banks), and
// every warp reads its fragments there. The activation row of element (o, r) is the general product's
// (ProductArgs: act_div, act_group_rows — a group boundary only at a multiple of 64 rows).
#include <cstdint>

#include "backend/cuda/matmul.cuh"
#include "backend/cuda/matmul_types.cuh"
#include "backend/cuda/mma_fold.cuh"
#include "numerics/blocks.h"
#include "numerics/half.h"

namespace dsv4::cuda {

namespace {

using namespace detail;

constexpr int kMmaWarps = 4;
constexpr int kMmaThreads = 32 * kMmaWarps;
constexpr int kMmaRows = 16 * kMmaWarps;  // weight rows per CTA
constexpr int kMmaCols = 32;              // activation rows per CTA: 4 tiles of 8
constexpr int kMmaTiles = kMmaCols / 8;
constexpr int kElems = 4 * kMmaTiles;     // output elements per thread
constexpr int kPitch = 12;                // words between staged rows (8 used)
constexpr int kLevels = 5;                // finished subtrees an element holds (S[0 … 4])
constexpr int64_t kMaxGridY = 65535;

// Below this many activation rows the general product's 8-row tiles are used. Measured (H100, 12-layer
// Flash q2): 16-token chunks ran 0.62× as fast with this form (its 64 × 32 tiles: a quarter of the
// CTAs, half of each tile unused), 64-token chunks 1.17×, 512 1.42×.
constexpr int64_t kMmaMinRows = 64;

struct MmaStage {
  uint32_t wq[kMmaRows][kPitch];  // weight block quants, 8 words per row
  float wd[kMmaRows];             // f16_to_f32(w.d)
  uint32_t aq[kMmaCols][kPitch];  // activation block quants
  float ad[kMmaCols];             // a.d
};

// One block's worth of loads held in registers between the global reads and the shared store.
struct MmaLoads {
  uint32_t wq[kMmaRows * 8 / kMmaThreads];
  uint32_t aq[kMmaCols * 8 / kMmaThreads];
  float d = 0.0f;  // thread i < 64: row i's weight scale; 64 ≤ i < 96: activation row i − 64's scale
};

struct MmaArgs {
  const uint8_t* w = nullptr;
  const uint8_t* w_z1 = nullptr;
  int64_t w_row_bytes = 0, out = 0, nb = 0;
  const uint8_t* act = nullptr;
  int64_t act_stride = 0, act_div = 1, act_group_rows = 0, act_group_bytes = 0;
  int64_t rows = 0;
  float* y = nullptr;
  float* y_z1 = nullptr;
  int64_t y_stride = 0;
};

// Quant word k (bytes 4k … 4k + 3 of qs) of the Q8_0 block at blk (2-byte aligned).
__device__ __forceinline__ uint32_t q8_0_word(const uint8_t* blk, int k) {
  const uint8_t* p = blk + 2 + 4 * k;
  if ((reinterpret_cast<uintptr_t>(p) & 3) == 0) return __ldg(reinterpret_cast<const uint32_t*>(p));
  const uint32_t lo = __ldg(reinterpret_cast<const uint32_t*>(p - 2));
  // The last word's upper half is the block's last two bytes: no read past it.
  const uint32_t hi = k < 7 ? __ldg(reinterpret_cast<const uint32_t*>(p + 2))
                            : static_cast<uint32_t>(__ldg(reinterpret_cast<const uint16_t*>(p + 2)));
  return __funnelshift_r(lo, hi, 16);
}

__global__ void __launch_bounds__(kMmaThreads, 2) product_mma_q8_0_kernel(MmaArgs a) {
  __shared__ __align__(16) MmaStage stage[2];
  wait_for_producer();
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * kMmaRows;
  const uint8_t* w = blockIdx.z == 0 ? a.w : a.w_z1;
  float* y = blockIdx.z == 0 ? a.y : a.y_z1;
  const int64_t group = a.act_group_rows > 0 ? (o0 / a.act_group_rows) * a.act_group_bytes : 0;
  const int64_t last_row = a.out - 1;

  for (int64_t r0 = static_cast<int64_t>(blockIdx.y) * kMmaCols; r0 < a.rows;
       r0 += static_cast<int64_t>(gridDim.y) * kMmaCols) {
    // This thread's load items: weight rows tid/8 + 16k (word tid % 8), activation rows likewise.
    const int item_row = tid >> 3, item_word = tid & 7;
    const uint8_t* w_rows[kMmaRows * 8 / kMmaThreads];
#pragma unroll
    for (int k = 0; k < kMmaRows * 8 / kMmaThreads; ++k) {
      const int64_t o = o0 + item_row + 16 * k;
      w_rows[k] = w + (o < last_row ? o : last_row) * a.w_row_bytes;
    }
    const uint8_t* a_rows[kMmaCols * 8 / kMmaThreads];
#pragma unroll
    for (int k = 0; k < kMmaCols * 8 / kMmaThreads; ++k) {
      const int64_t r = r0 + item_row + 16 * k;
      a_rows[k] = a.act + group + ((r < a.rows ? r : a.rows - 1) / a.act_div) * a.act_stride;
    }
    const uint8_t* d_row = nullptr;  // the row whose scale this thread loads
    bool d_weight = false;
    if (tid < kMmaRows) {
      const int64_t o = o0 + tid;
      d_row = w + (o < last_row ? o : last_row) * a.w_row_bytes;
      d_weight = true;
    } else if (tid < kMmaRows + kMmaCols) {
      const int64_t r = r0 + tid - kMmaRows;
      d_row = a.act + group + ((r < a.rows ? r : a.rows - 1) / a.act_div) * a.act_stride;
    }

    const auto load = [&](int64_t b, MmaLoads& l) {
#pragma unroll
      for (int k = 0; k < kMmaRows * 8 / kMmaThreads; ++k)
        l.wq[k] = q8_0_word(w_rows[k] + b * static_cast<int64_t>(sizeof(BlockQ8_0)), item_word);
#pragma unroll
      for (int k = 0; k < kMmaCols * 8 / kMmaThreads; ++k)
        l.aq[k] = __ldg(reinterpret_cast<const uint32_t*>(a_rows[k] + b * static_cast<int64_t>(sizeof(BlockQ8_0Act)) +
                                                          4 + 4 * item_word));
      if (d_row != nullptr) {
        l.d = d_weight ? f16_to_f32(__ldg(reinterpret_cast<const uint16_t*>(d_row + b * static_cast<int64_t>(sizeof(BlockQ8_0)))))
                       : __ldg(reinterpret_cast<const float*>(d_row + b * static_cast<int64_t>(sizeof(BlockQ8_0Act))));
      }
    };
    const auto store = [&](const MmaLoads& l, MmaStage& s) {
#pragma unroll
      for (int k = 0; k < kMmaRows * 8 / kMmaThreads; ++k) s.wq[item_row + 16 * k][item_word] = l.wq[k];
#pragma unroll
      for (int k = 0; k < kMmaCols * 8 / kMmaThreads; ++k) s.aq[item_row + 16 * k][item_word] = l.aq[k];
      if (tid < kMmaRows)
        s.wd[tid] = l.d;
      else if (tid < kMmaRows + kMmaCols)
        s.ad[tid - kMmaRows] = l.d;
    };

    float chain[kElems], S[kLevels][kElems];
#pragma unroll
    for (int e = 0; e < kElems; ++e) {
      chain[e] = 0.0f;
#pragma unroll
      for (int k = 0; k < kLevels; ++k) S[k][e] = 0.0f;
    }

    int m = 0;
    int64_t b = 0;  // leaf 0's first block (every row has one)
    MmaLoads regs;
    load(b, regs);
    store(regs, stage[0]);
    __syncthreads();
    int buf = 0;
    for (;;) {
      int next_m = m;
      int64_t next_b = b;
      const bool more = next_block<kLevels>(next_m, next_b, a.nb);
      if (more) load(next_b, regs);

      const MmaStage& s = stage[buf];
      const int wr = 16 * warp;
      const uint32_t a0 = s.wq[wr + g][t4], a1 = s.wq[wr + g + 8][t4], a2 = s.wq[wr + g][4 + t4],
                     a3 = s.wq[wr + g + 8][4 + t4];
      const float wd0 = s.wd[wr + g], wd1 = s.wd[wr + g + 8];
#pragma unroll
      for (int n = 0; n < kMmaTiles; ++n) {
        int32_t c[4];
        mma_s8(c, a0, a1, a2, a3, s.aq[8 * n + g][t4], s.aq[8 * n + g][4 + t4]);
        const float ad0 = s.ad[8 * n + 2 * t4], ad1 = s.ad[8 * n + 2 * t4 + 1];
        // v = (f16(w.d) · a.d) · (float)isum, then the leaf's chain (quant_ref.h q8_0_finish).
        chain[4 * n + 0] = chain[4 * n + 0] + (wd0 * ad0) * exact_i2f(c[0]);
        chain[4 * n + 1] = chain[4 * n + 1] + (wd0 * ad1) * exact_i2f(c[1]);
        chain[4 * n + 2] = chain[4 * n + 2] + (wd1 * ad0) * exact_i2f(c[2]);
        chain[4 * n + 3] = chain[4 * n + 3] + (wd1 * ad1) * exact_i2f(c[3]);
      }
      // The leaves that end here: m, and those without blocks before the next block's leaf.
      const int end_m = more ? next_m : 32;
      for (int mm = m; mm < end_m; ++mm) end_leaf<kLevels, kElems>(mm, S, chain);

      if (more) store(regs, stage[buf ^ 1]);
      __syncthreads();
      if (!more) break;
      m = next_m;
      b = next_b;
      buf ^= 1;
    }

#pragma unroll
    for (int n = 0; n < kMmaTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t o = o0 + 16 * warp + g + (e >= 2 ? 8 : 0);
        const int64_t r = r0 + 8 * n + 2 * t4 + (e & 1);
        if (o < a.out && r < a.rows) y[r * a.y_stride + o] = chain[4 * n + e];
      }
    }
  }
}

}  // namespace

namespace detail {

bool enqueue_mma_product(CudaBackend& be, const ProductArgs& p) {
  if (!be.forms().mma_products || p.type != TensorType::kQ8_0 || p.ids != nullptr || p.hc_out != nullptr ||
      p.rows < kMmaMinRows || p.in % 32 != 0 || p.in <= 0)
    return false;
  const auto aligned = [](const void* ptr, uintptr_t n) { return reinterpret_cast<uintptr_t>(ptr) % n == 0; };
  if (!aligned(p.w, 2) || p.w_row_bytes % 2 != 0 || (p.w_z1 != nullptr && !aligned(p.w_z1, 2)) || !aligned(p.act, 4) ||
      p.act_stride % 4 != 0 || p.act_group_bytes % 4 != 0 || (p.act_group_rows > 0 && p.act_group_rows % kMmaRows != 0) ||
      p.act_div <= 0)
    return false;
  MmaArgs a;
  a.w = static_cast<const uint8_t*>(p.w);
  a.w_z1 = static_cast<const uint8_t*>(p.w_z1);
  a.w_row_bytes = p.w_row_bytes;
  a.out = p.out;
  a.nb = p.in / 32;
  a.act = static_cast<const uint8_t*>(p.act);
  a.act_stride = p.act_stride;
  a.act_div = p.act_div;
  a.act_group_rows = p.act_group_rows;
  a.act_group_bytes = p.act_group_bytes;
  a.rows = p.rows;
  a.y = p.y;
  a.y_z1 = p.y_z1;
  a.y_stride = p.y_stride;
  const int64_t col_tiles = (p.rows + kMmaCols - 1) / kMmaCols;
  const dim3 grid(static_cast<unsigned>(blocks_for(p.out, kMmaRows)),
                  static_cast<unsigned>(col_tiles < kMaxGridY ? col_tiles : kMaxGridY), p.w_z1 != nullptr ? 2u : 1u);
  be.launch("product_mma_q8_0_kernel", product_mma_q8_0_kernel, grid, kMmaThreads, 0, a);
  return true;
}

}  // namespace detail

}  // namespace dsv4::cuda
