// model/forward.cpp — the one DS4 forward pass (spec/architecture.md §3-§7, §9.3), on backend::Ops.
//
// A chunk of n tokens at positions p0 … p0+n−1 goes through every layer as a batch (matrix ×
// matrix), and everything per token (attention key sets, compressor windows, indexer top-k) is
// decided per query exactly as token-by-token decode would: the raw keys of query t are the rows
// of positions max(0, t−W+1) … t (the state's last W−1 rows followed by the chunk), compressor
// windows that close anywhere inside the chunk are pooled in order, and a compressed entry w is
// visible to query t iff w < ⌊(t+1)/r⌋.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "model/model.h"

namespace dsv4::model {
namespace {

// Adds the scope's wall time to `slot` when timing is on.
class PhaseTimer {
 public:
  PhaseTimer(bool on, double& slot) : on_(on), slot_(slot) {
    if (on_) t0_ = std::chrono::steady_clock::now();
  }
  ~PhaseTimer() {
    if (on_) slot_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  bool on_;
  double& slot_;
  std::chrono::steady_clock::time_point t0_;
};

// A phase nested inside another: its time moves from `outer` to `inner`.
class NestedPhaseTimer {
 public:
  NestedPhaseTimer(bool on, double& inner, double& outer) : on_(on), inner_(inner), outer_(outer) {
    if (on_) t0_ = std::chrono::steady_clock::now();
  }
  ~NestedPhaseTimer() {
    if (!on_) return;
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    inner_ += dt;
    outer_ -= dt;
  }
  NestedPhaseTimer(const NestedPhaseTimer&) = delete;
  NestedPhaseTimer& operator=(const NestedPhaseTimer&) = delete;

