// backend/cuda/moe_mma.cu — moe's routed products over the pairs grouped by expert (prefill chunks) on the
// tensor cores: IQ2_XXS and Q2_K weights (the published q2 layout's experts) against Q8_K activations,
// with the bits of numerics/quant_ref*.h's vec_dot for every element.
//
// Why it is exact. A super-block's value is a float function of exact integer sums (quant_ref_iq2_xxs.h,
// quant_ref_k.h), and int32 sums of int8 products are exact in any order, so mma.sync m16n8k32 s8 gives
// them for 16 weight rows × 8 pairs at once. The K dimension of an MMA may be permuted (the same
// permutation for A and B): slot 4t + i holds element 8t + i of a 32-element group, slot 16 + 4t + i element
// 8t + 4 + i, so each thread decodes one 8-element run of a row and reads one 8-byte run of a pair.
//   IQ2_XXS: group g (32 elements): A = the signed grid values (|v| ≤ 43), one MMA from zero gives
//     gsum_g; isum = Σ_g (2·ls_g + 1)·gsum_g by integer multiply-adds; v = ((d·a.d)·(float)isum)·0.125f.
//   Q2_K: chunk c (32 elements, sub-blocks 2c, 2c + 1): A = (scale & 15)·q ≤ 45 accumulates isum_sc over
//     the 8 chunks; A = (scale >> 4) per element accumulates Σ_e m_k(e)·a.qs[e] = Σ_k m_k·bsums[k] =
//     isum_m (bsums[k] is the sum of the sub-block's quants); v = a.d·((d·(float)isum_sc) − (dmin·(float)isum_m)).
// The blocks' values are folded in the reference tree's post-order (mma_fold.cuh): with 16 (gate/up of
// DS4) or 8 (down) super-blocks per row, 4 or 3 levels of finished subtrees per element.
//
// Layout. Grid (64-row blocks of the output, tiles of ≤ 32 pairs of one expert (GroupedPairs), gate/up).
// A CTA of 4 warps: warp w rows 16w … 16w + 15, the tile's pairs as 4 n8 tiles (the MMAs of tiles past
// the pair count are skipped), so a thread holds 16 elements (rows g, g + 8 with g = lane / 4; pairs
// 2·(lane % 4) and + 1 of each n8 tile). Per super-block the CTA's 64 weight blocks and 32 activation
// blocks (d and the 256 quants; the bsums are not read) go to shared memory by 4-byte cp.async (a copy's
// lanes on consecutive words of the covers and rows), three stages deep in the visiting order. An IQ2_XXS block (66 bytes, 2-byte aligned) is copied as the 17
// aligned words that cover it (rows start 4-byte aligned and hold an even number of blocks: the cover
// stays in the row) and read with a funnel shift. Weight rows are 21 words apart (8 rows' same word hit
// 8 banks), activation rows 72 (a half-warp's 8-byte reads hit 32 banks).
#include <cstddef>
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

constexpr int kXThreads = kMmaThreads;
constexpr int kXRows = kMmaRows;            // weight rows per CTA
constexpr int kXTiles = kMmaTiles;          // n8 tiles of pairs
constexpr int kXElems = kMmaElems;          // output elements per thread
static_assert(kGroupTile == kMmaCols, "a tile of pairs is the CTA's activation rows");
constexpr int kXStages = 3;
constexpr int kWPitch = 21;                 // words per staged weight row (Q2_K: 21, IQ2_XXS cover: 17)
constexpr int kAPitch = 72;                 // words per staged activation row (64 quant words)
constexpr int kActWords = 65;               // BlockQ8_K's d and quants
constexpr int64_t kMaxGridY = 65535;

// A stage: the 64 weight covers, then the 32 activation rows as one array: row r's quant word i at
// a[kALead + r·kAPitch + i] (8-byte aligned: the fragment reads), its d the word before them, so a row's
// 65 words (d, then the quants: the BlockQ8_K's first 260 bytes) are consecutive in the stage as in memory.
constexpr int kALead = 2;
struct XStage {
  uint32_t w[kXRows][kWPitch];
  uint32_t a[kALead + kGroupTile * kAPitch];
};
__device__ __forceinline__ const uint32_t* act_quants(const XStage& s, int r) { return s.a + kALead + r * kAPitch; }
__device__ __forceinline__ float act_d(const XStage& s, int r) { return __uint_as_float(s.a[kALead - 1 + r * kAPitch]); }

