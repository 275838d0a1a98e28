// server/serve/server.h — `dsv4 serve`: the HTTP server over one Engine.
//
// Routes: POST /v1/chat/completions, POST /v1/completions, POST /v1/messages (Anthropic),
// POST /v1/responses, GET/DELETE /v1/responses/{id} (the last response_store responses),
// GET /v1/models, GET /health, GET /props, GET /metrics; OPTIONS preflight when --cors is set.
// Threads: server/http runs one thread per connection (parse, validate, render, tokenize,
// serialise); one EngineWorker owns the engine's timeline (job_queue.h). Security defaults: binds
// 127.0.0.1, no CORS headers unless --cors ORIGIN, optional API key (Bearer or x-api-key;
// constant-time compare; /health stays open; checked before the body is read), the HTTP layer's
// limits and timeouts (server/http/server.h), one JSON parser with one set of limits for every
// route (server/api/request_json.h), bounded queue (429).
//
//   Server server(*engine, options);
//   DSV4_RETURN_IF_ERROR(server.bind());   // port 0 → an ephemeral port, see port()
//   server.run();                           // blocks until stop() (from another thread)
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "dsv4/engine.h"

namespace dsv4::server::serve {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;                // empty = no auth
  std::string cors_origin;            // empty = no CORS headers
  int64_t max_queue = 16;             // waiting requests beyond the running one; more → 429
  size_t max_body_bytes = 32u << 20;  // larger bodies → 413
  int keepalive_ms = 2000;            // SSE ": keep-alive" comment interval while nothing else is sent
  int max_connections = 512;          // open connections (one thread each); more → 503
  int head_timeout_s = 10;            // a request head must arrive within this → 408
  int idle_timeout_s = 30;            // keep-alive: an idle connection is closed after this
  int read_timeout_s = 30;            // the longest wait for body bytes (→ 408) or for a slow reader
  bool timing = false;                // per-phase breakdown per request in the log
  std::string model_alias;            // the id /v1/models reports (default: the GGUF file name)
  std::string default_system_prompt;  // inserted when a chat request has no system message (off by default)
  size_t response_store = 100;        // /v1/responses kept for previous_response_id and GET (0 = none)
  // --replay (debugging/tests): the n-th generation request emits replay_outputs[n] (tokenized
  // with specials, then EOS) instead of sampled tokens; everything else runs for real. Past the
  // end of the list, requests sample normally.
  std::vector<std::string> replay_outputs;
};

class Server {
 public:
  Server(Engine& engine, ServeOptions options);
  ~Server();
  Status bind();
  int port() const;
  void run();   // blocks
  void stop();  // thread-safe; also cancels the running generation

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4::server::serve
