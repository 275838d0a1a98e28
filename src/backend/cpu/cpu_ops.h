// backend/cpu/cpu_ops.h — the CPU implementation of backend::Ops (the reference for every backend).
//
// Matmuls go through matmul.h (one vec_dot per output element); attention is split over
// (query, head) pairs on the thread pool, each pair computed entirely by one thread, so no result
// depends on the thread count. Everything else is the scalar reference arithmetic of ops.h.
#pragma once

#include "backend/cpu/matmul.h"
#include "backend/cpu/vec_ops.h"
#include "backend/ops.h"

namespace dsv4::cpu {

class CpuOps final : public backend::Ops {
 public:
  // amx: use AMX tiles for matrix x matrix where a type has them (ignored unless level is AVX-512 and
  // base/cpu_features.h amx_int8_usable()).
  CpuOps(ThreadPool* pool, SimdLevel level, bool amx = false);

  Status matmul(const backend::Weight& w, const float* x, int64_t n_tokens, float* y) override;
  Status matmul_expert(const backend::Weight& w, int64_t e, const float* x, int64_t n_tokens, float* y) override;
  Status matmul_batch(std::span<const backend::MatmulJob> jobs) override;
  Status get_rows(const backend::Weight& w, const int32_t* ids, int64_t n, float* out) override;
  Status dequantize(const backend::Weight& w, float* out) override;
  void rms_norm(const float* x, int64_t rows, int64_t n, const float* w, float eps, float* y) override;
  void rope_tail(float* x, int64_t rows, int64_t row_len, int64_t rows_per_pos, const int64_t* positions,
                 int64_t n_rot, const float* freqs, bool inverse) override;
  void hc_pre(const float* mix, const float* scale3, const float* base, int64_t n, int64_t hc, int64_t D, float eps,
              int64_t sinkhorn_iters, const float* X, float* x, float* post, float* comb) override;
  void hc_post(const float* X, const float* y, const float* post, const float* comb, int64_t n, int64_t hc, int64_t D,
               float* X_out) override;
  void hc_head(const float* mix, float scale, const float* base, int64_t n, int64_t hc, int64_t D, float eps,
               const float* X, float* y) override;
  void add_position_bias(float* z, int64_t n, int64_t width, const float* ape, int64_t ratio,
                         const int64_t* positions) override;
  void compress_pool(const float* a, const float* z, int64_t row_stride, int64_t n_entries, int64_t n_cand,
                     const int64_t* cand_row, const int64_t* cand_col, int64_t d, float* out) override;
  void indexer_select(const float* qI, const float* g, int64_t n, int64_t n_heads, int64_t head_dim,
                      const float* keys, const int64_t* visible, int64_t top_k, backend::KeySets& sets) override;
  void attention(const float* q, int64_t n, int64_t H, int64_t d, const float* raw, const float* comp,
                 const backend::KeySets& sets, const float* sinks, float scale, float* o) override;
  void route(const float* logits, int64_t n, int64_t n_expert, int64_t k, const float* bias, const int32_t* hash_ids,
             bool norm, float scale, int32_t* ids, float* weights) override;
  void swiglu_clamp(const float* g, const float* u, int64_t n, float limit, float* h) override;
  void axpy(float* y, const float* x, int64_t n, float a) override;

 private:
  void score_keys(const float* q, int64_t H, int64_t d, const std::vector<const float*>& keys, float* p) const;

  CpuContext ctx_;
  std::vector<MatmulJob> batch_;  // matmul_batch's jobs in matmul.h form (reused)
  VecDotFn dot_f32_;   // the F32 vec_dot: the 32-partial fma dot used by every reduction here
  VecDotTileFn tile_f32_ = nullptr;  // its tile form (same bits per element), where the level has one
  FmaAxpyFn fma_axpy_;  // y = fma(a, x, y) elementwise (vec_ops.h)
  WeightedRowsFn weighted_rows_ = nullptr;  // vec_ops.h, where the level has it (else fma_axpy_ loops)
  SwigluClampFn swiglu_clamp_;  // vec_ops.h
};

}  // namespace dsv4::cpu
