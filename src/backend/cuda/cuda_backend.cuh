// backend/cuda/cuda_backend.cuh — CudaBackend's declaration, shared by the op-family .cu files
// (cuda_backend.cu: memory, transfers, steps, weights; norm_rope_hc.cu; hc_pre_norm.cu; attention.cu: compressor,
// indexer, attention, kv_store; matmul.cu: activation quantization, matmul, embed, with the decode forms
// of the product in matmul_decode.cu; moe.cu: route, moe).
//
// Model: every tensor's data is a device pointer (cudaMalloc, never managed memory). Ops enqueue
// kernels on one stream in call order and never synchronise; a launch or runtime error is recorded
// (the first one, sticky until end_step). download() is the one synchronisation. Kernels go through
// launch(): they are collected and run as one CUDA graph per step (step_graph.cuh) when the stream is
// next used for anything else (end_step, a transfer, a memset, a free), in the order they were issued. Scratch buffers are
// device allocations that only grow (sized by reserve() and on first use), so steady-state steps
// allocate nothing.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/staged_upload.cuh"
#include "backend/cuda/step_graph.cuh"

namespace dsv4::cuda {

enum class ActFormat;  // matmul.cuh

// A grow-only device buffer (scratch).
struct DeviceScratch {
  void* data = nullptr;
  int64_t bytes = 0;
};

class CudaBackend final : public backend::Backend {
 public:
  explicit CudaBackend(const CudaBackendOptions& options);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;
  // Set-up result (stream creation etc.).
  Status init();

  std::string_view name() const override { return "cuda"; }
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
  void rms_norm_for(const backend::Tensor& x, const backend::Tensor& w, float eps, const backend::Tensor& y,
                    const backend::MatmulConsumers& consumers) override;
  void rope(const backend::Tensor& x, int64_t rows_per_pos, int64_t p0, int64_t n_rot, const backend::Tensor& freqs,
            bool inverse) override;
  // One warp per row, the jobs in one launch where they fit (norm_rope_hc.cu), else the two ops.
  void norm_rope(std::span<const backend::NormRopeJob> jobs) override;
  void hc_pre(const backend::Tensor& mix, const backend::Tensor& scale, const backend::Tensor& base, float eps,
              int64_t iters, const backend::Tensor& X, const backend::Tensor& x, const backend::Tensor& post,
              const backend::Tensor& comb) override;
  // One cluster kernel per step where it fits (hc_pre_norm.cu), else the four ops.
  void hc_pre_norm(const backend::HcPreNormArgs& a) override;
  void hc_post(const backend::Tensor& X, const backend::Tensor& y, const backend::Tensor& post,
               const backend::Tensor& comb, const backend::Tensor& X_out) override;
  void hc_head(const backend::Tensor& mix, const backend::Tensor& scale, const backend::Tensor& base, float eps,
               const backend::Tensor& X, const backend::Tensor& y) override;
  void matmul_hc_post(const backend::Tensor& w, const backend::Tensor& x, const backend::Tensor& y,
                      const backend::Tensor& X, const backend::Tensor& post, const backend::Tensor& comb,
                      const backend::Tensor& X_out) override;
  void compressor_update(const backend::CompressorUpdate& u, const backend::CompressorTensors& state) override;
  void indexer_topk(const backend::Tensor& qI, const backend::Tensor& g, float gscale0, float gscale1,
                    const backend::Tensor& keys, int64_t p0, int64_t ratio, const backend::Tensor& out) override;
  void attention(const backend::AttentionArgs& a) override;
  void attention_unrope(const backend::AttentionArgs& a, int64_t n_rot, const backend::Tensor& freqs) override;
  void kv_store(const backend::Tensor& kv, int64_t p0, const backend::Tensor& ring) override;
  void route(const backend::RouteArgs& r) override;
  void moe(const backend::MoeArgs& m) override;
  void moe_hc_post(const backend::MoeArgs& m, const backend::Tensor& X, const backend::Tensor& post,
                   const backend::Tensor& comb, const backend::Tensor& X_out) override;
  void argmax(const backend::Tensor& logits, const backend::Tensor& ids) override;
  void sample(const backend::SampleArgs& a) override;
  Result<backend::BackendLimits> measure_limits() override;
  Status finish() override;
  int64_t memory_in_use() const override { return in_use_bytes_; }
  int64_t memory_peak() const override { return peak_bytes_; }
  backend::LaunchStats launch_stats() const override;

