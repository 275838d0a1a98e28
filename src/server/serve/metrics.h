// server/serve/metrics.h — counters for GET /metrics (Prometheus text format 0.0.4).
// Thread-safe: HTTP threads and the worker update it under one mutex (cheap next to a token).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace dsv4::server::serve {

class Metrics {
 public:
  void request(const std::string& route, int status);
  void error(const std::string& kind);  // bad_request, auth, too_large, queue_full, context, engine, disconnect…
  void generation(int64_t prompt_tokens, int64_t cached_tokens, int64_t completion_tokens, double prefill_ms,
                  double decode_ms, double queue_ms);
  // queue_depth / busy are read at scrape time.
  std::string prometheus(int64_t queue_depth, bool busy, int64_t ctx, int64_t cache_tokens, int64_t checkpoints,
                         int64_t checkpoint_bytes) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
  std::map<std::string, int64_t> errors_;
  int64_t generations_ = 0, prompt_tokens_ = 0, cached_tokens_ = 0, completion_tokens_ = 0;
  double prefill_s_ = 0, decode_s_ = 0, queue_s_ = 0;
  double last_prefill_tps_ = 0, last_decode_tps_ = 0;
};

}  // namespace dsv4::server::serve
