// sampling/sampler.cpp — the sampler pipeline (bias, penalties, greedy, top-k, top-p, min-p, draw),
// the xoshiro256** RNG, argmax and the API's log-probabilities.
//
// Owns: the exact rule for every transform listed in sampler.h, and the fast paths that compute
// that rule without sorting the vocabulary. Must not: print, throw, allocate per call once warm
// (cand_ keeps its capacity), or let a result depend on the standard library's sort internals.
//
// The exact rule (what tests/unit/sampling's full-sort reference implements). With T > 0 and m the
// largest biased, penalised logit, token i weighs w_i = token_weight(l_i, m, T) (weights.h), so
// w_max = 1. The candidates, sorted by (logit desc, id asc):
//   * top-k keeps the first k.
//   * top-p needs Z, the weight of the top-k set: summed in sorted order when top-k is on, and by
//     sum_token_weights (id order) over the whole vocabulary when it is off. It keeps the shortest
//     prefix whose running sum (in sorted order) reaches p·Z.
//   * min-p keeps the prefix before the first candidate (after the first) with w < min_p, which is
//     p_i < min_p · p_max without the division.
//   * The kept prefix is renormalised by its running sum S; the draw returns the first candidate
//     whose running sum exceeds u·S.
//
// How it avoids sorting 129,280 ids per token, without changing any result:
//   * Pre-filter. Only candidates with (l − m)/T ≥ c are ever collected, with c conservative:
//     min-p gives c = ln(min_p) − 1 (everything below weighs < min_p/e, dropped by min-p anyway);
//     top-p gives c = ln(½ (1 − p) Z / N) for N candidates (everything below weighs < ½ (1 − p) Z
//     in total, so the prefix reaching p·Z ends above it). Both margins dwarf the rounding of the
//     weights and of std::log, which is therefore only ever used for these bounds. The logit at
//     which (l − m)/T reaches c is found once by bisection over float bit patterns, so the filter
//     pass is one vector max per 64 ids plus a comparison per id in chunks that reach the bound.
//   * top-k uses a bounded heap (k ≤ 4096; chunks whose max cannot enter are skipped) or
//     nth_element. Both give the same set, and nothing depends on the order it comes out in: every
//     later walk is over the set sorted by the total order (logit desc, id asc).
//   * The survivors are sorted lazily (nth_element + sort of a prefix that doubles), only as far as
//     the keep walk goes.
//   * Top-p alone (min-p off, top-k off) can keep tens of thousands of ids when the distribution
//     is flat. Over more than 2048 candidates, the cut and then the draw are located by quickselect
//     on mass: partitions summed in arbitrary order, which differ from the sorted-order running
//     sums only in the last bits, so any decision within 1e-9·Z of a boundary falls back to the
//     lazy sort above. The answer is the same either way.
//   * With top-k, top-p and min-p all off nothing is cut, so the draw walks the ids in id order
//     (block sums first, then the one block the draw lands in): no sort at all.
//   * Every sample() with T > 0 consumes exactly one RNG draw (even when one candidate is left), so
//     the n-th generated token always uses the n-th random number of the stream.
//   * NaN logits count as −inf (weight 0, never chosen); if every logit is −inf or one is +inf, the
//     first highest is returned.
#include "sampling/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "sampling/weights.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace dsv4::sampling {
namespace {

using Cand = std::pair<float, int32_t>;  // (logit, id); after the keep walk, (weight, id)

constexpr float kInf = std::numeric_limits<float>::infinity();
// Ids per block in the weight sums and the max scan (a multiple of kLanes): weights.h's order.
constexpr size_t kBlock = static_cast<size_t>(kWeightBlock);
constexpr size_t kLanes = static_cast<size_t>(kWeightLanes);
// Top-k selection uses a bounded heap up to this k and nth_element over a copy above it.
constexpr int32_t kHeapTopKLimit = 4096;
// Chunks of ids that the top-k heap and the candidate filter skip after one vector max.
constexpr size_t kChunk = 64;
// The first chunk of the lazily sorted prefix.
constexpr size_t kFirstSortedChunk = 64;
// Top-p over more candidates than this (min-p off) locates its cut and the draw by quickselect on
// mass instead of sorting; below it, quickselect segments this small are sorted.
constexpr size_t kQuickselectPool = 2048;
constexpr size_t kQuickselectLeaf = 32;
constexpr size_t kNotFound = static_cast<size_t>(-1);

// The one total order of the sampler: higher logit first, ties to the lower id. (A function
// object rather than a function, so that the std algorithms inline it.)
constexpr struct Before {
  bool operator()(const Cand& a, const Cand& b) const {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  }
} before;

inline float nan_to_neg_inf(float v) { return v != v ? -kInf : v; }

uint64_t splitmix64(uint64_t& x) {
  x += 0x9e3779b97f4a7c15ULL;
  uint64_t z = x;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// Σ w[0..n) in kLanes interleaved double partial sums, added lane 0 first, then the tail.
double sum_lanes(const float* w, size_t n) {
  double lane[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) lane[j] += static_cast<double>(w[i + j]);
  }
  double s = 0.0;
  for (double x : lane) s += x;
  for (; i < n; ++i) s += static_cast<double>(w[i]);
  return s;
}

// NaN never wins.
inline float larger(float v, float m) { return v > m ? v : m; }

// The largest non-NaN value of x[0..n), −inf if none. Only the value comes out, so the lane
// layout cannot change the result. (GCC does not vectorise a float max without -ffinite-math-only,
// hence SSE2's maxps, which is exactly `larger` per lane; other targets take the scalar loop.)
float max_value(const float* x, size_t n) {
  size_t i = 0;
  float r = -kInf;
#if defined(__SSE2__)
  __m128 a = _mm_set1_ps(-kInf), b = a;
  for (; i + 8 <= n; i += 8) {
    a = _mm_max_ps(_mm_loadu_ps(x + i), a);
    b = _mm_max_ps(_mm_loadu_ps(x + i + 4), b);
  }
  float lane[8];
  _mm_storeu_ps(lane, a);
  _mm_storeu_ps(lane + 4, b);
  for (float v : lane) r = larger(v, r);
#endif
  for (; i < n; ++i) r = larger(x[i], r);
  return r;
}

struct MaxAt {
  float value = -kInf;
  int32_t id = -1;  // -1: every value is NaN
};

// The largest non-NaN value and the lowest id holding it: a vectorised max per block, then one
// scan of the first block that holds the max.
MaxAt max_at(const float* l, size_t n) {
  float best = -kInf;
  size_t best_block = n;
  for (size_t b = 0; b < n; b += kBlock) {
    const float r = max_value(l + b, std::min(kBlock, n - b));
    if (r > best) {
      best = r;
      best_block = b;
    }
  }
  if (best_block == n) {  // nothing above −inf: the first −inf, if any
    for (size_t i = 0; i < n; ++i) {
      if (l[i] == -kInf) return {-kInf, static_cast<int32_t>(i)};
    }
    return {};
  }
  size_t i = best_block;
  while (l[i] != best) ++i;
  return {best, static_cast<int32_t>(i)};
}

// The top-p pre-filter bound (see the banner): candidates below it weigh < ½ (1 − p) Z in total.
float top_p_cut(float top_p, double z, size_t n_candidates) {
  return static_cast<float>(std::log(0.5 * (1.0 - static_cast<double>(top_p)) * z / static_cast<double>(n_candidates)));
}

// Fills `out` with exactly the k best (logit desc, id asc) of l[0..n), NaN as −inf, in no
// particular order. 0 < k < n.
void select_top_k(const float* l, int32_t n, int32_t k, std::vector<Cand>& out) {
  out.clear();
  if (k <= kHeapTopKLimit) {
    // A max-heap under `before`: the front is the worst of the k kept so far.
    // Later ids lose ties, so an id enters only with a logit above the worst kept one; chunks
    // whose max is not above it are skipped after one vectorised max.
    for (int32_t i = 0; i < k; ++i) out.emplace_back(nan_to_neg_inf(l[i]), i);
    std::make_heap(out.begin(), out.end(), before);
    float worst = out.front().first;
    for (int32_t b = k; b < n; b += static_cast<int32_t>(kChunk)) {
      const int32_t e = std::min(n, b + static_cast<int32_t>(kChunk));
      if (!(max_value(l + b, static_cast<size_t>(e - b)) > worst)) continue;
      for (int32_t i = b; i < e; ++i) {
        if (!(l[i] > worst)) continue;  // NaN never enters
        std::pop_heap(out.begin(), out.end(), before);
        out.back() = Cand(l[i], i);
        std::push_heap(out.begin(), out.end(), before);
        worst = out.front().first;
      }
    }
    return;
  }
  out.reserve(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) out.emplace_back(nan_to_neg_inf(l[i]), i);
  std::nth_element(out.begin(), out.begin() + (k - 1), out.end(), before);
  out.resize(static_cast<size_t>(k));
}

// Keeps v[0..sorted) equal to the first `sorted` elements of sort(v), extending it on demand.
class LazySorted {
 public:
  LazySorted(std::vector<Cand>& v, size_t already_sorted) : v_(v), sorted_(already_sorted) {}
  // After this, v_[0..i] hold their final sorted values (elements before sorted_ are untouched).
  void ensure(size_t i) {
    if (i < sorted_) return;
    const size_t m = std::max({i + 1, 2 * sorted_, kFirstSortedChunk});
    const auto first = v_.begin() + static_cast<std::ptrdiff_t>(sorted_);
    if (m >= v_.size()) {
      std::sort(first, v_.end(), before);
      sorted_ = v_.size();
      return;
    }
    const auto mid = v_.begin() + static_cast<std::ptrdiff_t>(m);
    std::nth_element(first, mid, v_.end(), before);
    std::sort(first, mid, before);
    sorted_ = m;
  }

