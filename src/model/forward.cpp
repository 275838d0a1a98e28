// model/forward.cpp — the one DS4 forward pass (docs/spec/architecture.md §3-§7, §9.3), on
// backend::Backend.
//
// A step of n tokens at positions p0 … p0+n−1 goes through every layer as a batch (matrix ×
// matrix) over the session's activation arena (model/activations.h). Everything per token
// (attention key sets, compressor windows, indexer top-k, expert routing) is decided on the
// backend by fixed-shape ops exactly as token-by-token decode would: the raw keys of query t are
// the positions max(0, t−W+1) … t, compressor windows that close anywhere inside the step are
// pooled in order, and a compressed entry w is visible to query t iff w < ⌊(t+1)/r⌋. The host
// computes no index: every op's shapes follow from (p0, n).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "model/activations.h"

namespace dsv4::model {
namespace {

// Adds the scope's wall time to `slot` when `be` is set (timing on). The backend is drained at both
// ends (Backend::finish), so that a device backend's queued work is counted in the phase that queued
// it; that adds a wait per phase, so totals under --timing exceed untimed runs.
class PhaseTimer {
 public:
  PhaseTimer(backend::Backend* be, double& slot) : be_(be), slot_(slot) {
    if (be_ == nullptr) return;
    (void)be_->finish();
    t0_ = std::chrono::steady_clock::now();
  }
  ~PhaseTimer() {
    if (be_ == nullptr) return;
    (void)be_->finish();
    slot_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  backend::Backend* be_;
  double& slot_;
  std::chrono::steady_clock::time_point t0_;
};

// A phase nested inside another: its time moves from `outer` to `inner`.
class NestedPhaseTimer {
 public:
  NestedPhaseTimer(backend::Backend* be, double& inner, double& outer) : be_(be), inner_(inner), outer_(outer) {
    if (be_ == nullptr) return;
    (void)be_->finish();
    t0_ = std::chrono::steady_clock::now();
  }
  ~NestedPhaseTimer() {
    if (be_ == nullptr) return;
    (void)be_->finish();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    inner_ += dt;
    outer_ -= dt;
  }
  NestedPhaseTimer(const NestedPhaseTimer&) = delete;
  NestedPhaseTimer& operator=(const NestedPhaseTimer&) = delete;

