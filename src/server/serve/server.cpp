// server/serve/server.cpp — set-up (bind, timeouts, thread pool, body limit), authentication,
// CORS, error shapes for transport errors, and the informational routes (/health, /v1/models,
// /props, /metrics).
#include <cctype>

#include <nlohmann/json.hpp>

#include "base/log.h"
#include "server/api/anthropic.h"
#include "server/api/json_limits.h"
#include "server/api/utility_requests.h"
#include "server/serve/server_impl.h"

namespace dsv4::server::serve {

ApiKind api_kind_for_path(const std::string& path) {
  if (path.rfind("/v1/messages", 0) == 0) return ApiKind::kAnthropic;
  if (path == "/v1/completions") return ApiKind::kCompletion;
  return ApiKind::kChat;
}

namespace {

// Constant-time comparison (the length may leak; the key's bytes do not).
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

// The route label in /metrics: a served path as is, anything else "other". Never the raw path:
// client bytes (quotes, newlines, invalid UTF-8) would corrupt the exposition, and every distinct
// path would add a series forever.
std::string route_label(const std::string& path) {
  static const char* const kRoutes[] = {"/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses",
                                        "/v1/messages/count_tokens", "/v1/models", "/models", "/tokenize",
                                        "/detokenize", "/health", "/props", "/metrics"};
  for (const char* r : kRoutes)
    if (path == r) return path;
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/:id";
  if (path.rfind("/v1/responses/", 0) == 0) return "/v1/responses/:id";
  return "other";
}

api::ApiError make_error(int status, std::string type, std::string message, std::string code = "") {
  api::ApiError e;
  e.http_status = status;
  e.type = std::move(type);
  e.message = std::move(message);
  e.code = std::move(code);
  return e;
}

}  // namespace

std::string Server::Impl::new_id(const char* prefix) {
  std::lock_guard<std::mutex> lock(id_mu);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%08llx", static_cast<unsigned long long>(id_rng()),
                static_cast<unsigned long long>(id_rng() & 0xffffffffu));
  return std::string(prefix) + buf;
}

std::string Server::Impl::model_id() const {
  return options.model_alias.empty() ? engine.info().name : options.model_alias;
}

bool Server::Impl::authorized(const http::Request& req) const {
  if (options.api_key.empty()) return true;
  const std::string auth = req.get_header_value("Authorization");
  if (auth.rfind("Bearer ", 0) == 0 && same_secret(auth.substr(7), options.api_key)) return true;
  const std::string xkey = req.get_header_value("x-api-key");
  return !xkey.empty() && same_secret(xkey, options.api_key);
}

bool Server::Impl::rejected_form_body(ApiKind kind, const http::Request& req, http::Response& res) {
  std::string type = req.get_header_value("Content-Type");
  type = type.substr(0, type.find(';'));
  for (char& c : type) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  while (!type.empty() && (type.back() == ' ' || type.back() == '\t')) type.pop_back();
  if (type != "application/x-www-form-urlencoded" && type != "multipart/form-data") return false;
  const size_t first = req.body.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && req.body[first] == '{') return false;  // JSON sent with curl -d
  send_error(kind, res,
             make_error(415, "invalid_request_error",
                        "Unsupported Content-Type '" + type + "': this server accepts JSON request bodies only "
                        "(send Content-Type: application/json)."),
             "bad_request");
  return true;
}

void Server::Impl::send_error(ApiKind kind, http::Response& res, const api::ApiError& e,
                              const std::string& metric_kind) {
  res.status = e.http_status;
  res.set_content(kind == ApiKind::kAnthropic ? api::anthropic_error_json(e) : api::openai_error_json(e),
                  "application/json");
  if (!metric_kind.empty()) metrics.error(metric_kind);
}

static http::ServerLimits http_limits(const ServeOptions& o) {
  http::ServerLimits l;
  l.parser.max_body_bytes = o.max_body_bytes;
  l.head_timeout_ms = o.head_timeout_s * 1000;
  l.idle_timeout_ms = o.idle_timeout_s * 1000;
  l.read_timeout_ms = o.read_timeout_s * 1000;
  l.write_timeout_ms = o.read_timeout_s * 1000;
  l.max_connections = o.max_connections;
  return l;
}

Server::Impl::Impl(Engine& e, ServeOptions o) : engine(e), options(std::move(o)), http(http_limits(options)) {}