template <TensorType T>
struct XType;
template <>
struct XType<TensorType::kIQ2_XXS> {
  static constexpr int kBlockBytes = sizeof(BlockIq2Xxs), kWords = 17;
};
template <>
struct XType<TensorType::kQ2_K> {
  static constexpr int kBlockBytes = sizeof(BlockQ2_K), kWords = 21;
};

// Bit j of s (j < 4) as bit 0 of byte j.
__device__ __forceinline__ uint32_t sign_bits4(uint32_t s) { return ((s & 0xFu) * 0x00204081u) & 0x01010101u; }

// −v per byte where bit 0 of the byte of b is set: (v ^ 0xff) + 1 = 256 − v. Grid bytes are 0x08, 0x19 or
// 0x2b (never 0), so no byte carries into the next and one 32-bit add does all four (the emulated
// __vsub4 took several instructions; a 128-entry mask table measured slower: bank conflicts).
__device__ __forceinline__ uint32_t apply_signs(uint32_t v, uint32_t b) { return (v ^ (b * 0xFFu)) + b; }

// This thread's 8 signed grid values of an IQ2_XXS group (run t4 of 4): lo = elements 0 … 3, hi = 4 … 7.
__device__ __forceinline__ void iq2_run(uint32_t aux0, uint32_t aux1, int t4, const uint64_t* grid, uint32_t& lo,
                                        uint32_t& hi) {
  const uint64_t gv = grid[(aux0 >> (8 * t4)) & 0xffu];
  const uint32_t si = (aux1 >> (7 * t4)) & 127u;
  const uint32_t sg = si | ((static_cast<uint32_t>(__popc(si)) & 1u) << 7);  // kIq2xxsSigns[si]
  lo = apply_signs(static_cast<uint32_t>(gv), sign_bits4(sg));
  hi = apply_signs(static_cast<uint32_t>(gv >> 32), sign_bits4(sg >> 4));
}