 private:
  backend::Backend* be_;
  double& inner_;
  double& outer_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace

// HC pre mixing of the residual streams X into the block input (spec §4.1), then the block's input
// norm: streams = norm(X), mix = W_fn·streams, pre/post/comb and the collapsed input, x =
// rms_norm(collapsed, norm) — one backend op (hc_pre_norm), which a backend may fuse.
void Session::hc_pre_block(const Weight& fn, const backend::Tensor& scale, const backend::Tensor& base,
                           const backend::Tensor& norm, int64_t n, const backend::MatmulConsumers& x_consumers) {
  const Ds4Shape& s = model_.shape();
  const Activations& a = *act_;
  PhaseTimer timer(timed(), times_.hc);
  backend::HcPreNormArgs h;
  h.X = a.X.rows(0, n);
  h.fn = fn;
  h.scale = scale;
  h.base = base;
  h.hc_eps = static_cast<float>(s.hc_eps);
  h.iters = s.hc_sinkhorn_iters;
  h.norm = norm;
  h.rms_eps = static_cast<float>(s.rms_eps);
  h.streams = a.streams.rows(0, n);
  h.mix = a.mix.rows(0, n);
  h.collapsed = a.collapsed.rows(0, n);
  h.x = a.x.rows(0, n);
  h.post = a.post.rows(0, n);
  h.comb = a.comb.rows(0, n);
  h.x_consumers = x_consumers;
  backend_.hc_pre_norm(h);
}

// Appends this step's projections (a = W_kv·x, z = W_gate·x, [n][coff·d]) to one compressor.
void Session::compressor_block(const backend::CompressorTensors& state, const backend::Tensor& a,
                               const backend::Tensor& z, const backend::Tensor& ape, const backend::Tensor& norm,
                               int64_t p0, int64_t ratio, int64_t coff, int64_t d) {
  const Ds4Shape& s = model_.shape();
  backend::CompressorUpdate u;
  u.a = a;
  u.z = z;
  u.ape = ape;
  u.norm = norm;
  u.freqs = model_.freqs(true);
  u.p0 = p0;
  u.ratio = ratio;
  u.coff = coff;
  u.d = d;
  u.n_rot = s.n_rot;
  u.eps = static_cast<float>(s.rms_eps);
  backend_.compressor_update(u, state);
}

void Session::attention_block(int64_t il, int64_t p0, int64_t n) {
  const Ds4Shape& s = model_.shape();
  const LayerWeights& lw = model_.weights().layers[static_cast<size_t>(il)];
  const LayerState& ls = layers_[static_cast<size_t>(il)];
  Activations& a = *act_;
  const int64_t H = s.n_head, d = s.head_dim, nI = s.idx_n_head, dI = s.idx_head_dim;
  const float eps = static_cast<float>(s.rms_eps);
  const AttentionKind kind = s.attention_kind(il);
  const int64_t ratio = s.compress_ratio[static_cast<size_t>(il)], coff = kind == AttentionKind::kCsa ? 2 : 1;
  const backend::Tensor& freqs = model_.freqs(kind != AttentionKind::kSliding);
  auto rows = [n](const backend::Tensor& t) { return t.rows(0, n); };

  // x is read next by the projections below (and nothing else writes it before them).
  backend::MatmulConsumers x_readers;
  for (const Weight* w : {&lw.q_a, &lw.kv}) x_readers.add(w->type);
  if (kind != AttentionKind::kSliding)
    for (const Weight* w : {&lw.comp_kv, &lw.comp_gate}) x_readers.add(w->type);
  if (kind == AttentionKind::kCsa)
    for (const Weight* w : {&lw.idx_kv, &lw.idx_gate, &lw.idx_proj}) x_readers.add(w->type);
  hc_pre_block(lw.hc_attn_fn, lw.hc_attn_scale, lw.hc_attn_base, lw.attn_norm, n, x_readers);
  PhaseTimer timer(timed(), times_.attention);
  const backend::Tensor x = rows(a.x), cq = rows(a.cq), q = rows(a.q), kv = rows(a.kv), o = rows(a.o);
  const backend::Tensor comp_a = a.comp_a.as_rows(coff * d).rows(0, n), comp_z = a.comp_z.as_rows(coff * d).rows(0, n);
  const backend::Tensor idx_a = rows(a.idx_a), idx_z = rows(a.idx_z), qI = rows(a.qI), gI = rows(a.gI);

  // Every projection of x in one batch: query latent, the shared key = value row, and the
  // compressors' (and indexer's) kv / gate rows.
  jobs_.clear();
  jobs_.push_back({lw.q_a, x, cq});
  jobs_.push_back({lw.kv, x, kv});
  if (kind != AttentionKind::kSliding) {
    jobs_.push_back({lw.comp_kv, x, comp_a});
    jobs_.push_back({lw.comp_gate, x, comp_z});
  }
  if (kind == AttentionKind::kCsa) {
    jobs_.push_back({lw.idx_kv, x, idx_a});
    jobs_.push_back({lw.idx_gate, x, idx_z});
    jobs_.push_back({lw.idx_proj, x, gI});
  }
  backend_.matmul_batch(jobs_);

  // Queries: c_q = norm(W_qa x); q = W_qb c_q (and the indexer's q = W_Iqb c_q), per-head
  // unweighted norm, RoPE. Key = value row: norm, RoPE.
  backend::MatmulConsumers cq_readers;
  cq_readers.add(lw.q_b.type);
  if (kind == AttentionKind::kCsa) cq_readers.add(lw.idx_q_b.type);
  backend_.rms_norm_for(cq, lw.q_a_norm, eps, cq, cq_readers);
  jobs_.clear();
  jobs_.push_back({lw.q_b, cq, q});
  if (kind == AttentionKind::kCsa) jobs_.push_back({lw.idx_q_b, cq, qI});
  backend_.matmul_batch(jobs_);
  // Query heads [n·H][d]: unweighted norm, RoPE; the key = value row: norm, RoPE; the indexer's query
  // heads [n·nI][dI]: RoPE only. One norm_rope (a backend may run the three as one kernel).
  backend::NormRopeJob nr[3];
  nr[0] = {q.as_rows(d), {}, true, eps, H, p0, s.n_rot, freqs};
  nr[1] = {kv, lw.kv_norm, true, eps, 1, p0, s.n_rot, freqs};
  nr[2] = {qI.as_rows(dI), {}, false, eps, nI, p0, s.n_rot, freqs};
  backend_.norm_rope({nr, kind == AttentionKind::kCsa ? size_t{3} : size_t{2}});

  // Compressed keys: HCA attends to every closed window, CSA to the indexer's top-k of them.
  if (kind != AttentionKind::kSliding) {
    NestedPhaseTimer sub(timed(), times_.compressor, times_.attention);
    compressor_block(ls.comp, comp_a, comp_z, lw.comp_ape, lw.comp_norm, p0, ratio, coff, d);
    if (kind == AttentionKind::kCsa) {
      compressor_block(ls.idx, idx_a, idx_z, lw.idx_ape, lw.idx_norm, p0, ratio, 2, dI);
      const float gscale0 = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dI)));
      const float gscale1 = static_cast<float>(1.0 / std::sqrt(static_cast<double>(nI)));
      backend_.indexer_topk(qI, gI, gscale0, gscale1, ls.idx.entries, p0, ratio, rows(a.topk));
    }
  }

