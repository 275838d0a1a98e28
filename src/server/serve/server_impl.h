// server/serve/server_impl.h — Server's private state, shared by server.cpp (set-up, auth, info
// routes) and generation.cpp (the three generation routes). Not included outside serve.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <random>
#include <string>

#include "server/api/output.h"
#include "server/http/server.h"
#include "server/serve/assembler.h"
#include "server/serve/job_queue.h"
#include "server/serve/metrics.h"
#include "server/serve/prepare.h"
#include "server/serve/response_store.h"
#include "server/serve/server.h"

namespace dsv4::server::serve {

struct Server::Impl {
  Impl(Engine& e, ServeOptions o);

  Engine& engine;
  ServeOptions options;
  http::Server http;
  Metrics metrics;
  std::unique_ptr<EngineWorker> worker;
  int bound_port = -1;
  std::atomic<int64_t> cache_live{0}, cache_checkpoints{0}, cache_checkpoint_bytes{0};
  std::atomic<size_t> replay_next{0};
  std::mutex id_mu;
  std::mt19937_64 id_rng{std::random_device{}()};
  std::unique_ptr<ResponseStore> response_store;  // /v1/responses (responses_route.cpp)

  void install_routes();
  void handle_generation(ApiKind kind, const http::Request& req, http::Response& res);
  // /v1/responses (responses_route.cpp): POST, and GET (erase=false) / DELETE of a stored one.
  void handle_responses(const http::Request& req, http::Response& res);
  void handle_response_lookup(const http::Request& req, http::Response& res, bool erase);
  void apply_replay(PreparedRequest& prep);  // --replay: the next recorded output, if any
  void send_error(ApiKind kind, http::Response& res, const api::ApiError& e, const std::string& metric_kind);
  // Waits for a non-streamed job (generation.cpp): false when an error was answered or the client left.
  bool await_unstreamed(ApiKind kind, Job& job, Assembler& assembler, const http::Request& req, http::Response& res,
                        GenerationResult* out);
  std::string new_id(const char* prefix);
  std::string model_id() const;
  bool authorized(const http::Request& req) const;
  // Bodies are JSON whatever the Content-Type says (`curl -d` sends form-urlencoded), but a body
  // that is a form (form-urlencoded or multipart, not starting with '{') gets 415; true = answered.
  bool rejected_form_body(ApiKind kind, const http::Request& req, http::Response& res);
};

// Which API's error shape a path gets.
ApiKind api_kind_for_path(const std::string& path);

}  // namespace dsv4::server::serve
