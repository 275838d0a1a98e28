// engine/prefix_cache.h — which tokens the session holds, and rewind points along them.
//
// Owns: the live token list (every token forwarded into the session, in order) and a bounded set
// of model::SessionCheckpoint, each a prefix of the live tokens (invariant). prepare() moves the
// session to the longest reusable prefix of a new prompt. Must not: sample, decode text or know
// requests.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/model.h"

namespace dsv4::engine {

class PrefixCache {
 public:
  explicit PrefixCache(int64_t max_checkpoints) : max_checkpoints_(max_checkpoints) {}

  // Puts `session` at the longest prefix of `prompt` it can reuse, keeping at least the last
  // prompt token to be computed (its logits are needed). Returns the reused token count.
  Result<int64_t> prepare(model::Session& session, std::span<const int32_t> prompt);
  // Records tokens just forwarded into the session.
  void on_forward(std::span<const int32_t> tokens) { live_.insert(live_.end(), tokens.begin(), tokens.end()); }
  // Takes a checkpoint at the session's position (no-op if one exists there).
  void checkpoint(const model::Session& session);
  void clear() {
    live_.clear();
    cps_.clear();
  }

  int64_t live_tokens() const { return static_cast<int64_t>(live_.size()); }
  int64_t n_checkpoints() const { return static_cast<int64_t>(cps_.size()); }
  int64_t checkpoint_bytes() const;

 private:
  void evict_one();

  int64_t max_checkpoints_;
  std::vector<int32_t> live_;                   // tokens in the session, position order
  std::vector<model::SessionCheckpoint> cps_;   // sorted by pos; each a prefix of live_
};

}  // namespace dsv4::engine