 private:
  bool on_;
  double& inner_;
  double& outer_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace

Status Session::hc_pre_block(const Weight& fn, const std::vector<float>& scale, const std::vector<float>& base,
                             const std::vector<float>& X, int64_t n, std::vector<float>& x, std::vector<float>& post,
                             std::vector<float>& comb) {
  const Ds4Shape& s = model_.shape();
  const int64_t hc = s.hc_mult, D = s.n_embd, n_mix = s.hc_mix();
  PhaseTimer timer(timing_, times_.hc);
  std::vector<float> fhat(static_cast<size_t>(n * hc * D)), mix(static_cast<size_t>(n * n_mix));
  ops_.rms_norm(X.data(), n, hc * D, nullptr, static_cast<float>(s.rms_eps), fhat.data());
  DSV4_RETURN_IF_ERROR(ops_.matmul(fn, fhat.data(), n, mix.data()));
  x.resize(static_cast<size_t>(n * D));
  post.resize(static_cast<size_t>(n * hc));
  comb.resize(static_cast<size_t>(n * hc * hc));
  ops_.hc_pre(mix.data(), scale.data(), base.data(), n, hc, D, static_cast<float>(s.hc_eps), s.hc_sinkhorn_iters,
              X.data(), x.data(), post.data(), comb.data());
  return ok_status();
}

Status Session::compressor_step(CompressorState& st, const std::vector<float>& x, const std::vector<int64_t>& pos,
                                int64_t r, int64_t coff, int64_t d, const Weight& kv_w, const Weight& gate_w,
                                const std::vector<float>& ape, const std::vector<float>& norm) {
  const Ds4Shape& s = model_.shape();
  const int64_t n = static_cast<int64_t>(pos.size()), width = coff * d, p0 = pos.front();
  // Rows of every pending token followed by the chunk's: positions first_pos … p0+n−1.
  const int64_t fp = st.n_rows > 0 ? st.first_pos : p0, ns = st.n_rows, total = ns + n;
  std::vector<float> a(static_cast<size_t>(total * width)), z(static_cast<size_t>(total * width));
  std::copy(st.a.begin(), st.a.begin() + ns * width, a.begin());
  std::copy(st.z.begin(), st.z.begin() + ns * width, z.begin());
  const backend::MatmulJob kv_gate[] = {{kv_w, x.data(), n, a.data() + ns * width},
                                         {gate_w, x.data(), n, z.data() + ns * width}};
  DSV4_RETURN_IF_ERROR(ops_.matmul_batch(kv_gate));
  ops_.add_position_bias(z.data() + ns * width, n, width, ape.data(), r, pos.data());
  // Windows w with (w+1)·r − 1 inside the chunk.
  const int64_t w_lo = p0 / r, w_hi = (p0 + n) / r, n_new = w_hi - w_lo, n_cand = coff * r;
  if (n_new > 0) {
    std::vector<int64_t> rows(static_cast<size_t>(n_new * n_cand)), cols(rows.size());
    for (int64_t e = 0; e < n_new; ++e) {
      const int64_t w = w_lo + e;
      int64_t c = 0;
      if (coff == 2) {  // A-half (columns [0, d)) of the previous window's tokens
        for (int64_t i = 0; i < r; ++i, ++c) {
          rows[static_cast<size_t>(e * n_cand + c)] = w >= 1 ? (w - 1) * r + i - fp : -1;
          cols[static_cast<size_t>(e * n_cand + c)] = 0;
        }
      }
      for (int64_t i = 0; i < r; ++i, ++c) {  // this window's tokens (B-half for CSA)
        rows[static_cast<size_t>(e * n_cand + c)] = w * r + i - fp;
        cols[static_cast<size_t>(e * n_cand + c)] = coff == 2 ? d : 0;
      }
    }
    std::vector<float> out(static_cast<size_t>(n_new * d));
    ops_.compress_pool(a.data(), z.data(), width, n_new, n_cand, rows.data(), cols.data(), d, out.data());
    ops_.rms_norm(out.data(), n_new, d, norm.data(), static_cast<float>(s.rms_eps), out.data());
    std::vector<int64_t> epos(static_cast<size_t>(n_new));
    for (int64_t e = 0; e < n_new; ++e) epos[static_cast<size_t>(e)] = (w_lo + e) * r;
    ops_.rope_tail(out.data(), n_new, d, 1, epos.data(), s.n_rot, model_.freqs(true).data(), false);
    if (st.n_entries != w_lo) return internal_error("compressor entry count out of step");
    st.entries.insert(st.entries.begin() + st.n_entries * d, out.begin(), out.end());
    st.n_entries += n_new;
  }
  // Keep what later windows need: the open window, plus (overlap) the last complete one.
  const int64_t P = p0 + n;
  const int64_t keep_from = coff == 2 ? std::max<int64_t>(0, (P / r - 1) * r) : (P / r) * r;
  const int64_t keep = P - keep_from, off = keep_from - fp;
  st.a.assign(a.begin() + off * width, a.begin() + (off + keep) * width);
  st.z.assign(z.begin() + off * width, z.begin() + (off + keep) * width);
  st.first_pos = keep_from;
  st.n_rows = keep;
  return ok_status();
}

Status Session::attention_block(int64_t il, const std::vector<int64_t>& pos, std::vector<float>& X) {
  const Ds4Shape& s = model_.shape();
  const LayerWeights& lw = model_.weights().layers[static_cast<size_t>(il)];
  LayerState& ls = layers_[static_cast<size_t>(il)];
  const int64_t n = static_cast<int64_t>(pos.size()), D = s.n_embd, H = s.n_head, d = s.head_dim;
  const int64_t p0 = pos.front();
  const float eps = static_cast<float>(s.rms_eps);
  const AttentionKind kind = s.attention_kind(il);
  const std::vector<float>& freqs = model_.freqs(kind != AttentionKind::kSliding);

  std::vector<float> xc, post, comb;
  DSV4_RETURN_IF_ERROR(hc_pre_block(lw.hc_attn_fn, lw.hc_attn_scale, lw.hc_attn_base, X, n, xc, post, comb));
  PhaseTimer timer(timing_, times_.attention);
  std::vector<float> x(static_cast<size_t>(n * D));
  ops_.rms_norm(xc.data(), n, D, lw.attn_norm.data(), eps, x.data());

  // Query: c_q = norm(W_qa x); q = W_qb c_q, per-head unweighted norm, RoPE.
  // Shared K = V row of each token, appended after the state's last W−1 rows; W_qa and W_kv share
  // the input x, so they run as one batch.
  const int64_t R = ls.raw_rows;
  std::vector<float> raw(static_cast<size_t>((R + n) * d));
  std::copy(ls.raw.begin(), ls.raw.begin() + R * d, raw.begin());
  float* kv = raw.data() + R * d;
  std::vector<float> cq(static_cast<size_t>(n * s.q_lora_rank));
  std::vector<float>& q = scratch_.q;  // fully written by the W_qb matmul below
  q.resize(static_cast<size_t>(n * H * d));
  const backend::MatmulJob qa_kv[] = {{lw.q_a, x.data(), n, cq.data()}, {lw.kv, x.data(), n, kv}};
  DSV4_RETURN_IF_ERROR(ops_.matmul_batch(qa_kv));
  ops_.rms_norm(cq.data(), n, s.q_lora_rank, lw.q_a_norm.data(), eps, cq.data());
  DSV4_RETURN_IF_ERROR(ops_.matmul(lw.q_b, cq.data(), n, q.data()));
  ops_.rms_norm(q.data(), n * H, d, nullptr, eps, q.data());
  ops_.rope_tail(q.data(), n * H, d, H, pos.data(), s.n_rot, freqs.data(), false);

  ops_.rms_norm(kv, n, d, lw.kv_norm.data(), eps, kv);
  ops_.rope_tail(kv, n, d, 1, pos.data(), s.n_rot, freqs.data(), false);

  backend::KeySets sets;
  sets.raw_begin.resize(static_cast<size_t>(n));
  sets.raw_end.resize(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    const int64_t pt = pos[static_cast<size_t>(t)];
    sets.raw_begin[static_cast<size_t>(t)] = std::max<int64_t>(0, pt - s.n_swa + 1) - (p0 - R);
    sets.raw_end[static_cast<size_t>(t)] = R + t + 1;
  }
  const float* comp_rows = nullptr;
  if (kind == AttentionKind::kSliding) {
    sets.comp_offset.assign(static_cast<size_t>(n + 1), 0);
  } else {
    NestedPhaseTimer sub(timing_, times_.compressor, times_.attention);
    const int64_t r = s.compress_ratio[static_cast<size_t>(il)];
    const int64_t coff = kind == AttentionKind::kCsa ? 2 : 1;
    DSV4_RETURN_IF_ERROR(compressor_step(ls.comp, x, pos, r, coff, d, lw.comp_kv, lw.comp_gate, lw.comp_ape, lw.comp_norm));
    comp_rows = ls.comp.entries.data();
    std::vector<int64_t> visible(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) visible[static_cast<size_t>(t)] = (pos[static_cast<size_t>(t)] + 1) / r;
    if (kind == AttentionKind::kCsa) {
      const int64_t nI = s.idx_n_head, dI = s.idx_head_dim;
      DSV4_RETURN_IF_ERROR(compressor_step(ls.idx, x, pos, r, 2, dI, lw.idx_kv, lw.idx_gate, lw.idx_ape, lw.idx_norm));
      std::vector<float> qI(static_cast<size_t>(n * nI * dI)), g(static_cast<size_t>(n * nI));
      const backend::MatmulJob idx_q_proj[] = {{lw.idx_q_b, cq.data(), n, qI.data()}, {lw.idx_proj, x.data(), n, g.data()}};
      DSV4_RETURN_IF_ERROR(ops_.matmul_batch(idx_q_proj));
      ops_.rope_tail(qI.data(), n * nI, dI, nI, pos.data(), s.n_rot, freqs.data(), false);
      const float gs = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dI))),
                  hs = static_cast<float>(1.0 / std::sqrt(static_cast<double>(nI)));
      for (auto& v : g) v = (v * gs) * hs;
      ops_.indexer_select(qI.data(), g.data(), n, nI, dI, ls.idx.entries.data(), visible.data(), s.idx_topk, sets);
    } else {
      sets.comp_offset.push_back(0);
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t w = 0; w < visible[static_cast<size_t>(t)]; ++w) sets.comp_index.push_back(w);
        sets.comp_offset.push_back(static_cast<int64_t>(sets.comp_index.size()));
      }
    }
  }

  std::vector<float>& o = scratch_.o;  // fully written by attention
  o.resize(static_cast<size_t>(n * H * d));
  ops_.attention(q.data(), n, H, d, raw.data(), comp_rows, sets, lw.sinks.data(),
                 static_cast<float>(1.0 / std::sqrt(static_cast<double>(d))), o.data());
  ops_.rope_tail(o.data(), n * H, d, H, pos.data(), s.n_rot, freqs.data(), true);

  // Grouped low-rank output: v_g = A_g · (heads of group g), out = W_ob · concat(v_g).
  const int64_t G = s.o_groups, in_g = s.wo_a_in(), Ro = s.o_lora_rank;
  // Group g reads columns [g·in_g, (g+1)·in_g) of each token's heads and writes v[t][g·Ro ..]: all
  // groups in one batch, strided in place (no copies).
  std::vector<float> v(static_cast<size_t>(n * G * Ro));
  std::vector<backend::MatmulJob> groups(static_cast<size_t>(G));
  for (int64_t g = 0; g < G; ++g)
    groups[static_cast<size_t>(g)] = {backend::row_view(lw.out_a, g * Ro, (g + 1) * Ro), o.data() + g * in_g, n,
                                      v.data() + g * Ro, H * d, G * Ro};
  DSV4_RETURN_IF_ERROR(ops_.matmul_batch(groups));
  std::vector<float> out(static_cast<size_t>(n * D));
  DSV4_RETURN_IF_ERROR(ops_.matmul(lw.out_b, v.data(), n, out.data()));
  std::vector<float> X2(X.size());
  ops_.hc_post(X.data(), out.data(), post.data(), comb.data(), n, s.hc_mult, D, X2.data());
  X.swap(X2);

  // The raw window keeps the last W−1 rows for the next chunk.
  const int64_t keep = std::min<int64_t>(s.n_swa - 1, R + n);
  ls.raw.assign(raw.end() - keep * d, raw.end());
  ls.raw_rows = keep;
  return ok_status();
}

