// backend/registry/verify_backend.cpp — the `--verify` backend (verify_backend.h says what and why).
#include "backend/registry/verify_backend.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace dsv4::backend {
namespace {

class VerifyingBackend final : public Backend {
 public:
  VerifyingBackend(std::unique_ptr<Backend> primary, std::unique_ptr<Backend> reference)
      : p_(std::move(primary)), r_(std::move(reference)) {}
  ~VerifyingBackend() override { regions_.clear(); }

  std::string_view name() const override { return p_->name(); }
  std::string describe() const override {
    return p_->describe() + "; every op checked bit for bit against " + std::string(r_->name()) + " (--verify)";
  }
  bool supports(Op op, TensorType type) const override { return p_->supports(op, type) && r_->supports(op, type); }

  Result<Buffer> allocate(int64_t bytes) override {
    DSV4_ASSIGN_OR_RETURN(Buffer a, p_->allocate(bytes));
    DSV4_ASSIGN_OR_RETURN(Buffer b, r_->allocate(bytes));
    void* data = a.data();
    void* rdata = b.data();
    std::vector<Buffer> pa, pb;
    pa.push_back(std::move(a));
    pb.push_back(std::move(b));
    add_region(data, bytes, rdata, std::move(pa), std::move(pb));
    return Buffer(this, data, bytes);
  }
  Result<Tensor> load_weight(const Tensor& host, std::vector<Buffer>& keep) override {
    return load_both(host, keep, false);
  }
  Result<Tensor> load_weight_f32(const Tensor& host, std::vector<Buffer>& keep) override {
    return load_both(host, keep, true);
  }
  Status reserve(const StepBounds& bounds) override {
    DSV4_RETURN_IF_ERROR(p_->reserve(bounds));
    return r_->reserve(bounds);
  }

  void upload(const Tensor& dst, const void* src, int64_t bytes) override {
    p_->upload(dst, src, bytes);
    r_->upload(ref(dst), src, bytes);
  }
  Status download(const Tensor& src, void* dst, int64_t bytes) override {
    ++syncs_;
    return p_->download(src, dst, bytes);
  }
  Status finish() override { return p_->finish(); }
  Result<BackendLimits> measure_limits() override { return p_->measure_limits(); }
  int64_t memory_in_use() const override { return p_->memory_in_use(); }
  int64_t memory_peak() const override { return p_->memory_peak(); }
  LaunchStats launch_stats() const override { return p_->launch_stats(); }

  void begin_step() override {
    ++step_;
    op_ = 0;
    block_ = 0;
    p_->begin_step();
    r_->begin_step();
  }
  Status end_step() override {
    Status a = p_->end_step();
    Status b = r_->end_step();
    if (!a.ok()) return a;
    if (!b.ok()) return Status(b.code(), "--verify reference backend: " + b.message());
    if (!first_difference_.empty()) return internal_error(first_difference_);
    return ok_status();
  }

