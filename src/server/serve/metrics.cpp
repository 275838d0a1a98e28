// server/serve/metrics.cpp — Prometheus text exposition of the server's counters.
#include "server/serve/metrics.h"

#include <cstdio>

namespace dsv4::server::serve {

void Metrics::request(const std::string& route, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{route, status}];
}

void Metrics::error(const std::string& kind) {
  std::lock_guard<std::mutex> lock(mu_);
  ++errors_[kind];
}

void Metrics::generation(int64_t prompt_tokens, int64_t cached_tokens, int64_t completion_tokens, double prefill_ms,
                         double decode_ms, double queue_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  ++generations_;
  prompt_tokens_ += prompt_tokens;
  cached_tokens_ += cached_tokens;
  completion_tokens_ += completion_tokens;
  prefill_s_ += prefill_ms / 1e3;
  decode_s_ += decode_ms / 1e3;
  queue_s_ += queue_ms / 1e3;
  const int64_t computed = prompt_tokens - cached_tokens;
  if (prefill_ms > 0 && computed > 0) last_prefill_tps_ = static_cast<double>(computed) / (prefill_ms / 1e3);
  if (decode_ms > 0 && completion_tokens > 0) last_decode_tps_ = static_cast<double>(completion_tokens) / (decode_ms / 1e3);
}

namespace {
void metric(std::string& out, const char* name, const char* type, const char* help) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}
std::string num(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}
// A metric without labels: its HELP/TYPE header and its one sample.
void sample(std::string& out, const char* name, const char* type, const char* help, int64_t v) {
  metric(out, name, type, help);
  out += std::string(name) + " " + std::to_string(v) + "\n";
}
void sample(std::string& out, const char* name, const char* type, const char* help, double v) {
  metric(out, name, type, help);
  out += std::string(name) + " " + num(v) + "\n";
}
}  // namespace

std::string Metrics::prometheus(int64_t queue_depth, bool busy, int64_t ctx, int64_t cache_tokens, int64_t checkpoints,
                                int64_t checkpoint_bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string o;
  metric(o, "dsv4_requests_total", "counter", "HTTP requests by route and status.");
  for (const auto& [k, v] : requests_)
    o += "dsv4_requests_total{route=\"" + k.first + "\",status=\"" + std::to_string(k.second) + "\"} " +
         std::to_string(v) + "\n";
  metric(o, "dsv4_errors_total", "counter", "Failed requests by kind.");
  for (const auto& [k, v] : errors_) o += "dsv4_errors_total{kind=\"" + k + "\"} " + std::to_string(v) + "\n";
  sample(o, "dsv4_generations_total", "counter", "Generations run by the engine worker.", generations_);
  sample(o, "dsv4_prompt_tokens_total", "counter", "Prompt tokens received (tokens in).", prompt_tokens_);
  sample(o, "dsv4_prompt_tokens_cached_total", "counter", "Prompt tokens whose state was reused.", cached_tokens_);
  sample(o, "dsv4_completion_tokens_total", "counter", "Tokens generated (tokens out).", completion_tokens_);
  sample(o, "dsv4_prefill_seconds_total", "counter", "Time spent in prefill.", prefill_s_);
  sample(o, "dsv4_decode_seconds_total", "counter", "Time spent decoding.", decode_s_);
  sample(o, "dsv4_queue_wait_seconds_total", "counter", "Time requests waited in the queue.", queue_s_);
  sample(o, "dsv4_prefill_tokens_per_second", "gauge", "Prefill speed of the last generation (computed tokens).", last_prefill_tps_);
  sample(o, "dsv4_decode_tokens_per_second", "gauge", "Decode speed of the last generation.", last_decode_tps_);
  sample(o, "dsv4_queue_depth", "gauge", "Requests waiting for the engine worker.", queue_depth);
  sample(o, "dsv4_busy", "gauge", "1 while the engine worker runs a generation.", int64_t{busy ? 1 : 0});
  sample(o, "dsv4_context_tokens", "gauge", "Context size of the session.", ctx);
  sample(o, "dsv4_cache_live_tokens", "gauge", "Tokens held by the session (prefix-reuse candidates).", cache_tokens);
  sample(o, "dsv4_cache_checkpoints", "gauge", "Rewind checkpoints kept.", checkpoints);
  sample(o, "dsv4_cache_checkpoint_bytes", "gauge", "Memory held by rewind checkpoints.", checkpoint_bytes);
  return o;
}

}  // namespace dsv4::server::serve
