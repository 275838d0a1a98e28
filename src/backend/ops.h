// backend/ops.h — the op interface the one DS4 forward pass (model/forward.cpp) is written against.
//
// The CPU backend (backend/cpu/cpu_ops.h) implements it now; a CUDA backend implements the same
// ops next, with the same bits: every op below defines its arithmetic order in its comment, and
// the CPU reference follows it with the project's own elementwise functions (numerics/det_math.h).
// Fused kernels are ops; there is never a second forward pass.
//
// Buffers are row-major f32 in host memory in this version ([rows][cols], rows = tokens unless
// said otherwise). Weights are views of GGUF tensors (ne[0] = input features, contiguous rows).
// Ops never allocate on the caller's behalf and never fail on shapes the forward pass validated;
// matmul-type ops return Status for unsupported weight types.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "base/tensor_type.h"

namespace dsv4::backend {

struct Weight {
  TensorType type = TensorType::kF32;
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};
  const void* data = nullptr;
  int64_t row_bytes() const { return tensor_row_bytes(type, ne[0]); }
  bool valid() const { return data != nullptr; }
};

// A 2-D view of expert e of a 3-D weight [in, out, n_expert].
inline Weight expert_view(const Weight& w, int64_t e) {
  Weight v = w;
  v.data = static_cast<const uint8_t*>(w.data) + e * w.ne[1] * w.row_bytes();
  v.n_dims = 2;
  v.ne[2] = 1;
  return v;
}

// Rows [begin, end) of a 2-D weight as its own view (e.g. one output group's slice of W_oa).
inline Weight row_view(const Weight& w, int64_t begin, int64_t end) {
  Weight v = w;
  v.data = static_cast<const uint8_t*>(w.data) + begin * w.row_bytes();
  v.ne[1] = end - begin;
  return v;
}

// One product of Ops::matmul_batch: y[t·y_stride + o] = Σ_i W[o][i]·x[t·x_stride + i] for a 2-D
// weight (view), t < n_tokens. Strides 0 mean dense (W's ne[0] for x, ne[1] for y).
struct MatmulJob {
  Weight w;
  const float* x = nullptr;
  int64_t n_tokens = 0;
  float* y = nullptr;
  int64_t x_stride = 0;
  int64_t y_stride = 0;
};

// Per-query key set of one attention call (see Ops::attention).
struct KeySets {
  // Raw keys: rows [raw_begin[i], raw_end[i]) of `raw` for query i, in increasing position.
  std::vector<int64_t> raw_begin, raw_end;
  // Compressed keys: for query i, entries comp_index[comp_offset[i] .. comp_offset[i+1]) of `comp`
  // (ascending entry index), visited after the raw keys.
  std::vector<int64_t> comp_offset;  // n_queries + 1
  std::vector<int64_t> comp_index;
};

class Ops {
 public:
  virtual ~Ops() = default;

  // y[t][o] = Σ_i W[o][i]·x[t][i] for a 2-D weight [in, out]; each element is one vec_dot of the
  // weight type (bit-identical for any n_tokens).
  virtual Status matmul(const Weight& w, const float* x, int64_t n_tokens, float* y) = 0;
  // Same with expert `e` of a 3-D weight [in, out, n_expert].
  virtual Status matmul_expert(const Weight& w, int64_t e, const float* x, int64_t n_tokens, float* y) = 0;
  // Every job exactly as matmul would compute it (same bits), in any order; lets a backend run
  // many small products (experts, output groups, projections of one input) in one dispatch.
  // No job's y may overlap any job's x.
  virtual Status matmul_batch(std::span<const MatmulJob> jobs) = 0;
  // out[t][:] = dequantized row ids[t] of a 2-D weight (embedding lookup).
  virtual Status get_rows(const Weight& w, const int32_t* ids, int64_t n, float* out) = 0;
  // Dequantized copy of a small weight (norm weights, biases, hc params, ape), n elements.
  virtual Status dequantize(const Weight& w, float* out) = 0;

  // y[r] = x[r] / sqrt(mean(x[r]²) + eps) (· w if w != null); mean via the 32-partial sum of
  // x·x (fma) and the fixed tree, divided by n; y may alias x.
  virtual void rms_norm(const float* x, int64_t rows, int64_t n, const float* w, float eps, float* y) = 0;

