// backend/cuda/attention.cuh — what attention.cu (the general attention kernels),
// attention_decode.cu (the decode forms) and indexer.cu share: the kernel arguments, where a query's keys are, how
// many compressed keys it sees, and the host-side entry points of the decode forms.
//
// A query at position p sees, in key order j: its raw keys lo … p (lo = max(0, p − W + 1); from the
// ring below p0, from this call's kv rows from p0), then its compressed keys (HCA: entries 0 …
// (p + 1)/ratio − 1; CSA: the comp_index row's entries before its first −1).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/row_ops.cuh"
#include "numerics/hd.h"

namespace dsv4::cuda {

class CudaBackend;

namespace detail {

struct AttnArgs {
  const void* q;
  int64_t q_nb;
  const void* kv;
  int64_t kv_nb;
  const void* ring;
  int64_t ring_nb;
  const void* comp;
  int64_t comp_nb;
  const void* ci;  // comp_index (CSA)
  int64_t ci_nb, ci_len;
  const float* sinks;
  void* o;
  int64_t o_nb;
  int64_t p0, H, d, W, ratio, cap;
  int64_t t0, n;  // this pass: queries t0 … t0 + n − 1 of the call (local index t below)
  float scale;
  int mode;  // 0 sliding, 1 HCA (all visible entries), 2 CSA (comp_index)
  int64_t maxk;
  float* S;         // [n][H][maxk] logits, then probabilities (this pass's queries)
  float* den;       // [n][H]
  int32_t* ncomp;   // [n] compressed keys of query t (−1: a comp_index entry beyond capacity)
  // > 0: the decode form's output rotated back, rope(o, H, p0, unrope_n_rot, unrope_freqs, inverse)
  // (d and unrope_n_rot even: a rotated pair is two adjacent lanes).
  int64_t unrope_n_rot = 0;
  const float* unrope_freqs = nullptr;
  // Non-null: a one-query pass's kv_store — the scores kernel copies kv row 0 (d floats) here, ring slot
  // p0 mod W, which holds position p0 − W: no key of the query reads it.
  float* store_to = nullptr;
};

__device__ __forceinline__ float neg_inf() { return hd::f32_from_bits(0xff800000u); }
__device__ __forceinline__ float quiet_nan() { return hd::f32_from_bits(0x7fc00000u); }

__device__ __forceinline__ int64_t raw_first(const AttnArgs& a, int64_t p) { return p - a.W + 1 > 0 ? p - a.W + 1 : 0; }

// Key j of the call's query tq (position p, raw keys lo … p first).
__device__ __forceinline__ const float* attn_key(const AttnArgs& a, int64_t tq, int64_t p, int64_t lo, int64_t nraw,
                                                 int64_t j) {
  if (j < nraw) {
    const int64_t pos = lo + j;
    return pos < a.p0 ? rowops::row_ptr<float>(a.ring, a.ring_nb, pos % a.W)
                      : rowops::row_ptr<float>(a.kv, a.kv_nb, pos - a.p0);
  }
  const int64_t i = j - nraw;
  const int64_t w = a.mode == 2 ? rowops::row_ptr<int32_t>(a.ci, a.ci_nb, tq)[i] : i;
  return rowops::row_ptr<float>(a.comp, a.comp_nb, w);
}

// The max over a head's logits P[0 … nk) that the softmax subtracts, before the sink (every lane gets
// it): lane l folds j = l, l + 32, … with std::max (a NaN never counts), then the shuffle-down tree.
// Only the sign of a zero maximum depends on the order, and no exp(v − M) can see it.
__device__ __forceinline__ float logits_max(const float* P, int64_t nk, int lane) {
  float m = neg_inf();
  for (int64_t j = lane; j < nk; j += 32) m = rowops::std_max(m, P[j]);
  for (int s = 16; s >= 1; s >>= 1) m = rowops::std_max(m, __shfl_down_sync(rowops::kFullMask, m, s));
  return __shfl_sync(rowops::kFullMask, m, 0);
}

// Queries per pass for `rows` queries of `row_bytes` score scratch each (attention logits, indexer
// scores): the pass's scratch stays within 256 MiB; at least one.
inline int64_t score_group_rows(int64_t rows, int64_t row_bytes) {
  constexpr int64_t kScoreBudget = int64_t{256} << 20;
  const int64_t g = row_bytes > 0 ? kScoreBudget / row_bytes : rows;
  const int64_t m = g < rows ? g : rows;
  return m < 1 ? 1 : m;
}

// The decode forms (attention_decode.cu) for a pass of ≤ 65535 queries with d ≤ 512: the logits of a tile
// of keys for a group of heads per CTA (the keys staged once in shared memory, each head's query in
// registers), and the softmax and outputs of a group of heads × 32 columns per CTA (the keys staged 128
// at a time, shared by the group's heads). Same bits as attn_count / attn_score / attn_softmax /
// attn_out_kernel.
bool decode_attention_fits(const AttnArgs& a);
// Writes a.ncomp and the logits S (attn_count_kernel + attn_score_kernel).
void enqueue_decode_attention_scores(CudaBackend& be, const AttnArgs& a);
// Writes o from the logits (attn_softmax_kernel + attn_out_kernel; S is left as the logits).
void enqueue_decode_attention_out(CudaBackend& be, const AttnArgs& a);
// The forms of passes of ≥ 16 queries (form attn-wide; within the decode forms' bounds): the logits
// and a.ncomp by a CTA per (32 heads, query) walking all its keys; then attn_softmax_kernel; then o from
// the probabilities and den it left in S, a CTA per 64 heads × 64 columns. The general kernels' bits.
bool wide_attention_fits(const CudaBackend& be, const AttnArgs& a);
void enqueue_wide_attention_scores(CudaBackend& be, const AttnArgs& a);
void enqueue_wide_attention_out(CudaBackend& be, const AttnArgs& a);

}  // namespace detail
}  // namespace dsv4::cuda