void Server::Impl::install_routes() {
  http.set_pre_routing_handler([this](const http::Request& req, http::Response& res) {
    if (!options.cors_origin.empty()) {
      res.set_header("Access-Control-Allow-Origin", options.cors_origin);
      res.set_header("Vary", "Origin");
      if (req.method == "OPTIONS") {
        res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        res.set_header("Access-Control-Allow-Headers",
                       "Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta");
        res.set_header("Access-Control-Max-Age", "600");
        res.status = 204;
        return true;
      }
    }
    if (req.path != "/health" && !authorized(req)) {
      const ApiKind kind = api_kind_for_path(req.path);
      api::ApiError e = make_error(401, kind == ApiKind::kAnthropic ? "authentication_error" : "invalid_request_error",
                                   "Invalid or missing API key. Send 'Authorization: Bearer <key>' or 'x-api-key: <key>'.",
                                   "invalid_api_key");
      send_error(kind, res, e, "auth");  // (the logger counts the request)
      return true;
    }
    return false;
  });

  // Errors answered before or instead of a route (the HTTP layer's own: 400 malformed, 404, 408,
  // 411, 413, 414, 415, 431, 503) get an API-shaped body.
  http.set_error_handler([this](const http::Request& req, http::Response& res) {
    const ApiKind kind = api_kind_for_path(req.path);
    api::ApiError e;
    e.http_status = res.status;
    if (res.status == 413) {
      e.type = kind == ApiKind::kAnthropic ? "request_too_large" : "invalid_request_error";
      e.message = "The request body is larger than the server's limit of " + std::to_string(options.max_body_bytes) +
                  " bytes.";
      metrics.error("too_large");
    } else if (res.status == 404) {
      e.type = kind == ApiKind::kAnthropic ? "not_found_error" : "invalid_request_error";
      e.message = "Unknown route: " + req.method + " " + req.path;
      metrics.error("not_found");
    } else {
      e.type = res.status >= 500 ? (kind == ApiKind::kAnthropic ? "overloaded_error" : "server_error")
                                 : "invalid_request_error";
      e.message = res.error_message.empty() ? "HTTP error " + std::to_string(res.status) : res.error_message;
      metrics.error(res.status == 408 ? "timeout" : res.status >= 500 ? "overloaded" : "bad_http");
    }
    res.set_content(kind == ApiKind::kAnthropic ? api::anthropic_error_json(e) : api::openai_error_json(e),
                    "application/json");
  });
  http.set_exception_handler([this](const http::Request& req, http::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& ex) {
      what = ex.what();
    } catch (...) {
    }
    log_error("%s %s: internal error: %s", req.method.c_str(), req.path.c_str(), what.c_str());
    send_error(api_kind_for_path(req.path), res, make_error(500, "server_error", "Internal server error."), "internal");
  });
  http.set_logger([this](const http::Request& req, const http::Response& res) {
    metrics.request(route_label(req.path), res.status);
    log_debug("%s %s -> %d", req.method.c_str(), req.path.c_str(), res.status);
  });

  http.get("/health", [this](const http::Request&, http::Response& res) {
    nlohmann::json j = {{"status", "ok"}, {"queue_depth", worker->queued()}, {"busy", worker->busy()}};
    res.set_content(j.dump(), "application/json");
  });
  auto models = [this](const http::Request&, http::Response& res) {
    const ModelInfo& mi = engine.info();
    nlohmann::json m = {{"id", model_id()}, {"object", "model"}, {"created", 0}, {"owned_by", "dsv4"},
                        {"context_length", mi.ctx}, {"max_completion_tokens", mi.ctx}};
    res.set_content(nlohmann::json{{"object", "list"}, {"data", {m}}}.dump(), "application/json");
  };
  http.get("/v1/models", models);
  http.get("/models", models);
  http.get("/v1/models/(.+)", [this](const http::Request& req, http::Response& res) {
    const std::string id = req.matches[1];
    if (id != model_id()) {
      send_error(ApiKind::kChat, res, make_error(404, "invalid_request_error", "The model '" + id + "' does not exist.",
                                                 "model_not_found"), "not_found");
      return;
    }
    const ModelInfo& mi = engine.info();
    res.set_content(nlohmann::json{{"id", model_id()}, {"object", "model"}, {"created", 0}, {"owned_by", "dsv4"},
                                   {"context_length", mi.ctx}}.dump(),
                    "application/json");
  });
  // llama.cpp-style helpers: text ↔ token ids with the model's tokenizer (specials are parsed).
  // llama.cpp-style helpers: text ↔ token ids with the model's tokenizer (specials are parsed).
  http.post("/tokenize", [this](const http::Request& req, http::Response& res) {
    if (rejected_form_body(ApiKind::kChat, req, res)) return;
    auto text = api::parse_tokenize_request(req.body);
    if (!text.ok()) return send_error(ApiKind::kChat, res, api::api_error_from_status(text.status()), "bad_request");
    const std::vector<int32_t> ids = engine.tokenize(*text, /*parse_special=*/true);
    res.set_content(nlohmann::json{{"tokens", ids}}.dump(), "application/json");
  });
  http.post("/detokenize", [this](const http::Request& req, http::Response& res) {
    if (rejected_form_body(ApiKind::kChat, req, res)) return;
    auto ids = api::parse_detokenize_request(req.body, engine.info().n_vocab);
    if (!ids.ok()) return send_error(ApiKind::kChat, res, api::api_error_from_status(ids.status()), "bad_request");
    auto text = engine.detokenize(*ids);
    res.set_content(nlohmann::json{{"content", text.ok() ? *text : std::string()}}.dump(-1, ' ', false,
                                                                                        nlohmann::json::error_handler_t::replace),
                    "application/json");
  });
  http.get("/props", [this](const http::Request&, http::Response& res) {
    const ModelInfo& mi = engine.info();
    const SamplingDefaults d;
    nlohmann::json j;
    j["model"] = {{"id", model_id()}, {"path", mi.path}, {"description", mi.description},
                  {"is_ds4_flash", mi.is_ds4_flash}, {"n_params", mi.n_params}, {"file_bytes", mi.file_bytes}};
    j["shape"] = {{"n_layer", mi.n_layer}, {"n_embd", mi.n_embd}, {"n_vocab", mi.n_vocab}, {"n_expert", mi.n_expert},
                  {"n_expert_used", mi.n_expert_used}, {"n_ctx_train", mi.n_ctx_train}};
    j["ctx"] = mi.ctx;
    j["session"] = {{"reserved_bytes", mi.session_bytes}, {"bytes_per_token", mi.session_bytes_per_token},
                    {"checkpoint_interval", engine.options().checkpoint_interval},
                    {"max_checkpoints", engine.options().max_checkpoints}};
    j["defaults"] = {{"temperature", d.temperature}, {"top_p", d.top_p}, {"min_p", d.min_p}, {"top_k", 0},
                     {"thinking", "enabled"}, {"reasoning_effort", "high"},
                     {"client_sampling", "client parameters win in every mode; these are the defaults"},
                     {"think_max_min_context", tokenizer::kThinkMaxMinContext},
                     {"default_system_prompt", options.default_system_prompt}};
    j["server"] = {{"max_queue", options.max_queue}, {"max_body_bytes", options.max_body_bytes},
                   {"auth", !options.api_key.empty()}, {"cors", options.cors_origin},
                   {"max_connections", options.max_connections}, {"head_timeout_s", options.head_timeout_s},
                   {"idle_timeout_s", options.idle_timeout_s}, {"read_timeout_s", options.read_timeout_s},
                   {"response_store", options.response_store}};
    j["limits"] = {{"max_header_fields", http::ParserLimits{}.max_header_count},
                   {"max_header_bytes", http::ParserLimits{}.max_head_bytes},
                   {"max_request_line_bytes", http::ParserLimits{}.max_request_line},
                   {"json_max_depth", api::kMaxJsonDepth}, {"json_max_object_keys", api::kMaxJsonObjectKeys},
                   {"json_max_values", api::kMaxJsonValues}, {"json_max_string_bytes", api::kMaxJsonStringBytes}};
    res.set_content(j.dump(), "application/json");
  });
  http.get("/metrics", [this](const http::Request&, http::Response& res) {
    res.set_content(metrics.prometheus(worker->queued(), worker->busy(), engine.info().ctx, cache_live.load(),
                                       cache_checkpoints.load(), cache_checkpoint_bytes.load()),
                    "text/plain; version=0.0.4");
  });
  http.post("/v1/chat/completions", [this](const http::Request& req, http::Response& res) {
    handle_generation(ApiKind::kChat, req, res);
  });
  http.post("/v1/completions", [this](const http::Request& req, http::Response& res) {
    handle_generation(ApiKind::kCompletion, req, res);
  });
  http.post("/v1/messages", [this](const http::Request& req, http::Response& res) {
    handle_generation(ApiKind::kAnthropic, req, res);
  });
  http.post("/v1/responses", [this](const http::Request& req, http::Response& res) { handle_responses(req, res); });
  http.get("/v1/responses/(.+)", [this](const http::Request& req, http::Response& res) {
    handle_response_lookup(req, res, /*erase=*/false);
  });
  http.del("/v1/responses/(.+)", [this](const http::Request& req, http::Response& res) {
    handle_response_lookup(req, res, /*erase=*/true);
  });
  // Anthropic token counting (Claude Code asks before large requests): the rendered prompt's length.
  http.post("/v1/messages/count_tokens", [this](const http::Request& req, http::Response& res) {
    if (rejected_form_body(ApiKind::kAnthropic, req, res)) return;
    auto parsed = api::parse_anthropic_count_tokens_request(req.body);
    if (!parsed.ok())
      return send_error(ApiKind::kAnthropic, res, api::api_error_from_status(parsed.status()), "bad_request");
    PreparedRequest prep;
    parsed->params.max_tokens = 1;
    if (auto err = prepare_chat(engine, *parsed, ApiKind::kAnthropic, options.default_system_prompt, prep);
        err && err->code != "context_length_exceeded")
      return send_error(ApiKind::kAnthropic, res, *err, "bad_request");
    res.set_content(nlohmann::json{{"input_tokens", prep.gen.prompt.size()}}.dump(), "application/json");
  });
}