 private:
  std::vector<Cand>& v_;
  size_t sorted_;
};

// Where the running sum of the weights of v[0..n), taken in sorted order, first exceeds `goal` —
// found without sorting, by a quickselect on mass. Returns p after rearranging v so that v[0..p]
// are exactly the sorted list's first p + 1 elements (in some order) and v[p] is the crossing one.
// The masses here are summed in arbitrary order, so they may differ from sorted-order running sums
// in the last bits (≤ n·2^-53 relatively); any comparison within `margin` of the goal, a missing
// crossing or a degenerate recursion returns kNotFound, and the caller then takes the exact path.
// w_of_id[id] is the weight of candidate id.
size_t locate_crossing(std::vector<Cand>& v, size_t n, double goal, double margin, const float* w_of_id) {
  auto weight = [w_of_id](const Cand& c) { return static_cast<double>(w_of_id[c.second]); };
  const auto at = [&v](size_t i) { return v.begin() + static_cast<std::ptrdiff_t>(i); };
  size_t lo = 0, hi = n;
  double below = 0.0;  // the mass of v[0..lo)
  for (int depth = 0; hi - lo > kQuickselectLeaf; ++depth) {
    if (depth == 64) return kNotFound;
    const Cand& a = v[lo];
    const Cand& b = v[lo + (hi - lo) / 2];
    const Cand& c = v[hi - 1];
    const Cand pivot = before(a, b) ? (before(b, c) ? b : (before(a, c) ? c : a))
                                    : (before(a, c) ? a : (before(b, c) ? c : b));
    const size_t p = static_cast<size_t>(
        std::partition(at(lo), at(hi), [&pivot](const Cand& x) { return before(x, pivot); }) - v.begin());
    std::iter_swap(at(p), std::find(at(p), at(hi), pivot));
    double mass = below;
    for (size_t i = lo; i < p; ++i) mass += weight(v[i]);
    if (mass > goal + margin) {  // crosses before the pivot
      hi = p;
      continue;
    }
    if (!(mass < goal - margin)) return kNotFound;
    mass += weight(v[p]);
    if (mass > goal + margin) return p;
    if (!(mass < goal - margin)) return kNotFound;
    below = mass;
    lo = p + 1;
  }
  std::sort(at(lo), at(hi), before);
  for (size_t i = lo; i < hi; ++i) {
    below += weight(v[i]);
    if (below > goal + margin) return i;
    if (!(below < goal - margin)) return kNotFound;
  }
  return kNotFound;
}

// The draw when nothing is cut: weights overwrite l, then u·Z is located block by block in id
// order. Z is the same sequence of block sums as sum_token_weights.
int32_t walk_by_id(float* l, size_t n, float mx, float t, double u) {
  double z = 0.0;
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t len = std::min(kBlock, n - b);
    for (size_t i = b; i < b + len; ++i) l[i] = token_weight(l[i], mx, t);
    z += sum_lanes(l + b, len);
  }
  const double target = u * z;
  double acc = 0.0;
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t len = std::min(kBlock, n - b);
    const double block = sum_lanes(l + b, len);
    if (acc + block > target) {  // the draw lands in this block (which has a positive weight)
      double inner = acc;
      int32_t last = -1;
      for (size_t i = b; i < b + len; ++i) {
        if (l[i] <= 0.0f) continue;
        inner += static_cast<double>(l[i]);
        last = static_cast<int32_t>(i);
        if (inner > target) break;
      }
      return last;  // the running sum falls short only by rounding: the block's last weighted id
    }
    acc += block;
  }
  // u·Z rounded up to Z: the last id with a weight (the max has weight 1).
  size_t i = n;
  while (i > 0 && !(l[i - 1] > 0.0f)) --i;
  return static_cast<int32_t>(i > 0 ? i - 1 : 0);
}

}  // namespace

