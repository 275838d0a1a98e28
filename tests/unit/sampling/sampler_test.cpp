// tests/unit/sampling/sampler_test.cpp — the sampler against hand-built logits, a full-sort
// reference of the documented pipeline, reference RNG values, and a double log-softmax.
//
// Every random quantity comes from fixed seeds, so statistical checks (chi-square bounds, supports)
// are deterministic: they either always pass or always fail. (Speed: `dsv4 bench sampler`.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <set>
#include <vector>

#include "sampling/sampler.h"
#include "sampling/weights.h"

namespace dsv4::sampling {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

SamplerConfig off_config(float temperature = 1.0f, uint64_t seed = 1) {
  SamplerConfig c;
  c.temperature = temperature;
  c.min_p = 0.0f;
  c.seed = seed;
  return c;
}

// Draws n ids from a fresh sampler, the logits copied for every call (sample() uses them as scratch).
std::vector<int32_t> draw(const SamplerConfig& cfg, const std::vector<float>& logits, int n) {
  Sampler s(cfg, static_cast<int32_t>(logits.size()));
  std::vector<int32_t> ids;
  std::vector<float> scratch;
  for (int i = 0; i < n; ++i) {
    scratch = logits;
    ids.push_back(s.sample(scratch));
  }
  return ids;
}

std::vector<int> histogram(const std::vector<int32_t>& ids, size_t n_vocab) {
  std::vector<int> h(n_vocab, 0);
  for (int32_t id : ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(static_cast<size_t>(id), n_vocab);
    if (id >= 0 && static_cast<size_t>(id) < n_vocab) ++h[static_cast<size_t>(id)];
  }
  return h;
}

std::set<int32_t> support(const std::vector<int32_t>& ids) { return {ids.begin(), ids.end()}; }

// Pearson's statistic of observed counts against probabilities (ids with p = 0 must never occur).
double chi_square(const std::vector<int>& counts, const std::vector<double>& p) {
  const double total = std::accumulate(counts.begin(), counts.end(), 0.0);
  double chi = 0.0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (p[i] == 0.0) {
      EXPECT_EQ(counts[i], 0) << "id " << i << " has probability 0";
      continue;
    }
    const double e = total * p[i];
    chi += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi;
}

// softmax(l / T) in double.
std::vector<double> softmax(const std::vector<float>& l, double t) {
  const double m = *std::max_element(l.begin(), l.end());
  std::vector<double> p(l.size());
  double z = 0.0;
  for (size_t i = 0; i < l.size(); ++i) z += p[i] = std::exp((l[i] - m) / t);
  for (double& x : p) x /= z;
  return p;
}

// Standard normal numbers from our own RNG (Box-Muller); only the test's inputs depend on libm.
struct Normal {
  explicit Normal(uint64_t seed) : rng(seed) {}
  double operator()() {
    const double u1 = 1.0 - rng.next_double();  // (0, 1]
    const double u2 = rng.next_double();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  Rng rng;
};

// Logits shaped like a language model's: a broad bulk plus a few strong candidates. `quantum` > 0
// rounds them to multiples of it, which makes many exact ties.
std::vector<float> lm_logits(size_t n, uint64_t seed, float quantum = 0.0f) {
  Normal normal(seed);
  std::vector<float> l(n);
  for (float& v : l) v = static_cast<float>(2.0 * normal());
  Rng pick(seed ^ 0x5555);
  for (int j = 0; j < 12; ++j) l[pick.next_u64() % n] = static_cast<float>(8.0 + 2.0 * normal());
  if (quantum > 0.0f) {
    for (float& v : l) v = std::round(v / quantum) * quantum;
  }
  return l;
}

// ---- a plain full-sort implementation of the documented rule (no bias, no penalties) ---------
// It shares only the weights and the whole-vocabulary sum (weights.h) with the sampler, so every
// pre-filter, selection and lazy sort in sampler.cpp is checked against a plain sort, draw for draw.

int32_t reference_sample(const std::vector<float>& l, const SamplerConfig& cfg, double u) {
  const size_t n = l.size();
  const float t = cfg.temperature;
  const float mx = *std::max_element(l.begin(), l.end());
  auto weight = [&](float v) { return token_weight(v, mx, t); };
  const size_t k = cfg.top_k > 0 && static_cast<size_t>(cfg.top_k) < n ? static_cast<size_t>(cfg.top_k) : 0;
  const bool top_p_on = cfg.top_p < 1.0f, min_p_on = cfg.min_p > 0.0f;
  if (k == 0 && !top_p_on && !min_p_on) {
    // Documented: the walk goes in id order. (The sampler adds whole blocks first; a plain running
    // sum differs from that only in the last bits, which no draw here lands on.)
    const double z = sum_token_weights(l, mx, t);
    double acc = 0.0;
    int32_t last = 0;
    for (size_t i = 0; i < n; ++i) {
      const float w = weight(l[i]);
      if (w <= 0.0f) continue;
      acc += w;
      last = static_cast<int32_t>(i);
      if (acc > u * z) return last;
    }
    return last;
  }
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  const size_t lim = k ? k : n;
  double z = 0.0;  // the weight of the top-k set: in sorted order, or over everything in id order
  if (k) {
    for (size_t r = 0; r < lim; ++r) z += weight(l[static_cast<size_t>(order[r])]);
  } else {
    z = sum_token_weights(l, mx, t);
  }
  std::vector<std::pair<float, int32_t>> kept;
  double mass = 0.0;
  for (size_t r = 0; r < lim; ++r) {
    const float w = weight(l[static_cast<size_t>(order[r])]);
    if (min_p_on && r > 0 && w < cfg.min_p) break;
    kept.emplace_back(w, order[r]);
    mass += w;
    if (top_p_on && mass >= static_cast<double>(cfg.top_p) * z) break;
  }
  double acc = 0.0;
  int32_t last = kept[0].second;
  for (const auto& [w, id] : kept) {
    if (w <= 0.0f) continue;
    acc += w;
    last = id;
    if (acc > u * mass) return id;
  }
  return last;
}

// ---- weights -----------------------------------------------------------------------------

TEST(Weights, ExpNonpositiveIsWithinTwoUlpAndExactAtZero) {
  EXPECT_EQ(exp_nonpositive(0.0f), 1.0f);
  EXPECT_EQ(exp_nonpositive(-0.0f), 1.0f);
  EXPECT_EQ(exp_nonpositive(-87.0f), 0.0f);
  EXPECT_EQ(exp_nonpositive(-1000.0f), 0.0f);
  EXPECT_EQ(exp_nonpositive(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(exp_nonpositive(kNaN), 0.0f);
  // Every 64th float in (−87, 0]: relative error below 2 ulp (2^-23), never decreasing.
  double worst = 0.0;
  float prev = 0.0f;
  int steps = 0;
  for (float x = std::nextafter(-87.0f, 0.0f); x < 0.0f;) {
    const float y = exp_nonpositive(x);
    const double e = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(y - e) / e);
    EXPECT_GE(y, prev) << x;
    prev = y;
    ++steps;
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    bits -= 64;  // towards zero
    std::memcpy(&x, &bits, 4);
    if (bits < 64) break;
  }
  EXPECT_GT(steps, 10000000);
  EXPECT_LT(worst, 0x1.0p-23) << worst;
}

TEST(Weights, TokenWeightAndSumMatchDoubleSoftmaxTerms) {
  const std::vector<float> l = lm_logits(129280, 17);
  const float mx = *std::max_element(l.begin(), l.end());
  for (float t : {0.3f, 1.0f, 2.5f}) {
    double ref = 0.0;
    for (float v : l) ref += std::exp((static_cast<double>(v) - mx) / t);
    EXPECT_NEAR(sum_token_weights(l, mx, t) / ref, 1.0, 1e-6) << t;
    EXPECT_EQ(token_weight(mx, mx, t), 1.0f);
  }
  EXPECT_EQ(sum_token_weights(std::vector<float>{}, 0.0f, 1.0f), 0.0);
  EXPECT_EQ(sum_token_weights(std::vector<float>(3, 2.0f), 2.0f, 1.0f), 3.0);
}

// ---- Rng -----------------------------------------------------------------------------------

TEST(Rng, MatchesReferenceXoshiro256StarStarSeededBySplitmix64) {
  // Computed with an independent Python implementation of splitmix64 + xoshiro256**.
  struct Case {
    uint64_t seed;
    uint64_t out[4];
  };
  const Case cases[] = {
      {0, {0x99ec5f36cb75f2b4ULL, 0xbf6e1f784956452aULL, 0x1a5f849d4933e6e0ULL, 0x6aa594f1262d2d2cULL}},
      {42, {0x15780b2e0c2ec716ULL, 0x6104d9866d113a7eULL, 0xae17533239e499a1ULL, 0xecb8ad4703b360a1ULL}},
      {0xffffffffffffffffULL,
       {0x8f5520d52a7ead08ULL, 0xc476a018caa1802dULL, 0x81de31c0d260469eULL, 0xbf658d7e065f3c2fULL}},
  };
  for (const Case& c : cases) {
    Rng rng(c.seed);
    for (uint64_t want : c.out) EXPECT_EQ(rng.next_u64(), want) << "seed " << c.seed;
  }
}

TEST(Rng, NextDoubleIsTheTop53BitsScaled) {
  Rng rng(42);
  EXPECT_EQ(rng.next_double(), 0.08386297105988216);
  EXPECT_EQ(rng.next_double(), 0.3789802506626686);
  EXPECT_EQ(rng.next_double(), 0.6800434110281394);
  Rng a(7), b(7);
  for (int i = 0; i < 1000; ++i) {
    const uint64_t x = a.next_u64();
    EXPECT_EQ(b.next_double(), static_cast<double>(x >> 11) / 9007199254740992.0);
  }
}

TEST(Rng, NextDoubleStaysInHalfOpenUnitIntervalWithMeanOneHalf) {
  Rng rng(123);
  double lo = 1.0, hi = 0.0, sum = 0.0;
  const int n = 1000000;
  for (int i = 0; i < n; ++i) {
    const double u = rng.next_double();
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    sum += u;
  }
  EXPECT_GE(lo, 0.0);
  EXPECT_LT(hi, 1.0);
  EXPECT_NEAR(sum / n, 0.5, 0.002);  // σ of the mean is 0.00029
}

// ---- greedy --------------------------------------------------------------------------------

TEST(Argmax, HighestLogitTiesToLowestIdNaNNeverWins) {
  EXPECT_EQ(argmax(std::vector<float>{1, 3, 2, 3}), 1);
  EXPECT_EQ(argmax(std::vector<float>{-5, -5, -5}), 0);
  EXPECT_EQ(argmax(std::vector<float>{kNaN, 1, kNaN, 4, 4}), 3);
  EXPECT_EQ(argmax(std::vector<float>{-std::numeric_limits<float>::infinity(), -1e30f}), 1);
  EXPECT_EQ(argmax(std::vector<float>{}), -1);
}

TEST(Sampler, TemperatureZeroIsArgmaxWithLowestIdTiesAndIgnoresSeed) {
  const std::vector<float> l = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f};
  for (uint64_t seed : {0ULL, 1ULL, 99ULL, 0xdeadbeefULL}) {
    SamplerConfig cfg;
    cfg.temperature = 0.0f;
    cfg.seed = seed;
    for (int32_t id : draw(cfg, l, 50)) EXPECT_EQ(id, 1);
  }
  const std::vector<float> big = lm_logits(129280, 3, 0.5f);
  SamplerConfig cfg = off_config(0.0f, 5);
  cfg.top_k = 3;
  cfg.top_p = 0.1f;  // cut parameters do not matter when greedy
  EXPECT_EQ(draw(cfg, big, 1)[0], argmax(big));
}

// ---- determinism and the RNG stream ------------------------------------------------------

TEST(Sampler, SameSeedSameSequenceDifferentSeedDifferentSequence) {
  const std::vector<float> flat(8, 0.0f);
  for (const SamplerConfig& base : {off_config(1.0f), SamplerConfig{}}) {
    SamplerConfig c1 = base, c2 = base;
    c1.seed = 1;
    c2.seed = 2;
    const auto a = draw(c1, flat, 2000), b = draw(c1, flat, 2000), c = draw(c2, flat, 2000);
    EXPECT_EQ(a, b);
    int same = 0;
    for (size_t i = 0; i < a.size(); ++i) same += a[i] == c[i];
    EXPECT_LT(same, 400);  // 1/8 expected: 250 ± 15
    EXPECT_EQ(support(a).size(), 8u);
  }
}

TEST(Sampler, EveryNonGreedyCallConsumesExactlyOneDraw) {
  // A coin (two equal logits: id 0 iff u < 0.5) interleaved with calls that are decided anyway
  // (min-p drops id 1; a weight of e^−100; a +inf logit): the coins follow every other draw.
  const std::vector<float> coin = {0.0f, 0.0f};
  const std::vector<float> lone = {0.0f, -100.0f};
  const std::vector<float> inf = {0.0f, std::numeric_limits<float>::infinity()};
  for (int variant = 0; variant < 3; ++variant) {
    SamplerConfig cfg = variant == 1 ? off_config(1.0f) : SamplerConfig{};  // defaults: min-p 0.05
    cfg.seed = 77 + static_cast<uint64_t>(variant);
    Sampler s(cfg, 2);
    Rng rng(cfg.seed);
    for (int i = 0; i < 500; ++i) {
      std::vector<float> l = coin;
      EXPECT_EQ(s.sample(l), rng.next_double() < 0.5 ? 0 : 1) << i;
      l = variant == 2 ? inf : lone;
      EXPECT_EQ(s.sample(l), variant == 2 ? 1 : 0);
      (void)rng.next_double();
    }
  }
}

TEST(Sampler, ResetRestoresTheInitialStreamAndForgetsHistory) {
  const std::vector<float> l = lm_logits(1000, 8);
  SamplerConfig cfg;
  cfg.seed = 31;
  cfg.temperature = 1.5f;
  cfg.frequency_penalty = 1.0f;
  Sampler s(cfg, 1000);
  std::vector<int32_t> first, second;
  for (int pass = 0; pass < 2; ++pass) {
    auto& out = pass == 0 ? first : second;
    for (int i = 0; i < 200; ++i) {
      std::vector<float> scratch = l;
      out.push_back(s.sample(scratch));
      s.accept(out.back());
    }
    s.reset();
  }
  EXPECT_EQ(first, second);
  EXPECT_GT(support(first).size(), 5u);
}

// ---- the distribution --------------------------------------------------------------------

TEST(Sampler, FrequenciesMatchSoftmaxOnBothWalks) {
  // Eight ids, 200k draws, fixed seeds. Chi-square with 7 degrees of freedom: P(χ² > 30) ≈ 1e-4.
  const std::vector<float> l = {1.0f, 0.0f, 2.0f, -1.0f, 0.5f, 1.5f, -0.25f, 0.75f};
  for (float t : {1.0f, 0.6f, 2.0f}) {
    const std::vector<double> p = softmax(l, t);
    // min-p 0 walks ids in order; a tiny min-p goes through the sorted pool and cuts nothing.
    for (float min_p : {0.0f, 1e-4f}) {
      SamplerConfig cfg = off_config(t, 2024);
      cfg.min_p = min_p;
      const auto counts = histogram(draw(cfg, l, 200000), l.size());
      EXPECT_LT(chi_square(counts, p), 30.0) << "T " << t << " min_p " << min_p;
    }
  }
}

TEST(Sampler, TopKKeepsTheKBestWithLowestIdTies) {
  const std::vector<float> l = {0.0f, 3.0f, 1.0f, 2.5f, 2.0f, -1.0f, 2.9f, 1.5f};
  SamplerConfig cfg = off_config(1.0f, 5);
  cfg.top_k = 3;
  const auto ids = draw(cfg, l, 60000);
  EXPECT_EQ(support(ids), (std::set<int32_t>{1, 3, 6}));
  std::vector<float> cut(l.size(), -std::numeric_limits<float>::infinity());
  for (int32_t id : {1, 3, 6}) cut[static_cast<size_t>(id)] = l[static_cast<size_t>(id)];
  std::vector<double> p = softmax(cut, 1.0);
  EXPECT_LT(chi_square(histogram(ids, l.size()), p), 25.0);  // 2 dof

  const std::vector<float> ties = {1.0f, 2.0f, 2.0f, 2.0f, 0.0f, 2.0f};
  cfg.top_k = 2;
  EXPECT_EQ(support(draw(cfg, ties, 5000)), (std::set<int32_t>{1, 2}));
  cfg.top_k = 1;
  EXPECT_EQ(support(draw(cfg, ties, 100)), (std::set<int32_t>{1}));
}

TEST(Sampler, TopPKeepsTheSmallestPrefixReachingP) {
  // Probabilities 1/2, 1/4, 1/8, ... (the last id takes the rest).
  const std::vector<float> l = {std::log(0.5f), std::log(0.25f), std::log(0.125f), std::log(0.0625f),
                                std::log(0.0625f)};
  const std::vector<int32_t> order = {0, 1, 2, 3, 4};
  const struct { float p; size_t keep; } cases[] = {{0.3f, 1}, {0.6f, 2}, {0.8f, 3}, {0.9f, 4}, {0.99f, 5}, {1e-6f, 1}};
  for (const auto& c : cases) {
    SamplerConfig cfg = off_config(1.0f, 11);
    cfg.top_p = c.p;
    EXPECT_EQ(support(draw(cfg, l, 20000)), std::set<int32_t>(order.begin(), order.begin() + static_cast<ptrdiff_t>(c.keep)))
        << "top_p " << c.p;
  }
  // A flat vocabulary of 1000: mass reaches 0.5 after exactly 500 ids (lowest ids first). This
  // walks well past the first sorted chunk.
  const std::vector<float> flat(1000, 0.25f);
  SamplerConfig cfg = off_config(1.0f, 12);
  cfg.top_p = 0.5f;
  const auto s = support(draw(cfg, flat, 20000));
  EXPECT_EQ(*s.begin(), 0);
  EXPECT_EQ(*s.rbegin(), 499);
  EXPECT_EQ(s.size(), 500u);
  // 10,000 equal weights, more than the quickselect threshold. At p = 0.3f (just above 0.3) the
  // prefix reaching p·Z is ids 0..3000; at p = 0.5 the running sum hits p·Z exactly at id 4999,
  // a boundary case that the quickselect hands to the sorted walk.
  const std::vector<float> wide(10000, -1.0f);
  cfg.top_p = 0.3f;
  const auto s3 = support(draw(cfg, wide, 30000));
  EXPECT_EQ(*s3.begin(), 0);
  EXPECT_EQ(*s3.rbegin(), 3000);
  EXPECT_GT(s3.size(), 2800u);
  cfg.top_p = 0.5f;
  const auto s5 = support(draw(cfg, wide, 30000));
  EXPECT_EQ(*s5.begin(), 0);
  EXPECT_EQ(*s5.rbegin(), 4999);
  EXPECT_GT(s5.size(), 4500u);
}

TEST(Sampler, MinPDropsBelowMinPTimesTheMaxProbability) {
  // Ratios to the best: 1, 0.5, 0.2, 0.06, 0.04 (inside the pre-filter margin), 0.03, 0.001.
  const std::vector<float> l = {0.0f, std::log(0.5f), std::log(0.2f), std::log(0.06f), std::log(0.04f),
                                std::log(0.03f), std::log(0.001f)};
  SamplerConfig cfg;
  cfg.seed = 3;
  cfg.min_p = 0.05f;
  EXPECT_EQ(support(draw(cfg, l, 20000)), (std::set<int32_t>{0, 1, 2, 3}));
  cfg.min_p = 0.3f;
  EXPECT_EQ(support(draw(cfg, l, 20000)), (std::set<int32_t>{0, 1}));
  cfg.min_p = 0.9999f;
  EXPECT_EQ(support(draw(cfg, l, 200)), (std::set<int32_t>{0}));
  // Temperature scales the ratios: at T = 2 they are square roots (0.2 → 0.447, 0.001 → 0.0316).
  cfg.min_p = 0.04f;
  cfg.temperature = 2.0f;
  EXPECT_EQ(support(draw(cfg, l, 40000)), (std::set<int32_t>{0, 1, 2, 3, 4, 5}));
  // Frequencies of the survivors are the renormalised softmax.
  cfg.min_p = 0.05f;
  cfg.temperature = 1.0f;
  std::vector<float> cut = l;
  for (size_t i = 4; i < cut.size(); ++i) cut[i] = -std::numeric_limits<float>::infinity();
  EXPECT_LT(chi_square(histogram(draw(cfg, l, 100000), l.size()), softmax(cut, 1.0)), 25.0);  // 3 dof
}

TEST(Sampler, OffValuesBehaveAsOff) {
  const std::vector<float> l = lm_logits(5000, 21, 0.25f);
  const auto want = draw(off_config(1.0f, 9), l, 300);
  SamplerConfig cfg = off_config(1.0f, 9);
  for (int32_t k : {0, 5000, 5001, 1 << 30, -3}) {
    cfg.top_k = k;
    EXPECT_EQ(draw(cfg, l, 300), want) << "top_k " << k;
  }
  cfg.top_k = 0;
  cfg.top_p = 1.0f;
  cfg.min_p = 0.0f;
  EXPECT_EQ(draw(cfg, l, 300), want);
  cfg.min_p = -0.5f;
  cfg.top_p = 1.5f;
  EXPECT_EQ(draw(cfg, l, 300), want);
  cfg.min_p = kNaN;
  cfg.top_p = kNaN;
  EXPECT_EQ(draw(cfg, l, 300), want);
}

TEST(Sampler, FastPathsEqualTheFullSortReference) {
  // Every combination of the cut parameters, on logits with many exact ties, against the plain
  // implementation above, draw for draw.
  const size_t n = 20000;
  int checked = 0;
  for (float t : {0.4f, 1.0f, 1.7f}) {
    for (int32_t k : {0, 1, 2, 40, 5000, 20000}) {
      for (float top_p : {1.0f, 0.5f, 0.9f, 0.995f}) {
        for (float min_p : {0.0f, 0.01f, 0.05f, 0.4f}) {
          SamplerConfig cfg;
          cfg.temperature = t;
          cfg.top_k = k;
          cfg.top_p = top_p;
          cfg.min_p = min_p;
          cfg.seed = static_cast<uint64_t>(checked) * 7919u + 1u;
          Sampler s(cfg, static_cast<int32_t>(n));
          Rng rng(cfg.seed);
          for (int j = 0; j < 3; ++j) {
            const std::vector<float> l = lm_logits(n, static_cast<uint64_t>(checked * 3 + j), j == 1 ? 0.125f : 0.0f);
            std::vector<float> scratch = l;
            const int32_t got = s.sample(scratch);
            EXPECT_EQ(got, reference_sample(l, cfg, rng.next_double()))
                << "T " << t << " k " << k << " top_p " << top_p << " min_p " << min_p << " draw " << j;
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 3 * 6 * 4 * 4);
  // Full size: the defaults, a common combination, nth_element top-k, top-p alone.
  for (int variant = 0; variant < 4; ++variant) {
    SamplerConfig cfg;
    if (variant == 3) {  // top-p alone over a large candidate set: the quickselect path
      cfg.top_p = 0.9f;
      cfg.min_p = 0.0f;
      cfg.temperature = 1.2f;
    } else if (variant == 1) {
      cfg.top_k = 40;
      cfg.top_p = 0.95f;
    } else if (variant == 2) {
      cfg.top_k = 8000;  // above the heap limit: nth_element selection
      cfg.top_p = 0.95f;
      cfg.min_p = 0.0f;
      cfg.temperature = 3.0f;
    }
    cfg.seed = 100 + static_cast<uint64_t>(variant);
    Sampler s(cfg, 129280);
    Rng rng(cfg.seed);
    for (int j = 0; j < 10; ++j) {
      const std::vector<float> l = lm_logits(129280, 500 + static_cast<uint64_t>(j), j % 2 ? 0.0625f : 0.0f);
      std::vector<float> scratch = l;
      EXPECT_EQ(s.sample(scratch), reference_sample(l, cfg, rng.next_double())) << variant << " " << j;
    }
  }
}

TEST(Sampler, NaNLogitsAreNeverChosenAndDegenerateInputsPickTheMax) {
  const std::vector<float> l = {kNaN, 1.0f, kNaN, 0.5f};
  EXPECT_EQ(support(draw(off_config(0.0f), l, 10)), (std::set<int32_t>{1}));
  EXPECT_EQ(support(draw(off_config(1.0f), l, 5000)), (std::set<int32_t>{1, 3}));
  EXPECT_EQ(support(draw(SamplerConfig{}, l, 5000)), (std::set<int32_t>{1, 3}));
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(support(draw(off_config(1.0f), {-inf, -inf, -inf}, 20)), (std::set<int32_t>{0}));
  EXPECT_EQ(support(draw(off_config(1.0f), {0.0f, inf, 3.0f, inf}, 20)), (std::set<int32_t>{1}));
  std::vector<float> empty;
  Sampler s(SamplerConfig{}, 0);
  EXPECT_EQ(s.sample(empty), -1);
  // Logits longer than the vocabulary: only the first n_vocab are candidates.
  Sampler two(off_config(1.0f), 2);
  for (int i = 0; i < 200; ++i) {
    std::vector<float> longer = {0.0f, 0.0f, 50.0f, 50.0f};
    EXPECT_LT(two.sample(longer), 2);
  }
}

// ---- logit bias and penalties ------------------------------------------------------------

TEST(Sampler, LogitBiasBansAndForces) {
  const std::vector<float> l = {5.0f, 0.0f, 0.0f, 1.0f};
  SamplerConfig cfg = off_config(1.0f, 4);
  cfg.logit_bias = {{0, -100.0f}, {99, 50.0f}, {-1, 50.0f}};  // out-of-range ids are ignored
  auto s = support(draw(cfg, l, 20000));
  EXPECT_FALSE(s.count(0));
  EXPECT_EQ(s, (std::set<int32_t>{1, 2, 3}));
  cfg.logit_bias = {{2, 100.0f}};
  EXPECT_EQ(support(draw(cfg, l, 20000)), (std::set<int32_t>{2}));
  cfg.temperature = 0.0f;
  cfg.logit_bias = {{3, 3.5f}};
  EXPECT_EQ(draw(cfg, l, 1)[0], 0);  // 4.5 < 5
  cfg.logit_bias = {{3, 2.0f}, {3, 2.5f}};  // repeated ids add up: 5.5 > 5
  EXPECT_EQ(draw(cfg, l, 1)[0], 3);
}

// Greedy choice between id 0 (whose history is `uses` accepts) and id 1 (never seen).
int32_t greedy_after(SamplerConfig cfg, float logit0, float logit1, int uses) {
  cfg.temperature = 0.0f;
  Sampler s(cfg, 3);
  for (int i = 0; i < uses; ++i) s.accept(0);
  s.accept(2);  // another id in the history must not matter
  std::vector<float> l = {logit0, logit1, -50.0f};
  return s.sample(l);
}

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  SamplerConfig cfg;
  cfg.repetition_penalty = 2.0f;
  EXPECT_EQ(greedy_after(cfg, 2.0f, 0.99f, 1), 0);   // 2 → 1.0
  EXPECT_EQ(greedy_after(cfg, 2.0f, 1.01f, 1), 1);
  EXPECT_EQ(greedy_after(cfg, 2.0f, 1.01f, 0), 0);   // not in the history: untouched
  EXPECT_EQ(greedy_after(cfg, 2.0f, 1.01f, 5), 1);   // applied once, not per occurrence
  EXPECT_EQ(greedy_after(cfg, 2.0f, 0.99f, 5), 0);
  EXPECT_EQ(greedy_after(cfg, -1.0f, -1.99f, 1), 1);  // −1 → −2
  EXPECT_EQ(greedy_after(cfg, -1.0f, -2.01f, 1), 0);
  cfg.repetition_penalty = 0.5f;  // < 1 encourages
  EXPECT_EQ(greedy_after(cfg, 2.0f, 3.99f, 1), 0);   // 2 → 4
  cfg.repetition_penalty = 1.0f;
  EXPECT_EQ(greedy_after(cfg, 2.0f, 1.99f, 3), 0);
}

TEST(Sampler, PresenceOnceAndFrequencyPerOccurrence) {
  SamplerConfig cfg;
  cfg.presence_penalty = 0.5f;
  cfg.frequency_penalty = 0.25f;
  EXPECT_EQ(greedy_after(cfg, 3.0f, 1.99f, 2), 0);  // 3 − (0.25·2 + 0.5) = 2
  EXPECT_EQ(greedy_after(cfg, 3.0f, 2.01f, 2), 1);
  EXPECT_EQ(greedy_after(cfg, 3.0f, 1.80f, 3), 1);  // 3 − 1.25 = 1.75
  EXPECT_EQ(greedy_after(cfg, 3.0f, 1.70f, 3), 0);
  EXPECT_EQ(greedy_after(cfg, 3.0f, 2.99f, 0), 0);
  cfg.frequency_penalty = 0.0f;
  cfg.presence_penalty = 1.0f;
  EXPECT_EQ(greedy_after(cfg, 3.0f, 1.99f, 4), 0);  // presence counts once: 2
  EXPECT_EQ(greedy_after(cfg, 3.0f, 2.01f, 4), 1);
  cfg.presence_penalty = 0.0f;
  cfg.frequency_penalty = -1.0f;  // negative encourages
  EXPECT_EQ(greedy_after(cfg, 3.0f, 5.99f, 3), 0);
  EXPECT_EQ(greedy_after(cfg, 3.0f, 6.01f, 3), 1);
}

TEST(Sampler, RepetitionComesBeforePresenceAndFrequency) {
  SamplerConfig cfg;
  cfg.repetition_penalty = 2.0f;
  cfg.presence_penalty = 1.0f;
  // (4 / 2) − 1 = 1.0; the other order would give (4 − 1) / 2 = 1.5.
  EXPECT_EQ(greedy_after(cfg, 4.0f, 1.25f, 1), 1);
  EXPECT_EQ(greedy_after(cfg, 4.0f, 0.9f, 1), 0);
}

TEST(Sampler, PenaltiesFollowAcceptedHistoryAndResetClearsIt) {
  SamplerConfig cfg;
  cfg.temperature = 0.0f;
  cfg.frequency_penalty = 2.0f;
  Sampler s(cfg, 3);
  const std::vector<float> l = {3.0f, 2.0f, 0.0f};
  std::vector<int32_t> ids;
  for (int i = 0; i < 6; ++i) {
    std::vector<float> scratch = l;
    ids.push_back(s.sample(scratch));
    s.accept(ids.back());
  }
  // 0: 3 | 1: 1 vs 2 | 0: 1 vs 0 vs 0 | 1: −1 vs 0 vs 0 (tie, lower id) | 2: −1 vs −2 vs 0 | 0
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 1, 0, 1, 2, 0}));
  s.accept(-1);   // ignored
  s.accept(3);    // out of range: ignored
  s.reset();
  std::vector<float> scratch = l;
  EXPECT_EQ(s.sample(scratch), 0);
}

// take_draw + sample_drawn (what a backend that samples where the logits are gets, and the host's
// finish when it cannot) is sample() exactly: the same ids over a sampled run with penalties, the
// draw taken only when the temperature is > 0, and the history named as (id, count) in first-seen order.
TEST(Sampler, TakeDrawThenSampleDrawnIsSample) {
  SamplerConfig cfg;
  cfg.temperature = 0.9f;
  cfg.min_p = 0.02f;
  cfg.repetition_penalty = 1.3f;
  cfg.presence_penalty = 0.4f;
  cfg.frequency_penalty = 0.2f;
  cfg.logit_bias = {{2, 1.5f}, {7, -3.0f}};
  cfg.seed = 99;
  const int32_t n = 50;
  Sampler whole(cfg, n), split(cfg, n);
  std::vector<float> l(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) l[static_cast<size_t>(i)] = std::sin(0.7f * static_cast<float>(i)) * 3.0f;
  for (int step = 0; step < 40; ++step) {
    std::vector<float> a = l, b = l;
    const int32_t want = whole.sample(a);
    const Sampler::Draw d = split.take_draw();
    EXPECT_GE(d.u, 0.0);
    EXPECT_LT(d.u, 1.0);
    ASSERT_EQ(d.seen_ids.size(), d.seen_counts.size());
    const int32_t got = split.sample_drawn(b, d);
    ASSERT_EQ(got, want) << "step " << step;
    whole.accept(want);
    split.accept(got);
  }
  // The history: ids once each in first-seen order, with their counts.
  Sampler h(cfg, n);
  for (int32_t id : {5, 3, 5, 9, 5}) h.accept(id);
  const Sampler::Draw d = h.take_draw();
  EXPECT_EQ(std::vector<int32_t>(d.seen_ids.begin(), d.seen_ids.end()), (std::vector<int32_t>{5, 3, 9}));
  EXPECT_EQ(std::vector<int32_t>(d.seen_counts.begin(), d.seen_counts.end()), (std::vector<int32_t>{3, 1, 1}));
  // Greedy takes no draw: the stream is where it was.
  SamplerConfig greedy = cfg;
  greedy.temperature = 0.0f;
  Sampler g(greedy, n), fresh(cfg, n);
  EXPECT_EQ(g.take_draw().u, 0.0);
  EXPECT_EQ(Rng(99).next_double(), fresh.take_draw().u);
}

// ---- logprobs ------------------------------------------------------------------------------

double reference_lse(const std::vector<float>& l) {
  const double m = *std::max_element(l.begin(), l.end());
  long double s = 0.0L;
  std::vector<double> terms;
  for (float v : l) terms.push_back(std::exp(static_cast<double>(v) - m));
  std::sort(terms.begin(), terms.end());  // small first
  for (double x : terms) s += x;
  return m + static_cast<double>(std::log(s));
}

// 1e-6 absolute, widened to half a float ulp where the logprob is large.
double lp_tolerance(double ref) { return std::max(1e-6, std::abs(ref) * 0x1.0p-24 * 1.01); }

TEST(Logprob, MatchesDoubleLogSoftmax) {
  for (size_t n : {size_t{1000}, size_t{129280}}) {
    const std::vector<float> l = lm_logits(n, 77);
    const double lse = reference_lse(l);
    std::vector<TokenLogprob> top;
    const size_t step = n > 5000 ? 997 : 1;
    double mass = 0.0;
    for (size_t i = 0; i < n; i += step) {
      const TokenLogprob r = logprob_of(l, static_cast<int32_t>(i), 0, top);
      const double ref = l[i] - lse;
      EXPECT_EQ(r.id, static_cast<int32_t>(i));
      EXPECT_NEAR(r.logprob, ref, lp_tolerance(ref)) << i;
      mass += std::exp(static_cast<double>(r.logprob));
      EXPECT_TRUE(top.empty());
    }
    if (step == 1) {
      EXPECT_NEAR(mass, 1.0, 1e-5);
    }
    logprob_of(l, 0, 20, top);
    ASSERT_EQ(top.size(), 20u);
    for (const TokenLogprob& t : top) {
      const double ref = l[static_cast<size_t>(t.id)] - lse;
      EXPECT_NEAR(t.logprob, ref, lp_tolerance(ref));
    }
    // The list is the 20 best by (logprob desc, id asc) over the whole vocabulary.
    std::vector<int32_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
    for (size_t i = 0; i < 20; ++i) EXPECT_EQ(top[i].id, order[i]) << i;
  }
}

TEST(Logprob, TopListOrderTiesAndSizes) {
  const std::vector<float> l = {1.0f, 3.0f, 3.0f, 2.0f, 3.0f, 0.0f};
  std::vector<TokenLogprob> top;
  const TokenLogprob chosen = logprob_of(l, 3, 4, top);
  EXPECT_EQ(chosen.id, 3);
  ASSERT_EQ(top.size(), 4u);
  EXPECT_EQ(top[0].id, 1);
  EXPECT_EQ(top[1].id, 2);
  EXPECT_EQ(top[2].id, 4);
  EXPECT_EQ(top[3].id, 3);
  EXPECT_EQ(top[0].logprob, top[1].logprob);
  EXPECT_EQ(top[1].logprob, top[2].logprob);
  EXPECT_GT(top[2].logprob, top[3].logprob);
  EXPECT_EQ(top[3].logprob, chosen.logprob);

  top.assign(3, TokenLogprob{});
  logprob_of(l, 0, 0, top);
  EXPECT_TRUE(top.empty());
  logprob_of(l, 0, 20, top);  // smaller vocabulary than n_top
  EXPECT_EQ(top.size(), l.size());
  EXPECT_EQ(top.back().id, 5);

  const std::vector<float> flat(100, 0.0f);
  logprob_of(flat, 0, 25, top);  // n_top is capped at 20
  ASSERT_EQ(top.size(), 20u);
  for (size_t i = 0; i < 20; ++i) {
    EXPECT_EQ(top[i].id, static_cast<int32_t>(i));
    EXPECT_NEAR(top[i].logprob, -std::log(100.0), 1e-6);
  }
  EXPECT_EQ(logprob_of(flat, 100, 1, top).id, -1);  // chosen out of range
  EXPECT_EQ(logprob_of(flat, -2, 1, top).id, -1);
  EXPECT_EQ(logprob_of(std::vector<float>{}, 0, 5, top).id, -1);
  EXPECT_TRUE(top.empty());
}

TEST(Logprob, UsesRawLogitsNotSamplerTransforms) {
  // The API reports the model's distribution: a sampler's bias on the same logits changes nothing.
  const std::vector<float> l = {0.0f, 1.0f, 2.0f};
  std::vector<TokenLogprob> top;
  const double lse = reference_lse(l);
  EXPECT_NEAR(logprob_of(l, 2, 1, top).logprob, 2.0 - lse, 1e-6);
  ASSERT_EQ(top.size(), 1u);
  EXPECT_EQ(top[0].id, 2);
}

}  // namespace
}  // namespace dsv4::sampling
