// backend/backend.cpp — the non-virtual parts of backend.h: tensor views, buffers, arena plans,
// op and backend-kind names, and the default (unfused) forms of the composite ops.
#include "backend/backend.h"

#include <string>
#include <utility>

namespace dsv4::backend {
namespace {

// nb[] of contiguous rows for dims ne[0..4): nb[0] one block, nb[1] one row, then products.
void contiguous_strides(Tensor& t) {
  t.nb[0] = tensor_type_info(t.type).block_bytes;
  t.nb[1] = tensor_row_bytes(t.type, t.ne[0]);
  for (int i = 2; i < 4; ++i) t.nb[i] = t.nb[i - 1] * t.ne[i - 1];
}

constexpr int64_t kArenaAlign = 256;

}  // namespace

void Backend::rms_norm_for(const Tensor& x, const Tensor& w, float eps, const Tensor& y, const MatmulConsumers&) {
  rms_norm(x, w, eps, y);
}

void Backend::hc_pre_norm(const HcPreNormArgs& a) {
  rms_norm(a.X, {}, a.rms_eps, a.streams);
  matmul(a.fn, a.streams, a.mix);
  hc_pre(a.mix, a.scale, a.base, a.hc_eps, a.iters, a.X, a.collapsed, a.post, a.comb);
  rms_norm(a.collapsed, a.norm, a.rms_eps, a.x);
}

void Backend::norm_rope(std::span<const NormRopeJob> jobs) {
  for (const NormRopeJob& j : jobs) {
    if (j.norm) rms_norm(j.x, j.w, j.eps, j.x);
    rope(j.x, j.rows_per_pos, j.p0, j.n_rot, j.freqs, false);
  }
}

void Backend::rms_norm_rope(const Tensor& x, const Tensor& w, float eps, int64_t rows_per_pos, int64_t p0,
                            int64_t n_rot, const Tensor& freqs) {
  const NormRopeJob job{x, w, true, eps, rows_per_pos, p0, n_rot, freqs};
  norm_rope({&job, 1});
}

void Backend::attention_unrope(const AttentionArgs& a, int64_t n_rot, const Tensor& freqs) {
  attention(a);
  if (a.n_head <= 0 || a.o.ne[0] % a.n_head != 0) return;  // attention has reported the shapes
  rope(a.o.as_rows(a.o.ne[0] / a.n_head), a.n_head, a.p0, n_rot, freqs, true);
  if (a.store_kv) kv_store(a.kv, a.p0, a.ring);
}

void Backend::matmul_hc_post(const Tensor& w, const Tensor& x, const Tensor& y, const Tensor& X, const Tensor& post,
                             const Tensor& comb, const Tensor& X_out) {
  matmul(w, x, y);
  hc_post(X, y, post, comb, X_out);
}

void Backend::moe_hc_post(const MoeArgs& m, const Tensor& X, const Tensor& post, const Tensor& comb,
                          const Tensor& X_out) {
  moe(m);
  hc_post(X, m.out, post, comb, X_out);
}

Tensor Tensor::rows(int64_t begin, int64_t n) const {
  Tensor v = *this;
  v.data = static_cast<uint8_t*>(data) + begin * nb[1];
  v.ne[1] = n;
  v.nb[2] = nb[1] * n;
  v.nb[3] = v.nb[2] * ne[2];
  return v;
}

Tensor Tensor::cols(int64_t begin, int64_t n) const {
  Tensor v = *this;
  v.data = static_cast<uint8_t*>(data) + begin * nb[0];
  v.ne[0] = n;
  return v;
}

Tensor Tensor::expert(int64_t e) const {
  Tensor v = *this;
  v.data = static_cast<uint8_t*>(data) + e * nb[2];
  v.n_dims = 2;
  v.ne[2] = 1;
  v.ne[3] = 1;
  v.nb[3] = v.nb[2];
  return v;
}

Tensor make_2d(TensorType type, void* data, int64_t cols, int64_t rows) {
  const int64_t ne[2] = {cols, rows};
  return make_nd(type, data, 2, ne);
}

Tensor make_nd(TensorType type, void* data, int n_dims, const int64_t* ne) {
  Tensor t;
  t.type = type;
  t.n_dims = n_dims;
  for (int i = 0; i < 4; ++i) t.ne[i] = i < n_dims ? ne[i] : 1;
  t.data = data;
  contiguous_strides(t);
  return t;
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    if (owner_ != nullptr && data_ != nullptr) owner_->release(data_, bytes_);
    owner_ = std::exchange(o.owner_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

Buffer::~Buffer() {
  if (owner_ != nullptr && data_ != nullptr) owner_->release(data_, bytes_);
}

int ArenaPlan::add(TensorType type, int64_t cols, int64_t rows) {
  const int64_t offset = (bytes_ + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
  slots_.push_back({type, cols, rows, offset});
  bytes_ = offset + tensor_row_bytes(type, cols) * rows;
  return static_cast<int>(slots_.size()) - 1;
}

Result<Buffer> ArenaPlan::allocate(Backend& backend) { return backend.allocate(bytes_); }

Tensor ArenaPlan::at(const Buffer& arena, int slot) const {
  const Slot& s = slots_[static_cast<size_t>(slot)];
  return make_2d(s.type, static_cast<uint8_t*>(arena.data()) + s.offset, s.cols, s.rows);
}

Status check_moe_shapes(const MoeArgs& m) {
  const Tensor& x = m.x;
  const int64_t n = x.ne[1], D = x.ne[0], K = m.ids.ne[0], E = m.gate_exps.ne[2], I = m.gate_exps.ne[1];
  const auto weight_ok = [](const Tensor& w, int64_t in, int64_t out, int64_t experts) {
    return w.valid() && w.ne[0] == in && w.ne[1] == out && w.ne[2] == experts && w.contiguous_rows();
  };
  if (!weight_ok(m.gate_exps, D, I, E) || !weight_ok(m.up_exps, D, I, E) || !weight_ok(m.down_exps, I, D, E) ||
      m.ids.ne[1] != n || m.weights.ne[0] != K || m.weights.ne[1] != n || m.out.ne[0] != D || m.out.ne[1] != n ||
      (m.gate_sh.valid() && (!weight_ok(m.up_sh, D, m.gate_sh.ne[1], 1) || !weight_ok(m.down_sh, m.gate_sh.ne[1], D, 1) ||
                             m.gate_sh.ne[0] != D)))
    return invalid_argument("moe: shapes do not fit (" + std::to_string(n) + " tokens of " + std::to_string(D) + ", " +
                            std::to_string(E) + " experts of " + std::to_string(I) + ", k " + std::to_string(K) + ")");
  return ok_status();
}

Status check_compressor_shapes(const CompressorUpdate& u, const CompressorTensors& st) {
  const int64_t r = u.ratio, coff = u.coff, d = u.d, width = coff * d, span = coff * r, n = u.a.ne[1];
  if (r <= 0 || (coff != 1 && coff != 2) || u.a.ne[0] != width || u.z.ne[0] != width || u.z.ne[1] != n ||
      u.ape.ne[0] != width || u.ape.ne[1] < r || st.ring_a.ne[0] != width || st.ring_z.ne[0] != width ||
      st.ring_a.ne[1] != span || st.ring_z.ne[1] != span || st.entries.ne[0] != d || u.norm.ne[0] != d ||
      u.n_rot > d || u.n_rot < 0 || u.n_rot % 2 != 0 || u.freqs.ne[0] * 2 < u.n_rot || u.p0 < 0)
    return invalid_argument("compressor_update: shapes do not fit (ratio " + std::to_string(r) + ", coff " +
                            std::to_string(coff) + ", d " + std::to_string(d) + ")");
  if ((u.p0 + n) / r > st.entries.ne[1])
    return out_of_range("compressor_update: entry " + std::to_string((u.p0 + n) / r - 1) + " beyond capacity " +
                        std::to_string(st.entries.ne[1]));
  return ok_status();
}

Status check_indexer_shapes(const Tensor& qI, const Tensor& g, const Tensor& keys, int64_t p0, int64_t ratio,
                            const Tensor& out) {
  const int64_t n = qI.ne[1], nI = g.ne[0], dI = keys.ne[0];
  if (ratio <= 0 || qI.ne[0] != nI * dI || g.ne[1] != n || out.ne[1] != n || out.type != TensorType::kI32 || p0 < 0)
    return invalid_argument("indexer_topk: shapes do not fit (qI [" + std::to_string(n) + "][" + std::to_string(qI.ne[0]) +
                            "], g [" + std::to_string(g.ne[1]) + "][" + std::to_string(nI) + "], keys of " +
                            std::to_string(dI) + ", out [" + std::to_string(out.ne[1]) + "][" + std::to_string(out.ne[0]) +
                            "], ratio " + std::to_string(ratio) + ", p0 " + std::to_string(p0) + ")");
  if (n > 0 && (p0 + n) / ratio > keys.ne[1])
    return out_of_range("indexer_topk: " + std::to_string((p0 + n) / ratio) + " visible entries beyond capacity " +
                        std::to_string(keys.ne[1]));
  return ok_status();
}

const char* op_name(Op op) {
  switch (op) {
    case Op::kEmbed: return "embed";
    case Op::kMatmul: return "matmul";
    case Op::kRmsNorm: return "rms_norm";
    case Op::kRope: return "rope";
    case Op::kHcPre: return "hc_pre";
    case Op::kHcPost: return "hc_post";
    case Op::kHcHead: return "hc_head";
    case Op::kCompressorUpdate: return "compressor_update";
    case Op::kIndexerTopk: return "indexer_topk";
    case Op::kAttention: return "attention";
    case Op::kKvStore: return "kv_store";
    case Op::kRoute: return "route";
    case Op::kMoe: return "moe";
    case Op::kArgmax: return "argmax";
    case Op::kSample: return "sample";
    case Op::kCount: break;
  }
  return "unknown";
}

Result<BackendKind> parse_backend_kind(std::string_view name) {
  if (name == "auto") return BackendKind::kAuto;
  if (name == "cpu") return BackendKind::kCpu;
  if (name == "cuda") return BackendKind::kCuda;
  return invalid_argument("unknown backend '" + std::string(name) + "' (valid: auto, cpu, cuda)");
}

const char* backend_kind_name(BackendKind kind) {
  switch (kind) {
    case BackendKind::kAuto: return "auto";
    case BackendKind::kCpu: return "cpu";
    case BackendKind::kCuda: return "cuda";
  }
  return "unknown";
}

}  // namespace dsv4::backend
