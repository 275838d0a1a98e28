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
// g = lane / 4; activation rows 2·(lane % 4) and + 1 of each tile). The CTA's 64 weight blocks (34 bytes,
// 2-byte aligned: copied as the 9 aligned words that cover each, read with a funnel shift) and 32
// activation blocks go to shared memory by 4-byte cp.async (the lanes of a copy on consecutive words of
// the CTA's covers: a few cache lines per copy), six stages deep in the visiting order (two blocks
// computed between barriers while the next four load; rows 12 words apart: the fragment reads of 8 rows ×
// 4 words hit 32 distinct banks). The activation row of element (o, r) is the general product's
// (ProductArgs: act_div, act_group_rows — a group boundary only at a multiple of 64 rows).
#include <cstdint>

#include "backend/cuda/matmul.cuh"
#include "backend/cuda/matmul_types.cuh"
#include "backend/cuda/mma_fold.cuh"
#include "backend/cuda/preload.cuh"
#include "numerics/blocks.h"
#include "numerics/half.h"

namespace dsv4::cuda {

namespace {

using namespace detail;

constexpr int kElems = kMmaElems;
constexpr int kPitch = 12;                // words between staged rows (8 used)
constexpr int kLevels = 5;                // finished subtrees an element holds (S[0 … 4])
constexpr int64_t kMaxGridY = 65535;

// Below this many activation rows the general product's 8-row tiles are used. Measured (H100, 12-layer
// Flash q2): 16-token chunks ran 0.62× as fast with this form (its 64 × 32 tiles: a quarter of the
// CTAs, half of each tile unused), 64-token chunks 1.17×, 512 1.42×.
constexpr int64_t kMmaMinRows = 64;

// A block's 34 bytes as the 9 aligned words that cover them (rows start 4-byte aligned, so block b
// starts 2·b mod 4 bytes into its first word; an even block's cover takes 2 bytes of the next block or of
// the row's padding, never past the row).
constexpr int kCoverWords = 9;
constexpr int kWWords = kMmaRows * kCoverWords;                            // weight words per stage (576)
constexpr int kAWords = kMmaCols * kCoverWords;                            // activation words per stage (288)
constexpr int kWCopies = (kWWords + kMmaThreads - 1) / kMmaThreads;        // a thread's weight copies (5)
constexpr int kACopies = (kAWords + kMmaThreads - 1) / kMmaThreads;        // a thread's activation copies (3)
constexpr int kStages = 6;  // stages: two blocks computed between barriers while four more load
constexpr int kAhead = kStages - 2;

struct MmaStage {
  uint32_t wq[kMmaRows][kPitch];  // weight block covers (9 words)
  uint32_t aq[kMmaCols][kPitch];  // activation block quants (8 words)
  float ad[kMmaCols];             // a.d
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

// At most 168 registers: three CTAs per SM (166 used; without the bound ptxas took 171, two CTAs).
__global__ void __launch_bounds__(kMmaThreads, 3) product_mma_q8_0_kernel(MmaArgs a) {
  __shared__ __align__(16) MmaStage stage[kStages];
  wait_for_producer();
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * kMmaRows;
  const uint8_t* w = blockIdx.z == 0 ? a.w : a.w_z1;
  float* y = blockIdx.z == 0 ? a.y : a.y_z1;
  const int64_t group = a.act_group_rows > 0 ? (o0 / a.act_group_rows) * a.act_group_bytes : 0;
  const int64_t last_row = a.out - 1;
  // This thread's copies (flattened: the CTA's 64 weight covers of 9 words, then the 32 activation
  // blocks' 9 words (d and the quants), as consecutive words j = tid + 128·k, so the 32 lanes of a copy
  // read ~4 rows' consecutive words: ~5 cache lines per instruction instead of 16, and the shared-memory
  // data pipe's wavefronts per copy fall with them (ncu: 8.1 per copy, 73 % of that pipe's peak, the
  // kernel's limit). Weight word j: row j / 9 (clamped to the last row), word j % 9, as a 32-bit offset
  // from the CTA's first row; its destination in stage 0 as a shared-window address (stage s is
  // s · sizeof(MmaStage) further). Activation word j: row j / 9 of the row tile, word j % 9 (0: d).
  const unsigned stage0 = static_cast<unsigned>(__cvta_generic_to_shared(&stage[0]));
  const auto stage_offset = [&](const void* p) {
    return static_cast<unsigned>(static_cast<const uint8_t*>(p) - reinterpret_cast<const uint8_t*>(&stage[0]));
  };
  const uint8_t* w_row0 = w + o0 * a.w_row_bytes;
  uint32_t w_src[kWCopies];
  unsigned w_dst[kWCopies];
#pragma unroll
  for (int k = 0; k < kWCopies; ++k) {
    const int j = tid + kMmaThreads * k < kWWords ? tid + kMmaThreads * k : 0, row = j / kCoverWords, word = j % kCoverWords;
    const int64_t src_row = o0 + row < last_row ? row : last_row - o0;
    w_src[k] = static_cast<uint32_t>(src_row * a.w_row_bytes) + 4u * static_cast<uint32_t>(word);
    w_dst[k] = stage0 + stage_offset(&stage[0].wq[row][word]);
  }
  int a_row[kACopies], a_word[kACopies];
  unsigned a_dst[kACopies];
#pragma unroll
  for (int k = 0; k < kACopies; ++k) {
    const int j = tid + kMmaThreads * k < kAWords ? tid + kMmaThreads * k : 0;
    a_row[k] = j / kCoverWords;
    a_word[k] = j % kCoverWords;
    a_dst[k] = stage0 + stage_offset(a_word[k] == 0 ? static_cast<const void*>(&stage[0].ad[a_row[k]])
                                                    : static_cast<const void*>(&stage[0].aq[a_row[k]][a_word[k] - 1]));
  }
  constexpr unsigned kStageBytes = sizeof(MmaStage);

  for (int64_t r0 = static_cast<int64_t>(blockIdx.y) * kMmaCols; r0 < a.rows;
       r0 += static_cast<int64_t>(gridDim.y) * kMmaCols) {
    const uint8_t* a_src[kACopies];
#pragma unroll
    for (int k = 0; k < kACopies; ++k) {
      const int64_t r_ld = r0 + a_row[k] < a.rows ? r0 + a_row[k] : a.rows - 1;
      a_src[k] = a.act + group + (r_ld / a.act_div) * a.act_stride + 4 * a_word[k];
    }
    // Block b's copies into the stage at shared offset `off` (a multiple of kStageBytes).
    const auto issue = [&](int64_t b, unsigned off) {
      const uint8_t* ws = w_row0 + ((b * static_cast<int64_t>(sizeof(BlockQ8_0))) & ~int64_t{3});
#pragma unroll
      for (int k = 0; k < kWCopies; ++k)
        if (k + 1 < kWCopies || tid + kMmaThreads * k < kWWords) preload::cp_async4_at(w_dst[k] + off, ws + w_src[k]);
      const int64_t ab = b * static_cast<int64_t>(sizeof(BlockQ8_0Act));
#pragma unroll
      for (int k = 0; k < kACopies; ++k)
        if (k + 1 < kACopies || tid + kMmaThreads * k < kAWords) preload::cp_async4_at(a_dst[k] + off, a_src[k] + ab);
    };

    float chain[kElems], S[kLevels][kElems];
#pragma unroll
    for (int e = 0; e < kElems; ++e) {
      chain[e] = 0.0f;
#pragma unroll
      for (int k = 0; k < kLevels; ++k) S[k][e] = 0.0f;
    }

    // The loader runs kAhead blocks ahead of the compute, in the visiting order, a commit group per block;
    // the compute takes two blocks per barrier.
    __syncthreads();  // the previous row tile's last stages are read before they are refilled
    int ld_m = 0;
    int64_t ld_b = 0;  // leaf 0's first block (every row has one)
    bool ld_more = true;
#pragma unroll
    for (int i = 0; i < kAhead; ++i) {
      if (ld_more) {
        if (i > 0) ld_more = next_block<kLevels>(ld_m, ld_b, a.nb);
        if (ld_more) issue(ld_b, i * kStageBytes);
      }
      preload::cp_async_commit();
    }
    unsigned ld_off = kAhead * kStageBytes;  // the stage the loader fills next
    int m = 0, buf = 0;
    int64_t b = 0;
    // Block b from stage buf into the chains, then the leaves that end with it; false after the last block.
    const auto step = [&]() {
      const MmaStage& s = stage[buf];
      const int wr = 16 * warp;
      const uint32_t* W0 = s.wq[wr + g];
      const uint32_t* W1 = s.wq[wr + g + 8];
      // Quant word j of the block is the cover's bytes 2 + 4j (even b) or 4 + 4j (odd b).
      const unsigned sh = (b & 1) != 0 ? 32u : 16u, dsh = (b & 1) != 0 ? 16u : 0u;
      const uint32_t a0 = __funnelshift_rc(W0[t4], W0[t4 + 1], sh), a2 = __funnelshift_rc(W0[t4 + 4], W0[t4 + 5], sh);
      const uint32_t a1 = __funnelshift_rc(W1[t4], W1[t4 + 1], sh), a3 = __funnelshift_rc(W1[t4 + 4], W1[t4 + 5], sh);
      const float wd0 = f16_to_f32(static_cast<uint16_t>(W0[0] >> dsh)), wd1 = f16_to_f32(static_cast<uint16_t>(W1[0] >> dsh));
#pragma unroll
      for (int n = 0; n < kMmaTiles; ++n) {
        int32_t c[4];
        // (|isum| ≤ 32 · 128 · 128 < 2^22: the biased accumulators give it by one subtraction.)
        mma_s8(c, a0, a1, a2, a3, s.aq[8 * n + g][t4], s.aq[8 * n + g][4 + t4], kI2fBias);
        const float ad0 = s.ad[8 * n + 2 * t4], ad1 = s.ad[8 * n + 2 * t4 + 1];
        // v = (f16(w.d) · a.d) · (float)isum, then the leaf's chain (quant_ref.h q8_0_finish).
        chain[4 * n + 0] = chain[4 * n + 0] + (wd0 * ad0) * biased_i2f(c[0]);
        chain[4 * n + 1] = chain[4 * n + 1] + (wd0 * ad1) * biased_i2f(c[1]);
        chain[4 * n + 2] = chain[4 * n + 2] + (wd1 * ad0) * biased_i2f(c[2]);
        chain[4 * n + 3] = chain[4 * n + 3] + (wd1 * ad1) * biased_i2f(c[3]);
      }
      int next_m = m;
      int64_t next_b = b;
      const bool more = next_block<kLevels>(next_m, next_b, a.nb);
      // The leaves that end here: m, and those without blocks before the next block's leaf.
      const int end_m = more ? next_m : 32;
      for (int mm = m; mm < end_m; ++mm) end_leaf<kLevels, kElems>(mm, S, chain);
      m = next_m;
      b = next_b;
      buf = buf + 1 == kStages ? 0 : buf + 1;
      return more;
    };
    for (;;) {
      preload::cp_async_wait_group<kAhead - 2>();  // this thread's copies of the next two blocks have landed
      __syncthreads();                             // everyone's; the stages refilled next were read
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        if (ld_more) {
          ld_more = next_block<kLevels>(ld_m, ld_b, a.nb);
          if (ld_more) issue(ld_b, ld_off);
        }
        preload::cp_async_commit();
        ld_off = ld_off + kStageBytes == kStages * kStageBytes ? 0u : ld_off + kStageBytes;
      }
      if (!step() || !step()) break;
    }
    preload::cp_async_wait_all();

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
  if (!aligned(p.w, 4) || p.w_row_bytes % 4 != 0 || p.w_row_bytes >= (int64_t{1} << 32) / kMmaRows || (p.w_z1 != nullptr && !aligned(p.w_z1, 4)) || !aligned(p.act, 4) ||
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
