// model/session.cpp — Model loading, RoPE frequencies, and the Session's state management
// (allocation of state and activations on the backend, reset, capacity, checkpoints,
// snapshot/restore). The layer loop is in forward.cpp.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "model/activations.h"
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

Result<std::unique_ptr<Model>> Model::load(const std::string& path, backend::Backend& backend) {
  auto m = std::unique_ptr<Model>(new Model());
  m->backend_ = &backend;
  DSV4_ASSIGN_OR_RETURN(m->file_, gguf::GgufFile::open(path));
  DSV4_ASSIGN_OR_RETURN(m->shape_, shape_from_gguf(m->file_));
  DSV4_ASSIGN_OR_RETURN(m->weights_, bind_weights(m->file_, m->shape_, backend, m->storage_));
  for (bool compress : {false, true}) {
    const std::vector<float> f = rope_freqs(m->shape_, compress);
    const int64_t bytes = static_cast<int64_t>(f.size() * sizeof(float));
    DSV4_ASSIGN_OR_RETURN(backend::Buffer buf, backend.allocate(bytes));
    backend::Tensor& t = compress ? m->compress_freqs_ : m->main_freqs_;
    t = backend::make_2d(TensorType::kF32, buf.data(), static_cast<int64_t>(f.size()), 1);
    backend.upload(t, f.data(), bytes);
    m->storage_.push_back(std::move(buf));
  }
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

Session::Session(const Model& model, int64_t ctx, int64_t max_chunk)
    : model_(model),
      backend_(model.backend()),
      ctx_(ctx),
      max_chunk_(max_chunk > 0 ? max_chunk : std::min<int64_t>(std::max<int64_t>(ctx, 1), kDefaultMaxChunk)),
      logit_rows_(std::min<int64_t>(max_chunk_, kLogitRows)),
      act_(std::make_unique<Activations>()) {
  status_ = allocate();
  if (status_.ok()) reset();
}

Session::~Session() = default;

Status Session::allocate() {
  const Ds4Shape& s = model_.shape();
  if (ctx_ < 1) return invalid_argument("session: context must be at least 1 token");
  // State: every ring first (one contiguous region: cleared, checkpointed and rewound as a whole),
  // then the compressed entries.
  backend::ArenaPlan state;
  struct Slots {
    int raw = -1, comp_a = -1, comp_z = -1, idx_a = -1, idx_z = -1, comp_e = -1, idx_e = -1;
  };
  std::vector<Slots> slots(static_cast<size_t>(s.n_layer));
  for (int64_t il = 0; il < s.n_layer; ++il) {
    Slots& sl = slots[static_cast<size_t>(il)];
    sl.raw = state.add(TensorType::kF32, s.head_dim, s.n_swa);
    const AttentionKind kind = s.attention_kind(il);
    if (kind == AttentionKind::kSliding) continue;
    const int64_t r = s.compress_ratio[static_cast<size_t>(il)], coff = kind == AttentionKind::kCsa ? 2 : 1;
    sl.comp_a = state.add(TensorType::kF32, coff * s.head_dim, coff * r);
    sl.comp_z = state.add(TensorType::kF32, coff * s.head_dim, coff * r);
    if (kind == AttentionKind::kCsa) {
      sl.idx_a = state.add(TensorType::kF32, 2 * s.idx_head_dim, 2 * r);
      sl.idx_z = state.add(TensorType::kF32, 2 * s.idx_head_dim, 2 * r);
    }
  }
  const int64_t ring_bytes = state.bytes();
  for (int64_t il = 0; il < s.n_layer; ++il) {
    const AttentionKind kind = s.attention_kind(il);
    if (kind == AttentionKind::kSliding) continue;
    const int64_t cap = ctx_ / s.compress_ratio[static_cast<size_t>(il)] + 1;
    slots[static_cast<size_t>(il)].comp_e = state.add(TensorType::kF32, s.head_dim, cap);
    if (kind == AttentionKind::kCsa) slots[static_cast<size_t>(il)].idx_e = state.add(TensorType::kF32, s.idx_head_dim, cap);
  }
  // The largest per-query sizes any step of this session reaches (backend scratch, sized once).
  backend::StepBounds bounds;
  bounds.tokens = max_chunk_;
  bounds.heads = s.n_head;
  bounds.keys = s.n_swa;
  for (int64_t il = 0; il < s.n_layer; ++il) {
    const AttentionKind kind = s.attention_kind(il);
    const int64_t visible = kind == AttentionKind::kSliding ? 0 : ctx_ / s.compress_ratio[static_cast<size_t>(il)];
    bounds.keys = std::max(bounds.keys, s.n_swa + (kind == AttentionKind::kCsa ? std::min(visible, s.idx_topk) : visible));
    if (kind == AttentionKind::kCsa) bounds.index_entries = std::max(bounds.index_entries, visible);
  }
  DSV4_RETURN_IF_ERROR(backend_.reserve(bounds));
  auto sbuf = state.allocate(backend_);
  if (!sbuf.ok()) return sbuf.status().with_context("session state for " + std::to_string(ctx_) + " tokens");
  state_buf_ = std::move(*sbuf);
  rings_ = backend::make_2d(TensorType::kF32, state_buf_.data(), ring_bytes / static_cast<int64_t>(sizeof(float)), 1);
  layers_.assign(static_cast<size_t>(s.n_layer), LayerState{});
  for (int64_t il = 0; il < s.n_layer; ++il) {
    const Slots& sl = slots[static_cast<size_t>(il)];
    LayerState& ls = layers_[static_cast<size_t>(il)];
    auto at = [&](int slot) { return slot < 0 ? backend::Tensor{} : state.at(state_buf_, slot); };
    ls.raw = at(sl.raw);
    ls.comp = {at(sl.comp_a), at(sl.comp_z), at(sl.comp_e)};
    ls.idx = {at(sl.idx_a), at(sl.idx_z), at(sl.idx_e)};
  }

  // Activations for max_chunk tokens.
  const int64_t n = max_chunk_, D = s.n_embd, hc = s.hc_mult;
  backend::ArenaPlan plan;
  struct Entry {
    backend::Tensor Activations::*member;
    TensorType type;
    int64_t cols, rows;
  };
  const Entry entries[] = {
      {&Activations::tokens, TensorType::kI32, 1, n},
      {&Activations::X, TensorType::kF32, hc * D, n},
      {&Activations::X_next, TensorType::kF32, hc * D, n},
      {&Activations::streams, TensorType::kF32, hc * D, n},
      {&Activations::mix, TensorType::kF32, s.hc_mix(), n},
      {&Activations::collapsed, TensorType::kF32, D, n},
      {&Activations::post, TensorType::kF32, hc, n},
      {&Activations::comb, TensorType::kF32, hc * hc, n},
      {&Activations::x, TensorType::kF32, D, n},
      {&Activations::cq, TensorType::kF32, s.q_lora_rank, n},
      {&Activations::q, TensorType::kF32, s.q_dim(), n},
      {&Activations::kv, TensorType::kF32, s.head_dim, n},
      {&Activations::comp_a, TensorType::kF32, 2 * s.head_dim, n},
      {&Activations::comp_z, TensorType::kF32, 2 * s.head_dim, n},
      {&Activations::idx_a, TensorType::kF32, 2 * s.idx_head_dim, n},
      {&Activations::idx_z, TensorType::kF32, 2 * s.idx_head_dim, n},
      {&Activations::qI, TensorType::kF32, s.idx_n_head * s.idx_head_dim, n},
      {&Activations::gI, TensorType::kF32, s.idx_n_head, n},
      {&Activations::topk, TensorType::kI32, s.idx_topk, n},
      {&Activations::o, TensorType::kF32, s.q_dim(), n},
      {&Activations::v, TensorType::kF32, s.wo_a_out(), n},
      {&Activations::y, TensorType::kF32, D, n},
      {&Activations::router, TensorType::kF32, s.n_expert, n},
      {&Activations::expert_ids, TensorType::kI32, s.n_expert_used, n},
      {&Activations::expert_w, TensorType::kF32, s.n_expert_used, n},
      {&Activations::head_mix, TensorType::kF32, hc, logit_rows_},
      {&Activations::head_y, TensorType::kF32, D, logit_rows_},
      {&Activations::logits, TensorType::kF32, s.n_vocab, logit_rows_},
      {&Activations::greedy, TensorType::kI32, 1, logit_rows_},
  };
  std::vector<int> at;
  for (const Entry& e : entries) at.push_back(plan.add(e.type, e.cols, e.rows));
  auto abuf = plan.allocate(backend_);
  if (!abuf.ok()) return abuf.status().with_context("activations for steps of " + std::to_string(n) + " tokens");
  arena_buf_ = std::move(*abuf);
  for (size_t i = 0; i < std::size(entries); ++i) (*act_).*(entries[i].member) = plan.at(arena_buf_, at[i]);
  jobs_.reserve(static_cast<size_t>(std::max<int64_t>(s.o_groups, 8)));
  zeros_.assign(static_cast<size_t>(rings_.ne[0]), 0.0f);
  return ok_status();
}

void Session::reset() {
  pos_ = 0;
  if (!status_.ok()) return;
  backend_.upload(rings_, zeros_.data(), rings_.ne[0] * static_cast<int64_t>(sizeof(float)));
}

Status Session::check_tokens(std::span<const int32_t> tokens) const {
  DSV4_RETURN_IF_ERROR(status_);
  if (tokens.empty()) return invalid_argument("forward: no tokens");
  const Ds4Shape& s = model_.shape();
  if (pos_ + static_cast<int64_t>(tokens.size()) > ctx_)
    return out_of_range("forward: " + std::to_string(pos_) + " + " + std::to_string(tokens.size()) +
                        " tokens exceed the context of " + std::to_string(ctx_));
  for (int32_t t : tokens)
    if (t < 0 || t >= s.n_vocab)
      return out_of_range("forward: token id " + std::to_string(t) + " outside the vocabulary of " +
                          std::to_string(s.n_vocab));
  return ok_status();
}

Status Session::forward(std::span<const int32_t> tokens, float* logits, bool all_logits) {
  DSV4_RETURN_IF_ERROR(check_tokens(tokens));
  const Ds4Shape& s = model_.shape();
  const int64_t total = static_cast<int64_t>(tokens.size());
  for (int64_t b = 0; b < total; b += max_chunk_) {
    const int64_t m = std::min(max_chunk_, total - b);
    HeadOut out;
    out.logits = logits == nullptr ? nullptr : all_logits ? logits + b * s.n_vocab : (b + m == total ? logits : nullptr);
    out.all_logits = all_logits;
    DSV4_RETURN_IF_ERROR(forward_step(tokens.subspan(static_cast<size_t>(b), static_cast<size_t>(m)), out));
  }
  return ok_status();
}

Status Session::forward_greedy(std::span<const int32_t> tokens, int32_t* next) {
  DSV4_RETURN_IF_ERROR(check_tokens(tokens));
  if (next == nullptr) return invalid_argument("forward_greedy: no place for the next token");
  HeadOut last;
  last.greedy = next;
  return forward_to_last(tokens, last);
}

Status Session::forward_sample(std::span<const int32_t> tokens, const backend::SampleArgs& params, int32_t* next,
                               float* logits) {
  DSV4_RETURN_IF_ERROR(check_tokens(tokens));
  if (next == nullptr || logits == nullptr)
    return invalid_argument("forward_sample: no place for the next token or the fallback logits");
  if (params.seen_ids.size() != params.seen_counts.size())
    return invalid_argument("forward_sample: the penalty history has " + std::to_string(params.seen_ids.size()) +
                            " ids but " + std::to_string(params.seen_counts.size()) + " counts");
  HeadOut last;
  last.greedy = next;
  last.sample = &params;
  last.logits = logits;
  return forward_to_last(tokens, last);
}

Status Session::forward_to_last(std::span<const int32_t> tokens, const HeadOut& last) {
  const int64_t total = static_cast<int64_t>(tokens.size());
  for (int64_t b = 0; b < total; b += max_chunk_) {
    const int64_t m = std::min(max_chunk_, total - b);
    DSV4_RETURN_IF_ERROR(forward_step(tokens.subspan(static_cast<size_t>(b), static_cast<size_t>(m)),
                                      b + m == total ? last : HeadOut{}));
  }
  return ok_status();
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

int64_t Session::reserved_bytes() const { return state_buf_.bytes() + arena_buf_.bytes(); }

int64_t SessionCheckpoint::bytes() const {
  return static_cast<int64_t>(sizeof(SessionCheckpoint) + rings.size() * sizeof(float));
}

SessionCheckpoint Session::checkpoint() const {
  SessionCheckpoint c;
  c.pos = pos_;
  if (!status_.ok()) return c;
  c.rings.resize(static_cast<size_t>(rings_.ne[0]));
  if (!backend_.download(rings_, c.rings.data(), rings_.ne[0] * static_cast<int64_t>(sizeof(float))).ok()) c.rings.clear();
  return c;
}

Status Session::rewind(const SessionCheckpoint& c) {
  DSV4_RETURN_IF_ERROR(status_);
  if (c.rings.size() != static_cast<size_t>(rings_.ne[0])) return invalid_argument("rewind: checkpoint from another model or session");
  if (c.pos > pos_)
    return invalid_argument("rewind: checkpoint at " + std::to_string(c.pos) + " is ahead of the position " +
                            std::to_string(pos_));
  backend_.upload(rings_, c.rings.data(), rings_.ne[0] * static_cast<int64_t>(sizeof(float)));
  pos_ = c.pos;
  return ok_status();
}

// Snapshot layout (little-endian): "DSV4SNAP" u32 version=2, u64 n_layer, u64 n_embd, u64 vocab,
// i64 position, i64 ring_floats, floats rings (every layer's rings, LayerState order, the state
// buffer's layout), then per compressed layer for comp and (CSA) idx: i64 n_entries (= ⌊pos/r⌋),
// i64 entry_dim, floats entries.
namespace {
constexpr char kSnapMagic[8] = {'D', 'S', 'V', '4', 'S', 'N', 'A', 'P'};
constexpr uint32_t kSnapVersion = 2;

void put(std::vector<uint8_t>& out, const void* p, size_t n) {
  if (n == 0) return;
  const size_t old = out.size();
  out.resize(old + n);
  std::memcpy(out.data() + old, p, n);
}
void put_i64(std::vector<uint8_t>& out, int64_t v) { put(out, &v, 8); }

struct Reader {
  std::span<const uint8_t> b;
  size_t off = 0;
  bool get(void* p, size_t n) {
    if (n == 0) return true;
    if (b.size() - off < n) return false;
    std::memcpy(p, b.data() + off, n);
    off += n;
    return true;
  }
  bool i64(int64_t& v) { return get(&v, 8); }
  // The next n floats in place (nullptr if truncated).
  const uint8_t* floats(int64_t n) {
    if (n < 0 || static_cast<uint64_t>(n) > (b.size() - off) / 4) return nullptr;
    const uint8_t* p = b.data() + off;
    off += static_cast<size_t>(n) * 4;
    return p;
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
  put_i64(out, rings_.ne[0]);
  auto download_into = [&](const backend::Tensor& t, int64_t bytes) {
    const size_t old = out.size();
    out.resize(old + static_cast<size_t>(bytes));
    if (bytes > 0 && !backend_.download(t, out.data() + old, bytes).ok()) std::memset(out.data() + old, 0xff, static_cast<size_t>(bytes));
  };
  download_into(rings_, rings_.ne[0] * 4);
  int64_t il = 0;
  for (const LayerState& ls : layers_) {
    const int64_t r = s.compress_ratio[static_cast<size_t>(il++)];
    for (const backend::CompressorTensors* c : {&ls.comp, &ls.idx}) {
      if (!c->entries.valid()) continue;
      const int64_t n = pos_ / r, d = c->entries.ne[0];
      put_i64(out, n);
      put_i64(out, d);
      download_into(c->entries, n * d * 4);
    }
  }
  return out;
}

Status Session::restore(std::span<const uint8_t> bytes) {
  DSV4_RETURN_IF_ERROR(status_);
  const Ds4Shape& s = model_.shape();
  Reader rd{bytes};
  char magic[8];
  uint32_t version = 0;
  if (!rd.get(magic, 8) || std::memcmp(magic, kSnapMagic, 8) != 0) return corrupt("snapshot: bad magic");
  if (!rd.get(&version, 4) || version != kSnapVersion)
    return unsupported("snapshot: version " + std::to_string(version) + ", expected " + std::to_string(kSnapVersion));
  int64_t nl = 0, ne = 0, nv = 0, pos = 0, ring_floats = 0;
  if (!rd.i64(nl) || !rd.i64(ne) || !rd.i64(nv) || !rd.i64(pos)) return corrupt("snapshot: truncated header");
  if (nl != s.n_layer || ne != s.n_embd || nv != s.n_vocab) return invalid_argument("snapshot: made for another model shape");
  if (pos < 0 || pos > ctx_) return out_of_range("snapshot: position " + std::to_string(pos) + " exceeds the context");
  if (!rd.i64(ring_floats) || ring_floats != rings_.ne[0]) return corrupt("snapshot: ring state of another size");
  const uint8_t* rings = rd.floats(ring_floats);
  if (rings == nullptr) return corrupt("snapshot: truncated ring state");
  // Validate everything before touching the session.
  struct Part {
    backend::Tensor t;
    const uint8_t* src;
    int64_t bytes;
  };
  std::vector<Part> parts;
  int64_t il = 0;
  for (const LayerState& ls : layers_) {
    const int64_t r = s.compress_ratio[static_cast<size_t>(il)];
    for (const backend::CompressorTensors* c : {&ls.comp, &ls.idx}) {
      if (!c->entries.valid()) continue;
      int64_t n = 0, d = 0;
      const uint8_t* src = nullptr;
      if (!rd.i64(n) || !rd.i64(d) || n != pos / r || d != c->entries.ne[0] || (src = rd.floats(n * d)) == nullptr)
        return corrupt("snapshot: layer " + std::to_string(il) + " compressed entries");
      parts.push_back({c->entries, src, n * d * 4});
    }
    ++il;
  }
  if (rd.off != bytes.size()) return corrupt("snapshot: trailing bytes");
  backend_.upload(rings_, rings, ring_floats * 4);
  for (const Part& p : parts)
    if (p.bytes > 0) backend_.upload(p.t, p.src, p.bytes);
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
