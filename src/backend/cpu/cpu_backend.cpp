// backend/cpu/cpu_backend.cpp — CpuBackend: memory, weights, steps, and the dense ops (embed, matmul,
// rms_norm, rope, HC mixing). Compressor / indexer / attention / kv_store are in cpu_attention.cpp,
// route and moe in cpu_moe.cpp.
#include "backend/cpu/cpu_backend.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <string>

#include "backend/cpu/bench_kernels.h"
#include "backend/cpu/cpu_backend_internal.h"
#include "numerics/det_math.h"

namespace dsv4::cpu {

using backend::Tensor;
using internal::f32;
using internal::grow;
using internal::row;
using internal::stride;

namespace {

int64_t available_memory_bytes() {
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : -1;
}

std::string dims(const Tensor& t) {
  std::string s = "[";
  for (int i = 0; i < std::max(t.n_dims, 1); ++i) s += (i ? ", " : "") + std::to_string(t.ne[i]);
  return s + "]";
}

}  // namespace

CpuBackend::CpuBackend(const CpuBackendOptions& options) : pool_(options.threads) {
  ctx_.pool = &pool_;
  ctx_.max_level = options.simd;
  ctx_.use_amx = options.amx;  // matmul.h uses_amx() also checks the level and the CPU/OS
  const TypeKernels& k = *type_kernels(TensorType::kF32);
  dot_f32_ = select_vec_dot(k, options.simd);
  tile_f32_ = k.vec_dot_tile[static_cast<int>(effective_simd_level(k, options.simd))];
  fma_axpy_ = select_fma_axpy(options.simd);
  weighted_rows_ = select_weighted_rows(options.simd);
  swiglu_clamp_ = select_swiglu_clamp(options.simd);
  thread_scratch_.resize(static_cast<size_t>(pool_.size()));
}

CpuBackend::~CpuBackend() = default;

std::string CpuBackend::describe() const {
  std::string s = "cpu: " + std::string(simd_level_name(ctx_.max_level)) + ", " + std::to_string(pool_.size()) +
                  " threads";
  if (ctx_.use_amx) s += amx_int8_usable() ? ", AMX" : ", AMX requested but not usable";
  const int64_t avail = available_memory_bytes();
  if (avail >= 0) s += ", " + std::to_string(avail >> 20) + " MiB free";
  return s;
}

bool CpuBackend::supports(backend::Op op, TensorType type) const {
  switch (op) {
    case backend::Op::kEmbed:
      return type == TensorType::kI32 || type_kernels(type) != nullptr;
    case backend::Op::kMatmul:
    case backend::Op::kMoe:
      return type_kernels(type) != nullptr;
    default:
      return type == TensorType::kF32;
  }
}

void CpuBackend::grow_thread_scratch(int64_t heads, int64_t keys) {
  for (ThreadScratch& ts : thread_scratch_) {
    grow(ts.p, heads * keys);
    grow(ts.den, heads);
    ts.keys.reserve(static_cast<size_t>(keys));
  }
}

Status CpuBackend::reserve(const backend::StepBounds& b) {
  if (b.tokens < 0 || b.heads < 0 || b.keys < 0 || b.index_entries < 0) return invalid_argument("reserve: negative bounds");
  try {
    grow_thread_scratch(b.heads, b.keys);  // attention: one query's scores and key rows per thread
    grow(score_, b.index_entries);  // indexer_topk: one query's scores and their order
    grow(order_, b.index_entries);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("reserve: no memory for the attention and indexer scratch of " +
                              std::to_string(b.keys) + " keys × " + std::to_string(b.heads) + " heads");
  }
  return ok_status();
}

Result<backend::Buffer> CpuBackend::allocate(int64_t bytes) {
  if (bytes < 0) return invalid_argument("cpu backend: cannot allocate " + std::to_string(bytes) + " bytes");
  const int64_t size = std::max<int64_t>(64, (bytes + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, static_cast<size_t>(size));
  if (p == nullptr) {
    const int64_t avail = available_memory_bytes();
    return resource_exhausted("cpu backend: cannot allocate " + std::to_string(bytes) + " bytes (" +
                              (avail >= 0 ? std::to_string(avail) + " bytes free" : "free memory unknown") + ")");
  }
  std::memset(p, 0, static_cast<size_t>(size));
  in_use_bytes_ += size;
  peak_bytes_ = std::max(peak_bytes_, in_use_bytes_);
  return backend::Buffer(this, p, bytes);
}

void CpuBackend::release(void* data, int64_t bytes) {
  std::free(data);
  in_use_bytes_ -= std::max<int64_t>(64, (bytes + 63) / 64 * 64);
}

void CpuBackend::sample(const backend::SampleArgs& a) {
  if (!error_.ok()) return;
  if (a.logits.type != TensorType::kF32 || a.logits.rows() != 1 || a.id.type != TensorType::kI32 || a.id.ne[0] != 1 ||
      !a.logits.valid() || !a.id.valid() || a.seen_ids.size() != a.seen_counts.size())
    return fail(invalid_argument("cpu sample: needs one row of F32 logits, an I32 id and as many seen counts as ids"));
  if (a.temperature > 0.0f || !a.logit_bias.empty() || !a.seen_ids.empty()) {  // only the plain greedy choice here
    *static_cast<int32_t*>(a.id.data) = backend::kSampleOnHost;
    return;
  }
  argmax(a.logits, a.id);
}

void CpuBackend::argmax(const Tensor& logits, const Tensor& ids) {
  if (!error_.ok()) return;
  if (logits.type != TensorType::kF32 || ids.type != TensorType::kI32 || logits.rows() != ids.ne[0] ||
      logits.ne[0] <= 0 || logits.ne[0] > INT32_MAX || !logits.valid() || !ids.valid())
    return fail(invalid_argument("cpu argmax: needs logits [n][V] F32 and ids [n] I32 of the same n"));
  for (int64_t t = 0; t < logits.rows(); ++t) {
    const float* row = reinterpret_cast<const float*>(static_cast<const uint8_t*>(logits.data) + t * logits.nb[1]);
    float best = 0.0f;
    int32_t best_i = -1;
    for (int64_t i = 0; i < logits.ne[0]; ++i) {
      const float v = row[i];
      if (v == v && (best_i < 0 || v > best)) {  // first number, then strictly larger: ties → lower id
        best = v;
        best_i = static_cast<int32_t>(i);
      }
    }
    static_cast<int32_t*>(ids.data)[t] = best_i < 0 ? 0 : best_i;
  }
}

Result<backend::BackendLimits> CpuBackend::measure_limits() {
  BenchOptions bo;
  bo.bandwidth_bytes = int64_t{512} << 20;
  const MachineLimits m = measure_machine(ctx_, bo);
  backend::BackendLimits lim;
  lim.read_gbps = m.read_gbps;
  lim.fma_gflops = m.fma_gflops;
  lim.what = std::to_string(m.threads) + " threads, " + simd_level_name(m.level) +
             ": best streaming read of 512 MiB and f32 FMA chains";
  return lim;
}

Result<Tensor> CpuBackend::load_weight(const Tensor& host, std::vector<backend::Buffer>&) {
  // Index tables (the hash router's tid2eid) are I32 and read in place by their ops.
  if (host.type != TensorType::kI32 && type_kernels(host.type) == nullptr)
    return unsupported("cpu backend: no CPU kernels for tensor type " + std::string(tensor_type_name(host.type)));
  if (!host.valid()) return invalid_argument("cpu backend: load_weight of a tensor without data");
  return host;  // the mapping is used in place
}

Result<Tensor> CpuBackend::load_weight_f32(const Tensor& host, std::vector<backend::Buffer>& keep) {
  if (!host.valid()) return invalid_argument("cpu backend: load_weight_f32 of a tensor without data");
  const int64_t rows = host.rows(), n = host.ne[0];
  const TypeKernels* k = host.type == TensorType::kI32 ? nullptr : type_kernels(host.type);
  if (host.type != TensorType::kI32 && k == nullptr)
    return unsupported("cpu backend: no CPU kernels for tensor type " + std::string(tensor_type_name(host.type)));
  DSV4_ASSIGN_OR_RETURN(backend::Buffer buf, allocate(rows * n * static_cast<int64_t>(sizeof(float))));
  float* out = static_cast<float*>(buf.data());
  const int64_t row_bytes = host.row_bytes();
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = static_cast<const uint8_t*>(host.data) + r * row_bytes;
    if (k == nullptr) {
      const int32_t* s = reinterpret_cast<const int32_t*>(src);
      for (int64_t i = 0; i < n; ++i) out[r * n + i] = static_cast<float>(s[i]);
    } else {
      k->dequantize_row(src, out + r * n, n);
    }
  }
  Tensor t = backend::make_nd(TensorType::kF32, out, std::max(host.n_dims, 1), host.ne);
  keep.push_back(std::move(buf));
  return t;
}

void CpuBackend::upload(const Tensor& dst, const void* src, int64_t bytes) {
  if (bytes > 0) std::memcpy(dst.data, src, static_cast<size_t>(bytes));
}

Status CpuBackend::download(const Tensor& src, void* dst, int64_t bytes) {
  ++syncs_;
  if (bytes > 0) std::memcpy(dst, src.data, static_cast<size_t>(bytes));
  return ok_status();
}

void CpuBackend::begin_step() { error_ = ok_status(); }

Status CpuBackend::end_step() {
  Status s = std::move(error_);
  error_ = ok_status();
  return s;
}

void CpuBackend::fail(Status status) {
  if (error_.ok()) error_ = std::move(status);
}

// --- embed ----------------------------------------------------------------------------------------

void CpuBackend::embed(const Tensor& table, const Tensor& tokens, int64_t copies, const Tensor& out) {
  const int64_t D = table.ne[0], vocab = table.ne[1], n = internal::elements(tokens);
  if (out.ne[0] != copies * D || out.ne[1] != n) {
    fail(invalid_argument("embed: out " + dims(out) + " for " + std::to_string(n) + " tokens of " +
                          std::to_string(copies) + " x " + std::to_string(D)));
    return;
  }
  const TypeKernels* k = table.type == TensorType::kI32 ? nullptr : type_kernels(table.type);
  if (table.type != TensorType::kI32 && k == nullptr) {
    fail(unsupported("embed: no CPU kernels for tensor type " + std::string(tensor_type_name(table.type))));
    return;
  }
  const int32_t* ids = internal::i32(tokens);
  for (int64_t t = 0; t < n; ++t) {
    if (ids[t] < 0 || ids[t] >= vocab) {
      fail(out_of_range("embed: token id " + std::to_string(ids[t]) + " out of range (vocab " +
                        std::to_string(vocab) + ")"));
      return;
    }
    float* dst = row(out, t);
    const uint8_t* src = static_cast<const uint8_t*>(table.data) + ids[t] * table.nb[1];
    if (k == nullptr) {
      for (int64_t i = 0; i < D; ++i) dst[i] = static_cast<float>(reinterpret_cast<const int32_t*>(src)[i]);
    } else {
      k->dequantize_row(src, dst, D);
    }
    for (int64_t c = 1; c < copies; ++c) std::memcpy(dst + c * D, dst, static_cast<size_t>(D) * sizeof(float));
  }
}

// --- matmul ---------------------------------------------------------------------------------------

bool CpuBackend::add_job(const backend::MatmulJob& j) {
  const Tensor &w = j.w, &x = j.x, &y = j.y;
  if (w.ne[2] != 1 || w.ne[3] != 1 || !w.contiguous_rows() || x.type != TensorType::kF32 ||
      y.type != TensorType::kF32 || x.ne[0] != w.ne[0] || y.ne[0] != w.ne[1] || y.ne[1] != x.ne[1]) {
    fail(invalid_argument("matmul: weight " + std::string(tensor_type_name(w.type)) + " " + dims(w) + ", x " +
                          dims(x) + ", y " + dims(y) + " do not fit (2-D weight with contiguous rows, F32 x [n][in], y [n][out])"));
    return false;
  }
  batch_.push_back({w.type, w.data, w.ne[1], w.ne[0], f32(x), x.ne[1], f32(y), stride(x), stride(y)});
  return true;
}

void CpuBackend::run_batch(std::span<const MatmulJob> jobs) {
  Status s = cpu::matmul_batch(ctx_, jobs);
  if (!s.ok()) fail(std::move(s));
}

void CpuBackend::matmul(const Tensor& w, const Tensor& x, const Tensor& y) {
  batch_.clear();
  if (!add_job({w, x, y})) return;
  const MatmulJob& j = batch_[0];
  if (j.x_stride == j.n && j.y_stride == j.rows) {  // dense: matmul.h's single-product path
    Status s = cpu::matmul(ctx_, j.type, j.w, j.rows, j.n, j.x, j.cols, j.y);
    if (!s.ok()) fail(std::move(s));
    return;
  }
  run_batch(batch_);
}

void CpuBackend::matmul_batch(std::span<const backend::MatmulJob> jobs) {
  batch_.clear();
  for (const backend::MatmulJob& j : jobs)
    if (!add_job(j)) return;
  run_batch(batch_);
}

// --- rms_norm, rope -------------------------------------------------------------------------------

void CpuBackend::rms_norm_row(const float* x, int64_t n, const float* w, float eps, float* y) const {
  const float ss = dot_f32_(n, x, x);
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  if (w != nullptr) {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * inv) * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv;
  }
}

