// apps/dsv4/cmd_serve.cpp — `dsv4 serve`: flags → ServeOptions, signals → graceful stop.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/flags.h"
#include "base/log.h"
#include "dsv4/commands.h"
#include "dsv4/serve_common.h"
#include "server/serve/server.h"

namespace dsv4::app {
namespace {

struct ServeArgs {
  EngineLoadArgs engine;
  server::serve::ServeOptions serve;
  int64_t max_body_mb = 32;
  std::string replay_file;
};

// --replay FILE: one JSON string per line (the model output to emit for that request).
Status read_replay(const std::string& path, std::vector<std::string>& out) {
  std::ifstream f(path);
  if (!f) return not_found(path + ": cannot open");
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    ++n;
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_string())
      return invalid_argument(path + ":" + std::to_string(n) + ": expected a JSON string per line");
    out.push_back(j.get<std::string>());
  }
  return ok_status();
}

int run_serve(ServeArgs& a) {
  // Block SIGINT/SIGTERM in every thread; one thread waits for them and stops the server.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  if (!a.replay_file.empty()) {
    if (Status s = read_replay(a.replay_file, a.serve.replay_outputs); !s.ok()) {
      std::fprintf(stderr, "dsv4 serve: %s\n", s.to_string().c_str());
      return 2;
    }
    log_warn("--replay: the first %zu requests emit recorded outputs instead of sampled tokens",
             a.serve.replay_outputs.size());
  }
  auto store = flag_int("response-store");
  if (!store.ok() || *store < 0 || *store > 1000000) {
    std::fprintf(stderr, "dsv4 serve: --response-store: expected an integer from 0 to 1000000, got '%s'\n",
                 flag_value("response-store").c_str());
    return 2;
  }
  a.serve.response_store = static_cast<size_t>(*store);
  auto engine = load_engine(a.engine, "serve");
  if (!engine.ok()) {
    std::fprintf(stderr, "dsv4 serve: %s\n", engine.status().to_string().c_str());
    return 1;
  }
  a.serve.max_body_bytes = static_cast<size_t>(a.max_body_mb) << 20;
  a.serve.timing = a.engine.timing;
  server::serve::Server server(**engine, a.serve);
  if (Status s = server.bind(); !s.ok()) {
    std::fprintf(stderr, "dsv4 serve: %s\n", s.to_string().c_str());
    return 1;
  }
  std::thread waiter([&server, set] {
    int sig = 0;
    sigwait(&set, &sig);
    log_info("signal %d: stopping (the running generation is cancelled)", sig);
    server.stop();
  });
  log_info("listening on http://%s:%d (OpenAI /v1/chat/completions, /v1/completions, /v1/responses; Anthropic /v1/messages)%s%s",
           a.serve.host.c_str(), server.port(), a.serve.api_key.empty() ? "" : "; API key required",
           a.serve.cors_origin.empty() ? "" : "; CORS on");
  std::fflush(stderr);
  server.run();
  // Wake the waiter if the server stopped for another reason.
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  log_info("stopped");
  return 0;
}

}  // namespace

void add_engine_options(CLI::App* cmd, EngineLoadArgs& e) {
  cmd->add_option("-m,--model", e.model, "model .gguf (default: the built-in random-weight tiny model)");
  cmd->add_option("--ctx", e.ctx, "tokens one conversation may hold, prompt + reply (default: min(the model's context, 32768)); "
                  "memory is reserved up front: about 13.4 KiB per token for the real Flash (32 K: 430 MB, 1 M: 13 GiB)")
      ->check(CLI::Range(int64_t{16}, int64_t{1} << 24));
  cmd->add_option("--prefill-chunk", e.prefill_chunk, "tokens per prefill step (speed only: results are identical at any size)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  cmd->add_option("--checkpoint-interval", e.checkpoint_interval,
                  "prefix-cache rewind point every N tokens, plus one token before each prompt's end (about 21 MB "
                  "each for the real Flash)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  cmd->add_option("--max-checkpoints", e.max_checkpoints, "prefix-cache rewind points kept")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_flag("--timing", e.timing, "log a per-phase time breakdown (HC, attention, compressor+indexer, MoE, head, sampling) per request");
}

void add_serve_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand(
      "serve", "OpenAI- and Anthropic-compatible HTTP server (its behaviour: README.md, section \"dsv4 serve\")");
  add_engine_options(cmd, a->engine);
  cmd->add_option("--host", a->serve.host, "address to bind (127.0.0.1: this machine only; 0.0.0.0 exposes it to the network: use --api-key then)")->capture_default_str();
  cmd->add_option("--port", a->serve.port, "port (0: any free port, printed in the log)")->capture_default_str()->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", a->serve.api_key, "require Authorization: Bearer KEY or x-api-key: KEY on every route but /health (401 otherwise)")
      ->envname("DSV4_API_KEY");
  cmd->add_option("--cors", a->serve.cors_origin, "send Access-Control-Allow-Origin: ORIGIN and answer preflights (e.g. http://localhost:3000 or *)");
  cmd->add_option("--max-queue", a->serve.max_queue, "requests that may wait while one runs (one runs at a time); beyond that 429 with Retry-After")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{100000}));
  cmd->add_option("--max-body-mb", a->max_body_mb, "largest request body in MiB (larger → 413)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_option("--keepalive-ms", a->serve.keepalive_ms,
                  "interval of `: keep-alive` SSE comments while nothing else is sent (prefill progress is sent as "
                  "`: prefill done/total`)")
      ->capture_default_str()
      ->check(CLI::Range(10, 600000));
  cmd->add_option("--max-connections", a->serve.max_connections,
                  "open HTTP connections (one thread each); more get 503 with Retry-After")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  cmd->add_option("--head-timeout-s", a->serve.head_timeout_s, "a request line and headers must arrive within this many seconds from their first byte (else 408, closed)")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  cmd->add_option("--idle-timeout-s", a->serve.idle_timeout_s, "an idle keep-alive connection is closed after this many seconds")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  cmd->add_option("--read-timeout-s", a->serve.read_timeout_s,
                  "longest wait in seconds for the next bytes of a request body (else 408), or for a client to take response "
                  "bytes (else closed)")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  cmd->add_option("--alias", a->serve.model_alias,
                  "model id reported by /v1/models (default: the file name; requests may name any model)");
  cmd->add_option("--default-system-prompt", a->serve.default_system_prompt,
                  "system prompt inserted when a chat request has none (off by default; shown in /props)");
  cmd->add_option("--replay", a->replay_file,
                  "debugging/tests: JSONL of output strings; request n emits line n instead of sampled tokens");
  cmd->callback([a, &exit_code] { exit_code = run_serve(*a); });
}

}  // namespace dsv4::app