Server::Server(Engine& engine, ServeOptions options) : impl_(std::make_unique<Impl>(engine, std::move(options))) {
  Impl* impl = impl_.get();
  impl->worker = std::make_unique<EngineWorker>(
      engine, impl->options.max_queue, [impl](const Job& job, const Result<GenerationResult>& r, double queue_ms) {
        // Runs on the worker thread: the only place the engine's cache may be read.
        const CacheStats cs = impl->engine.cache_stats();
        impl->cache_live = cs.live_tokens;
        impl->cache_checkpoints = cs.checkpoints;
        impl->cache_checkpoint_bytes = cs.checkpoint_bytes;
        if (!r.ok()) {
          impl->metrics.error("engine");
          log_error("%s: generation failed: %s", job.route.c_str(), r.status().to_string().c_str());
          return;
        }
        const GenerationStats& s = r->stats;
        impl->metrics.generation(s.prompt_tokens, s.cached_tokens, s.completion_tokens, s.prefill_ms, s.decode_ms,
                                 queue_ms);
        if (r->finish == FinishReason::kCancelled) impl->metrics.error("cancelled");
        const double computed = static_cast<double>(s.prompt_tokens - s.cached_tokens);
        log_info("%s: prompt %lld (cached %lld) in %.1f ms (%.1f tok/s), %lld tokens in %.1f ms (%.2f tok/s), "
                 "queue %.1f ms, finish %s",
                 job.route.c_str(), static_cast<long long>(s.prompt_tokens), static_cast<long long>(s.cached_tokens),
                 s.prefill_ms, s.prefill_ms > 0 ? computed / (s.prefill_ms / 1e3) : 0.0,
                 static_cast<long long>(s.completion_tokens), s.decode_ms,
                 s.decode_ms > 0 ? static_cast<double>(s.completion_tokens) / (s.decode_ms / 1e3) : 0.0, queue_ms,
                 finish_reason_name(r->finish));
        if (impl->options.timing) {
          const PhaseMillis& p = s.phases;
          const double n = static_cast<double>(std::max<int64_t>(s.completion_tokens + s.prompt_tokens - s.cached_tokens, 1));
          log_info("%s: timing (ms total / per token): hc %.1f/%.3f attention %.1f/%.3f compressor+indexer %.1f/%.3f "
                   "moe %.1f/%.3f head %.1f/%.3f embed %.1f/%.3f sampling %.1f",
                   job.route.c_str(), p.hc, p.hc / n, p.attention, p.attention / n, p.compressor, p.compressor / n,
                   p.moe, p.moe / n, p.head, p.head / n, p.embed, p.embed / n, p.sampling);
        }
      });
  impl->response_store = std::make_unique<ResponseStore>(impl->options.response_store);
  impl->install_routes();
}

Server::~Server() {
  stop();
  impl_->worker.reset();
}

Status Server::bind() {
  Impl& m = *impl_;
  DSV4_RETURN_IF_ERROR(m.http.bind(m.options.host, m.options.port));
  m.bound_port = m.http.port();
  return ok_status();
}

int Server::port() const { return impl_->bound_port; }

void Server::run() { impl_->http.listen(); }

void Server::stop() {
  // Every job ends now (finished, cancelled or failed), so open streams write their last event;
  // the HTTP layer closes idle connections at once and lets in-flight answers finish.
  if (impl_->worker) impl_->worker->stop();
  impl_->http.stop();
}

}  // namespace dsv4::server::serve