// One super-block's value for this thread's 16 elements, added to the leaf's chain.
template <TensorType T>
__device__ __forceinline__ void block_step(const XStage& s, int64_t b, int count, const uint64_t* grid, int warp, int gq,
                                           int t4, float (&chain)[kXElems]) {
  const uint32_t* W0 = s.w[16 * warp + gq];
  const uint32_t* W1 = s.w[16 * warp + gq + 8];
  if constexpr (T == TensorType::kIQ2_XXS) {
    // The cover starts 2 bytes before the block when the block is at 2 mod 4 (odd b).
    const unsigned sh = (b & 1) != 0 ? 32u : 16u;
    int32_t isum[kXElems];
#pragma unroll
    for (int e = 0; e < kXElems; ++e) isum[e] = 0;
#pragma unroll
    for (int grp = 0; grp < 8; ++grp) {
      uint32_t a0, a1, a2, a3;
      const uint32_t x00 = W0[2 * grp], x01 = W0[2 * grp + 1], x02 = W0[2 * grp + 2];
      const uint32_t x10 = W1[2 * grp], x11 = W1[2 * grp + 1], x12 = W1[2 * grp + 2];
      const uint32_t aux01 = __funnelshift_rc(x01, x02, sh), aux11 = __funnelshift_rc(x11, x12, sh);
      iq2_run(__funnelshift_rc(x00, x01, sh), aux01, t4, grid, a0, a2);
      iq2_run(__funnelshift_rc(x10, x11, sh), aux11, t4, grid, a1, a3);
      const int32_t f0 = static_cast<int32_t>(2 * (aux01 >> 28) + 1), f1 = static_cast<int32_t>(2 * (aux11 >> 28) + 1);
#pragma unroll
      for (int n = 0; n < kXTiles; ++n) {
        if (8 * n >= count) break;  // the same in the whole CTA
        const uint2 bb = *reinterpret_cast<const uint2*>(act_quants(s, 8 * n + gq) + 8 * grp + 2 * t4);
        int32_t c[4];
        mma_s8(c, a0, a1, a2, a3, bb.x, bb.y);
        isum[4 * n + 0] += f0 * c[0];
        isum[4 * n + 1] += f0 * c[1];
        isum[4 * n + 2] += f1 * c[2];
        isum[4 * n + 3] += f1 * c[3];
      }
    }
    const unsigned dsh = (b & 1) != 0 ? 16u : 0u;
    const float wd0 = f16_to_f32(static_cast<uint16_t>(W0[0] >> dsh)), wd1 = f16_to_f32(static_cast<uint16_t>(W1[0] >> dsh));
#pragma unroll
    for (int n = 0; n < kXTiles; ++n) {
      const float ad0 = act_d(s, 8 * n + 2 * t4), ad1 = act_d(s, 8 * n + 2 * t4 + 1);
      // iq2_xxs_finish: ((f16(d) · a.d) · (float)isum) · 0.125f.
      chain[4 * n + 0] = chain[4 * n + 0] + ((wd0 * ad0) * static_cast<float>(isum[4 * n + 0])) * 0.125f;
      chain[4 * n + 1] = chain[4 * n + 1] + ((wd0 * ad1) * static_cast<float>(isum[4 * n + 1])) * 0.125f;
      chain[4 * n + 2] = chain[4 * n + 2] + ((wd1 * ad0) * static_cast<float>(isum[4 * n + 2])) * 0.125f;
      chain[4 * n + 3] = chain[4 * n + 3] + ((wd1 * ad1) * static_cast<float>(isum[4 * n + 3])) * 0.125f;
    }
  } else {
    int32_t csc[kXTiles][4], cm[kXTiles][4];
#pragma unroll
    for (int n = 0; n < kXTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) csc[n][e] = cm[n][e] = kI2fBias;  // (biased_i2f below)
    const int hb = t4 >> 1;  // sub-block 2c + hb of chunk c
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      const int h = c >> 2, j = c & 3;
      const unsigned sbit = 8u * static_cast<unsigned>(2 * (c & 1) + hb);
      const uint32_t s0 = (W0[c >> 1] >> sbit) & 0xffu, s1 = (W1[c >> 1] >> sbit) & 0xffu;
      const uint32_t q00 = (W0[4 + 8 * h + 2 * t4] >> (2 * j)) & 0x03030303u;
      const uint32_t q01 = (W0[5 + 8 * h + 2 * t4] >> (2 * j)) & 0x03030303u;
      const uint32_t q10 = (W1[4 + 8 * h + 2 * t4] >> (2 * j)) & 0x03030303u;
      const uint32_t q11 = (W1[5 + 8 * h + 2 * t4] >> (2 * j)) & 0x03030303u;
      // (scale & 15)·q ≤ 45 per byte: no carry between bytes.
      const uint32_t a0 = q00 * (s0 & 15u), a2 = q01 * (s0 & 15u), a1 = q10 * (s1 & 15u), a3 = q11 * (s1 & 15u);
      const uint32_t m0 = (s0 >> 4) * 0x01010101u, m1 = (s1 >> 4) * 0x01010101u;
#pragma unroll
      for (int n = 0; n < kXTiles; ++n) {
        if (8 * n >= count) break;
        const uint2 bb = *reinterpret_cast<const uint2*>(act_quants(s, 8 * n + gq) + 8 * c + 2 * t4);
        mma_s8_acc(csc[n], a0, a1, a2, a3, bb.x, bb.y);
        mma_s8_acc(cm[n], m0, m1, m0, m1, bb.x, bb.y);
      }
    }
    const float d0 = f16_to_f32(static_cast<uint16_t>(W0[20])), dm0 = f16_to_f32(static_cast<uint16_t>(W0[20] >> 16));
    const float d1 = f16_to_f32(static_cast<uint16_t>(W1[20])), dm1 = f16_to_f32(static_cast<uint16_t>(W1[20] >> 16));
#pragma unroll
    for (int n = 0; n < kXTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float ad = act_d(s, 8 * n + 2 * t4 + (e & 1));
        const float d = e < 2 ? d0 : d1, dm = e < 2 ? dm0 : dm1;
        // q2_k_finish: a.d · ((d · (float)isum_sc) − (dmin · (float)isum_m)). |isum_sc| ≤ 256 · 45 · 128 and
        // |isum_m| ≤ 256 · 15 · 128, both < 2^22: the biased sums convert by one subtraction (not the
        // quarter-rate I2F).
        const float t_sc = d * biased_i2f(csc[n][e]);
        const float t_m = dm * biased_i2f(cm[n][e]);
        chain[4 * n + e] = chain[4 * n + e] + ad * (t_sc - t_m);
      }
    }
  }
}