  // --- ops: run on both, then compare what the op wrote --------------------------------------------
  void embed(const Tensor& table, const Tensor& tokens, int64_t copies, const Tensor& out) override {
    p_->embed(table, tokens, copies, out);
    r_->embed(ref(table), ref(tokens), copies, ref(out));
    check("embed", {{"out", out}});
  }
  void matmul(const Tensor& w, const Tensor& x, const Tensor& y) override {
    p_->matmul(w, x, y);
    r_->matmul(ref(w), ref(x), ref(y));
    check("matmul", {{"y", y}});
  }
  void matmul_batch(std::span<const MatmulJob> jobs) override {
    std::vector<MatmulJob> rj;
    std::vector<Output> outs;
    for (const MatmulJob& j : jobs) {
      rj.push_back({ref(j.w), ref(j.x), ref(j.y)});
      outs.push_back({"y of job " + std::to_string(outs.size()), j.y});
    }
    p_->matmul_batch(jobs);
    r_->matmul_batch(rj);
    check("matmul_batch", outs);
  }
  void rms_norm(const Tensor& x, const Tensor& w, float eps, const Tensor& y) override {
    p_->rms_norm(x, w, eps, y);
    r_->rms_norm(ref(x), ref(w), eps, ref(y));
    check("rms_norm", {{"y", y}});
  }
  void rope(const Tensor& x, int64_t rows_per_pos, int64_t p0, int64_t n_rot, const Tensor& freqs,
            bool inverse) override {
    p_->rope(x, rows_per_pos, p0, n_rot, freqs, inverse);
    r_->rope(ref(x), rows_per_pos, p0, n_rot, ref(freqs), inverse);
    check("rope", {{"x", x}});
  }
  void rms_norm_for(const Tensor& x, const Tensor& w, float eps, const Tensor& y,
                    const backend::MatmulConsumers& consumers) override {
    p_->rms_norm_for(x, w, eps, y, consumers);
    r_->rms_norm(ref(x), ref(w), eps, ref(y));
    check("rms_norm", {{"y", y}});
  }
  void norm_rope(std::span<const NormRopeJob> jobs) override {
    p_->norm_rope(jobs);
    std::vector<NormRopeJob> rj(jobs.begin(), jobs.end());
    std::vector<Output> outs;
    for (NormRopeJob& j : rj) {
      outs.push_back({"x of job " + std::to_string(outs.size()), j.x});
      j.x = ref(j.x);
      j.w = ref(j.w);
      j.freqs = ref(j.freqs);
    }
    r_->norm_rope(rj);
    check("norm_rope", outs);
  }
  void hc_pre(const Tensor& mix, const Tensor& scale, const Tensor& base, float eps, int64_t iters, const Tensor& X,
              const Tensor& x, const Tensor& post, const Tensor& comb) override {
    ++block_;
    p_->hc_pre(mix, scale, base, eps, iters, X, x, post, comb);
    r_->hc_pre(ref(mix), ref(scale), ref(base), eps, iters, ref(X), ref(x), ref(post), ref(comb));
    check("hc_pre", {{"x", x}, {"post", post}, {"comb", comb}});
  }
  void hc_pre_norm(const HcPreNormArgs& a) override {
    ++block_;
    HcPreNormArgs r = a;
    for (Tensor* t : {&r.X, &r.fn, &r.scale, &r.base, &r.norm, &r.streams, &r.mix, &r.collapsed, &r.x, &r.post, &r.comb})
      *t = ref(*t);
    p_->hc_pre_norm(a);
    r_->hc_pre_norm(r);
    check("hc_pre_norm", {{"mix", a.mix}, {"x", a.x}, {"post", a.post}, {"comb", a.comb}});
  }
  void hc_post(const Tensor& X, const Tensor& y, const Tensor& post, const Tensor& comb, const Tensor& X_out) override {
    p_->hc_post(X, y, post, comb, X_out);
    r_->hc_post(ref(X), ref(y), ref(post), ref(comb), ref(X_out));
    check("hc_post", {{"X_out", X_out}});
  }
  void matmul_hc_post(const Tensor& w, const Tensor& x, const Tensor& y, const Tensor& X, const Tensor& post,
                      const Tensor& comb, const Tensor& X_out) override {
    p_->matmul_hc_post(w, x, y, X, post, comb, X_out);
    r_->matmul_hc_post(ref(w), ref(x), ref(y), ref(X), ref(post), ref(comb), ref(X_out));
    check("matmul_hc_post", {{"y", y}, {"X_out", X_out}});
  }
  void hc_head(const Tensor& mix, const Tensor& scale, const Tensor& base, float eps, const Tensor& X,
               const Tensor& y) override {
    p_->hc_head(mix, scale, base, eps, X, y);
    r_->hc_head(ref(mix), ref(scale), ref(base), eps, ref(X), ref(y));
    check("hc_head", {{"y", y}});
  }
  void compressor_update(const CompressorUpdate& u, const CompressorTensors& state) override {
    CompressorUpdate ru = u;
    ru.a = ref(u.a);
    ru.z = ref(u.z);
    ru.ape = ref(u.ape);
    ru.norm = ref(u.norm);
    ru.freqs = ref(u.freqs);
    const CompressorTensors rs{ref(state.ring_a), ref(state.ring_z), ref(state.entries)};
    p_->compressor_update(u, state);
    r_->compressor_update(ru, rs);
    check("compressor_update", {{"ring_a", state.ring_a}, {"ring_z", state.ring_z}, {"entries", state.entries}});
  }
  void indexer_topk(const Tensor& qI, const Tensor& g, float gscale0, float gscale1, const Tensor& keys, int64_t p0,
                    int64_t ratio, const Tensor& out) override {
    p_->indexer_topk(qI, g, gscale0, gscale1, keys, p0, ratio, out);
    r_->indexer_topk(ref(qI), ref(g), gscale0, gscale1, ref(keys), p0, ratio, ref(out));
    check("indexer_topk", {{"out", out}});
  }
  void attention(const AttentionArgs& a) override {
    AttentionArgs ra = a;
    for (Tensor* t : {&ra.q, &ra.kv, &ra.ring, &ra.comp, &ra.comp_index, &ra.sinks, &ra.o}) *t = ref(*t);
    p_->attention(a);
    r_->attention(ra);
    check("attention", {{"o", a.o}});
  }
  void attention_unrope(const AttentionArgs& a, int64_t n_rot, const Tensor& freqs) override {
    AttentionArgs ra = a;
    for (Tensor* t : {&ra.q, &ra.kv, &ra.ring, &ra.comp, &ra.comp_index, &ra.sinks, &ra.o}) *t = ref(*t);
    p_->attention_unrope(a, n_rot, freqs);
    r_->attention_unrope(ra, n_rot, ref(freqs));
    if (a.store_kv)
      check("attention_unrope", {{"o", a.o}, {"ring", a.ring}});
    else
      check("attention_unrope", {{"o", a.o}});
  }
  void kv_store(const Tensor& kv, int64_t p0, const Tensor& ring) override {
    p_->kv_store(kv, p0, ring);
    r_->kv_store(ref(kv), p0, ref(ring));
    check("kv_store", {{"ring", ring}});
  }
  void route(const RouteArgs& r) override {
    RouteArgs rr = r;
    for (Tensor* t : {&rr.logits, &rr.bias, &rr.tid2eid, &rr.tokens, &rr.ids, &rr.weights}) *t = ref(*t);
    p_->route(r);
    r_->route(rr);
    check("route", {{"ids", r.ids}, {"weights", r.weights}});
  }
  // m with every tensor replaced by its reference copy.
  MoeArgs ref_moe(const MoeArgs& m) const {
    MoeArgs rm = m;
    for (Tensor* t : {&rm.x, &rm.ids, &rm.weights, &rm.gate_exps, &rm.up_exps, &rm.down_exps, &rm.gate_sh, &rm.up_sh,
                      &rm.down_sh, &rm.out})
      *t = ref(*t);
    return rm;
  }
  void moe(const MoeArgs& m) override {
    p_->moe(m);
    r_->moe(ref_moe(m));
    check("moe", {{"out", m.out}});
  }
  void moe_hc_post(const MoeArgs& m, const Tensor& X, const Tensor& post, const Tensor& comb,
                   const Tensor& X_out) override {
    p_->moe_hc_post(m, X, post, comb, X_out);
    r_->moe_hc_post(ref_moe(m), ref(X), ref(post), ref(comb), ref(X_out));
    check("moe_hc_post", {{"out", m.out}, {"X_out", X_out}});
  }
  void argmax(const Tensor& logits, const Tensor& ids) override {
    p_->argmax(logits, ids);
    r_->argmax(ref(logits), ref(ids));
    check("argmax", {{"ids", ids}});
  }
  // A reference that answers kSampleOnHost (the CPU backend whenever the temperature is > 0) leaves
  // nothing to compare: the logits both sides sampled from were compared at the head's matmul.
  void sample(const SampleArgs& a) override {
    SampleArgs ra = a;
    ra.logits = ref(a.logits);
    ra.id = ref(a.id);
    p_->sample(a);
    r_->sample(ra);
    int32_t ref_id = 0;
    if (ra.id.valid() && r_->download(ra.id, &ref_id, 4).ok() && ref_id == backend::kSampleOnHost) {
      ++op_;
      return;
    }
    check("sample", {{"id", a.id}});
  }