void CpuBackend::rms_norm(const Tensor& x, const Tensor& w, float eps, const Tensor& y) {
  const int64_t rows = x.rows(), n = x.ne[0];
  if (y.ne[0] != n || y.rows() != rows || (w.valid() && w.ne[0] != n)) {
    fail(invalid_argument("rms_norm: x " + dims(x) + ", y " + dims(y) + ", w " + dims(w) + " do not fit"));
    return;
  }
  const float* wd = w.valid() ? f32(w) : nullptr;
  for (int64_t r = 0; r < rows; ++r) rms_norm_row(row(x, r), n, wd, eps, row(y, r));
}

void CpuBackend::rope_rows(float* x, int64_t rows, int64_t stride_f, int64_t row_len, int64_t pos, int64_t n_rot,
                           const float* freqs, bool inverse) {
  const int64_t half = n_rot / 2, n0 = row_len - n_rot;
  float* c = grow(rope_c_, half);
  float* s = grow(rope_s_, half);
  for (int64_t k = 0; k < half; ++k) {
    const float angle = static_cast<float>(pos) * freqs[k];
    double sd, cd;
    det::sincos(static_cast<double>(angle), &sd, &cd);
    c[k] = static_cast<float>(cd);
    s[k] = inverse ? -static_cast<float>(sd) : static_cast<float>(sd);
  }
  for (int64_t r = 0; r < rows; ++r) {
    float* t = x + r * stride_f + n0;
    for (int64_t k = 0; k < half; ++k) {
      const float x0 = t[2 * k], x1 = t[2 * k + 1];
      t[2 * k] = x0 * c[k] - x1 * s[k];
      t[2 * k + 1] = x0 * s[k] + x1 * c[k];
    }
  }
}