  // --- for the op-family files ---------------------------------------------------------------------
  cudaStream_t stream() const { return stream_; }
  // Enqueues kernel<<<grid, block, smem>>>(args...) on the step's launch list (each argument converted
  // to its parameter's type, as a <<<>>> launch would). Runs with the step's other kernels at the next
  // flush; launch errors are recorded there under `name`.
  template <typename... Params, typename... Args>
  void launch(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, Args&&... args) {
    launch_as(side_scope_, name, kernel, grid, block, smem, std::forward<Args>(args)...);
  }
  // launch, or when `side` a side launch (StepGraph::begin_side_launch): off the chain, joined by
  // join_side(); a side kernel writes only what the ops that join read (never a twin).
  template <typename... Params, typename... Args>
  void launch_as(bool side, const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                 Args&&... args) {
    static_assert(sizeof...(Params) == sizeof...(Args), "launch: argument count differs from the kernel's");
    const void* func = reinterpret_cast<const void*>(kernel);
    if (side) {
      steps_.begin_side_launch(func, grid, block, static_cast<unsigned>(smem), name);
    } else {
      if (!twin_scope_) n_twins = 0;  // a kernel of another op may write a twin's rows
      steps_.begin_launch(func, grid, block, static_cast<unsigned>(smem), name);
    }
    (steps_.add_arg(static_cast<std::remove_cv_t<std::remove_reference_t<Params>>>(std::forward<Args>(args))), ...);
    if (!graphs_) flush_launches();
  }
  // The next launch waits for the side launches so far (every op that reads hc_pre_norm's post or comb).
  void join_side() { steps_.join_side(); }
  // hc_pre's post and comb from mix (the Sinkhorn; rowops::hc_mix_warp for hc·hc ≤ 32), as a side launch
  // when `side` (hc_pre_norm: only hc_post reads them, many launches later).
  void launch_hc_mix(const backend::Tensor& mix, const float* scale3, const float* base, float eps, int64_t iters,
                     const backend::Tensor& post, const backend::Tensor& comb, bool side);
  // Runs the collected launches (step_graph.cuh); every stream operation other than a launch calls it first.
  void flush_launches();
  bool graphs_enabled() const { return graphs_; }
  // Records the first error of the step (sticky until end_step).
  void fail(Status status);
  // Records `err` (if not cudaSuccess) as "CUDA <what>: <error string>".
  void check(cudaError_t err, const char* what);
  // After a launch: records cudaGetLastError() under the kernel's name.
  void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }
  // Grows `s` to at least `bytes` (records an error and returns null on failure). Growing frees the
  // old allocation after the stream drains (warm-up only: steady state never grows).
  void* grow(DeviceScratch& s, int64_t bytes);
  bool failed() const { return !error_.ok(); }
  // The largest step any session reserved (element-wise max over reserve() calls; zero before any).
  // An op whose scratch depends on the step (tokens, keys, indexed entries) grows it on first use to
  // what a step of these bounds needs, not just the current call, so that later steps of a growing
  // context never grow it (a decode step allocates nothing).
  const backend::StepBounds& bounds() const { return bounds_; }
  int sm_count() const { return sm_count_; }
  int device() const { return device_; }
  // The optional kernel forms this backend may use (--cuda-disable).
  const CudaKernelForms& forms() const { return forms_; }
  // Device bytes of weights loaded (load_weight + load_weight_f32).
  int64_t weight_bytes() const { return weight_bytes_; }

  // --- activations quantized by their producer (backend.h MatmulConsumers) ---------------------------
  // A producer given MatmulConsumers may quantize its output for them in its kernel and record the copy
  // here (matmul.cu plan_quant_twins); matmul, matmul_batch and moe then read it instead of quantizing
  // x again (find_quant_twin). The copies are dropped by any kernel launched outside a TwinScope (the
  // scope of those consumer ops, route, and the producer itself), by any upload, by begin_step, and by
  // a consumer's output that overlaps a copy's rows (twins_note_write).
  struct QuantTwin {
    const void* x = nullptr;  // the float rows [rows][n], x_nb bytes apart
    int64_t rows = 0, n = 0, x_nb = 0;
    ActFormat format{};
    uint8_t* act = nullptr;  // their quantized rows, act_row_bytes(format, n) apart
  };
  static constexpr int kMaxTwins = 2;
  QuantTwin twins[kMaxTwins];
  int n_twins = 0;
  DeviceScratch twin_scratch[kMaxTwins];
  // Sets one of the backend's flags for a scope and restores its value after (TwinScope, SideScope).
  class FlagScope {
   public:
    explicit FlagScope(bool& flag) : flag_(flag), was_(flag) { flag_ = true; }
    ~FlagScope() { flag_ = was_; }
    FlagScope(const FlagScope&) = delete;
    FlagScope& operator=(const FlagScope&) = delete;