 protected:
  void release(void* data, int64_t /*bytes*/) override { regions_.erase(static_cast<const char*>(data)); }

 private:
  struct Region {
    int64_t bytes = 0;
    char* ref = nullptr;
    std::vector<Buffer> own_p, own_r;  // the two sides' allocations (none for weights used in place)
  };
  struct Output {
    std::string what;
    Tensor t;
  };

  void add_region(void* p, int64_t bytes, void* r, std::vector<Buffer> a, std::vector<Buffer> b) {
    Region reg;
    reg.bytes = bytes;
    reg.ref = static_cast<char*>(r);
    reg.own_p = std::move(a);
    reg.own_r = std::move(b);
    regions_[static_cast<const char*>(p)] = std::move(reg);
  }

  Result<Tensor> load_both(const Tensor& host, std::vector<Buffer>& keep, bool f32) {
    std::vector<Buffer> kp, kr;
    DSV4_ASSIGN_OR_RETURN(Tensor a, f32 ? p_->load_weight_f32(host, kp) : p_->load_weight(host, kp));
    DSV4_ASSIGN_OR_RETURN(Tensor b, f32 ? r_->load_weight_f32(host, kr) : r_->load_weight(host, kr));
    const int64_t bytes = a.bytes();
    // Weights used in place (a CPU's mapping) are never released through us (the region and the
    // reference's copy live as long as this backend); owned ones go when the model's buffer does.
    if (!kp.empty()) keep.emplace_back(this, a.data, bytes);
    add_region(a.data, bytes, b.data, std::move(kp), std::move(kr));
    return a;
  }