// At most 168 registers: three CTAs per SM (DS4's IQ2_XXS gate/up at L = 4 takes 161; its Q2_K down at
// L = 3 spills 8 bytes at this bound, and took 172 registers — two CTAs — without it).
template <TensorType T, int L>
__global__ void __launch_bounds__(kXThreads, 3) routed_mma_kernel(ProductArgs a, GroupedPairs g) {
  __shared__ __align__(16) XStage stage[kXStages];
  __shared__ uint64_t grid[T == TensorType::kIQ2_XXS ? 256 : 1];
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int gq = lane >> 2, t4 = lane & 3;
  if constexpr (T == TensorType::kIQ2_XXS) {
    for (int i = tid; i < 256; i += kXThreads) grid[i] = d_iq2xxs.grid[i];
  }
  wait_for_producer();
  if (static_cast<int32_t>(blockIdx.y) >= *g.n_tiles) return;  // the whole CTA
  const PairTile tile = g.tiles[blockIdx.y];
  const int count = tile.count;
  const int32_t* pairs = g.order + tile.first;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * kXRows;
  float* y = blockIdx.z == 0 ? a.y : a.y_z1;
  if (tile.expert < 0) {  // ids outside [0, n_expert): the pairs' rows are NaN
    for (int i = tid; i < kXRows * count; i += kXThreads) {
      const int64_t o = o0 + i % kXRows;
      if (o < a.out) y[static_cast<int64_t>(pairs[i / kXRows]) * a.y_stride + o] = nan_f32();
    }
    return;
  }
  const uint8_t* w = static_cast<const uint8_t*>(blockIdx.z == 0 ? a.w : a.w_z1) + tile.expert * a.expert_bytes;
  const int64_t nb = a.in / 256;

  // Load items. Warp w copies the covers of rows 16w … 16w + 15 two rows at a time (lanes 0-15 the first
  // 16 words of one row, 16-31 of the next; then the rest of the two covers) and activation rows 8w … 8w + 7
  // one at a time (words 0-31, 32-63, 64): the lanes of a copy read 1-4 cache lines, where one weight row
  // per two lanes and one activation row per four lanes read 8-16 (ncu, IQ2_XXS gate/up: 498M
  // shared-memory wavefronts of the copies beside 701M of the fragment and grid reads, that pipe at 74 % of
  // its peak). Rows past the output are read as the last row (never written).
  constexpr int kW = XType<T>::kWords;
  static_assert(kW > 16 && kW <= 32 && kActWords == 65, "a cover in two copies of 16 lanes; a row in three");
  const int half = lane >> 4, hl = lane & 15;
  const int64_t last_rel = a.out - 1 - o0;  // ≥ 0
  const uint8_t* w_rows = w + o0 * a.w_row_bytes + 4 * hl;
  // The tile's activation rows (pair order), a pointer each in shared memory; only the n8 tiles that hold
  // pairs are read (block_step skips the others): a tile of 12 pairs (a 512-token chunk's average) copies
  // 16 activation rows per block, not 32.
  __shared__ const uint8_t* a_rows[kGroupTile];
  if (tid < kGroupTile) {
    const int64_t p_ld = pairs[tid < count ? tid : 0];
    a_rows[tid] = static_cast<const uint8_t*>(a.act) + (p_ld / a.act_div) * a.act_stride;
  }
  const bool a_copies = 8 * warp < count;  // this warp's 8 activation rows are read (n8 tile `warp` holds pairs)
  __syncthreads();
  // The copies' destinations: stage0 (the stages' shared-window address, once) plus offsets from the
  // indices (the generic-to-shared conversion per copy cost several instructions); each copy's offset from
  // the thread's first is a constant.
  const unsigned stage0 = static_cast<unsigned>(__cvta_generic_to_shared(&stage[0]));
  constexpr unsigned kWOff = offsetof(XStage, w), kAOff = offsetof(XStage, a);
  const unsigned w_dst = stage0 + kWOff + 4u * static_cast<unsigned>((16 * warp + half) * kWPitch + hl);
  const unsigned a_dst = stage0 + kAOff + 4u * static_cast<unsigned>(kALead - 1 + 8 * warp * kAPitch + lane);
  // Block b's copies into the stage at shared offset `off` (a multiple of sizeof(XStage)).
  const auto issue = [&](int64_t b, unsigned off) {
    const int64_t cover = (b * XType<T>::kBlockBytes) & ~int64_t{3};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int64_t row = 16 * warp + 2 * i + half;
      const uint8_t* src = w_rows + (row < last_rel ? row : last_rel) * a.w_row_bytes + cover;
      const unsigned dst = w_dst + off + 4u * static_cast<unsigned>(2 * i * kWPitch);
      preload::cp_async4_at(dst, src);
      if (hl < kW - 16) preload::cp_async4_at(dst + 64u, src + 64);
    }
    if (a_copies) {
      const int64_t ab = b * static_cast<int64_t>(sizeof(BlockQ8_K)) + 4 * lane;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const uint8_t* src = a_rows[8 * warp + i] + ab;
        const unsigned dst = a_dst + off + 4u * static_cast<unsigned>(i * kAPitch);
        preload::cp_async4_at(dst, src);
        preload::cp_async4_at(dst + 128u, src + 128);
        if (lane == 0) preload::cp_async4_at(dst + 256u, src + 256);
      }
    }
  };
  constexpr unsigned kStageBytes = sizeof(XStage);

  float chain[kXElems], S[L][kXElems];
