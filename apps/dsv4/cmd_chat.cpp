// apps/dsv4/cmd_chat.cpp — `dsv4 chat`: an interactive multi-turn REPL over the engine (in
// process, no HTTP), with streamed output, thinking on/off, Ctrl-C to interrupt a generation.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include "dsv4/commands.h"
#include "dsv4/serve_common.h"

namespace dsv4::app {
namespace {

std::atomic<bool> g_interrupted{false};
void on_sigint(int) { g_interrupted = true; }

struct ChatArgs {
  EngineLoadArgs engine;
  std::string prompt;        // -p: one shot
  std::string system;
  bool no_think = false;
  int64_t max_tokens = 0;    // 0 = default_reply_limit(thinking)
  double temperature = 1.0;
  int64_t seed = -1;
};

class PrintObserver final : public GenerationObserver {
 public:
  explicit PrintObserver(bool tty) : tty_(tty) {}
  bool on_prefill(int64_t done, int64_t total) override {
    if (tty_ && total > 256) {
      std::fprintf(stderr, "\r[prefill %3d%%] %lld/%lld", static_cast<int>(100 * done / total),
                   static_cast<long long>(done), static_cast<long long>(total));
      progress_shown_ = true;
    }
    return !g_interrupted.load();
  }
  bool on_delta(const GenerationDelta& d) override {
    if (progress_shown_) {
      std::fprintf(stderr, "\r\033[K");
      progress_shown_ = false;
    }
    for (const auto& e : d.events) {
      using K = tokenizer::DsmlEvent::Kind;
      switch (e.kind) {
        case K::kReasoning:
          if (tty_ && !in_reasoning_) std::fputs("\033[2m", stdout);
          in_reasoning_ = true;
          std::fputs(e.text.c_str(), stdout);
          reasoning += e.text;
          break;
        case K::kContent:
          end_reasoning();
          std::fputs(e.text.c_str(), stdout);
          content += e.text;
          break;
        case K::kToolCallBegin:
          end_reasoning();
          std::printf("\n[tool call %s(", e.name.c_str());
          calls.push_back({e.id, e.name, ""});
          break;
        case K::kToolCallArguments:
          std::fputs(e.text.c_str(), stdout);
          if (!calls.empty()) calls.back().arguments_json += e.text;
          break;
        case K::kToolCallEnd: std::printf(")]\n"); break;
      }
    }
    std::fflush(stdout);
    return !g_interrupted.load();
  }
  void end_reasoning() {
    if (in_reasoning_ && tty_) std::fputs("\033[0m\n", stdout);
    in_reasoning_ = false;
  }
  std::string reasoning, content;
  std::vector<tokenizer::ChatToolCall> calls;