  // The reference backend's view of a primary tensor (same offset in the matching allocation).
  Tensor ref(const Tensor& t) const {
    if (!t.valid()) return t;
    const char* p = static_cast<const char*>(t.data);
    auto it = regions_.upper_bound(p);
    if (it == regions_.begin()) return missing(t);
    --it;
    if (p >= it->first + std::max<int64_t>(it->second.bytes, 1)) return missing(t);
    Tensor r = t;
    r.data = it->second.ref + (p - it->first);
    return r;
  }
  Tensor missing(const Tensor& t) const {
    if (first_difference_.empty()) first_difference_ = "--verify: a tensor the wrapper did not allocate reached an op";
    Tensor r = t;
    r.data = nullptr;
    return r;
  }

  // Downloads each output from both backends and records the first difference.
  void check(const char* op, const std::vector<Output>& outs) {
    ++op_;
    if (!first_difference_.empty()) return;
    for (const Output& o : outs) {
      const Tensor& t = o.t;
      if (!t.valid() || t.rows() <= 0) continue;
      const int64_t row_bytes = t.row_bytes(), span = (t.rows() - 1) * t.nb[1] + row_bytes;
      std::vector<char> a(static_cast<size_t>(span)), b(static_cast<size_t>(span));
      Status sa = p_->download(t, a.data(), span);
      Status sb = r_->download(ref(t), b.data(), span);
      if (!sa.ok() || !sb.ok()) {
        first_difference_ = where(op, o.what) + ": " + (sa.ok() ? sb : sa).to_string();
        return;
      }
      int64_t differ = 0, first_row = -1, first_col = -1;
      uint32_t va = 0, vb = 0;
      const int64_t elems = t.type == TensorType::kF32 || t.type == TensorType::kI32 ? t.ne[0] : row_bytes / 4;
      for (int64_t r = 0; r < t.rows(); ++r)
        for (int64_t c = 0; c < elems; ++c) {
          uint32_t x, y;
          std::memcpy(&x, a.data() + r * t.nb[1] + 4 * c, 4);
          std::memcpy(&y, b.data() + r * t.nb[1] + 4 * c, 4);
          if (x == y) continue;
          const bool both_nan = t.type == TensorType::kF32 && (x & 0x7fffffffu) > 0x7f800000u &&
                                (y & 0x7fffffffu) > 0x7f800000u;
          if (both_nan) continue;
          if (differ++ == 0) {
            first_row = r;
            first_col = c;
            va = x;
            vb = y;
          }
        }
      if (differ == 0) continue;
      char buf[160];
      if (t.type == TensorType::kI32) {
        std::snprintf(buf, sizeof buf, "%d vs %d", static_cast<int32_t>(va), static_cast<int32_t>(vb));
      } else {
        float fa, fb;
        std::memcpy(&fa, &va, 4);
        std::memcpy(&fb, &vb, 4);
        std::snprintf(buf, sizeof buf, "%.9g (0x%08x) vs %.9g (0x%08x)", fa, va, fb, vb);
      }
      first_difference_ = where(op, o.what) + ": " + std::to_string(differ) + " of " +
                          std::to_string(t.rows() * elems) + " elements differ; first at row " +
                          std::to_string(first_row) + ", column " + std::to_string(first_col) + ": " +
                          std::string(p_->name()) + " " + buf + " " + std::string(r_->name());
      return;
    }
  }

  std::string where(const char* op, const std::string& what) const {
    std::string s = "--verify: step " + std::to_string(step_) + ", op " + std::to_string(op_) + " (" + op + ")";
    if (block_ > 0)
      s += ", block " + std::to_string(block_ - 1) + " (layer " + std::to_string((block_ - 1) / 2) +
           ((block_ - 1) % 2 == 0 ? " attention" : " ffn") + ")";
    return s + ", output " + what;
  }

  std::unique_ptr<Backend> p_, r_;
  std::map<const char*, Region> regions_;  // by the primary's address
  int64_t step_ = 0, op_ = 0, block_ = 0;
  mutable std::string first_difference_;
};

}  // namespace

std::unique_ptr<Backend> make_verifying_backend(std::unique_ptr<Backend> primary, std::unique_ptr<Backend> reference) {
  return std::make_unique<VerifyingBackend>(std::move(primary), std::move(reference));
}

}  // namespace dsv4::backend
