// server/serve/server_impl.h — Server's private state, shared by server.cpp (set-up, auth, info
// routes) and generation.cpp (the three generation routes). Not included outside serve.
#pragma once

#include <httplib.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <random>
#include <string>

#include "server/api/output.h"
#include "server/serve/job_queue.h"
#include "server/serve/metrics.h"
#include "server/serve/prepare.h"
#include "server/serve/server.h"

namespace dsv4::server::serve {

struct Server::Impl {
  Impl(Engine& e, ServeOptions o) : engine(e), options(std::move(o)) {}

  Engine& engine;
  ServeOptions options;
  httplib::Server http;
  Metrics metrics;
  std::unique_ptr<EngineWorker> worker;
  int bound_port = -1;
  std::atomic<int64_t> cache_live{0}, cache_checkpoints{0}, cache_checkpoint_bytes{0};
  std::atomic<size_t> replay_next{0};
  // Streams that have not written their last event yet: stop() lets them finish (their jobs end
  // at once) before the HTTP server stops, which would cut their responses short.
  std::atomic<int> open_streams{0};
  std::mutex id_mu;
  std::mt19937_64 id_rng{std::random_device{}()};

  void install_routes();
  void handle_generation(ApiKind kind, const httplib::Request& req, httplib::Response& res);
  void send_error(ApiKind kind, httplib::Response& res, const api::ApiError& e, const std::string& metric_kind);
  std::string new_id(const char* prefix);
  std::string model_id() const;
  bool authorized(const httplib::Request& req) const;
};

// Which API's error shape a path gets.
ApiKind api_kind_for_path(const std::string& path);

}  // namespace dsv4::server::serve
