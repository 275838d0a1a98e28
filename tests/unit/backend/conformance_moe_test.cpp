// tests/unit/backend/conformance_moe_test.cpp — op conformance (see conformance_test.cpp) of the
// mixture of experts: route (hash and score routing) and moe.
#include "conformance_fixture.h"

namespace dsv4::conformance {
namespace {

// ================================================================================================
// route
// ================================================================================================

struct RouteCase {
  std::string name;
  int64_t n, E, K;
  bool bias, hash;
  bool norm = true;
  float scale = 1.5f;
  int logits = 0;  // 0 normal, 1 few values (ties), 2 NaN logits / bias, 3 ±inf, 4 tiny (sum near 1e-20), 5 all −200, 6 huge bias
  int64_t vocab = 1000;
};

std::vector<RouteCase> route_cases() {
  return {
      {"real_E256_K6_bias", 5, 256, 6, true, false},
      {"real_no_bias", 4, 256, 6, false, false},
      {"real_hash", 7, 256, 6, false, true},
      {"hash_with_bias_ignored", 3, 256, 6, true, true},
      {"no_norm", 4, 64, 6, true, false, false, 2.5f},
      {"ties", 6, 32, 5, true, false, true, 1.0f, 1},
      {"ties_no_bias", 6, 32, 5, false, false, true, 1.0f, 1},
      {"nan_logits_and_bias", 4, 16, 6, true, false, true, 1.5f, 2},
      {"inf_logits", 4, 16, 4, false, false, true, 1.5f, 3},
      {"tiny_sum_eps", 4, 16, 6, false, false, true, 1.0f, 4},
      {"all_zero_scores", 2, 16, 6, true, false, true, 1.0f, 5},
      {"bias_dominates", 3, 64, 6, true, false, true, 1.5f, 6},
      {"k_equals_e", 3, 7, 7, true, false},
      {"k1", 3, 9, 1, true, false},
      {"hash_no_norm", 3, 16, 3, false, true, false, 0.5f},
      // More experts than the CUDA router's one-warp form holds (256): its CTA form.
      {"wide_E384_cta", 3, 384, 6, true, false},
      {"wide_E300_ties_cta", 4, 300, 5, true, false, true, 1.0f, 1},
  };
}

TEST_P(Conformance, Route) {
  uint64_t seed = 1400;
  for (const RouteCase& c : route_cases()) {
    SCOPED_TRACE("route case " + c.name);
    Ctx x(be());
    Rng rng(++seed);
    std::vector<float> logits = rng.normals(c.n * c.E, 2.0f), bias = rng.normals(c.E, 0.3f);
    switch (c.logits) {
      case 1: {
        const float vals[] = {-1.0f, 0.5f, 2.0f};
        for (auto& l : logits) l = vals[rng.range(0, 2)];
        const float bvals[] = {0.0f, 0.25f};
        for (auto& b : bias) b = bvals[rng.range(0, 1)];
        break;
      }
      case 2:
        logits[3] = f_nan();
        logits[static_cast<size_t>(c.E + 5)] = f_nan();
        bias[1] = f_nan();
        bias[7] = f_nan();
        bias[8] = f_nan();
        break;
      case 3:
        logits[2] = f_inf();
        logits[static_cast<size_t>(c.E + 1)] = -f_inf();
        logits[static_cast<size_t>(2 * c.E + 3)] = f_inf();
        logits[static_cast<size_t>(2 * c.E + 4)] = f_inf();
        break;
      case 4:
        for (auto& l : logits) l = rng.uniform(-100.0f, -88.0f);
        break;
      case 5:
        std::fill(logits.begin(), logits.end(), -200.0f);
        break;
      case 6:
        for (auto& b : bias) b *= 1000.0f;
        break;
      default: break;
    }
    std::vector<int32_t> table, tokens(static_cast<size_t>(c.n));
    if (c.hash) {
      table.resize(static_cast<size_t>(c.vocab * c.K));
      std::vector<int32_t> perm(static_cast<size_t>(c.E));
      std::iota(perm.begin(), perm.end(), 0);
      for (int64_t v = 0; v < c.vocab; ++v) {
        std::shuffle(perm.begin(), perm.end(), rng.g);
        std::copy(perm.begin(), perm.begin() + c.K, table.begin() + v * c.K);
      }
      for (auto& t : tokens) t = static_cast<int32_t>(rng.range(0, c.vocab - 1));
      tokens[0] = static_cast<int32_t>(c.vocab - 1);
    }
    RouteArgs r;
    r.logits = x.f32(logits, c.E, c.n);
    if (c.bias) r.bias = x.f32_1d(bias);
    if (c.hash) {
      r.tid2eid = x.i32(table, c.K, c.vocab);
      r.tokens = x.i32_1d(tokens);
    }
    r.ids = x.alloc(TensorType::kI32, c.K, c.n);
    r.weights = x.alloc(TensorType::kF32, c.K, c.n);
    r.k = c.K;
    r.norm = c.norm;
    r.scale = c.scale;
    if (!x.step([&] { be().route(r); })) continue;
    std::vector<int32_t> rid(static_cast<size_t>(c.n * c.K));
    std::vector<float> rw(rid.size());
    for (int64_t t = 0; t < c.n; ++t)
      route_token(logits.data() + t * c.E, c.E, c.bias ? bias.data() : nullptr,
                  c.hash ? table.data() + tokens[static_cast<size_t>(t)] * c.K : nullptr, c.K, c.norm, c.scale,
                  rid.data() + t * c.K, rw.data() + t * c.K);
    EXPECT_TRUE(same_i32("route ids", rid, x.get<int32_t>(r.ids), c.n, c.K));
    EXPECT_TRUE(same_f32("route weights", rw, x.get<float>(r.weights), c.n, c.K));
    count("route");
  }
}

// ================================================================================================
// moe
// ================================================================================================

struct MoeCase {
  std::string name;
  int64_t n, D, I, E, K;
  TensorType gt, ut, dt;
  bool shared;
  TensorType st = TensorType::kQ8_0;
  float limit_exp = 10.0f, limit_sh = 10.0f;
  int special = 0;  // 1: weights 1 / 0 / negative, 2: NaN g, NaN u, inf u (F32 experts), 3: x specials
};

std::vector<MoeCase> moe_cases() {
  std::vector<MoeCase> v;
  for (TensorType t : kWeightTypes)
    v.push_back({"uniform_" + tname(t), 3, 256, 256, 4, 2, t, t, t, true, t, 3.0f, 2.5f});
  v.push_back({"real_D4096_iq2xxs_q2k_sh_q8_0", 2, 4096, 256, 8, 6, TensorType::kIQ2_XXS, TensorType::kIQ2_XXS,
               TensorType::kQ2_K, true, TensorType::kQ8_0});
  // Many pairs per expert (prefill chunks): several quantized types, experts with few pairs.
  v.push_back({"many_pairs_iq2xxs_q2k_n70", 70, 256, 256, 8, 6, TensorType::kIQ2_XXS, TensorType::kIQ2_XXS,
               TensorType::kQ2_K, true, TensorType::kQ8_0});
  v.push_back({"many_pairs_q4k_q8_0_n41", 41, 256, 512, 5, 3, TensorType::kQ4_K, TensorType::kQ4_K, TensorType::kQ8_0,
               true, TensorType::kBF16, 3.0f, 4.0f});
  v.push_back({"many_pairs_mxfp4_n33_E16", 33, 256, 256, 16, 2, TensorType::kMXFP4, TensorType::kQ8_0,
               TensorType::kMXFP4, false});
  v.push_back({"many_pairs_real_D4096_n24", 24, 4096, 256, 8, 6, TensorType::kIQ2_XXS, TensorType::kIQ2_XXS,
               TensorType::kQ2_K, true, TensorType::kQ8_0});
  // Tiles of up to 32 pairs of one expert (a GPU's grouped tensor-core form): experts with more than one
  // tile and a partial last one; rows of 4 / 3 super-blocks (trees of 8 leaves); IQ2_XXS rows of an odd
  // number of blocks (not grouped: pair by pair) beside a grouped Q2_K down; rows of 34 super-blocks (chains
  // of two blocks in the 32-leaf tree) for each type; Q2_K down rows not a multiple of 64.
  v.push_back({"grouped_iq2xxs_q2k_n70_tiles", 70, 1024, 768, 4, 4, TensorType::kIQ2_XXS, TensorType::kIQ2_XXS,
               TensorType::kQ2_K, true, TensorType::kQ8_0});
  v.push_back({"grouped_q2k_down_iq2xxs_odd_blocks", 100, 768, 512, 4, 4, TensorType::kIQ2_XXS,
               TensorType::kIQ2_XXS, TensorType::kQ2_K, false});
  v.push_back({"grouped_iq2xxs_chains_D8704", 20, 8704, 256, 4, 2, TensorType::kIQ2_XXS, TensorType::kIQ2_XXS,
               TensorType::kQ2_K, false});
  v.push_back({"grouped_q2k_chains_I8704", 20, 512, 8704, 4, 2, TensorType::kIQ2_XXS, TensorType::kIQ2_XXS,
               TensorType::kQ2_K, false});
  v.push_back({"grouped_q2k_down_D800", 40, 800, 512, 4, 3, TensorType::kQ8_0, TensorType::kQ8_0, TensorType::kQ2_K,
               true, TensorType::kQ8_0});
  v.push_back({"many_tokens_n17", 17, 256, 256, 6, 4, TensorType::kQ8_0, TensorType::kQ8_0, TensorType::kQ4_K, true,
               TensorType::kBF16, 3.0f, 4.0f});
  v.push_back({"decode_n1_no_shared", 1, 256, 256, 5, 3, TensorType::kMXFP4, TensorType::kMXFP4, TensorType::kQ8_0,
               false});
  v.push_back({"weights_one_zero_negative", 4, 256, 256, 4, 3, TensorType::kF16, TensorType::kF16, TensorType::kF32,
               false, TensorType::kF32, 3.0f, 3.0f, 1});
  v.push_back({"swiglu_nan_inf", 3, 64, 32, 3, 2, TensorType::kF32, TensorType::kF32, TensorType::kF32, true,
               TensorType::kF32, 2.0f, 1.5f, 2});
  v.push_back({"swiglu_nan_q8_0_down", 3, 64, 32, 3, 2, TensorType::kF32, TensorType::kF32, TensorType::kQ8_0, false,
               TensorType::kF32, 2.0f, 1.5f, 2});
  v.push_back({"x_specials", 3, 256, 256, 4, 2, TensorType::kBF16, TensorType::kQ4_K, TensorType::kF32, true,
               TensorType::kF32, 3.0f, 3.0f, 3});
  return v;
}

TEST_P(Conformance, Moe) {
  uint64_t seed = 1500;
  for (const MoeCase& c : moe_cases()) {
    SCOPED_TRACE("moe case " + c.name);
    ++seed;
    if (!supported(Op::kMoe, c.gt) || !supported(Op::kMoe, c.ut) || !supported(Op::kMoe, c.dt) ||
        (c.shared && !supported(Op::kMoe, c.st)))
      continue;
    Ctx x(be());
    Rng rng(seed);
    // F32/F16/BF16 weights ~ N(0, σ) with σ·sqrt(in) ≈ 4: the clamps are active for some elements.
    auto sig = [](int64_t in) { return 4.0f / std::sqrt(static_cast<float>(in)); };
    std::vector<uint8_t> gb = weight_bytes(c.gt, c.D, c.I * c.E, rng, WeightGen::kRandom, sig(c.D));
    std::vector<uint8_t> ub = weight_bytes(c.ut, c.D, c.I * c.E, rng, WeightGen::kRandom, sig(c.D));
    std::vector<uint8_t> db = weight_bytes(c.dt, c.I, c.D * c.E, rng, WeightGen::kRandom, sig(c.I));
    if (c.special == 2) {  // expert 0: gate row 1 NaN; expert 1: up row 2 NaN, up row 3 +inf; row 4 of both huge
      auto setf = [](std::vector<uint8_t>& b, int64_t idx, float v) { std::memcpy(b.data() + 4 * idx, &v, 4); };
      setf(gb, 1 * c.D + 5, f_nan());
      setf(ub, (c.I + 2) * c.D + 7, f_nan());
      setf(ub, (c.I + 3) * c.D + 0, f_inf());
      for (int64_t e = 0; e < c.E; ++e) setf(gb, (e * c.I + 4) * c.D + 1, 1e6f), setf(ub, (e * c.I + 4) * c.D + 1, -1e6f);
    }
    const int64_t neg[3] = {c.D, c.I, c.E}, ned[3] = {c.I, c.D, c.E};
    MoeArgs m;
    MoeWeights mw{c.gt, c.ut, c.dt, nullptr, nullptr, nullptr};
    m.gate_exps = x.weight(c.gt, gb, 3, neg);
    mw.gate = x.host_bytes_of_last();
    m.up_exps = x.weight(c.ut, ub, 3, neg);
    mw.up = x.host_bytes_of_last();
    m.down_exps = x.weight(c.dt, db, 3, ned);
    mw.down = x.host_bytes_of_last();
    if (c.shared) {
      const int64_t nsg[2] = {c.D, c.I}, nsd[2] = {c.I, c.D};
      mw.has_shared = true;
      mw.gsh_t = mw.ush_t = mw.dsh_t = c.st;
      m.gate_sh = x.weight(c.st, weight_bytes(c.st, c.D, c.I, rng, WeightGen::kRandom, sig(c.D)), 2, nsg);
      mw.gsh = x.host_bytes_of_last();
      m.up_sh = x.weight(c.st, weight_bytes(c.st, c.D, c.I, rng, WeightGen::kRandom, sig(c.D)), 2, nsg);
      mw.ush = x.host_bytes_of_last();
      m.down_sh = x.weight(c.st, weight_bytes(c.st, c.I, c.D, rng, WeightGen::kRandom, sig(c.I)), 2, nsd);
      mw.dsh = x.host_bytes_of_last();
    }
    std::vector<float> xs = rng.normals(c.n * c.D);
    if (c.special == 3) inject_specials(xs, rng, 6);
    // ids: distinct per token; token 0 uses expert 0 and 1 first (the special rows), experts shared across tokens.
    std::vector<int32_t> ids(static_cast<size_t>(c.n * c.K));
    std::vector<float> wts(ids.size());
    std::vector<int32_t> perm(static_cast<size_t>(c.E));
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t t = 0; t < c.n; ++t) {
      if (t > 0) std::shuffle(perm.begin(), perm.end(), rng.g);
      for (int64_t k = 0; k < c.K; ++k) {
        ids[static_cast<size_t>(t * c.K + k)] = perm[static_cast<size_t>(k)];
        wts[static_cast<size_t>(t * c.K + k)] = rng.uniform(0.05f, 0.6f);
      }
    }
    if (c.special == 1) {
      std::fill(wts.begin(), wts.begin() + c.K, 0.0f);  // token 0: all weights 0 (out = +0, never −0)
      wts[static_cast<size_t>(c.K)] = 1.0f;              // token 1: a weight of exactly 1 (plain add)
      wts[static_cast<size_t>(c.K + 2)] = 1.0f;
      wts[static_cast<size_t>(2 * c.K + 1)] = -0.75f;    // token 2: a negative weight
      wts[static_cast<size_t>(3 * c.K)] = 0.0f;          // token 3: a zero weight first
    }
    m.x = x.f32(xs, c.D, c.n);
    m.ids = x.i32(ids, c.K, c.n);
    m.weights = x.f32(wts, c.K, c.n);
    m.out = x.alloc(TensorType::kF32, c.D, c.n);
    m.limit_exp = c.limit_exp;
    m.limit_sh = c.limit_sh;
    if (!x.step([&] { be().moe(m); })) continue;
    std::vector<float> ref(static_cast<size_t>(c.n * c.D));
    for (int64_t t = 0; t < c.n; ++t)
      moe_token(mw, c.D, c.I, xs.data() + t * c.D, ids.data() + t * c.K, wts.data() + t * c.K, c.K, c.limit_exp,
                c.limit_sh, ref.data() + t * c.D);
    EXPECT_TRUE(same_f32("moe out", ref, x.get<float>(m.out), c.n, c.D));
    count("moe");

    // moe_hc_post: the same MoE, then HC post of its output over 4 streams as one op (a GPU computes the
    // weighted sum inside HC post's kernel): out as moe's, X_out as hc_post_token's on that out.
    constexpr int64_t hc = 4;
    std::vector<float> X = rng.normals(c.n * hc * c.D), post = rng.normals(c.n * hc), comb = rng.normals(c.n * hc * hc, 0.5f);
    if (c.special == 3) inject_specials(X, rng, 4);
    const Tensor Xt = x.f32(X, hc * c.D, c.n), pt = x.f32(post, hc, c.n), ct = x.f32(comb, hc * hc, c.n);
    const Tensor X_out = x.alloc(TensorType::kF32, hc * c.D, c.n);
    MoeArgs m2 = m;
    m2.out = x.alloc(TensorType::kF32, c.D, c.n);
    if (!x.step([&] { be().moe_hc_post(m2, Xt, pt, ct, X_out); })) continue;
    std::vector<float> X_ref(static_cast<size_t>(c.n * hc * c.D));
    for (int64_t t = 0; t < c.n; ++t)
      hc_post_token(X.data() + t * hc * c.D, ref.data() + t * c.D, post.data() + t * hc, comb.data() + t * hc * hc, hc,
                    c.D, X_ref.data() + t * hc * c.D);
    EXPECT_TRUE(same_f32("moe_hc_post out", ref, x.get<float>(m2.out), c.n, c.D));
    EXPECT_TRUE(same_f32("moe_hc_post X_out", X_ref, x.get<float>(X_out), c.n, hc * c.D));
    count("moe_hc_post");
  }
}

}  // namespace
}  // namespace dsv4::conformance