double sum_token_weights(std::span<const float> logits, float max_logit, float temperature) {
  float w[kBlock];
  double z = 0.0;
  for (size_t b = 0; b < logits.size(); b += kBlock) {
    const size_t len = std::min(kBlock, logits.size() - b);
    for (size_t i = 0; i < len; ++i) w[i] = token_weight(logits[b + i], max_logit, temperature);
    z += sum_lanes(w, len);
  }
  return z;
}

// ---- Rng -------------------------------------------------------------------------------------

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (uint64_t& s : s_) s = splitmix64(x);
}

uint64_t Rng::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::next_double() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

// ---- Sampler ---------------------------------------------------------------------------------

Sampler::Sampler(const SamplerConfig& config, int32_t n_vocab)
    : config_(config), n_vocab_(std::max<int32_t>(n_vocab, 0)), rng_(config.seed),
      counts_(static_cast<size_t>(n_vocab_), 0) {}

void Sampler::accept(int32_t id) {
  if (id < 0 || id >= n_vocab_) return;
  if (counts_[static_cast<size_t>(id)]++ == 0) seen_.push_back(id);
}

void Sampler::reset() {
  for (int32_t id : seen_) counts_[static_cast<size_t>(id)] = 0;
  seen_.clear();
  rng_ = Rng(config_.seed);
}