 private:
  bool tty_;
  bool in_reasoning_ = false;
  bool progress_shown_ = false;
};

// A reply stops at the end-of-sentence token; this bounds one that never emits it (e.g. the built-in
// random-weight model): the DeepSeek API's defaults, 32768 tokens with thinking (the reasoning counts),
// 4096 without. Never more than the context has room for.
constexpr int64_t kDefaultReplyTokensThinking = 32768;
constexpr int64_t kDefaultReplyTokens = 4096;

const char* kHelp =
    "commands: /think  /nothink  /reset  /ctx N  /read FILE  /help  /quit   (Ctrl-C interrupts a reply)\n";

int run_chat(ChatArgs& a) {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigaction(SIGINT, &sa, nullptr);
  auto loaded = load_engine(a.engine, "chat");
  if (!loaded.ok()) {
    std::fprintf(stderr, "dsv4 chat: %s\n", loaded.status().to_string().c_str());
    return 1;
  }
  std::unique_ptr<Engine> engine = std::move(*loaded);
  const bool tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
  bool thinking = !a.no_think;
  std::vector<tokenizer::ChatMessage> history;
  std::mt19937_64 seeder(a.seed >= 0 ? static_cast<uint64_t>(a.seed) : std::random_device{}());

  auto reply = [&](const std::string& user_text) -> bool {
    tokenizer::ChatRequest req;
    if (!a.system.empty()) req.messages.push_back({tokenizer::ChatRole::kSystem, a.system, "", {}, "", ""});
    req.messages.insert(req.messages.end(), history.begin(), history.end());
    req.messages.push_back({tokenizer::ChatRole::kUser, user_text, "", {}, "", ""});
    req.thinking = thinking ? tokenizer::ThinkingMode::kHigh : tokenizer::ThinkingMode::kNone;
    req.context_size = engine->info().ctx;
    auto rendered = engine->render_chat(req);
    if (!rendered.ok()) {
      std::fprintf(stderr, "error: %s\n", rendered.status().message().c_str());
      return false;
    }
    GenerateRequest g;
    g.prompt = engine->tokenize_chat(*rendered);
    const int64_t room = engine->info().ctx + 1 - static_cast<int64_t>(g.prompt.size());
    if (room < 1) {
      std::fprintf(stderr, "error: the conversation (%zu tokens) fills the context of %lld; /reset or /ctx N\n",
                   g.prompt.size(), static_cast<long long>(engine->info().ctx));
      return false;
    }
    const bool thinks = rendered->thinking_used != tokenizer::ThinkingMode::kNone;
    const int64_t limit = a.max_tokens > 0 ? a.max_tokens : thinks ? kDefaultReplyTokensThinking : kDefaultReplyTokens;
    g.max_tokens = std::min(limit, room);
    g.chat = true;
    g.thinking = thinks;
    g.sampler.temperature = static_cast<float>(a.temperature);
    g.sampler.seed = seeder();
    g_interrupted = false;
    PrintObserver obs(tty);
    auto res = engine->generate(g, obs);
    obs.end_reasoning();
    std::printf("\n");
    if (!res.ok()) {
      std::fprintf(stderr, "error: %s\n", res.status().to_string().c_str());
      return false;
    }
    if (res->finish == FinishReason::kCancelled) std::fprintf(stderr, "[interrupted]\n");
    if (res->finish == FinishReason::kLength)
      std::fprintf(stderr, "[length limit: %lld tokens%s]\n", static_cast<long long>(g.max_tokens),
                   g.max_tokens == room ? ", the context is full (/reset or /ctx N)" : "; -n N raises it");
    if (!res->output_error.ok()) std::fprintf(stderr, "[%s]\n", res->output_error.message().c_str());
    const auto& s = res->stats;
    if (tty)
      std::fprintf(stderr, "\033[2m[%lld prompt tokens (%lld cached) %.0f ms, %lld tokens %.1f tok/s]\033[0m\n",
                   static_cast<long long>(s.prompt_tokens), static_cast<long long>(s.cached_tokens), s.prefill_ms,
                   static_cast<long long>(s.completion_tokens),
                   s.decode_ms > 0 ? static_cast<double>(s.completion_tokens) / (s.decode_ms / 1e3) : 0.0);
    history.push_back({tokenizer::ChatRole::kUser, user_text, "", {}, "", ""});
    tokenizer::ChatMessage m{tokenizer::ChatRole::kAssistant, obs.content, obs.reasoning, obs.calls, "", ""};
    history.push_back(std::move(m));
    return true;
  };

  if (!a.prompt.empty()) return reply(a.prompt) ? 0 : 1;
  if (tty) std::fprintf(stderr, "%s", kHelp);
  std::string line;
  for (;;) {
    if (tty) std::fprintf(stdout, "%s> ", thinking ? "think" : "");
    std::fflush(stdout);
    g_interrupted = false;
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    if (line[0] == '/') {
      std::istringstream is(line);
      std::string cmd, arg;
      is >> cmd;
      std::getline(is >> std::ws, arg);
      if (cmd == "/quit" || cmd == "/exit") break;
      if (cmd == "/help") std::fprintf(stderr, "%s", kHelp);
      else if (cmd == "/think") thinking = true;
      else if (cmd == "/nothink") thinking = false;
      else if (cmd == "/reset") {
        history.clear();
        engine->reset();
      } else if (cmd == "/ctx") {
        char* end = nullptr;
        const long long n = std::strtoll(arg.c_str(), &end, 10);
        if (arg.empty() || *end != '\0' || n < 16) {
          std::fprintf(stderr, "usage: /ctx N (N >= 16)\n");
          continue;
        }
        a.engine.ctx = n;
        engine.reset();
        auto re = load_engine(a.engine, "chat");
        if (!re.ok()) {
          std::fprintf(stderr, "error: %s\n", re.status().to_string().c_str());
          return 1;
        }
        engine = std::move(*re);
      } else if (cmd == "/read") {
        std::ifstream f(arg, std::ios::binary);
        if (!f) {
          std::fprintf(stderr, "error: cannot open '%s'\n", arg.c_str());
          continue;
        }
        std::stringstream ss;
        ss << f.rdbuf();
        reply(ss.str());
      } else {
        std::fprintf(stderr, "unknown command %s\n%s", cmd.c_str(), kHelp);
      }
      continue;
    }
    reply(line);
  }
  return 0;
}

}  // namespace

void add_chat_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<ChatArgs>();
  auto* cmd = app.add_subcommand("chat", "Terminal chat over the same engine: streamed replies (reasoning dimmed), /think, /nothink, /reset, "
      "/ctx N, /read FILE, /quit; Ctrl-C interrupts a reply; -p answers once and exits");
  add_engine_options(cmd, a->engine);
  cmd->add_option("-p,--prompt", a->prompt, "one message, print the reply, exit");
  cmd->add_option("--system", a->system, "system prompt");
  cmd->add_flag("--no-think", a->no_think, "start with thinking off (/think turns it on)");
  cmd->add_option("-n,--max-tokens", a->max_tokens, "reply length limit in tokens, reasoning included; a reply ends earlier at the end-of-sentence token "
                  "(default: 32768 with thinking, 4096 without, as the DeepSeek API; never beyond the context)");
  cmd->add_option("--temperature", a->temperature, "sampling temperature (0 = greedy)")->capture_default_str();
  cmd->add_option("--seed", a->seed, "sampling seed (default: random)");
  cmd->callback([a, &exit_code] { exit_code = run_chat(*a); });
}

}  // namespace dsv4::app