#pragma unroll
  for (int e = 0; e < kXElems; ++e) {
    chain[e] = 0.0f;
#pragma unroll
    for (int k = 0; k < L; ++k) S[k][e] = 0.0f;
  }

  // Three stages in the visiting order: the loader runs two blocks ahead of the compute.
  int ld_m = 0;
  int64_t ld_b = 0;  // leaf 0's first block (every row has one)
  issue(ld_b, 0);
  preload::cp_async_commit();
  bool ld_more = next_block<L>(ld_m, ld_b, nb);
  if (ld_more) issue(ld_b, kStageBytes);
  preload::cp_async_commit();
  unsigned ld_off = 2 * kStageBytes;  // the stage the loader fills next
  int m = 0, buf = 0;
  int64_t b = 0;
  for (;;) {
    preload::cp_async_wait_group<1>();  // this thread's copies of block b have landed
    __syncthreads();                    // everyone's; everyone is past the stage the next issue reuses
    if (ld_more) {
      ld_more = next_block<L>(ld_m, ld_b, nb);
      if (ld_more) issue(ld_b, ld_off);
    }
    preload::cp_async_commit();
    ld_off = ld_off == 2 * kStageBytes ? 0u : ld_off + kStageBytes;
    block_step<T>(stage[buf], b, count, grid, warp, gq, t4, chain);
    int next_m = m;
    int64_t next_b = b;
    const bool more = next_block<L>(next_m, next_b, nb);
    // The leaves that end here: m, and those without blocks before the next block's leaf.
    const int end_m = more ? next_m : (1 << L);
    for (int mm = m; mm < end_m; ++mm) end_leaf<L, kXElems>(mm, S, chain);
    if (!more) break;
    m = next_m;
    b = next_b;
    buf = buf == 2 ? 0 : buf + 1;
  }
  preload::cp_async_wait_all();

#pragma unroll
  for (int n = 0; n < kXTiles; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t o = o0 + 16 * warp + gq + (e >= 2 ? 8 : 0);
      const int j = 8 * n + 2 * t4 + (e & 1);
      if (o < a.out && j < count) y[static_cast<int64_t>(pairs[j]) * a.y_stride + o] = chain[4 * n + e];
    }
  }
}

template <TensorType T>
void launch_routed_mma(CudaBackend& be, const ProductArgs& a, const GroupedPairs& g, dim3 grid, int L) {
  switch (L) {
    case 3: return be.launch("routed_mma_kernel", routed_mma_kernel<T, 3>, grid, kXThreads, 0, a, g);
    case 4: return be.launch("routed_mma_kernel", routed_mma_kernel<T, 4>, grid, kXThreads, 0, a, g);
    default: return be.launch("routed_mma_kernel", routed_mma_kernel<T, 5>, grid, kXThreads, 0, a, g);
  }
}

}  // namespace

bool grouped_product_supported(TensorType type, int64_t in) {
  if (in <= 0 || in % 256 != 0) return false;
  if (type == TensorType::kQ2_K) return true;
  return type == TensorType::kIQ2_XXS && (in / 256) % 2 == 0;  // the 17-word covers stay in the row
}

bool enqueue_grouped_product(CudaBackend& be, const ProductArgs& a, const GroupedPairs& g) {
  if (a.ids == nullptr || !grouped_product_supported(a.type, a.in) || g.max_tiles <= 0 || g.max_tiles > kMaxGridY)
    return false;
  const auto aligned4 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 4 == 0; };
  if (!aligned4(a.w) || (a.w_z1 != nullptr && !aligned4(a.w_z1)) || a.w_row_bytes % 4 != 0 || a.expert_bytes % 4 != 0 ||
      !aligned4(a.act) || a.act_stride % 4 != 0 || a.act_div <= 0 || a.act_group_rows != 0)
    return false;
  if (a.rows <= 0 || a.out <= 0) return true;
  const dim3 grid(static_cast<unsigned>(blocks_for(a.out, kXRows)), static_cast<unsigned>(g.max_tiles),
                  a.w_z1 != nullptr ? 2u : 1u);
  const int L = fold_levels(a.in / 256, 3);
  if (a.type == TensorType::kIQ2_XXS)
    launch_routed_mma<TensorType::kIQ2_XXS>(be, a, g, grid, L);
  else
    launch_routed_mma<TensorType::kQ2_K>(be, a, g, grid, L);
  return true;
}

}  // namespace dsv4::cuda
