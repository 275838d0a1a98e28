// backend/cpu/cpu_backend.h — the CPU implementation of backend::Backend (the reference backend).
//
// Tensors are host memory: a tensor's data is a plain pointer, weights are the GGUF mapping in place.
// Ops run synchronously on the caller's thread and the backend's thread pool; every output element is
// computed entirely by one thread in backend.h's order, so no result depends on the thread count or
// SIMD level. Matmuls go through matmul.h (one vec_dot per element; AMX / tile / prepared kernels
// where the type has them). Attention is split over query tokens; each token's H heads share its key
// loads (F32 tile kernel over runs of consecutive key rows, weighted_rows for the value sum).
//
// Steady state is heap-free: every op keeps grow-only scratch (members, one set per pool thread for
// parallel loops), so after one call of a shape, calling any op again with that shape allocates
// nothing (tests/unit/backend_cpu/cpu_backend_alloc_test.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/vec_ops.h"
#include "base/cpu_features.h"
#include "base/thread_pool.h"

namespace dsv4::cpu {

struct CpuBackendOptions {
  int threads = 0;                         // pool size; <= 0: every online CPU
  SimdLevel simd = detected_simd_level();  // highest SIMD level the kernels may use
  bool amx = false;  // AMX tiles for matrix x matrix (matmul.h uses_amx also checks level and CPU/OS)
};

class CpuBackend final : public backend::Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& options = CpuBackendOptions());
  ~CpuBackend() override;
  CpuBackend(const CpuBackend&) = delete;
  CpuBackend& operator=(const CpuBackend&) = delete;

  std::string_view name() const override { return "cpu"; }
  std::string describe() const override;
  bool supports(backend::Op op, TensorType type) const override;
  Result<backend::Buffer> allocate(int64_t bytes) override;
  Status reserve(const backend::StepBounds& bounds) override;
  Result<backend::Tensor> load_weight(const backend::Tensor& host, std::vector<backend::Buffer>& keep) override;
  Result<backend::Tensor> load_weight_f32(const backend::Tensor& host, std::vector<backend::Buffer>& keep) override;

  void upload(const backend::Tensor& dst, const void* src, int64_t bytes) override;
  Status download(const backend::Tensor& src, void* dst, int64_t bytes) override;

  void begin_step() override;
  Status end_step() override;

  void embed(const backend::Tensor& table, const backend::Tensor& tokens, int64_t copies,
             const backend::Tensor& out) override;
  void matmul(const backend::Tensor& w, const backend::Tensor& x, const backend::Tensor& y) override;
  void matmul_batch(std::span<const backend::MatmulJob> jobs) override;
  void rms_norm(const backend::Tensor& x, const backend::Tensor& w, float eps, const backend::Tensor& y) override;
  void rope(const backend::Tensor& x, int64_t rows_per_pos, int64_t p0, int64_t n_rot, const backend::Tensor& freqs,
            bool inverse) override;
  void hc_pre(const backend::Tensor& mix, const backend::Tensor& scale, const backend::Tensor& base, float eps,
              int64_t iters, const backend::Tensor& X, const backend::Tensor& x, const backend::Tensor& post,
              const backend::Tensor& comb) override;
  void hc_post(const backend::Tensor& X, const backend::Tensor& y, const backend::Tensor& post,
               const backend::Tensor& comb, const backend::Tensor& X_out) override;
  void hc_head(const backend::Tensor& mix, const backend::Tensor& scale, const backend::Tensor& base, float eps,
               const backend::Tensor& X, const backend::Tensor& y) override;
  void compressor_update(const backend::CompressorUpdate& u, const backend::CompressorTensors& state) override;
  void indexer_topk(const backend::Tensor& qI, const backend::Tensor& g, float gscale0, float gscale1,
                    const backend::Tensor& keys, int64_t p0, int64_t ratio, const backend::Tensor& out) override;
  void attention(const backend::AttentionArgs& a) override;
  void kv_store(const backend::Tensor& kv, int64_t p0, const backend::Tensor& ring) override;
  void route(const backend::RouteArgs& r) override;
  void moe(const backend::MoeArgs& m) override;
  void argmax(const backend::Tensor& logits, const backend::Tensor& ids) override;
  // Greedy without bias or penalty history: argmax's rule. Otherwise kSampleOnHost: the logits are
  // host memory already, and the sampler (a room above the backends) samples them where it lives.
  void sample(const backend::SampleArgs& a) override;
  Result<backend::BackendLimits> measure_limits() override;
  Status finish() override { return ok_status(); }  // ops run synchronously
  int64_t memory_in_use() const override { return in_use_bytes_; }
  int64_t memory_peak() const override { return peak_bytes_; }

  // The pool the ops run on (tools that run CPU kernels directly share it).
  ThreadPool& pool() { return pool_; }
  SimdLevel simd_level() const { return ctx_.max_level; }

 protected:
  void release(void* data, int64_t bytes) override;

 private:
  int64_t in_use_bytes_ = 0, peak_bytes_ = 0;  // allocate()d and not yet released (64-byte multiples)
  // Records the first error of the step (sticky until end_step).
  void fail(Status status);
  // The rms_norm of one row (n floats) into y (may alias x); w null: no weight.
  void rms_norm_row(const float* x, int64_t n, const float* w, float eps, float* y) const;
  // RoPE of `rows` rows (stride floats apart) at one position.
  void rope_rows(float* x, int64_t rows, int64_t stride, int64_t row_len, int64_t pos, int64_t n_rot,
                 const float* freqs, bool inverse);
  // p[h * nk + j] = dot(q_h, keys[j]) for H query rows of d floats at q (tile kernel over runs of
  // consecutive key rows, else dot_f32_): the same bits either way.
  void score_keys(const float* q, int64_t H, int64_t d, const float* const* keys, int64_t nk, float* p) const;
  // Pools compressor window w from the ring into `out` (d floats).
  void pool_window(const backend::CompressorUpdate& u, const backend::CompressorTensors& st, int64_t w, float* out);
  // matmul_batch on already converted jobs (records the error).
  void run_batch(std::span<const MatmulJob> jobs);
  // Appends one backend job to batch_ in matmul.h form (false + error recorded on a bad shape).
  bool add_job(const backend::MatmulJob& job);

  ThreadPool pool_;
  CpuContext ctx_;
  Status error_;

  VecDotFn dot_f32_;                  // the F32 vec_dot: every reduction's 32-partial fma dot
  VecDotTileFn tile_f32_ = nullptr;   // its tile form (same bits per element), where the level has one
  FmaAxpyFn fma_axpy_;                // y = fma(a, x, y) elementwise
  WeightedRowsFn weighted_rows_ = nullptr;  // where the level has it (else fma_axpy_ loops)
  SwigluClampFn swiglu_clamp_;

  // Grow-only scratch (see the header comment).
  std::vector<MatmulJob> batch_;
  std::vector<float> rope_c_, rope_s_, pre_, pool_w_;
  std::vector<const float*> cand_a_, cand_z_;
  std::vector<float> score_;
  std::vector<int32_t> order_;
  std::vector<float> gsc_;
  std::vector<float> route_s_, route_sel_;
  std::vector<int64_t> moe_first_, moe_fill_, moe_slots_, moe_row_of_pair_;
  std::vector<float> xe_, ge_, ue_, he_, ye_, gs_, us_, hs_, ys_;
  struct ThreadScratch {  // one per pool thread (attention)
    std::vector<float> p, den;
    std::vector<const float*> keys;
  };
  std::vector<ThreadScratch> thread_scratch_;
  // Every thread's attention scratch for `heads` heads × `keys` keys (grow-only; may throw bad_alloc).
  void grow_thread_scratch(int64_t heads, int64_t keys);
};

}  // namespace dsv4::cpu