Status Session::ffn_block(int64_t il, std::span<const int32_t> tokens, std::vector<float>& X) {
  const Ds4Shape& s = model_.shape();
  const LayerWeights& lw = model_.weights().layers[static_cast<size_t>(il)];
  const int64_t n = static_cast<int64_t>(tokens.size()), D = s.n_embd, E = s.n_expert, K = s.n_expert_used;
  const int64_t I = s.n_ff_exp;
  std::vector<float> xc, post, comb;
  DSV4_RETURN_IF_ERROR(hc_pre_block(lw.hc_ffn_fn, lw.hc_ffn_scale, lw.hc_ffn_base, X, n, xc, post, comb));
  PhaseTimer timer(timing_, times_.moe);
  std::vector<float> x(static_cast<size_t>(n * D));
  ops_.rms_norm(xc.data(), n, D, lw.ffn_norm.data(), static_cast<float>(s.rms_eps), x.data());

  std::vector<float> rl(static_cast<size_t>(n * E)), rw(static_cast<size_t>(n * K));
  std::vector<int32_t> ids(static_cast<size_t>(n * K)), hash;
  DSV4_RETURN_IF_ERROR(ops_.matmul(lw.router, x.data(), n, rl.data()));
  if (s.is_hash_layer(il)) {
    hash.resize(static_cast<size_t>(n * K));
    const int32_t* table = static_cast<const int32_t*>(lw.tid2eid.data);
    for (int64_t t = 0; t < n; ++t) {
      const int32_t tok = tokens[static_cast<size_t>(t)];
      for (int64_t k = 0; k < K; ++k) {
        const int32_t e = table[static_cast<int64_t>(tok) * K + k];
        if (e < 0 || e >= E) return corrupt("blk." + std::to_string(il) + ".ffn_gate_tid2eid: expert id out of range");
        hash[static_cast<size_t>(t * K + k)] = e;
      }
    }
  }
  ops_.route(rl.data(), n, E, K, lw.router_bias.empty() ? nullptr : lw.router_bias.data(),
             hash.empty() ? nullptr : hash.data(), s.expert_weights_norm, static_cast<float>(s.expert_weights_scale),
             ids.data(), rw.data());

  // Routed experts: each expert runs once over the (token, slot) pairs that chose it (experts
  // ascending, pairs in order); every row of the result depends only on its own token, so the
  // grouping changes no bits. All experts' gate and up products (and the shared expert's) run as
  // one batch, then all down products as another.
  const int64_t nk = n * K;
  std::vector<int64_t> slots(static_cast<size_t>(nk)), first(static_cast<size_t>(E + 1), 0);
  for (int64_t i = 0; i < nk; ++i) ++first[static_cast<size_t>(ids[static_cast<size_t>(i)]) + 1];
  for (int64_t e = 0; e < E; ++e) first[static_cast<size_t>(e + 1)] += first[static_cast<size_t>(e)];
  {
    std::vector<int64_t> fill(first.begin(), first.end() - 1);
    for (int64_t i = 0; i < nk; ++i) slots[static_cast<size_t>(fill[static_cast<size_t>(ids[static_cast<size_t>(i)])]++)] = i;
  }
  // Scratch (model.h): xe rows are written for experts with several pairs (and only those are read),
  // ge/ue/ye by the matmuls, he by swiglu, y by the permutation below.
  std::vector<float>& xe = scratch_.xe;
  std::vector<float>& ge = scratch_.ge;
  std::vector<float>& ue = scratch_.ue;
  std::vector<float>& he = scratch_.he;
  std::vector<float>& ye = scratch_.ye;
  xe.resize(static_cast<size_t>(nk * D));
  ge.resize(static_cast<size_t>(nk * I));
  ue.resize(ge.size());
  he.resize(ge.size());
  ye.resize(static_cast<size_t>(nk * D));
  const bool shared = s.n_expert_shared > 0;
  std::vector<float> gs(shared ? static_cast<size_t>(n * I) : 0), us(gs.size()), hs(gs.size()),
      ys(shared ? static_cast<size_t>(n * D) : 0);
  std::vector<backend::MatmulJob> jobs;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t b = first[static_cast<size_t>(e)], m = first[static_cast<size_t>(e + 1)] - b;
    if (m == 0) continue;
    // One pair: read the token's row of x in place (pairs of one token then share a quantization).
    const float* xin = x.data() + (slots[static_cast<size_t>(b)] / K) * D;
    if (m > 1) {
      for (int64_t j = 0; j < m; ++j)
        std::memcpy(xe.data() + (b + j) * D, x.data() + (slots[static_cast<size_t>(b + j)] / K) * D,
                    static_cast<size_t>(D) * sizeof(float));
      xin = xe.data() + b * D;
    }
    jobs.push_back({backend::expert_view(lw.gate_exps, e), xin, m, ge.data() + b * I});
    jobs.push_back({backend::expert_view(lw.up_exps, e), xin, m, ue.data() + b * I});
  }
  if (shared) {
    jobs.push_back({lw.gate_sh, x.data(), n, gs.data()});
    jobs.push_back({lw.up_sh, x.data(), n, us.data()});
  }
  DSV4_RETURN_IF_ERROR(ops_.matmul_batch(jobs));
  ops_.swiglu_clamp(ge.data(), ue.data(), nk * I, static_cast<float>(s.swiglu_clamp_exp[static_cast<size_t>(il)]),
                    he.data());
  if (shared)
    ops_.swiglu_clamp(gs.data(), us.data(), n * I, static_cast<float>(s.swiglu_clamp_shexp[static_cast<size_t>(il)]),
                      hs.data());
  jobs.clear();
  for (int64_t e = 0; e < E; ++e) {
    const int64_t b = first[static_cast<size_t>(e)], m = first[static_cast<size_t>(e + 1)] - b;
    if (m > 0) jobs.push_back({backend::expert_view(lw.down_exps, e), he.data() + b * I, m, ye.data() + b * D});
  }
  if (shared) jobs.push_back({lw.down_sh, hs.data(), n, ys.data()});
  DSV4_RETURN_IF_ERROR(ops_.matmul_batch(jobs));
  std::vector<float> moe(static_cast<size_t>(n * D), 0.0f);
  std::vector<float>& Y = scratch_.y;
  Y.resize(static_cast<size_t>(nk * D));
  for (int64_t j = 0; j < nk; ++j)
    std::memcpy(Y.data() + slots[static_cast<size_t>(j)] * D, ye.data() + j * D, static_cast<size_t>(D) * sizeof(float));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t k = 0; k < K; ++k)
      ops_.axpy(moe.data() + t * D, Y.data() + (t * K + k) * D, D, rw[static_cast<size_t>(t * K + k)]);
  if (shared) ops_.axpy(moe.data(), ys.data(), n * D, 1.0f);
  std::vector<float> X2(X.size());
  ops_.hc_post(X.data(), moe.data(), post.data(), comb.data(), n, s.hc_mult, D, X2.data());
  X.swap(X2);
  return ok_status();
}