   private:
    bool& flag_;
    bool was_;
  };
  class TwinScope : FlagScope {
   public:
    explicit TwinScope(CudaBackend& be) : FlagScope(be.twin_scope_) {}
  };
  // While a SideScope lives, launch() makes side launches (StepGraph::begin_side_launch): a chain of
  // kernels off the step's chain, each starting once the chain kernel before it and the side kernel
  // before it have completed. The op that opens it must join_side() before a chain kernel reads what
  // they write, and they write no twin (moe's shared expert: only its combine reads its output).
  class SideScope : FlagScope {
   public:
    explicit SideScope(CudaBackend& be) : FlagScope(be.side_scope_) {}
  };
  // Drops the twins whose float rows overlap y's bytes.
  void twins_note_write(const backend::Tensor& y);

  // --- HC post in a product's epilogue (matmul_hc_post) --------------------------------------------
  // Set by matmul_hc_post around its matmul: the decode product's split form, writing y[o] of a one-row
  // product of `out` == D rows, also writes X_out (matmul.cuh ProductArgs::hc_*) and sets taken; any
  // other form leaves it, and matmul_hc_post then launches hc_post.
  struct HcEpilogue {
    const float* X = nullptr;  // [hc][D]
    const float* post = nullptr;
    const float* comb = nullptr;
    float* X_out = nullptr;
    int64_t hc = 0, D = 0;
    bool taken = false;
  };
  HcEpilogue* hc_epilogue = nullptr;

  // Scratch shared by the op families (each op uses its own; ops of one stream never overlap).
  DeviceScratch act_scratch;     // quantized activations (matmul, moe)
  DeviceScratch attn_scratch;    // attention scores / probabilities
  DeviceScratch index_scratch;   // indexer scores and order
  DeviceScratch moe_scratch;     // per-pair intermediates
  DeviceScratch misc_scratch;    // small per-op tables
  DeviceScratch sample_scratch;  // sample: the adjusted row, weight block sums, argmax pairs
  DeviceScratch sample_lists;    // sample: bias and penalty lists
  // f(s) for every DeviceScratch member above (the twins' too): the destructor frees them all, so a new
  // scratch member is listed here once (a member left out leaked: compute-sanitizer memcheck).
  template <typename F>
  void for_each_scratch(F&& f) {
    for (DeviceScratch* s : {&act_scratch, &attn_scratch, &index_scratch, &moe_scratch, &misc_scratch,
                             &sample_scratch, &sample_lists})
      f(*s);
    for (DeviceScratch& s : twin_scratch) f(s);
  }

 protected:
  void release(void* data, int64_t bytes) override;

 private:
  int device_ = 0;
  bool graphs_ = true;
  bool twin_scope_ = false;
  bool side_scope_ = false;
  CudaKernelForms forms_;
  cudaStream_t stream_ = nullptr;
  StepGraph steps_;
  StagedUpload staging_;  // weight uploads (load_weight) until the first step
  Status error_;
  std::string device_name_;
  int64_t total_bytes_ = 0;
  int sm_count_ = 0;
  int cc_major_ = 0, cc_minor_ = 0;
  int64_t weight_bytes_ = 0;
  int64_t in_use_bytes_ = 0, peak_bytes_ = 0;  // device_alloc'd and not yet freed (256-byte multiples)
  backend::StepBounds bounds_;
  // Device memory for `bytes` (256-byte multiple, at least 256), or an error naming what was asked,
  // what for, and the device's free / total memory.
  Result<void*> device_alloc(int64_t bytes, const char* what);
  // cudaFree of a device_alloc'd block of `bytes` (as asked; the rounding is redone here).
  void device_free(void* p, int64_t bytes);
  // attention (n_rot = 0) or attention_unrope (attention.cu); store: then kv_store(a.kv, a.p0, a.ring).
  void attend(const backend::AttentionArgs& a, int64_t n_rot, const backend::Tensor* freqs, bool store);
  // moe, then (tail set) hc_post(X, m.out, post, comb, X_out) in the combine's kernel (moe.cu).
  struct HcPostTail {
    const backend::Tensor *X, *post, *comb, *X_out;
  };
  void moe_then(const backend::MoeArgs& m, const HcPostTail* tail);
};

}  // namespace dsv4::cuda