void CpuBackend::rope(const Tensor& x, int64_t rows_per_pos, int64_t p0, int64_t n_rot, const Tensor& freqs,
                      bool inverse) {
  const int64_t rows = x.rows();
  if (rows_per_pos <= 0 || n_rot < 0 || n_rot % 2 != 0 || n_rot > x.ne[0] || freqs.ne[0] * 2 < n_rot) {
    fail(invalid_argument("rope: x " + dims(x) + ", n_rot " + std::to_string(n_rot) + ", rows per position " +
                          std::to_string(rows_per_pos) + ", freqs " + dims(freqs) + " do not fit"));
    return;
  }
  // Rows of one position are consecutive: one angle table per position.
  for (int64_t r = 0; r < rows; r += rows_per_pos)
    rope_rows(row(x, r), std::min(rows_per_pos, rows - r), stride(x), x.ne[0], p0 + r / rows_per_pos, n_rot, f32(freqs),
              inverse);
}

// --- HC mixing ------------------------------------------------------------------------------------

void CpuBackend::hc_pre(const Tensor& mix_t, const Tensor& scale_t, const Tensor& base_t, float eps, int64_t iters,
                        const Tensor& X, const Tensor& x, const Tensor& post, const Tensor& comb) {
  const int64_t n = x.ne[1], D = x.ne[0], hc = post.ne[0], n_mix = (2 + hc) * hc;
  if (X.ne[0] != hc * D || X.ne[1] != n || mix_t.ne[0] != n_mix || mix_t.ne[1] != n || post.ne[1] != n ||
      comb.ne[0] != hc * hc || comb.ne[1] != n || base_t.ne[0] * base_t.ne[1] < n_mix) {
    fail(invalid_argument("hc_pre: mix " + dims(mix_t) + ", X " + dims(X) + ", x " + dims(x) + ", post " + dims(post) +
                          ", comb " + dims(comb) + " do not fit"));
    return;
  }
  const float* scale3 = f32(scale_t);
  const float* base = f32(base_t);
  float* pre = grow(pre_, hc);
  for (int64_t t = 0; t < n; ++t) {
    const float* m = row(mix_t, t);
    float* C = row(comb, t);
    float* pt = row(post, t);
    for (int64_t i = 0; i < hc; ++i) {
      pre[i] = det::sigmoid(m[i] * scale3[0] + base[i]) + eps;
      pt[i] = 2.0f * det::sigmoid(m[hc + i] * scale3[1] + base[hc + i]);
    }
    // Sinkhorn: row softmax (+eps), column norm, then (iters − 1) × (row norm, column norm).
    for (int64_t i = 0; i < hc; ++i) {
      float* r = C + i * hc;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < hc; ++j) {
        r[j] = m[2 * hc + i * hc + j] * scale3[2] + base[2 * hc + i * hc + j];
        mx = std::max(mx, r[j]);
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < hc; ++j) {
        r[j] = det::exp(r[j] - mx);
        sum += r[j];
      }
      for (int64_t j = 0; j < hc; ++j) r[j] = r[j] / sum + eps;
    }
    auto col_norm = [&] {
      for (int64_t j = 0; j < hc; ++j) {
        float s = 0.0f;
        for (int64_t i = 0; i < hc; ++i) s += C[i * hc + j];
        const float den = s + eps;
        for (int64_t i = 0; i < hc; ++i) C[i * hc + j] = C[i * hc + j] / den;
      }
    };
    col_norm();
    for (int64_t it = 1; it < iters; ++it) {
      for (int64_t i = 0; i < hc; ++i) {
        float s = 0.0f;
        for (int64_t j = 0; j < hc; ++j) s += C[i * hc + j];
        const float den = s + eps;
        for (int64_t j = 0; j < hc; ++j) C[i * hc + j] = C[i * hc + j] / den;
      }
      col_norm();
    }
    // Collapse: x = Σ_i pre_i · X[i] (i ascending, fma chain from 0).
    const float* Xt = row(X, t);
    float* xt = row(x, t);
    std::fill(xt, xt + D, 0.0f);
    for (int64_t i = 0; i < hc; ++i) fma_axpy_(xt, Xt + i * D, pre[i], D);
  }
}

