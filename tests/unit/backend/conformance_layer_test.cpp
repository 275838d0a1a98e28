// tests/unit/backend/conformance_layer_test.cpp — op conformance (see conformance_test.cpp) of the
// per-layer ops around attention and MoE: rms_norm, rope, rms_norm_rope, hc_pre, hc_post, hc_head and
// hc_pre_norm.
#include "conformance_fixture.h"

namespace dsv4::conformance {
namespace {

// ================================================================================================
// rms_norm
// ================================================================================================

struct RmsCase {
  std::string name;
  int64_t rows, n;
  bool weight;
  bool alias = false;
  int64_t pad = 0;  // x and y as column slices [pad, pad + n) of wider tensors
  float eps = 1e-6f;
  int specials = 0;  // 1: special rows (zero, NaN, inf, overflowing, underflowing), 2: random specials
};

std::vector<RmsCase> rms_cases() {
  return {
      {"real_D4096", 3, 4096, true},
      {"heads_512_no_w", 2 * 64, 512, false},
      {"q_lora_1024", 4, 1024, true},
      {"indexer_128", 5, 128, true, false, 0, 1e-5f},
      {"odd_7", 5, 7, true},
      {"odd_33_no_w", 3, 33, false},
      {"one", 2, 1, true},
      {"odd_100_specials", 6, 100, true, false, 0, 1e-6f, 1},
      {"random_specials", 7, 64, true, false, 0, 1e-6f, 2},
      {"alias_512", 4, 512, true, true},
      {"alias_no_w_odd", 3, 45, false, true},
      {"views", 3, 64, true, false, 5},
      {"alias_view", 3, 96, true, true, 7},
      {"eps0_special_rows", 6, 48, true, false, 0, 0.0f, 1},
  };
}

TEST_P(Conformance, RmsNorm) {
  uint64_t seed = 500;
  for (const RmsCase& c : rms_cases()) {
    SCOPED_TRACE("rms_norm case " + c.name);
    Ctx x(be());
    Rng rng(++seed);
    std::vector<float> xs = rng.normals(c.rows * c.n, 2.0f);
    if (c.specials == 1) {
      for (int64_t i = 0; i < c.n; ++i) {
        xs[static_cast<size_t>(i)] = 0.0f;                  // row 0: zeros (ss = 0)
        xs[static_cast<size_t>(3 * c.n + i)] = 1e20f;       // row 3: ss overflows to inf
        xs[static_cast<size_t>(4 * c.n + i)] = -1e-30f;     // row 4: ss underflows to 0
      }
      xs[static_cast<size_t>(c.n + c.n / 2)] = f_nan();    // row 1: one NaN
      xs[static_cast<size_t>(2 * c.n)] = -f_inf();         // row 2: one inf
    } else if (c.specials == 2) {
      inject_specials(xs, rng, 9);
    }
    std::vector<float> ws = rng.normals(c.n, 0.3f);
    for (auto& w : ws) w += 1.0f;
    const int64_t width = c.n + 2 * c.pad;
    std::vector<float> xwide(static_cast<size_t>(c.rows * width));
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t i = 0; i < width; ++i)
        xwide[static_cast<size_t>(r * width + i)] =
            (i >= c.pad && i < c.pad + c.n) ? xs[static_cast<size_t>(r * c.n + i - c.pad)] : rng.normal();
    const Tensor xw = x.f32(xwide, width, c.rows);
    const Tensor xt = c.pad ? xw.cols(c.pad, c.n) : xw;
    const Tensor wt = c.weight ? x.f32_1d(ws) : Tensor{};
    const Tensor yw = c.alias ? xw : x.alloc(TensorType::kF32, width, c.rows);
    const Tensor yt = c.pad ? yw.cols(c.pad, c.n) : yw;
    if (!x.step([&] { be().rms_norm(xt, wt, c.eps, yt); })) continue;
    std::vector<float> ref(static_cast<size_t>(c.rows * c.n));
    for (int64_t r = 0; r < c.rows; ++r)
      rms_norm_row(xs.data() + r * c.n, c.n, c.weight ? ws.data() : nullptr, c.eps, ref.data() + r * c.n);
    const std::vector<float> got = x.get<float>(yw);
    EXPECT_TRUE(same_f32("rms_norm y", ref, got, c.rows, c.n, width, c.pad));
    if (c.alias) {
      for (int64_t r = 0; r < c.rows; ++r) {
        for (int64_t i = 0; i < width; ++i) {
          if (i >= c.pad && i < c.pad + c.n) continue;
          EXPECT_EQ(f32_bits(got[static_cast<size_t>(r * width + i)]), f32_bits(xwide[static_cast<size_t>(r * width + i)]))
              << "rms_norm changed column " << i << " outside its view";
        }
      }
    } else {
      EXPECT_TRUE(poison_outside("rms_norm y neighbours", got, c.rows, width, c.pad, c.n));
    }
    count("rms_norm");
  }
}

// ================================================================================================
// rope
// ================================================================================================

struct RopeCase {
  std::string name;
  int64_t rows, row_len, n_rot, rows_per_pos, p0;
  bool inverse;
  int64_t pad = 0;    // x as columns [pad, pad + row_len) of a wider tensor
  int freqs = 0;      // 0: 10000^(−2k/n_rot), 1: random in [0, 1.5)
  bool specials = false;
};

std::vector<RopeCase> rope_cases() {
  return {
      {"q_heads_real", 3 * 64, 512, 64, 64, 0, false},
      {"kv_real_p1000", 5, 512, 64, 1, 1000, false},
      {"o_inverse_p70000", 2 * 64, 512, 64, 64, 70000, true},
      {"p_2e24_plus1", 4, 512, 64, 1, 16777217, false, 0, 1},
      {"p_1e8_inverse", 3, 128, 64, 1, 100000000, true, 0, 1},
      {"indexer_q", 2 * 64, 128, 64, 64, 4097, false},
      {"odd_rows_per_pos", 7, 10, 4, 3, 5, false, 0, 1},
      {"full_row", 4, 8, 8, 2, 11, true, 0, 1},
      {"view", 6, 40, 16, 2, 33, false, 3, 1},
      {"specials", 6, 32, 16, 1, 9, false, 0, 1, true},
  };
}

TEST_P(Conformance, Rope) {
  uint64_t seed = 600;
  for (const RopeCase& c : rope_cases()) {
    SCOPED_TRACE("rope case " + c.name);
    Ctx x(be());
    Rng rng(++seed);
    const int64_t width = c.row_len + 2 * c.pad;
    std::vector<float> xs = rng.normals(c.rows * width);
    if (c.specials) inject_specials(xs, rng, 10);
    std::vector<float> fr(static_cast<size_t>(c.n_rot / 2));
    for (int64_t k = 0; k < c.n_rot / 2; ++k)
      fr[static_cast<size_t>(k)] = c.freqs == 0 ? static_cast<float>(std::pow(10000.0, -2.0 * k / c.n_rot))
                                                : rng.uniform(0.0f, 1.5f);
    const Tensor xw = x.f32(xs, width, c.rows);
    const Tensor xt = c.pad ? xw.cols(c.pad, c.row_len) : xw;
    const Tensor ft = x.f32_1d(fr);
    if (!x.step([&] { be().rope(xt, c.rows_per_pos, c.p0, c.n_rot, ft, c.inverse); })) continue;
    std::vector<float> ref = xs;
    for (int64_t r = 0; r < c.rows; ++r)
      rope_row(ref.data() + r * width + c.pad, c.row_len, c.p0 + r / c.rows_per_pos, c.n_rot, fr.data(), c.inverse);
    EXPECT_TRUE(same_f32("rope x (whole tensor: untouched columns included)", ref, x.get<float>(xw), c.rows, width));
    count("rope");
  }
}

// ================================================================================================
// rms_norm_rope
// ================================================================================================

// rms_norm(x, w, eps, x) then rope(x, rows_per_pos, p0, n_rot, freqs, false), as the two scalar
// references composed. The CUDA backend fuses it for rows shorter than its block-wide rms_norm
// threshold with a rotated tail of at most 256 floats (the long_row and wide_tail cases take its
// unfused path); the CPU runs the two ops.
struct RmsNormRopeCase {
  std::string name;
  int64_t tokens, rows_per_pos, n, n_rot, p0;  // rows = tokens · rows_per_pos, each of n floats
  bool weight;
  int64_t pad = 0;  // x as columns [pad, pad + n) of a wider tensor
  int freqs = 0;    // 0: 10000^(−2k/n_rot), 1: random in [0, 1.5)
  bool specials = false;
};

TEST_P(Conformance, RmsNormRope) {
  const std::vector<RmsNormRopeCase> cases = {
      {"q_heads_real_p0", 3, 64, 512, 64, 0, false},
      {"q_heads_real_p70000", 3, 64, 512, 64, 70000, false},
      {"kv_real_p0", 3, 1, 512, 64, 0, true},
      {"kv_real_p70000", 3, 1, 512, 64, 70000, true},
      {"q_heads_weight", 2, 64, 512, 64, 4097, true},
      {"kv_no_weight", 4, 1, 512, 64, 1000, false},
      {"odd_70_rot6", 4, 3, 70, 6, 11, true, 0, 1},
      {"odd_70_rot6_no_w_rows_per_pos1", 5, 1, 70, 6, 16777217, false, 0, 1},
      {"full_row", 3, 2, 8, 8, 5, true, 0, 1},
      {"view", 3, 2, 40, 16, 33, true, 3, 1},
      {"specials_real", 2, 64, 512, 64, 70000, false, 0, 0, true},
      {"specials_weight", 6, 1, 64, 16, 9, true, 0, 1, true},
      {"long_row_unfused", 2, 1, 4096, 64, 33, true},
      {"wide_tail_unfused", 3, 1, 600, 300, 7, true, 0, 1},
  };
  uint64_t seed = 650;
  for (const RmsNormRopeCase& c : cases) {
    SCOPED_TRACE("rms_norm_rope case " + c.name);
    Ctx x(be());
    Rng rng(++seed);
    const int64_t rows = c.tokens * c.rows_per_pos, width = c.n + 2 * c.pad;
    std::vector<float> xs = rng.normals(rows * width, 2.0f);
    if (c.specials) inject_specials(xs, rng, 12);
    std::vector<float> ws = rng.normals(c.n, 0.3f);
    for (auto& w : ws) w += 1.0f;
    std::vector<float> fr(static_cast<size_t>(c.n_rot / 2));
    for (int64_t k = 0; k < c.n_rot / 2; ++k)
      fr[static_cast<size_t>(k)] = c.freqs == 0 ? static_cast<float>(std::pow(10000.0, -2.0 * k / c.n_rot))
                                                : rng.uniform(0.0f, 1.5f);
    const Tensor xw = x.f32(xs, width, rows);
    const Tensor xt = c.pad ? xw.cols(c.pad, c.n) : xw;
    const Tensor wt = c.weight ? x.f32_1d(ws) : Tensor{};
    const Tensor ft = x.f32_1d(fr);
    if (!x.step([&] { be().rms_norm_rope(xt, wt, 1e-6f, c.rows_per_pos, c.p0, c.n_rot, ft); })) continue;
    std::vector<float> ref = xs;
    for (int64_t r = 0; r < rows; ++r) {
      float* row = ref.data() + r * width + c.pad;
      rms_norm_row(row, c.n, c.weight ? ws.data() : nullptr, 1e-6f, row);
      rope_row(row, c.n, c.p0 + r / c.rows_per_pos, c.n_rot, fr.data(), false);
    }
    EXPECT_TRUE(same_f32("rms_norm_rope x (whole tensor: untouched columns included)", ref, x.get<float>(xw), rows, width));
    count("rms_norm_rope");
  }
}

// norm_rope with several jobs: the attention block's (query heads without a weight, the kv row with one,
// the indexer's query heads rope only), and batches of more jobs than the CUDA kernel takes per launch,
// with views, odd shapes, jobs its register kernel does not take (long rows, wide tails) and empty jobs
// between them. Each job's x against rms_norm_row (norm jobs) then rope_row.
struct NormRopeJobCase {
  int64_t tokens, rows_per_pos, n, n_rot, p0;
  bool norm, weight;
  int64_t pad = 0;
};

TEST_P(Conformance, NormRopeJobs) {
  const std::vector<std::pair<std::string, std::vector<NormRopeJobCase>>> batches = {
      {"attention_block", {{2, 64, 512, 64, 70000, true, false}, {2, 1, 512, 64, 70000, true, true},
                           {2, 64, 128, 64, 70000, false, false}}},
      {"decode_step", {{1, 64, 512, 64, 5, true, false}, {1, 1, 512, 64, 5, true, true},
                       {1, 64, 128, 64, 5, false, false}}},
      {"six_jobs_mixed",
       {{3, 2, 70, 6, 11, true, true, 3}, {2, 5, 40, 16, 9, false, false, 1}, {4, 1, 64, 0, 3, true, true},
        {0, 4, 32, 8, 7, true, false}, {2, 3, 96, 32, 16777217, false, false}, {3, 1, 8, 8, 1, true, false, 2}}},
      {"unfused_between",
       {{2, 4, 64, 16, 100, true, true}, {2, 1, 4096, 64, 33, true, true}, {2, 2, 600, 300, 7, false, false},
        {3, 1, 600, 200, 8, true, true}, {2, 3, 48, 8, 12, false, false}, {1, 1, 2000, 64, 70000, true, false}}},
  };
  uint64_t seed = 700;
  for (const auto& [name, jobs] : batches) {
    SCOPED_TRACE("norm_rope batch " + name);
    Ctx x(be());
    Rng rng(++seed);
    std::vector<std::vector<float>> xs(jobs.size()), ws(jobs.size()), fr(jobs.size());
    std::vector<Tensor> whole(jobs.size());
    std::vector<backend::NormRopeJob> js(jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i) {
      const NormRopeJobCase& c = jobs[i];
      const int64_t rows = c.tokens * c.rows_per_pos, width = c.n + 2 * c.pad;
      xs[i] = rng.normals(std::max<int64_t>(rows, 1) * width, 2.0f);
      ws[i] = rng.normals(c.n, 0.3f);
      for (auto& w : ws[i]) w += 1.0f;
      fr[i].resize(static_cast<size_t>(std::max<int64_t>(c.n_rot / 2, 1)));
      for (auto& f : fr[i]) f = rng.uniform(0.0f, 1.5f);
      whole[i] = x.f32(xs[i], width, std::max<int64_t>(rows, 1));
      backend::NormRopeJob& j = js[i];
      j.x = (c.pad ? whole[i].cols(c.pad, c.n) : whole[i]).rows(0, rows);
      j.w = c.weight ? x.f32_1d(ws[i]) : Tensor{};
      j.norm = c.norm;
      j.eps = 1e-6f;
      j.rows_per_pos = c.rows_per_pos;
      j.p0 = c.p0;
      j.n_rot = c.n_rot;
      j.freqs = x.f32_1d(fr[i]);
    }
    if (!x.step([&] { be().norm_rope(js); })) continue;
    for (size_t i = 0; i < jobs.size(); ++i) {
      SCOPED_TRACE("job " + std::to_string(i));
      const NormRopeJobCase& c = jobs[i];
      const int64_t rows = c.tokens * c.rows_per_pos, width = c.n + 2 * c.pad;
      std::vector<float> ref = xs[i];
      for (int64_t r = 0; r < rows; ++r) {
        float* row = ref.data() + r * width + c.pad;
        if (c.norm) rms_norm_row(row, c.n, c.weight ? ws[i].data() : nullptr, 1e-6f, row);
        rope_row(row, c.n, c.p0 + r / c.rows_per_pos, c.n_rot, fr[i].data(), false);
      }
      EXPECT_TRUE(same_f32("norm_rope x (whole tensor: untouched columns included)", ref, x.get<float>(whole[i]),
                           std::max<int64_t>(rows, 1), width));
    }
    count("norm_rope");
  }
}

// ================================================================================================
// hc_pre / hc_post / hc_head
// ================================================================================================

struct HcCase {
  std::string name;
  int64_t n, hc, D, iters;
  float eps;
  int specials = 0;  // 1: NaN / inf / saturating values in mix, X and base
};

std::vector<HcCase> hc_cases() {
  return {
      {"real_hc4_D4096_20iters", 3, 4, 4096, 20, 1e-6f},
      {"hc4_D64_1iter", 5, 4, 64, 1, 1e-6f},
      {"hc4_D64_3iters", 4, 4, 64, 3, 1e-6f},
      {"hc4_odd_D7", 2, 4, 7, 20, 1e-6f},
      {"hc2_D33", 3, 2, 33, 5, 1e-4f},
      {"hc3_D5", 2, 3, 5, 7, 1e-6f},
      {"specials", 6, 4, 24, 20, 1e-6f, 1},
      {"saturating_mix", 3, 4, 16, 20, 1e-6f, 2},
  };
}

struct HcData {
  std::vector<float> mix, scale, base, X;
};

HcData hc_data(const HcCase& c, Rng& rng, int64_t n_mix) {
  HcData d;
  d.mix = rng.normals(c.n * n_mix, 1.5f);
  d.scale = {rng.uniform(0.3f, 2.0f), rng.uniform(0.3f, 2.0f), rng.uniform(0.3f, 2.0f)};
  d.base = rng.normals(n_mix, 0.5f);
  d.X = rng.normals(c.n * c.hc * c.D);
  if (c.specials == 1) {
    inject_specials(d.mix, rng, 4);
    inject_specials(d.X, rng, 8);
    d.base[static_cast<size_t>(n_mix - 1)] = f_inf();
  } else if (c.specials == 2) {
    for (auto& m : d.mix) m *= 60.0f;  // softmax rows saturate: exp underflows to 0 and subnormals
  }
  return d;
}

TEST_P(Conformance, HcPre) {
  uint64_t seed = 700;
  for (const HcCase& c : hc_cases()) {
    SCOPED_TRACE("hc_pre case " + c.name);
    Ctx x(be());
    Rng rng(++seed);
    const int64_t n_mix = (2 + c.hc) * c.hc;
    const HcData d = hc_data(c, rng, n_mix);
    const Tensor mix = x.f32(d.mix, n_mix, c.n), scale = x.f32_1d(d.scale), base = x.f32_1d(d.base);
    const Tensor X = x.f32(d.X, c.hc * c.D, c.n);
    const Tensor xo = x.alloc(TensorType::kF32, c.D, c.n), post = x.alloc(TensorType::kF32, c.hc, c.n),
                 comb = x.alloc(TensorType::kF32, c.hc * c.hc, c.n);
    if (!x.step([&] { be().hc_pre(mix, scale, base, c.eps, c.iters, X, xo, post, comb); })) continue;
    std::vector<float> rx(static_cast<size_t>(c.n * c.D)), rp(static_cast<size_t>(c.n * c.hc)),
        rc(static_cast<size_t>(c.n * c.hc * c.hc));
    for (int64_t t = 0; t < c.n; ++t)
      hc_pre_token(d.mix.data() + t * n_mix, d.scale.data(), d.base.data(), c.hc, c.D, c.eps, c.iters,
                   d.X.data() + t * c.hc * c.D, rx.data() + t * c.D, rp.data() + t * c.hc, rc.data() + t * c.hc * c.hc);
    EXPECT_TRUE(same_f32("hc_pre comb", rc, x.get<float>(comb), c.n, c.hc * c.hc));
    EXPECT_TRUE(same_f32("hc_pre post", rp, x.get<float>(post), c.n, c.hc));
    EXPECT_TRUE(same_f32("hc_pre x", rx, x.get<float>(xo), c.n, c.D));
    count("hc_pre");
  }
}

TEST_P(Conformance, HcPost) {
  uint64_t seed = 800;
  for (const HcCase& c : hc_cases()) {
    SCOPED_TRACE("hc_post case " + c.name);
    Ctx x(be());
    Rng rng(++seed);
    std::vector<float> X = rng.normals(c.n * c.hc * c.D), y = rng.normals(c.n * c.D),
                       post = rng.normals(c.n * c.hc), comb = rng.normals(c.n * c.hc * c.hc, 0.5f);
    if (c.specials) {
      inject_specials(X, rng, 8);
      inject_specials(y, rng, 3);
      comb[1] = f_nan();
    }
    const Tensor Xt = x.f32(X, c.hc * c.D, c.n), yt = x.f32(y, c.D, c.n), pt = x.f32(post, c.hc, c.n),
                 ct = x.f32(comb, c.hc * c.hc, c.n);
    const Tensor out = x.alloc(TensorType::kF32, c.hc * c.D, c.n);
    if (!x.step([&] { be().hc_post(Xt, yt, pt, ct, out); })) continue;
    std::vector<float> ref(static_cast<size_t>(c.n * c.hc * c.D));
    for (int64_t t = 0; t < c.n; ++t)
      hc_post_token(X.data() + t * c.hc * c.D, y.data() + t * c.D, post.data() + t * c.hc, comb.data() + t * c.hc * c.hc,
                    c.hc, c.D, ref.data() + t * c.hc * c.D);
    EXPECT_TRUE(same_f32("hc_post X_out", ref, x.get<float>(out), c.n, c.hc * c.D));
    count("hc_post");
  }
}

// matmul_hc_post: matmul(w, x, y), then hc_post(X, y, post, comb, X_out) as one op. A GPU computes HC
// post in the decode product's epilogue (one row, quantized weights); other shapes and types take the
// two ops.
TEST_P(Conformance, MatmulHcPost) {
  struct Case {
    std::string name;
    TensorType type;
    int64_t in, D, rows, hc;
  };
  const std::vector<Case> cases = {
      {"decode_q8_0", TensorType::kQ8_0, 2048, 512, 1, 4},   {"decode_q2_k", TensorType::kQ2_K, 4096, 256, 1, 4},
      {"decode_q8_0_hc3", TensorType::kQ8_0, 1024, 96, 1, 3}, {"decode_f16", TensorType::kF16, 1024, 64, 1, 4},
      {"prompt_q8_0", TensorType::kQ8_0, 1024, 128, 3, 4},
  };
  uint64_t seed = 850;
  for (const Case& c : cases) {
    SCOPED_TRACE("matmul_hc_post case " + c.name);
    if (!supported(Op::kMatmul, c.type)) continue;
    Ctx x(be());
    Rng rng(++seed);
    const int64_t ne[2] = {c.in, c.D};
    const Tensor w = x.weight(c.type, weight_bytes(c.type, c.in, c.D, rng, WeightGen::kRandom,
                                                   2.0f / std::sqrt(static_cast<float>(c.in))),
                              2, ne);
    const uint8_t* w_bytes = x.host_bytes_of_last();
    std::vector<float> xs = rng.normals(c.rows * c.in), X = rng.normals(c.rows * c.hc * c.D),
                       post = rng.normals(c.rows * c.hc), comb = rng.normals(c.rows * c.hc * c.hc, 0.5f);
    const Tensor xt = x.f32(xs, c.in, c.rows), Xt = x.f32(X, c.hc * c.D, c.rows), pt = x.f32(post, c.hc, c.rows),
                 ct = x.f32(comb, c.hc * c.hc, c.rows);
    const Tensor y = x.alloc(TensorType::kF32, c.D, c.rows), X_out = x.alloc(TensorType::kF32, c.hc * c.D, c.rows);
    if (!x.step([&] { be().matmul_hc_post(w, xt, y, Xt, pt, ct, X_out); })) continue;
    std::vector<float> ry(static_cast<size_t>(c.rows * c.D)), rX(static_cast<size_t>(c.rows * c.hc * c.D));
    matmul(c.type, w_bytes, c.in, c.D, xs.data(), c.in, c.rows, ry.data(), c.D);
    for (int64_t t = 0; t < c.rows; ++t)
      hc_post_token(X.data() + t * c.hc * c.D, ry.data() + t * c.D, post.data() + t * c.hc,
                    comb.data() + t * c.hc * c.hc, c.hc, c.D, rX.data() + t * c.hc * c.D);
    EXPECT_TRUE(same_f32("matmul_hc_post y", ry, x.get<float>(y), c.rows, c.D));
    EXPECT_TRUE(same_f32("matmul_hc_post X_out", rX, x.get<float>(X_out), c.rows, c.hc * c.D));
    count("matmul_hc_post");
  }
}

TEST_P(Conformance, HcHead) {
  uint64_t seed = 900;
  for (const HcCase& c : hc_cases()) {
    SCOPED_TRACE("hc_head case " + c.name);
    Ctx x(be());
    Rng rng(++seed);
    std::vector<float> mix = rng.normals(c.n * c.hc, 1.5f), base = rng.normals(c.hc, 0.5f), X = rng.normals(c.n * c.hc * c.D);
    std::vector<float> scale = {rng.uniform(0.3f, 2.0f)};
    if (c.specials) {
      inject_specials(mix, rng, 2);
      inject_specials(X, rng, 8);
    }
    const Tensor mt = x.f32(mix, c.hc, c.n), st = x.f32_1d(scale), bt = x.f32_1d(base), Xt = x.f32(X, c.hc * c.D, c.n);
    const Tensor y = x.alloc(TensorType::kF32, c.D, c.n);
    if (!x.step([&] { be().hc_head(mt, st, bt, c.eps, Xt, y); })) continue;
    std::vector<float> ref(static_cast<size_t>(c.n * c.D));
    for (int64_t t = 0; t < c.n; ++t)
      hc_head_token(mix.data() + t * c.hc, scale[0], base.data(), c.hc, c.D, c.eps, X.data() + t * c.hc * c.D,
                    ref.data() + t * c.D);
    EXPECT_TRUE(same_f32("hc_head y", ref, x.get<float>(y), c.n, c.D));
    count("hc_head");
  }
}

// hc_pre_norm: rms_norm(X) → matmul(fn) → hc_pre → rms_norm(collapsed, norm), as the scalar
// references composed. The CUDA backend fuses it for float fn types whose rows fit in shared memory
// (the F32 D4096 and Q8_0 cases take its unfused path); the CPU runs the four ops.
struct HcPreNormCase {
  std::string name;
  int64_t n, hc, D, iters;
  float eps;
  TensorType fn_type;
  bool norm_weight = true;
  int specials = 0;  // 1: NaN / inf in X
};

TEST_P(Conformance, HcPreNorm) {
  const std::vector<HcPreNormCase> cases = {
      {"real_hc4_D4096_f16", 2, 4, 4096, 20, 1e-6f, TensorType::kF16},
      {"tokens5_D256_f16", 5, 4, 256, 20, 1e-6f, TensorType::kF16},
      {"f32_D64", 3, 4, 64, 3, 1e-6f, TensorType::kF32},
      {"f32_D4096_unfused", 1, 4, 4096, 20, 1e-6f, TensorType::kF32},
      {"bf16_hc2_D33", 3, 2, 33, 5, 1e-4f, TensorType::kBF16},
      {"f16_hc3_D5_no_norm_weight", 2, 3, 5, 7, 1e-6f, TensorType::kF16, false},
      {"q8_0_unfused", 2, 4, 64, 20, 1e-6f, TensorType::kQ8_0},
      {"specials_f16", 3, 4, 96, 20, 1e-6f, TensorType::kF16, true, 1},
  };
  uint64_t seed = 950;
  for (const HcPreNormCase& c : cases) {
    SCOPED_TRACE("hc_pre_norm case " + c.name);
    if (!supported(Op::kMatmul, c.fn_type)) continue;
    Ctx x(be());
    Rng rng(++seed);
    const int64_t n_mix = (2 + c.hc) * c.hc, HD = c.hc * c.D;
    std::vector<float> X = rng.normals(c.n * HD), base = rng.normals(n_mix, 0.5f), normw = rng.normals(c.D, 0.5f);
    std::vector<float> scale = {rng.uniform(0.3f, 2.0f), rng.uniform(0.3f, 2.0f), rng.uniform(0.3f, 2.0f)};
    if (c.specials) inject_specials(X, rng, 6);
    const int64_t ne[2] = {HD, n_mix};
    backend::HcPreNormArgs a;
    const float sigma = 1.5f / std::sqrt(static_cast<float>(HD));  // mix values of order 1
    a.fn = x.weight(c.fn_type, weight_bytes(c.fn_type, HD, n_mix, rng, WeightGen::kRandom, sigma), 2, ne);
    const uint8_t* fn_bytes = x.host_bytes_of_last();
    a.X = x.f32(X, HD, c.n);
    a.scale = x.f32_1d(scale);
    a.base = x.f32_1d(base);
    a.hc_eps = c.eps;
    a.iters = c.iters;
    if (c.norm_weight) a.norm = x.f32_1d(normw);
    a.rms_eps = 1e-6f;
    a.streams = x.alloc(TensorType::kF32, HD, c.n);
    a.mix = x.alloc(TensorType::kF32, n_mix, c.n);
    a.collapsed = x.alloc(TensorType::kF32, c.D, c.n);
    a.x = x.alloc(TensorType::kF32, c.D, c.n);
    a.post = x.alloc(TensorType::kF32, c.hc, c.n);
    a.comb = x.alloc(TensorType::kF32, c.hc * c.hc, c.n);
    if (!x.step([&] { be().hc_pre_norm(a); })) continue;
    std::vector<float> rmix(static_cast<size_t>(c.n * n_mix)), rx(static_cast<size_t>(c.n * c.D)),
        rp(static_cast<size_t>(c.n * c.hc)), rc(static_cast<size_t>(c.n * c.hc * c.hc)), streams(static_cast<size_t>(HD)),
        coll(static_cast<size_t>(c.D));
    for (int64_t t = 0; t < c.n; ++t) {
      const float* Xt = X.data() + t * HD;
      rms_norm_row(Xt, HD, nullptr, a.rms_eps, streams.data());
      matmul(c.fn_type, fn_bytes, HD, n_mix, streams.data(), HD, 1, rmix.data() + t * n_mix, n_mix);
      hc_pre_token(rmix.data() + t * n_mix, scale.data(), base.data(), c.hc, c.D, c.eps, c.iters, Xt, coll.data(),
                   rp.data() + t * c.hc, rc.data() + t * c.hc * c.hc);
      rms_norm_row(coll.data(), c.D, c.norm_weight ? normw.data() : nullptr, a.rms_eps, rx.data() + t * c.D);
    }
    EXPECT_TRUE(same_f32("hc_pre_norm mix", rmix, x.get<float>(a.mix), c.n, n_mix));
    EXPECT_TRUE(same_f32("hc_pre_norm comb", rc, x.get<float>(a.comb), c.n, c.hc * c.hc));
    EXPECT_TRUE(same_f32("hc_pre_norm post", rp, x.get<float>(a.post), c.n, c.hc));
    EXPECT_TRUE(same_f32("hc_pre_norm x", rx, x.get<float>(a.x), c.n, c.D));
    count("hc_pre_norm");
  }
}

// hc_pre_norm twice (two inputs, the same outputs), then an op that reads its post and comb, in one step:
// a backend may compute post and comb after the op returns (CUDA: the Sinkhorn as a side launch beside
// the next kernels), so the reader must see the second call's values and the second call must not race
// the first one's. Readers: matmul_hc_post (the decode case takes CUDA's product epilogue) and hc_post.
// The second call's fn may be Q8_0 (CUDA: the four-op path, whose matmul writes mix first).
TEST_P(Conformance, HcPreNormThenPost) {
  struct Case {
    std::string name;
    int64_t n, D;
    bool matmul_reader;
    TensorType fn2 = TensorType::kF16;  // the second call's fn type
  };
  const std::vector<Case> cases = {{"decode_matmul_hc_post", 1, 512, true},
                                   {"tokens2_hc_post", 2, 256, false},
                                   {"second_unfused_q8_0", 1, 256, false, TensorType::kQ8_0}};
  uint64_t seed = 1900;
  for (const Case& c : cases) {
    SCOPED_TRACE("hc_pre_norm then post case " + c.name);
    if (!supported(Op::kMatmul, TensorType::kF16) || !supported(Op::kMatmul, TensorType::kQ8_0)) continue;
    Ctx x(be());
    Rng rng(++seed);
    const int64_t hc = 4, n = c.n, D = c.D, n_mix = (2 + hc) * hc, HD = hc * D, in = 2048;
    const float hc_eps = 1e-6f, rms_eps = 1e-6f;
    const int64_t iters = 20;
    std::vector<float> X1 = rng.normals(n * HD), X2 = rng.normals(n * HD, 2.0f), base = rng.normals(n_mix, 0.5f),
                       normw = rng.normals(D, 0.5f), xin = rng.normals(n * in), y_in = rng.normals(n * D);
    std::vector<float> scale = {rng.uniform(0.3f, 2.0f), rng.uniform(0.3f, 2.0f), rng.uniform(0.3f, 2.0f)};
    const int64_t fn_ne[2] = {HD, n_mix}, w_ne[2] = {in, D};
    backend::HcPreNormArgs a;
    a.fn = x.weight(TensorType::kF16, weight_bytes(TensorType::kF16, HD, n_mix, rng, WeightGen::kRandom,
                                                   1.5f / std::sqrt(static_cast<float>(HD))),
                    2, fn_ne);
    const Tensor fn1 = a.fn;
    const Tensor fn2 = x.weight(c.fn2, weight_bytes(c.fn2, HD, n_mix, rng, WeightGen::kRandom,
                                                    1.5f / std::sqrt(static_cast<float>(HD))),
                                2, fn_ne);
    const uint8_t* fn_bytes = x.host_bytes_of_last();
    const Tensor w = x.weight(TensorType::kQ8_0, weight_bytes(TensorType::kQ8_0, in, D, rng, WeightGen::kRandom,
                                                              2.0f / std::sqrt(static_cast<float>(in))),
                              2, w_ne);
    const uint8_t* w_bytes = x.host_bytes_of_last();
    const Tensor X1t = x.f32(X1, HD, n), X2t = x.f32(X2, HD, n), xt = x.f32(xin, in, n), yt_in = x.f32(y_in, D, n);
    a.scale = x.f32_1d(scale);
    a.base = x.f32_1d(base);
    a.hc_eps = hc_eps;
    a.iters = iters;
    a.norm = x.f32_1d(normw);
    a.rms_eps = rms_eps;
    a.streams = x.alloc(TensorType::kF32, HD, n);
    a.mix = x.alloc(TensorType::kF32, n_mix, n);
    a.collapsed = x.alloc(TensorType::kF32, D, n);
    a.x = x.alloc(TensorType::kF32, D, n);
    a.post = x.alloc(TensorType::kF32, hc, n);
    a.comb = x.alloc(TensorType::kF32, hc * hc, n);
    const Tensor y = x.alloc(TensorType::kF32, D, n), X_out = x.alloc(TensorType::kF32, HD, n);
    const bool ran = x.step([&] {
      backend::HcPreNormArgs first = a;
      first.X = X1t;
      first.fn = fn1;
      be().hc_pre_norm(first);
      backend::HcPreNormArgs second = a;
      second.X = X2t;
      second.fn = fn2;
      be().hc_pre_norm(second);
      if (c.matmul_reader)
        be().matmul_hc_post(w, xt, y, X2t, a.post, a.comb, X_out);
      else
        be().hc_post(X2t, yt_in, a.post, a.comb, X_out);
    });
    if (!ran) continue;
    std::vector<float> rmix(static_cast<size_t>(n_mix)), rp(static_cast<size_t>(n * hc)),
        rc(static_cast<size_t>(n * hc * hc)), streams(static_cast<size_t>(HD)), coll(static_cast<size_t>(D)),
        ry(static_cast<size_t>(n * D)), rX(static_cast<size_t>(n * HD));
    if (c.matmul_reader)
      matmul(TensorType::kQ8_0, w_bytes, in, D, xin.data(), in, n, ry.data(), D);
    else
      ry = y_in;
    for (int64_t t = 0; t < n; ++t) {
      const float* Xt = X2.data() + t * HD;
      rms_norm_row(Xt, HD, nullptr, rms_eps, streams.data());
      matmul(c.fn2, fn_bytes, HD, n_mix, streams.data(), HD, 1, rmix.data(), n_mix);
      hc_pre_token(rmix.data(), scale.data(), base.data(), hc, D, hc_eps, iters, Xt, coll.data(), rp.data() + t * hc,
                   rc.data() + t * hc * hc);
      hc_post_token(Xt, ry.data() + t * D, rp.data() + t * hc, rc.data() + t * hc * hc, hc, D, rX.data() + t * HD);
    }
    EXPECT_TRUE(same_f32("hc_pre_norm post", rp, x.get<float>(a.post), n, hc));
    EXPECT_TRUE(same_f32("hc_pre_norm comb", rc, x.get<float>(a.comb), n, hc * hc));
    EXPECT_TRUE(same_f32("hc post X_out", rX, x.get<float>(X_out), n, HD));
    count("hc_pre_norm then post");
  }
}

// rms_norm_for and hc_pre_norm with MatmulConsumers, then the matmuls that read their output: a backend
// may quantize the output for them in the producing kernel (CUDA: its twins, cuda_backend.cuh); the
// products must be the bits of matmul on the stored output. In the "rewritten" cases an op without
// consumers writes the output again before the matmuls, so a copy of the first output must not be used.
struct ProducerQuantCase {
  std::string name;
  bool hc;  // hc_pre_norm (hc 4, D = n, F16 fn) or rms_norm_for
  int64_t rows, n;
  TensorType t0, t1;  // the two consumers' weight types
  bool rewritten = false;
};

TEST_P(Conformance, ProducerQuantizedMatmul) {
  const std::vector<ProducerQuantCase> cases = {
      {"norm_q8_0_iq2", false, 1, 1024, TensorType::kQ8_0, TensorType::kIQ2_XXS},
      {"norm_rows3_q8_0_q2k", false, 3, 1024, TensorType::kQ8_0, TensorType::kQ2_K},
      {"norm_rows9_q8_0_f16", false, 9, 512, TensorType::kQ8_0, TensorType::kF16},
      {"norm_rewritten", false, 2, 1024, TensorType::kQ8_0, TensorType::kQ2_K, true},
      {"hc_D2048_q8_0_iq2", true, 1, 2048, TensorType::kQ8_0, TensorType::kIQ2_XXS},
      {"hc_tokens3_q2k_q8_0", true, 3, 2048, TensorType::kQ2_K, TensorType::kQ8_0},
      {"hc_rewritten", true, 2, 2048, TensorType::kQ8_0, TensorType::kIQ2_XXS, true},
  };
  uint64_t seed = 1700;
  for (const ProducerQuantCase& c : cases) {
    SCOPED_TRACE("producer-quantized matmul case " + c.name);
    if (!supported(Op::kMatmul, c.t0) || !supported(Op::kMatmul, c.t1) || !supported(Op::kMatmul, TensorType::kF16))
      continue;
    Ctx x(be());
    Rng rng(++seed);
    const int64_t n = c.n, rows = c.rows, outs[2] = {96, 64};
    const TensorType types[2] = {c.t0, c.t1};
    Tensor w[2];
    const uint8_t* w_bytes[2];
    for (int k = 0; k < 2; ++k) {
      const int64_t ne[2] = {n, outs[k]};
      w[k] = x.weight(types[k], weight_bytes(types[k], n, outs[k], rng, WeightGen::kQuantized, 0.5f), 2, ne);
      w_bytes[k] = x.host_bytes_of_last();
    }
    backend::MatmulConsumers consumers;
    consumers.add(c.t0);
    consumers.add(c.t1);
    const Tensor y = x.alloc(TensorType::kF32, n, rows);
    const Tensor out0 = x.alloc(TensorType::kF32, outs[0], rows), out1 = x.alloc(TensorType::kF32, outs[1], rows);
    std::vector<float> ry(static_cast<size_t>(rows * n));
    const std::vector<float> Z = rng.normals(rows * n, 3.0f);  // the rewritten cases' second input
    const Tensor z = x.f32(Z, n, rows);
    std::function<void()> produce;
    backend::HcPreNormArgs a;
    std::vector<float> X, normw;
    Tensor xin, nw;
    if (c.hc) {
      const int64_t hc = 4, n_mix = (2 + hc) * hc, HD = hc * n;
      X = rng.normals(rows * HD);
      normw = rng.normals(n, 0.5f);
      std::vector<float> base = rng.normals(n_mix, 0.5f);
      std::vector<float> scale = {rng.uniform(0.3f, 2.0f), rng.uniform(0.3f, 2.0f), rng.uniform(0.3f, 2.0f)};
      const int64_t ne[2] = {HD, n_mix};
      a.fn = x.weight(TensorType::kF16, weight_bytes(TensorType::kF16, HD, n_mix, rng, WeightGen::kRandom,
                                                     1.5f / std::sqrt(static_cast<float>(HD))),
                      2, ne);
      const uint8_t* fn_bytes = x.host_bytes_of_last();
      a.X = x.f32(X, HD, rows);
      a.scale = x.f32_1d(scale);
      a.base = x.f32_1d(base);
      a.hc_eps = 1e-6f;
      a.iters = 20;
      a.norm = x.f32_1d(normw);
      a.rms_eps = 1e-6f;
      a.streams = x.alloc(TensorType::kF32, HD, rows);
      a.mix = x.alloc(TensorType::kF32, n_mix, rows);
      a.collapsed = x.alloc(TensorType::kF32, n, rows);
      a.x = y;
      a.post = x.alloc(TensorType::kF32, hc, rows);
      a.comb = x.alloc(TensorType::kF32, hc * hc, rows);
      a.x_consumers = consumers;
      produce = [&] { be().hc_pre_norm(a); };
      std::vector<float> mix(static_cast<size_t>(n_mix)), streams(static_cast<size_t>(HD)), coll(static_cast<size_t>(n)),
          post(static_cast<size_t>(hc)), comb(static_cast<size_t>(hc * hc));
      for (int64_t t = 0; t < rows; ++t) {
        const float* Xt = X.data() + t * HD;
        rms_norm_row(Xt, HD, nullptr, a.rms_eps, streams.data());
        matmul(TensorType::kF16, fn_bytes, HD, n_mix, streams.data(), HD, 1, mix.data(), n_mix);
        hc_pre_token(mix.data(), scale.data(), base.data(), hc, n, a.hc_eps, a.iters, Xt, coll.data(), post.data(),
                     comb.data());
        rms_norm_row(coll.data(), n, normw.data(), a.rms_eps, ry.data() + t * n);
      }
    } else {
      X = rng.normals(rows * n, 2.0f);
      normw = rng.normals(n, 0.3f);
      for (auto& v : normw) v += 1.0f;
      xin = x.f32(X, n, rows);
      nw = x.f32_1d(normw);
      produce = [&] { be().rms_norm_for(xin, nw, 1e-6f, y, consumers); };
      for (int64_t t = 0; t < rows; ++t) rms_norm_row(X.data() + t * n, n, normw.data(), 1e-6f, ry.data() + t * n);
    }
    if (c.rewritten)
      for (int64_t t = 0; t < rows; ++t) rms_norm_row(Z.data() + t * n, n, nullptr, 1e-6f, ry.data() + t * n);
    const backend::MatmulJob jobs[2] = {{w[0], y, out0}, {w[1], y, out1}};
    if (!x.step([&] {
          produce();
          if (c.rewritten) be().rms_norm(z, {}, 1e-6f, y);
          be().matmul_batch(jobs);
        }))
      continue;
    EXPECT_TRUE(same_f32("producer output", ry, x.get<float>(y), rows, n));
    for (int k = 0; k < 2; ++k) {
      std::vector<float> ref(static_cast<size_t>(rows * outs[k]));
      matmul(types[k], w_bytes[k], n, outs[k], ry.data(), n, rows, ref.data(), outs[k]);
      EXPECT_TRUE(same_f32("consumer " + std::to_string(k), ref, x.get<float>(k == 0 ? out0 : out1), rows, outs[k]));
    }
    count("producer_quantized_matmul");
  }
}

}  // namespace
}  // namespace dsv4::conformance