  backend::AttentionArgs att;
  att.q = q;
  att.kv = kv;
  att.ring = ls.raw;
  att.comp = kind == AttentionKind::kSliding ? backend::Tensor{} : ls.comp.entries;
  att.comp_index = kind == AttentionKind::kCsa ? rows(a.topk) : backend::Tensor{};
  att.sinks = lw.sinks;
  att.o = o;
  att.p0 = p0;
  att.n_head = H;
  att.window = s.n_swa;
  att.ratio = ratio;
  att.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  att.store_kv = true;  // then the chunk's kv rows into the ring, for the next steps
  backend_.attention_unrope(att, s.n_rot, freqs);  // the heads' positions rotated back out of o

  // Grouped low-rank output: v_g = A_g · (heads of group g), y = W_ob · concat(v_g); group g reads
  // columns [g·in_g, (g+1)·in_g) of o and writes columns [g·R, (g+1)·R) of v, in place.
  const int64_t G = s.o_groups, in_g = s.wo_a_in(), Ro = s.o_lora_rank;
  const backend::Tensor v = rows(a.v), y = rows(a.y);
  jobs_.clear();
  for (int64_t g = 0; g < G; ++g) jobs_.push_back({lw.out_a.rows(g * Ro, Ro), o.cols(g * in_g, in_g), v.cols(g * Ro, Ro)});
  backend_.matmul_batch(jobs_);
  backend_.matmul_hc_post(lw.out_b, v, y, rows(a.X), rows(a.post), rows(a.comb), rows(a.X_next));
  std::swap(a.X, a.X_next);
}

void Session::ffn_block(int64_t il, int64_t n) {
  const Ds4Shape& s = model_.shape();
  const LayerWeights& lw = model_.weights().layers[static_cast<size_t>(il)];
  Activations& a = *act_;
  auto rows = [n](const backend::Tensor& t) { return t.rows(0, n); };
  // x is read next by the router and the experts (route runs between them and writes neither).
  backend::MatmulConsumers x_readers;
  x_readers.add(lw.router.type);
  for (const Weight* w : {&lw.gate_exps, &lw.up_exps}) x_readers.add(w->type);
  if (lw.gate_sh.valid())
    for (const Weight* w : {&lw.gate_sh, &lw.up_sh}) x_readers.add(w->type);
  hc_pre_block(lw.hc_ffn_fn, lw.hc_ffn_scale, lw.hc_ffn_base, lw.ffn_norm, n, x_readers);
  PhaseTimer timer(timed(), times_.moe);
  const backend::Tensor x = rows(a.x);

  // Router: K experts per token (hash layers: by token id) and their weights.
  backend_.matmul(lw.router, x, rows(a.router));
  backend::RouteArgs r;
  r.logits = rows(a.router);
  r.bias = lw.router_bias;
  r.tid2eid = s.is_hash_layer(il) ? lw.tid2eid : backend::Tensor{};
  r.tokens = rows(a.tokens);
  r.ids = rows(a.expert_ids);
  r.weights = rows(a.expert_w);
  r.k = s.n_expert_used;
  r.norm = s.expert_weights_norm;
  r.scale = static_cast<float>(s.expert_weights_scale);
  backend_.route(r);

  // Routed experts and the shared expert, combined.
  backend::MoeArgs m;
  m.x = x;
  m.ids = r.ids;
  m.weights = r.weights;
  m.gate_exps = lw.gate_exps;
  m.up_exps = lw.up_exps;
  m.down_exps = lw.down_exps;
  m.gate_sh = lw.gate_sh;
  m.up_sh = lw.up_sh;
  m.down_sh = lw.down_sh;
  m.out = rows(a.y);
  m.limit_exp = static_cast<float>(s.swiglu_clamp_exp[static_cast<size_t>(il)]);
  m.limit_sh = static_cast<float>(s.swiglu_clamp_shexp[static_cast<size_t>(il)]);
  backend_.moe_hc_post(m, rows(a.X), rows(a.post), rows(a.comb), rows(a.X_next));
  std::swap(a.X, a.X_next);
}

// One step of n ≤ max_chunk tokens at positions pos_ … pos_+n−1: a static op sequence whose
// shapes depend only on (pos_, n). The host reads nothing back except the logits.
Status Session::forward_step(std::span<const int32_t> tokens, const HeadOut& out) {
  const Ds4Shape& s = model_.shape();
  Activations& a = *act_;
  const int64_t n = static_cast<int64_t>(tokens.size()), p0 = pos_;
  if (timing_) times_.tokens += n;  // phases are timed only while timing is on
  backend_.begin_step();
  {
    PhaseTimer timer(timed(), times_.embed);
    backend_.upload(a.tokens, tokens.data(), n * static_cast<int64_t>(sizeof(int32_t)));
    // HC state: every stream starts as the token's embedding.
    backend_.embed(model_.weights().tok_embd, a.tokens.rows(0, n), s.hc_mult, a.X.rows(0, n));
  }
  for (int64_t il = 0; il < s.n_layer; ++il) {
    attention_block(il, p0, n);
    ffn_block(il, n);
  }
  pos_ += n;
  if (out.logits == nullptr && out.greedy == nullptr) return backend_.end_step();
  return head(n, out);
}

// Output head over the rows whose logits are wanted (the last, or all), logit_rows_ at a time;
// each group ends the step and downloads its logits, or the last row's greedy id (the step's one
// synchronisation in decode).
Status Session::head(int64_t n, const HeadOut& want) {
  const Ds4Shape& s = model_.shape();
  const ModelWeights& mw = model_.weights();
  const Activations& a = *act_;
  const float eps = static_cast<float>(s.rms_eps);
  PhaseTimer timer(timed(), times_.head);
  const bool all_logits = want.logits != nullptr && want.all_logits;
  const int64_t first = all_logits ? 0 : n - 1;
  for (int64_t g = first; g < n; g += logit_rows_) {
    const int64_t m = std::min(logit_rows_, n - g);
    if (g != first) backend_.begin_step();
    const backend::Tensor X = a.X.rows(g, m), streams = a.streams.rows(0, m), mix = a.head_mix.rows(0, m);
    const backend::Tensor y = a.head_y.rows(0, m), out = a.logits.rows(0, m);
    backend_.rms_norm(X, {}, eps, streams);
    backend_.matmul(mw.out_hc_fn, streams, mix);
    backend_.hc_head(mix, mw.out_hc_scale, mw.out_hc_base, static_cast<float>(s.hc_eps), X, y);
    backend_.rms_norm(y, mw.out_norm, eps, y);
    backend_.matmul(mw.output, y, out);
    if (want.greedy != nullptr) {  // only the last row (first == n − 1, m == 1)
      if (want.sample != nullptr) {
        backend::SampleArgs sa = *want.sample;
        sa.logits = out;
        sa.id = a.greedy.rows(0, 1);
        backend_.sample(sa);
      } else {
        backend_.argmax(out, a.greedy.rows(0, 1));
      }
      DSV4_RETURN_IF_ERROR(backend_.end_step());
      DSV4_RETURN_IF_ERROR(backend_.download(a.greedy, want.greedy, 4));
      if (want.sample != nullptr && *want.greedy == backend::kSampleOnHost)  // the caller samples these
        DSV4_RETURN_IF_ERROR(backend_.download(out, want.logits, s.n_vocab * 4));
      continue;
    }
    DSV4_RETURN_IF_ERROR(backend_.end_step());
    DSV4_RETURN_IF_ERROR(backend_.download(out, want.logits + (g - first) * s.n_vocab, m * s.n_vocab * 4));
  }
  return ok_status();
}

}  // namespace dsv4::model
