// backend/cuda/mma_fold.cuh — what the tensor-core products (matmul_mma.cu: Q8_0; moe_mma.cu: the routed
// experts' IQ2_XXS and Q2_K) share: the int8 MMA, an exact int → float, and the reference order of the
// blocks' float values (numerics/accumulate.h) folded in the tree's post-order. Included by .cu files only.
//
// The order. An element's value is Partials32::reduce over partial[l] = +0 + v_l + v_{l+32} + … (block
// values in ascending order). Holding 32 partials per element would cost 32 registers, so the blocks are
// visited leaf by leaf in the tree's post-order: leaf m is partial l = bitreverse(m) (0, 16, 8, 24, 4, …:
// siblings next to each other), its chain of blocks l, l + 32, … in ascending order. After leaf m the
// finished subtrees merge like a binary counter: with c = the trailing ones of m, v = chain; v = S[k] + v
// for k < c (S[k], the earlier and so left subtree of 2^k leaves); S[c] = v. At the last leaf v is the
// tree's root. An element holds its chain and at most kLevels finished subtrees.
//
// Fewer levels. With nb ≤ 2^L blocks (L < 5) the 32-leaf tree's first 5 − L steps add +0 partials to
// partials that hold +0 + v or +0 (never −0: a chain starts at +0), which keeps every value; so the tree
// over 2^L leaves (bitreverse over L bits) gives the same bits with L levels of registers. Leaves past the
// row's blocks are chains of no blocks, +0, as the reference's untouched partials.
#pragma once

#include <cstdint>

namespace dsv4::cuda::detail {

// The CTA tile both kernels use: 4 warps of 16 weight rows each, 32 activation rows (pairs) as 4 n8
// tiles, so a thread holds 16 output elements (rows g, g + 8 of its warp's 16 with g = lane / 4;
// activation rows 2·(lane % 4) and + 1 of each n8 tile).
constexpr int kMmaWarps = 4;
constexpr int kMmaThreads = 32 * kMmaWarps;
constexpr int kMmaRows = 16 * kMmaWarps;  // weight rows per CTA
constexpr int kMmaCols = 32;              // activation rows per CTA
constexpr int kMmaTiles = kMmaCols / 8;
constexpr int kMmaElems = 4 * kMmaTiles;  // output elements per thread

// Partial l of leaf m in a tree of 2^L leaves.
template <int L>
__device__ __forceinline__ int leaf_partial(int m) {
  if constexpr (L == 0) {
    return 0;
  } else {
    return static_cast<int>(__brev(static_cast<unsigned>(m)) >> (32 - L));
  }
}

// Levels for a row of nb blocks: the smallest L ≥ min_levels with nb ≤ 2^L, at most 5 (then chains).
inline int fold_levels(int64_t nb, int min_levels) {
  int L = min_levels;
  while (L < 5 && (int64_t{1} << L) < nb) ++L;
  return L;
}

// An integer sum as a float, exactly, without the quarter-rate I2F: for |isum| < 2^22 the bits of
// 1.5·2^23 plus isum are the float 1.5·2^23 + isum, and the subtraction is exact. The sums start at
// kI2fBias instead of 0 (MMA accumulators initialised to it; the int32 sum kI2fBias + isum is exact), so
// the conversion is one float subtraction.
constexpr int32_t kI2fBias = 0x4B400000;  // the bits of 1.5·2^23
__device__ __forceinline__ float biased_i2f(int32_t biased) { return __int_as_float(biased) - 12582912.0f; }

// c = c0 + A·B for one m16n8k32 s8 tile, every accumulator starting at c0 (A row-major 16 × 32, B
// column-major 32 × 8): c0 = 0 gives the sums, c0 = kI2fBias their biased_i2f form.
__device__ __forceinline__ void mma_s8(int32_t (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                       uint32_t b1, int32_t c0 = 0) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %10, %10, %10};"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(c0));
}
// c += A·B (exact: int32 sums of int8 products in any order).
__device__ __forceinline__ void mma_s8_acc(int32_t* c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                           uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The binary counter's merge after a leaf whose index has C trailing ones (see the banner).
template <int C, int L, int E>
__device__ __forceinline__ void merge_leaf(float (&S)[L > 0 ? L : 1][E], float (&chain)[E]) {
#pragma unroll
  for (int e = 0; e < E; ++e) {
    float v = chain[e];
#pragma unroll
    for (int k = 0; k < C; ++k) v = S[k][e] + v;
    if constexpr (C < L) {
      S[C][e] = v;
      chain[e] = 0.0f;
    } else {
      chain[e] = v;  // the root: the element's value
    }
  }
}

// After leaf m (the same in the whole CTA) of a tree of 2^L leaves.
template <int L, int E>
__device__ __forceinline__ void end_leaf(int m, float (&S)[L > 0 ? L : 1][E], float (&chain)[E]) {
  const int c = __ffs(~m) - 1;
  if constexpr (L >= 1) {
    if (c == 0) return merge_leaf<0, L, E>(S, chain);
  }
  if constexpr (L >= 2) {
    if (c == 1) return merge_leaf<1, L, E>(S, chain);
  }
  if constexpr (L >= 3) {
    if (c == 2) return merge_leaf<2, L, E>(S, chain);
  }
  if constexpr (L >= 4) {
    if (c == 3) return merge_leaf<3, L, E>(S, chain);
  }
  if constexpr (L >= 5) {
    if (c == 4) return merge_leaf<4, L, E>(S, chain);
  }
  merge_leaf<L, L, E>(S, chain);  // c ≥ L: the last leaf
}

// The next block after block b of leaf m in the visiting order (skipping leaves without blocks): false
// after the last. Chains step by 32 (the partials), so below 5 levels a leaf holds at most one block.
template <int L>
__device__ __forceinline__ bool next_block(int& m, int64_t& b, int64_t nb) {
  b += 32;
  while (b >= nb) {
    if (++m == (1 << L)) return false;
    b = leaf_partial<L>(m);
  }
  return true;
}

}  // namespace dsv4::cuda::detail
