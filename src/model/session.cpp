// model/session.cpp — Model loading, RoPE frequencies, and the Session's state management
// (reset, capacity, snapshot/restore). The layer loop is in forward.cpp.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "model/model.h"

namespace dsv4::model {

std::vector<float> rope_freqs(const Ds4Shape& s, bool compress) {
  const int64_t rd = s.n_rot, half = rd / 2;
  const double theta = compress ? s.compress_rope_base : s.rope_base;
  std::vector<float> out(static_cast<size_t>(half));
  const bool yarn = compress && s.yarn_orig_ctx > 0 && s.yarn_factor != 1.0;
  double lo = 0, hi = 0;
  if (yarn) {
    auto corr = [&](double beta) {
      return static_cast<double>(rd) * std::log(static_cast<double>(s.yarn_orig_ctx) / (beta * 2.0 * M_PI)) /
             (2.0 * std::log(theta));
    };
    lo = std::max(0.0, std::floor(corr(s.yarn_beta_fast)));
    hi = std::min(static_cast<double>(rd - 1), std::ceil(corr(s.yarn_beta_slow)));
    if (lo == hi) hi += 0.001;
  }
  for (int64_t k = 0; k < half; ++k) {
    const double f = std::pow(theta, -2.0 * static_cast<double>(k) / static_cast<double>(rd));
    double w = f;
    if (yarn) {
      const double ramp = std::clamp((static_cast<double>(k) - lo) / (hi - lo), 0.0, 1.0);
      w = f * (1.0 - ramp) + (f / s.yarn_factor) * ramp;
    }
    out[static_cast<size_t>(k)] = static_cast<float>(w);
  }
  return out;
}

Result<std::unique_ptr<Model>> Model::load(const std::string& path, backend::Ops& ops) {
  auto m = std::unique_ptr<Model>(new Model());
  DSV4_ASSIGN_OR_RETURN(m->file_, gguf::GgufFile::open(path));
  DSV4_ASSIGN_OR_RETURN(m->shape_, shape_from_gguf(m->file_));
  DSV4_ASSIGN_OR_RETURN(m->weights_, bind_weights(m->file_, m->shape_, ops));
  m->main_freqs_ = rope_freqs(m->shape_, false);
  m->compress_freqs_ = rope_freqs(m->shape_, true);
  return m;
}

std::string Model::describe() const {
  if (is_ds4_flash(shape_)) return "DeepSeek V4 Flash (43 layers, 284 B parameters)";
  char buf[200];
  std::snprintf(buf, sizeof buf, "DS4-family model: %lld layers, D=%lld, vocab %lld, %lld experts (%lld used)",
                static_cast<long long>(shape_.n_layer), static_cast<long long>(shape_.n_embd),
                static_cast<long long>(shape_.n_vocab), static_cast<long long>(shape_.n_expert),
                static_cast<long long>(shape_.n_expert_used));
  return buf;
}

Session::Session(const Model& model, backend::Ops& ops, int64_t ctx) : model_(model), ops_(ops), ctx_(ctx) { reset(); }

void Session::reset() {
  const Ds4Shape& s = model_.shape();
  pos_ = 0;
  layers_.assign(static_cast<size_t>(s.n_layer), LayerState{});
  for (int64_t il = 0; il < s.n_layer; ++il) {
    LayerState& ls = layers_[static_cast<size_t>(il)];
    ls.raw.reserve(static_cast<size_t>((s.n_swa - 1) * s.head_dim));
    const AttentionKind kind = s.attention_kind(il);
    if (kind == AttentionKind::kSliding) continue;
    const int64_t r = s.compress_ratio[static_cast<size_t>(il)];
    ls.comp.entries.reserve(static_cast<size_t>((ctx_ / r + 1) * s.head_dim));
    if (kind == AttentionKind::kCsa) ls.idx.entries.reserve(static_cast<size_t>((ctx_ / r + 1) * s.idx_head_dim));
  }
}

Status Session::forward(std::span<const int32_t> tokens, float* logits, bool all_logits) {
  if (tokens.empty()) return invalid_argument("forward: no tokens");
  const Ds4Shape& s = model_.shape();
  if (pos_ + static_cast<int64_t>(tokens.size()) > ctx_)
    return out_of_range("forward: " + std::to_string(pos_) + " + " + std::to_string(tokens.size()) +
                        " tokens exceed the context of " + std::to_string(ctx_));
  for (int32_t t : tokens)
    if (t < 0 || t >= s.n_vocab)
      return out_of_range("forward: token id " + std::to_string(t) + " outside the vocabulary of " +
                          std::to_string(s.n_vocab));
  return forward_chunk(tokens, logits, all_logits);
}

double Session::bytes_per_token() const {
  const Ds4Shape& s = model_.shape();
  double b = 0;
  for (int64_t il = 0; il < s.n_layer; ++il) {
    const AttentionKind kind = s.attention_kind(il);
    if (kind == AttentionKind::kSliding) continue;
    const double r = static_cast<double>(s.compress_ratio[static_cast<size_t>(il)]);
    b += 4.0 * static_cast<double>(s.head_dim) / r;
    if (kind == AttentionKind::kCsa) b += 4.0 * static_cast<double>(s.idx_head_dim) / r;
  }
  return b;
}

int64_t Session::reserved_bytes() const {
  int64_t b = 0;
  for (const LayerState& ls : layers_)
    b += static_cast<int64_t>((ls.raw.capacity() + ls.comp.entries.capacity() + ls.idx.entries.capacity()) * sizeof(float));
  return b;
}

int64_t SessionCheckpoint::bytes() const {
  int64_t b = 0;
  for (const LayerState& ls : layers)
    b += static_cast<int64_t>((ls.raw.size() + ls.comp.a.size() + ls.comp.z.size() + ls.idx.a.size() + ls.idx.z.size()) *
                              sizeof(float));
  return b + static_cast<int64_t>(sizeof(SessionCheckpoint) + layers.size() * sizeof(LayerState));
}

SessionCheckpoint Session::checkpoint() const {
  const int64_t head_dim = model_.shape().head_dim;
  SessionCheckpoint c;
  c.pos = pos_;
  c.layers.resize(layers_.size());
  for (size_t il = 0; il < layers_.size(); ++il) {
    const LayerState& src = layers_[il];
    LayerState& dst = c.layers[il];
    dst.raw_rows = src.raw_rows;
    dst.raw.assign(src.raw.begin(), src.raw.begin() + src.raw_rows * head_dim);
    for (auto [from, to] : {std::pair{&src.comp, &dst.comp}, std::pair{&src.idx, &dst.idx}}) {
      to->a = from->a;
      to->z = from->z;
      to->first_pos = from->first_pos;
      to->n_rows = from->n_rows;
      to->n_entries = from->n_entries;
    }
  }
  return c;
}

Status Session::rewind(const SessionCheckpoint& c) {
  if (c.layers.size() != layers_.size()) return invalid_argument("rewind: checkpoint from another model");
  if (c.pos > pos_)
    return invalid_argument("rewind: checkpoint at " + std::to_string(c.pos) + " is ahead of the position " +
                            std::to_string(pos_));
  for (size_t il = 0; il < layers_.size(); ++il)
    if (c.layers[il].comp.n_entries > layers_[il].comp.n_entries || c.layers[il].idx.n_entries > layers_[il].idx.n_entries)
      return invalid_argument("rewind: checkpoint does not belong to this timeline (layer " + std::to_string(il) + ")");
  for (size_t il = 0; il < layers_.size(); ++il) {
    const LayerState& src = c.layers[il];
    LayerState& dst = layers_[il];
    dst.raw_rows = src.raw_rows;
    dst.raw.assign(src.raw.begin(), src.raw.end());
    for (auto [from, to] : {std::pair{&src.comp, &dst.comp}, std::pair{&src.idx, &dst.idx}}) {
      const int64_t edim = to->n_entries > 0 ? static_cast<int64_t>(to->entries.size()) / to->n_entries : 0;
      to->a = from->a;
      to->z = from->z;
      to->first_pos = from->first_pos;
      to->n_rows = from->n_rows;
      to->entries.resize(static_cast<size_t>(from->n_entries * edim));
      to->n_entries = from->n_entries;
    }
  }
  pos_ = c.pos;
  return ok_status();
}

// Snapshot layout (little-endian): "DSV4SNAP" u32 version=1, u64 n_layer, u64 n_embd, u64 vocab,
// i64 position, then per layer: raw (i64 rows, floats), and for comp and idx: i64 first_pos,
// i64 n_rows, i64 width, floats a, floats z, i64 n_entries, i64 entry_dim, floats entries.
namespace {
constexpr char kSnapMagic[8] = {'D', 'S', 'V', '4', 'S', 'N', 'A', 'P'};
constexpr uint32_t kSnapVersion = 1;

void put(std::vector<uint8_t>& out, const void* p, size_t n) {
  if (n == 0) return;
  const size_t old = out.size();
  out.resize(old + n);
  std::memcpy(out.data() + old, p, n);
}
void put_i64(std::vector<uint8_t>& out, int64_t v) { put(out, &v, 8); }
void put_floats(std::vector<uint8_t>& out, const std::vector<float>& v, size_t n) { put(out, v.data(), n * 4); }

struct Reader {
  std::span<const uint8_t> b;
  size_t off = 0;
  bool get(void* p, size_t n) {
    if (n == 0) return true;  // (p may be null for an empty vector)
    if (b.size() - off < n) return false;
    std::memcpy(p, b.data() + off, n);
    off += n;
    return true;
  }
  bool i64(int64_t& v) { return get(&v, 8); }
  bool floats(std::vector<float>& v, int64_t n) {
    if (n < 0 || static_cast<uint64_t>(n) > (b.size() - off) / 4) return false;
    v.resize(static_cast<size_t>(n));
    return get(v.data(), static_cast<size_t>(n) * 4);
  }
};
}  // namespace

std::vector<uint8_t> Session::snapshot() const {
  const Ds4Shape& s = model_.shape();
  std::vector<uint8_t> out;
  put(out, kSnapMagic, 8);
  put(out, &kSnapVersion, 4);
  put_i64(out, s.n_layer);
  put_i64(out, s.n_embd);
  put_i64(out, s.n_vocab);
  put_i64(out, pos_);
  for (int64_t il = 0; il < s.n_layer; ++il) {
    const LayerState& ls = layers_[static_cast<size_t>(il)];
    put_i64(out, ls.raw_rows);
    put_floats(out, ls.raw, static_cast<size_t>(ls.raw_rows * s.head_dim));
    for (const CompressorState* c : {&ls.comp, &ls.idx}) {
      const int64_t width = c->n_rows > 0 ? static_cast<int64_t>(c->a.size()) / c->n_rows : 0;
      const int64_t edim = c->n_entries > 0 ? static_cast<int64_t>(c->entries.size()) / c->n_entries : 0;
      put_i64(out, c->first_pos);
      put_i64(out, c->n_rows);
      put_i64(out, width);
      put_floats(out, c->a, static_cast<size_t>(c->n_rows * width));
      put_floats(out, c->z, static_cast<size_t>(c->n_rows * width));
      put_i64(out, c->n_entries);
      put_i64(out, edim);
      put_floats(out, c->entries, static_cast<size_t>(c->n_entries * edim));
    }
  }
  return out;
}

Status Session::restore(std::span<const uint8_t> bytes) {
  const Ds4Shape& s = model_.shape();
  Reader rd{bytes};
  char magic[8];
  uint32_t version = 0;
  if (!rd.get(magic, 8) || std::memcmp(magic, kSnapMagic, 8) != 0) return corrupt("snapshot: bad magic");
  if (!rd.get(&version, 4) || version != kSnapVersion)
    return unsupported("snapshot: version " + std::to_string(version) + ", expected " + std::to_string(kSnapVersion));
  int64_t nl = 0, ne = 0, nv = 0, pos = 0;
  if (!rd.i64(nl) || !rd.i64(ne) || !rd.i64(nv) || !rd.i64(pos)) return corrupt("snapshot: truncated header");
  if (nl != s.n_layer || ne != s.n_embd || nv != s.n_vocab) return invalid_argument("snapshot: made for another model shape");
  if (pos < 0 || pos > ctx_) return out_of_range("snapshot: position " + std::to_string(pos) + " exceeds the context");
  std::vector<LayerState> layers(static_cast<size_t>(nl));
  for (int64_t il = 0; il < nl; ++il) {
    LayerState& ls = layers[static_cast<size_t>(il)];
    if (!rd.i64(ls.raw_rows) || ls.raw_rows < 0 || ls.raw_rows >= s.n_swa || !rd.floats(ls.raw, ls.raw_rows * s.head_dim))
      return corrupt("snapshot: layer " + std::to_string(il) + " raw window");
    for (CompressorState* c : {&ls.comp, &ls.idx}) {
      int64_t width = 0, edim = 0;
      if (!rd.i64(c->first_pos) || !rd.i64(c->n_rows) || !rd.i64(width) || c->n_rows < 0 || width < 0 ||
          width > 4 * s.head_dim || !rd.floats(c->a, c->n_rows * width) || !rd.floats(c->z, c->n_rows * width) ||
          !rd.i64(c->n_entries) || !rd.i64(edim) || c->n_entries < 0 || edim < 0 || edim > s.head_dim ||
          !rd.floats(c->entries, c->n_entries * edim))
        return corrupt("snapshot: layer " + std::to_string(il) + " compressor state");
    }
  }
  if (rd.off != bytes.size()) return corrupt("snapshot: trailing bytes");
  layers_ = std::move(layers);
  pos_ = pos;
  return ok_status();
}

Status Session::save(const std::string& path) const {
  const std::vector<uint8_t> b = snapshot();
  const std::string tmp = path + ".tmp";
  std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
  if (!f) return io_error(tmp + ": cannot open for writing");
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  f.close();
  if (!f) {
    std::remove(tmp.c_str());
    return io_error(tmp + ": write failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return io_error(path + ": rename failed");
  return ok_status();
}

Status Session::load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found(path + ": cannot open");
  std::vector<uint8_t> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return restore(b).with_context(path);
}

}  // namespace dsv4::model
