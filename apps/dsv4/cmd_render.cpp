// apps/dsv4/cmd_render.cpp — `dsv4 render`: the exact prompt the server builds for a request.
//
//   dsv4 render --request REQUEST.json [--ctx N] [--show-mode] [--default-system-prompt TEXT]
//     REQUEST.json is an OpenAI chat-completions body. Prints the rendered prompt text exactly (no
//     newline added). --ctx is the context size (default 1,048,576): thinking `max` renders as
//     `high` below 393,216. --show-mode prints the thinking mode used on stderr.
//     --default-system-prompt inserts TEXT as a system message when the request has none.
// Errors go to stderr, exit code 1. The api → tokenizer conversion below is what the server uses.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "dsv4/commands.h"
#include "server/api/openai_chat.h"
#include "tokenizer/chat_template.h"

namespace dsv4::app {
namespace {

struct RenderOptions {
  std::string request;
  int64_t ctx = tokenizer::kDefaultContextSize;
  bool show_mode = false;
  std::string default_system_prompt;
};

Result<tokenizer::ChatRequest> to_chat_request(const server::api::ChatCompletionRequest& api, int64_t ctx) {
  tokenizer::ChatRequest out;
  for (size_t i = 0; i < api.messages.size(); ++i) {
    const auto& m = api.messages[i];
    auto role = tokenizer::parse_chat_role(m.role);
    if (!role.ok()) return role.status().with_context("messages[" + std::to_string(i) + "]");
    tokenizer::ChatMessage cm;
    cm.role = role.value();
    cm.content = m.content;
    cm.reasoning_content = m.reasoning_content;
    cm.tool_call_id = m.tool_call_id;
    cm.name = m.name;
    for (const auto& tc : m.tool_calls) cm.tool_calls.push_back({tc.id, tc.name, tc.arguments});
    out.messages.push_back(std::move(cm));
  }
  for (const auto& t : api.tools) out.tools_json.push_back(t.function_json);
  out.response_format_json = api.response_format_json;
  if (!api.thinking) {
    out.thinking = tokenizer::ThinkingMode::kNone;
  } else {
    out.thinking = api.reasoning_effort == server::api::ReasoningEffort::kMax ? tokenizer::ThinkingMode::kMax
                                                                             : tokenizer::ThinkingMode::kHigh;
  }
  out.context_size = ctx;
  return out;
}

int run_render(const RenderOptions& o) {
  std::ifstream in(o.request, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "error: %s: cannot open\n", o.request.c_str());
    return 1;
  }
  std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto api = server::api::parse_chat_completion_request(body);
  if (!api.ok()) {
    std::fprintf(stderr, "error: %s: %s\n", o.request.c_str(), api.status().message().c_str());
    return 1;
  }
  auto req = to_chat_request(api.value(), o.ctx);
  if (!req.ok()) {
    std::fprintf(stderr, "error: %s: %s\n", o.request.c_str(), req.status().message().c_str());
    return 1;
  }
  tokenizer::apply_default_system_prompt(req.value(), o.default_system_prompt);
  auto prompt = tokenizer::render_chat(req.value());
  if (!prompt.ok()) {
    std::fprintf(stderr, "error: %s: %s\n", o.request.c_str(), prompt.status().message().c_str());
    return 1;
  }
  if (o.show_mode) std::fprintf(stderr, "thinking: %s\n", tokenizer::thinking_mode_name(prompt->thinking_used));
  std::fwrite(prompt->text.data(), 1, prompt->text.size(), stdout);
  std::fflush(stdout);
  return 0;
}

}  // namespace

void add_render_command(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<RenderOptions>();
  CLI::App* cmd = app.add_subcommand("render", "Print the exact DS4 prompt rendered from an OpenAI chat request");
  cmd->add_option("--request", opts->request, "OpenAI chat-completions request JSON file")->required();
  cmd->add_option("--ctx", opts->ctx, "Context size in tokens (max thinking needs >= 393216)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--show-mode", opts->show_mode, "Print the thinking mode used on stderr");
  cmd->add_option("--default-system-prompt", opts->default_system_prompt,
                  "System message to insert when the request has none (off by default)");
  cmd->callback([opts, &exit_code] { exit_code = run_render(*opts); });
}

}  // namespace dsv4::app
