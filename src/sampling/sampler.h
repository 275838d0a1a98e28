// sampling/sampler.h — next-token choice from raw logits: penalties, logit bias, temperature,
// top-k, top-p, min-p, seeded sampling, greedy; and log-probabilities for the API.
//
// Owns: pure functions over float spans plus a tiny seeded RNG. Must not: know tokens as text,
// sessions, requests or JSON; print; throw. Uses base and numerics/token_weight.h.
//
// Determinism: the same config (incl. seed), the same logits and the same accepted history give
// the same id on every machine and thread count. Everything here runs on one thread, every
// reduction runs in one fixed order (sampling/weights.h), every sort is (value desc, id asc), the
// exponential is our own float code rather than libm's, and the RNG is our own (xoshiro256**
// seeded through splitmix64), never std::*_distribution (whose output differs between standard
// libraries).
//
// Order of transforms in Sampler::sample (llama.cpp's order, documented for users in the README):
//   1. logit_bias (added to the raw logit; −100 bans a token in practice, like OpenAI)
//   2. repetition penalty (CTRL/HF rule: logit>0 → logit/p, else logit·p) for every id seen in the
//      history, then presence (−presence once) and frequency (−frequency·count) penalties
//      (OpenAI rule). The history is what accept() recorded: the completion's tokens, not the prompt.
//   3. temperature == 0 → greedy: the highest logit, ties to the lowest id. Done.
//   4. top-k (0 = off): keep the k highest (ties by lowest id).
//   5. softmax at the temperature: weights e^((l − max)/T) from sampling/weights.h (plain IEEE
//      float code, so the bits do not depend on the C library; numerics/token_weight.h, which the
//      CUDA sampling kernel shares).
//   6. top-p (1 = off): keep the smallest prefix of the sorted list whose mass reaches p (at least 1).
//   7. min-p (0 = off): drop candidates whose probability < min_p · p_max (at least 1 kept).
//   8. renormalise, draw u in [0,1) from the RNG (53-bit double), walk the sorted list. With
//      top-k, top-p and min-p all off nothing is cut, so the walk goes in id order instead (no sort
//      of the vocabulary; still deterministic). Every call with temperature > 0 consumes exactly
//      one draw; greedy consumes none. sampler.cpp's banner states the exact weights and cut rules.
//
//   sampling::SamplerConfig cfg; cfg.temperature = 0.7f; cfg.seed = 42;
//   sampling::Sampler s(cfg, n_vocab);
//   int32_t id = s.sample(logits);   // logits: span<float> of n_vocab raw logits (used as scratch)
//   s.accept(id);
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace dsv4::sampling {

struct SamplerConfig {
  float temperature = 1.0f;        // 0 = greedy; must be >= 0
  int32_t top_k = 0;               // 0 = off
  float top_p = 1.0f;              // (0, 1]; 1 = off
  float min_p = 0.05f;             // [0, 1); 0 = off
  float presence_penalty = 0.0f;   // OpenAI semantics, [-2, 2]
  float frequency_penalty = 0.0f;  // OpenAI semantics, [-2, 2]
  float repetition_penalty = 1.0f; // > 0; 1 = off
  uint64_t seed = 0;
  std::vector<std::pair<int32_t, float>> logit_bias;  // (id, bias); ids must be < n_vocab
};

// xoshiro256** seeded with splitmix64(seed); identical streams everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0);
  uint64_t next_u64();
  double next_double();  // uniform in [0, 1), 53 random bits
 private:
  uint64_t s_[4];
};

class Sampler {
 public:
  Sampler(const SamplerConfig& config, int32_t n_vocab);

  // Picks the next id from raw logits [n_vocab]. `logits` is scratch: modified in place.
  // = sample_drawn(logits, take_draw()).
  int32_t sample(std::span<float> logits);

  // One sample() call split in two, for a backend that samples where the logits are
  // (backend::Backend::sample gets these values): take_draw() consumes the RNG exactly as sample()
  // would (one draw when temperature > 0, none when greedy) and names the penalty history;
  // sample_drawn() is the rest of sample() with that draw (the host's finish when the backend
  // answers that it could not). The spans stay valid until the next accept() / take_draw() / reset().
  struct Draw {
    double u = 0.0;                         // the draw in [0, 1); 0 when greedy
    std::span<const int32_t> seen_ids;      // the accepted ids, first-seen order, each once
    std::span<const int32_t> seen_counts;   // their occurrences
  };
  Draw take_draw();
  int32_t sample_drawn(std::span<float> logits, const Draw& draw);
  // Records an id of the completion (penalty history). The caller accepts every generated id,
  // including ids it forced.
  void accept(int32_t id);
  // Forget the history and reseed (a new request).
  void reset();

  const SamplerConfig& config() const { return config_; }

 private:
  SamplerConfig config_;
  int32_t n_vocab_;
  Rng rng_;
  std::vector<int32_t> counts_;        // [n_vocab] occurrences in the history
  std::vector<int32_t> seen_;          // ids with counts_ > 0, in first-seen order
  std::vector<int32_t> seen_counts_;   // counts_ of seen_, filled by take_draw()
  std::vector<std::pair<float, int32_t>> cand_;  // scratch: (value, id)
};

// Highest logit, ties to the lowest id.
int32_t argmax(std::span<const float> logits);

struct TokenLogprob {
  int32_t id = -1;
  float logprob = 0.0f;
};

// Log-softmax of the RAW logits (the model's distribution, before bias/penalties/temperature, as
// the OpenAI API reports it): the chosen id's logprob and the n_top most likely ids (logprob desc,
// ties lowest id first). n_top in [0, 20]. Computed in double, rounded to float once.
TokenLogprob logprob_of(std::span<const float> logits, int32_t chosen, int32_t n_top,
                        std::vector<TokenLogprob>& top);

}  // namespace dsv4::sampling
