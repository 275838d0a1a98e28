// server/serve/server_impl.h — Server's private state, shared by server.cpp (set-up, auth, info
// routes) and generation.cpp (the three generation routes). Not included outside serve.
#pragma once

#include <atomic>
#include <functional>
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
  // How a route renders a streamed generation as SSE text ("" sends nothing): its opening events, each
  // delta (events, logprobs, raw text), an engine or model-output error, the finished output.
  struct StreamRender {
    std::function<std::string()> begin;
    std::function<std::string(const std::vector<api::OutputEvent>&, const std::vector<api::TokenLogprobInfo>&,
                              const std::string&)>
        delta;
    std::function<std::string(const api::ApiError&)> error;
    std::function<std::string(const api::CompletionOutput&)> finish;
  };
  // Streams `job` (generation.cpp): keep-alive comments while nothing else is sent, prefill progress,
  // deltas through `assembler` (owned, with what it references, by `owner`); a client that goes away
  // cancels the job within one token.
  void stream_job(http::Response& res, std::shared_ptr<Job> job, Assembler* assembler, std::shared_ptr<void> owner,
                  StreamRender render);
  // Queues a prepared generation (generation.cpp); nullptr when the queue is full (the 429 is sent).
  std::shared_ptr<Job> submit_job(ApiKind kind, const PreparedRequest& prep, const http::Request& req,
                                  http::Response& res);
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