  // RoPE on the trailing n_rot dims of each row of length row_len, adjacent pairs; row r has
  // position positions[r / rows_per_pos]; angle = (float)position · freqs[k] (f32 multiply), then
  // cos/sin of that f32 angle in double precision rounded to f32 (own fixed implementation).
  // inverse: rotate by −angle.
  virtual void rope_tail(float* x, int64_t rows, int64_t row_len, int64_t rows_per_pos, const int64_t* positions,
                         int64_t n_rot, const float* freqs, bool inverse) = 0;

  // HC pre mixing for n tokens (spec §4.1 steps 3-7). mix [n][(2+hc)·hc] (Φ·f̂), X [n][hc][D].
  // Outputs x [n][D] collapsed input, post [n][hc], comb [n][hc][hc] (Sinkhorn, [src][dst]).
  virtual void hc_pre(const float* mix, const float* scale3, const float* base, int64_t n, int64_t hc, int64_t D,
                      float eps, int64_t sinkhorn_iters, const float* X, float* x, float* post, float* comb) = 0;
  // X'[t][j] = post[t][j]·y[t] + Σ_i comb[t][i][j]·X[t][i] (i ascending, fma chain).
  virtual void hc_post(const float* X, const float* y, const float* post, const float* comb, int64_t n, int64_t hc,
                       int64_t D, float* X_out) = 0;
  // HC head: pre_i = σ(mix_i·scale + base_i) + eps; y = Σ_i pre_i·X[i] (i ascending).
  virtual void hc_head(const float* mix, float scale, const float* base, int64_t n, int64_t hc, int64_t D, float eps,
                       const float* X, float* y) = 0;

  // z[t][c] += ape[positions[t] mod ratio][c], ape [ratio][width] (already dequantized).
  virtual void add_position_bias(float* z, int64_t n, int64_t width, const float* ape, int64_t ratio,
                                 const int64_t* positions) = 0;
  // Softmax pooling of one compressor window per output entry: for entry e and channel j,
  // P[e][j] = Σ_c softmax_c(z_c[j])·a_c[j] over the entry's candidates c (in the given order):
  // max, then exp(z − max), sum (32-partials), weighted sum (fma chain), one division.
  // Candidate c of entry e is row cand_row[e·n_cand + c] of (a, z), columns [cand_col[...],
  // cand_col + d); a row index < 0 means "absent" (weight 0).
  virtual void compress_pool(const float* a, const float* z, int64_t row_stride, int64_t n_entries, int64_t n_cand,
                             const int64_t* cand_row, const int64_t* cand_col, int64_t d, float* out) = 0;

  // Lightning indexer: for query i and each entry w in [0, visible[i]): score = Σ_h g[i][h]·
  // ReLU(qI[i][h]·k[w]) (dot via 32-partials, h ascending); keeps the top_k highest (ties →
  // lower w) or all when visible ≤ top_k. Appends the kept entries in ascending order to sets
  // (comp_index / comp_offset).
  virtual void indexer_select(const float* qI, const float* g, int64_t n, int64_t n_heads, int64_t head_dim,
                              const float* keys, const int64_t* visible, int64_t top_k, KeySets& sets) = 0;

  // Attention with sinks for n queries of H heads of dim d: keys = values (rows of raw / comp).
  // logits l = (q·k)·scale (32-partial dot); M = max(sink, l); p = exp(l − M);
  // den = exp(sink − M) + Σ p (raw keys then compressed, in order, 32-partials);
  // o[c] = (Σ_j p_j·k_j[c]) / den (fma chain over keys in the same order).
  virtual void attention(const float* q, int64_t n, int64_t H, int64_t d, const float* raw, const float* comp,
                         const KeySets& sets, const float* sinks, float scale, float* o) = 0;

  // MoE router: s_e = sqrt(softplus(logits[t][e])); selection = top-k of s + bias (bias may be
  // null: top-k of s; ties → lower e) or, for hash layers, hash_ids[t][0..k) ; weights
  // w_k = s_{e_k} / (Σ_k s_{e_k}) (· renormalised only if norm) · scale. ids/weights [n][k].
  virtual void route(const float* logits, int64_t n, int64_t n_expert, int64_t k, const float* bias,
                     const int32_t* hash_ids, bool norm, float scale, int32_t* ids, float* weights) = 0;
  // h = silu(min(g, limit)) · clamp(u, −limit, limit), elementwise over n values.
  virtual void swiglu_clamp(const float* g, const float* u, int64_t n, float limit, float* h) = 0;
  // y[i] = y[i] + a·x[i] as one fma each (a == 1: plain add).
  virtual void axpy(float* y, const float* x, int64_t n, float a) = 0;
};

}  // namespace dsv4::backend
