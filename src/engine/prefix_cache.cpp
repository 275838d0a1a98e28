// engine/prefix_cache.cpp — prefix matching, rewinds and checkpoint eviction.
#include "engine/prefix_cache.h"

#include <algorithm>

namespace dsv4::engine {

Result<int64_t> PrefixCache::prepare(model::Session& session, std::span<const int32_t> prompt) {
  if (session.position() != live_tokens()) {  // someone else moved the session: trust nothing
    session.reset();
    clear();
  }
  const size_t n = std::min(live_.size(), prompt.size());
  size_t lcp = 0;
  while (lcp < n && live_[lcp] == prompt[lcp]) ++lcp;
  const int64_t usable = std::min<int64_t>(static_cast<int64_t>(lcp), static_cast<int64_t>(prompt.size()) - 1);
  if (usable == live_tokens()) return usable;  // the prompt extends the timeline: continue in place
  // Drop every checkpoint past the reusable prefix (its entries are about to be truncated), then
  // rewind to the last one left.
  while (!cps_.empty() && cps_.back().pos > usable) cps_.pop_back();
  if (cps_.empty() || cps_.back().pos == 0) {
    session.reset();
    clear();
    return int64_t{0};
  }
  DSV4_RETURN_IF_ERROR(session.rewind(cps_.back()));
  live_.resize(static_cast<size_t>(cps_.back().pos));
  return cps_.back().pos;
}

void PrefixCache::checkpoint(const model::Session& session) {
  const int64_t pos = session.position();
  if (pos == 0 || pos != live_tokens()) return;
  auto it = std::lower_bound(cps_.begin(), cps_.end(), pos,
                             [](const model::SessionCheckpoint& c, int64_t p) { return c.pos < p; });
  if (it != cps_.end() && it->pos == pos) return;
  cps_.insert(it, session.checkpoint());
  while (static_cast<int64_t>(cps_.size()) > std::max<int64_t>(max_checkpoints_, 1)) evict_one();
}

// Thins the set evenly: drops the checkpoint (never the newest-positioned) whose neighbours are
// closest together, so rewind points stay spread over the timeline.
void PrefixCache::evict_one() {
  if (cps_.size() <= 1) {
    cps_.clear();
    return;
  }
  size_t victim = 0;
  int64_t best_gap = INT64_MAX;
  for (size_t i = 0; i + 1 < cps_.size(); ++i) {
    const int64_t before = i == 0 ? 0 : cps_[i - 1].pos;
    const int64_t gap = cps_[i + 1].pos - before;
    if (gap < best_gap) {
      best_gap = gap;
      victim = i;
    }
  }
  cps_.erase(cps_.begin() + static_cast<std::ptrdiff_t>(victim));
}

int64_t PrefixCache::checkpoint_bytes() const {
  int64_t b = 0;
  for (const auto& c : cps_) b += c.bytes();
  return b;
}

}  // namespace dsv4::engine