Sampler::Draw Sampler::take_draw() {
  Draw d;
  if (config_.temperature > 0.0f) d.u = rng_.next_double();  // exactly one draw per non-greedy call
  seen_counts_.resize(seen_.size());
  for (size_t j = 0; j < seen_.size(); ++j) seen_counts_[j] = counts_[static_cast<size_t>(seen_[j])];
  d.seen_ids = seen_;
  d.seen_counts = seen_counts_;
  return d;
}

int32_t Sampler::sample(std::span<float> logits) { return sample_drawn(logits, take_draw()); }

int32_t Sampler::sample_drawn(std::span<float> logits, const Draw& draw) {
  const size_t n = std::min(logits.size(), static_cast<size_t>(n_vocab_));
  if (n == 0) return -1;
  const int32_t n_ids = static_cast<int32_t>(n);
  float* l = logits.data();

  // 1. logit bias (ids outside the vocabulary are ignored; repeated ids add up).
  for (const auto& [id, bias] : config_.logit_bias) {
    if (id >= 0 && id < n_ids) l[id] += bias;
  }
  // 2. penalties over the accepted history, in first-seen order (each id is touched once, so the
  //    order cannot change a value). Repetition first (CTRL/HF), then one subtraction of
  //    frequency·count + presence (llama.cpp's form of OpenAI's rule).
  const float rep = config_.repetition_penalty;
  const bool rep_on = rep > 0.0f && rep != 1.0f;
  const bool pf_on = config_.presence_penalty != 0.0f || config_.frequency_penalty != 0.0f;
  if (rep_on || pf_on) {
    for (size_t j = 0; j < draw.seen_ids.size(); ++j) {
      const int32_t id = draw.seen_ids[j];
      if (id >= n_ids) continue;
      float v = l[id];
      if (rep_on) v = v > 0.0f ? v / rep : v * rep;
      if (pf_on) {
        const float count = static_cast<float>(draw.seen_counts[j]);
        v -= config_.frequency_penalty * count + config_.presence_penalty;
      }
      l[id] = v;
    }
  }
  // 3. greedy: a temperature that is not > 0 (NaN included). No RNG draw.
  const float t = config_.temperature;
  if (!(t > 0.0f)) return argmax(logits.first(n));

  const double u = draw.u;  // take_draw() drew it: exactly one draw per non-greedy call
  const MaxAt top1 = max_at(l, n);
  if (top1.id < 0) return 0;                      // every logit is NaN
  if (!std::isfinite(top1.value)) return top1.id;  // all −inf, or a +inf: nothing to draw from
  const float mx = top1.value;

  const int32_t k = config_.top_k > 0 && config_.top_k < n_ids ? config_.top_k : 0;
  const float top_p = config_.top_p, min_p = config_.min_p;
  const bool top_p_on = top_p < 1.0f;  // false for NaN
  const bool min_p_on = min_p > 0.0f;
  if (k == 1) return top1.id;
  if (k == 0 && !top_p_on && !min_p_on) return walk_by_id(l, n, mx, t, u);

  // 4.–5. The candidates (a superset of the kept prefix) and top-p's target mass p·Z.
  const float c_min_p = min_p_on ? std::log(min_p) - 1.0f : -kInf;
  double top_p_mass = 0.0;
  size_t presorted = 0;
  double z = 0.0;  // top-p's Z
  if (k > 0 && (top_p_on || !min_p_on)) {
    select_top_k(l, n_ids, k, cand_);
    float c = c_min_p;
    if (top_p_on) {  // Z over the top-k set, in sorted order
      std::sort(cand_.begin(), cand_.end(), before);
      presorted = cand_.size();
      for (const Cand& x : cand_) z += static_cast<double>(token_weight(x.first, mx, t));
      top_p_mass = static_cast<double>(top_p) * z;
      c = std::max(c, top_p_cut(top_p, z, cand_.size()));
    }
    if (c > -kInf) {
      const float lo = lowest_logit_reaching(mx, t, std::min(c, -1.0f));
      if (presorted > 0) {
        const auto end = std::partition_point(cand_.begin(), cand_.end(), [lo](const Cand& x) { return x.first >= lo; });
        cand_.resize(static_cast<size_t>(end - cand_.begin()));
        presorted = cand_.size();
      } else {
        std::erase_if(cand_, [lo](const Cand& x) { return !(x.first >= lo); });
      }
    }
  } else {
    // Here min-p or top-p is on, so the filter bound is finite. c ≤ −1 keeps the max in.
    float c = c_min_p;
    if (top_p_on) {  // Z over the whole vocabulary, in id order
      z = sum_token_weights(logits.first(n), mx, t);
      top_p_mass = static_cast<double>(top_p) * z;
      c = std::max(c, top_p_cut(top_p, z, n));
    }
    const float lo = lowest_logit_reaching(mx, t, std::min(c, -1.0f));
    cand_.clear();
    for (size_t b = 0; b < n; b += kChunk) {  // whole chunks below the bound cost one vector max
      const size_t e = std::min(n, b + kChunk);
      if (!(max_value(l + b, e - b) >= lo)) continue;
      for (size_t i = b; i < e; ++i) {
        if (l[i] >= lo) cand_.emplace_back(l[i], static_cast<int32_t>(i));
      }
    }
    // Everything at or above a logit bound is in, so with more than k the top-k set is inside.
    if (k > 0 && cand_.size() > static_cast<size_t>(k)) {
      std::nth_element(cand_.begin(), cand_.begin() + (k - 1), cand_.end(), before);
      cand_.resize(static_cast<size_t>(k));
    }
  }

  // Top-p alone over many candidates: locate the cut, then the draw inside the kept set, by
  // quickselect on mass (exact unless a sum lands within 1e-9 of a boundary; then fall through).
  // The logits are not read again, so the candidates' weights go there, by id.
  if (k == 0 && top_p_on && !min_p_on && cand_.size() > kQuickselectPool) {
    for (const Cand& x : cand_) l[x.second] = token_weight(x.first, mx, t);
    const size_t cut = locate_crossing(cand_, cand_.size(), top_p_mass, 1e-9 * z, l);
    if (cut != kNotFound) {
      double kept = 0.0;
      for (size_t i = 0; i <= cut; ++i) kept += static_cast<double>(l[cand_[i].second]);
      const size_t hit = locate_crossing(cand_, cut + 1, u * kept, 1e-9 * kept, l);
      if (hit != kNotFound) return cand_[hit].second;
    }
  }

  // 6.–7. The keep walk over the sorted candidates: min-p stops before the first weight below
  // min_p, top-p after the prefix that reaches p·Z; at least one is kept. Kept entries get their
  // weight written over their logit (the lazy sort only ever touches the unsorted tail).
  LazySorted sorted(cand_, presorted);
  double kept_mass = 0.0;
  size_t n_kept = 0;
  for (size_t i = 0; i < cand_.size(); ++i) {
    sorted.ensure(i);
    const float w = token_weight(cand_[i].first, mx, t);
    if (min_p_on && i > 0 && w < min_p) break;
    cand_[i].first = w;
    kept_mass += static_cast<double>(w);
    n_kept = i + 1;
    if (top_p_on && kept_mass >= top_p_mass) break;
  }

  // 8. Renormalise over the kept prefix and walk it with the draw.
  const double target = u * kept_mass;
  double acc = 0.0;
  int32_t last = cand_[0].second;
  for (size_t i = 0; i < n_kept; ++i) {
    if (cand_[i].first <= 0.0f) continue;
    acc += static_cast<double>(cand_[i].first);
    last = cand_[i].second;
    if (acc > target) break;
  }
  return last;  // (if u·S rounded up to S: the last kept id with a weight)
}