void CpuBackend::hc_post(const Tensor& X, const Tensor& y, const Tensor& post, const Tensor& comb,
                         const Tensor& X_out) {
  const int64_t n = y.ne[1], D = y.ne[0], hc = post.ne[0];
  if (X.ne[0] != hc * D || X.ne[1] != n || X_out.ne[0] != hc * D || X_out.ne[1] != n || post.ne[1] != n ||
      comb.ne[0] != hc * hc || comb.ne[1] != n) {
    fail(invalid_argument("hc_post: X " + dims(X) + ", y " + dims(y) + ", post " + dims(post) + ", comb " + dims(comb) +
                          ", X_out " + dims(X_out) + " do not fit"));
    return;
  }
  for (int64_t t = 0; t < n; ++t) {
    const float* Xt = row(X, t);
    const float* C = row(comb, t);
    const float* yt = row(y, t);
    const float* pt = row(post, t);
    for (int64_t j = 0; j < hc; ++j) {
      float* out = row(X_out, t) + j * D;
      const float pj = pt[j];
      for (int64_t c = 0; c < D; ++c) out[c] = pj * yt[c];
      for (int64_t i = 0; i < hc; ++i) fma_axpy_(out, Xt + i * D, C[i * hc + j], D);
    }
  }
}

void CpuBackend::hc_head(const Tensor& mix, const Tensor& scale, const Tensor& base, float eps, const Tensor& X,
                         const Tensor& y) {
  const int64_t n = y.ne[1], D = y.ne[0], hc = D > 0 ? X.ne[0] / D : 0;
  if (X.ne[0] != hc * D || X.ne[1] != n || mix.ne[0] < hc || mix.ne[1] != n || base.ne[0] * base.ne[1] < hc) {
    fail(invalid_argument("hc_head: mix " + dims(mix) + ", X " + dims(X) + ", y " + dims(y) + " do not fit"));
    return;
  }
  const float s0 = f32(scale)[0];
  const float* b = f32(base);
  float* pre = grow(pre_, hc);
  for (int64_t t = 0; t < n; ++t) {
    const float* m = row(mix, t);
    for (int64_t i = 0; i < hc; ++i) pre[i] = det::sigmoid(m[i] * s0 + b[i]) + eps;
    float* yt = row(y, t);
    std::fill(yt, yt + D, 0.0f);
    for (int64_t i = 0; i < hc; ++i) fma_axpy_(yt, row(X, t) + i * D, pre[i], D);
  }
}

}  // namespace dsv4::cpu