Status Session::forward_chunk(std::span<const int32_t> tokens, float* logits, bool all_logits) {
  const Ds4Shape& s = model_.shape();
  const ModelWeights& mw = model_.weights();
  const int64_t n = static_cast<int64_t>(tokens.size()), D = s.n_embd, hc = s.hc_mult;
  std::vector<int64_t> pos(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) pos[static_cast<size_t>(t)] = pos_ + t;
  // HC state: every stream starts as the token's embedding.
  std::vector<float> e(static_cast<size_t>(n * D)), X(static_cast<size_t>(n * hc * D));
  times_.tokens += n;
  {
    PhaseTimer timer(timing_, times_.embed);
    DSV4_RETURN_IF_ERROR(ops_.get_rows(mw.tok_embd, tokens.data(), n, e.data()));
  }
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < hc; ++i)
      std::memcpy(X.data() + (t * hc + i) * D, e.data() + t * D, static_cast<size_t>(D) * sizeof(float));
  for (int64_t il = 0; il < s.n_layer; ++il) {
    DSV4_RETURN_IF_ERROR(attention_block(il, pos, X).with_context("layer " + std::to_string(il)));
    DSV4_RETURN_IF_ERROR(ffn_block(il, tokens, X).with_context("layer " + std::to_string(il)));
  }
  pos_ += n;
  if (logits == nullptr) return ok_status();
  // Head: only the rows whose logits are wanted.
  PhaseTimer timer(timing_, times_.head);
  const int64_t first = all_logits ? 0 : n - 1, m = n - first;
  const std::vector<float> Xh(X.begin() + first * hc * D, X.end());
  std::vector<float> fhat(static_cast<size_t>(m * hc * D)), mix(static_cast<size_t>(m * hc)), y(static_cast<size_t>(m * D));
  ops_.rms_norm(Xh.data(), m, hc * D, nullptr, static_cast<float>(s.rms_eps), fhat.data());
  DSV4_RETURN_IF_ERROR(ops_.matmul(mw.out_hc_fn, fhat.data(), m, mix.data()));
  ops_.hc_head(mix.data(), mw.out_hc_scale[0], mw.out_hc_base.data(), m, hc, D, static_cast<float>(s.hc_eps), Xh.data(),
               y.data());
  ops_.rms_norm(y.data(), m, D, mw.out_norm.data(), static_cast<float>(s.rms_eps), y.data());
  return ops_.matmul(mw.output, y.data(), m, logits);
}

}  // namespace dsv4::model