// ---- free functions --------------------------------------------------------------------------

int32_t argmax(std::span<const float> logits) {
  if (logits.empty()) return -1;
  const MaxAt m = max_at(logits.data(), logits.size());
  return m.id < 0 ? 0 : m.id;
}

TokenLogprob logprob_of(std::span<const float> logits, int32_t chosen, int32_t n_top,
                        std::vector<TokenLogprob>& top) {
  top.clear();
  const size_t n = logits.size();
  if (n == 0) return {};
  // log-sum-exp in double, in id order; NaN logits are left out.
  const double m = max_at(logits.data(), n).value;
  double s = 0.0;
  for (float v : logits) {
    if (v == v) s += std::exp(static_cast<double>(v) - m);
  }
  const double lse = m + std::log(s);
  auto lp = [lse](float v) { return static_cast<float>(static_cast<double>(v) - lse); };

  TokenLogprob result;
  if (chosen >= 0 && static_cast<size_t>(chosen) < n) {
    result.id = chosen;
    result.logprob = lp(logits[static_cast<size_t>(chosen)]);
  }

  // The n_top best by the reported (float) logprob, ties to the lower id: insertion into a list of
  // at most 20. Ids arrive in increasing order, so an equal logprob goes after its ties. The float
  // logprob never decreases as the logit grows, so once the list is full an id whose logit is not
  // above the last entry's cannot enter (at best it ties, with a higher id): one comparison.
  const size_t want = std::min(static_cast<size_t>(std::clamp(n_top, 0, 20)), n);
  if (want == 0) return result;
  top.reserve(want + 1);
  float floor_logit = -kInf;
  for (size_t i = 0; i < n; ++i) {
    const float v = logits[i];
    if (v != v || (top.size() == want && v <= floor_logit)) continue;
    const float p = lp(v);
    size_t pos = top.size();
    while (pos > 0 && p > top[pos - 1].logprob) --pos;
    if (pos == want) continue;
    top.insert(top.begin() + static_cast<std::ptrdiff_t>(pos), TokenLogprob{static_cast<int32_t>(i), p});
    if (top.size() > want) top.pop_back();
    if (top.size() == want) floor_logit = logits[static_cast<size_t>(top.back().id)];
  }
  return result;
}

}  // namespace dsv4::sampling
