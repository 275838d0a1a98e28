// server/serve/prepare.cpp — request → prompt tokens and sampler settings.
#include "server/serve/prepare.h"

#include <algorithm>
#include <mutex>
#include <random>

namespace dsv4::server::serve {
namespace {

api::ApiError bad_request(std::string message, std::string param = "", std::string code = "") {
  api::ApiError e;
  e.http_status = 400;
  e.type = "invalid_request_error";
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

uint64_t fresh_seed() {
  static std::mutex mu;
  static std::random_device rd;
  std::lock_guard<std::mutex> lock(mu);
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

// Shared tail: context check, max_tokens default, sampler, stop, logprobs.
std::optional<api::ApiError> finish_prepare(const Engine& engine, const api::GenerationParams& p,
                                            PreparedRequest& out) {
  const int64_t ctx = engine.info().ctx;
  const int64_t n = static_cast<int64_t>(out.gen.prompt.size());
  if (n == 0) return bad_request("The prompt is empty.", "prompt");
  const char* what = out.kind == ApiKind::kCompletion ? "prompt" : "messages";
  if (n >= ctx)
    return bad_request("This model's maximum context length is " + std::to_string(ctx) + " tokens. However, your " +
                       what + " resulted in " + std::to_string(n) + " tokens. Please reduce the length of the " + what +
                       ".", what, "context_length_exceeded");
  // Room left for the completion (the last sampled token is never forwarded, hence + 1). A
  // max_tokens beyond it is clamped, not refused: clients send 4096 or more by default, and
  // the generation then ends with finish_reason "length" when the context is full.
  const int64_t room = ctx + 1 - n;
  out.gen.max_tokens = p.max_tokens ? std::min(*p.max_tokens, room) : room;
  out.gen.sampler = sampler_config(p);
  for (const auto& [id, bias] : p.logit_bias)
    if (id < 0 || id >= engine.info().n_vocab)
      return bad_request("Invalid key in 'logit_bias': token id " + std::to_string(id) +
                         " is outside the vocabulary (0.." + std::to_string(engine.info().n_vocab - 1) + ").",
                         "logit_bias");
  out.gen.stop = p.stop;
  out.gen.top_logprobs = p.logprobs ? p.top_logprobs : -1;
  out.logprobs = p.logprobs;
  out.stream = p.stream;
  out.include_usage = p.include_usage;
  return std::nullopt;
}

// tool_choice → the decoding constraint; required/function need tools (and the function one of them).
std::optional<api::ApiError> tool_choice_spec(const api::ChatCompletionRequest& req, ApiKind kind,
                                              tokenizer::ToolChoiceSpec& spec) {
  const bool anthropic = kind == ApiKind::kAnthropic;
  const api::ToolChoice& tc = req.tool_choice;
  auto tool_of = [](const api::ApiTool& t) {
    return tokenizer::ToolGrammarTool{t.name, t.param_names, t.params_known};
  };
  switch (tc.kind) {
    case api::ToolChoiceKind::kAuto: spec.mode = tokenizer::ToolChoiceMode::kAuto; return std::nullopt;
    case api::ToolChoiceKind::kNone: spec.mode = tokenizer::ToolChoiceMode::kNone; return std::nullopt;
    case api::ToolChoiceKind::kRequired:
      if (req.tools.empty())
        return bad_request(anthropic ? "tool_choice: type 'any' requires at least one tool in 'tools'."
                                     : "Invalid value for 'tool_choice': 'required' is only allowed when 'tools' are "
                                       "specified.",
                           "tool_choice");
      spec.mode = tokenizer::ToolChoiceMode::kRequired;
      for (const api::ApiTool& t : req.tools) spec.tools.push_back(tool_of(t));
      spec.parallel = req.parallel_tool_calls;
      return std::nullopt;
    case api::ToolChoiceKind::kFunction:
      for (const api::ApiTool& t : req.tools)
        if (t.name == tc.function_name) {
          spec.mode = tokenizer::ToolChoiceMode::kFunction;
          spec.tools = {tool_of(t)};
          spec.parallel = false;
          return std::nullopt;
        }
      return bad_request(anthropic ? "tool_choice.name: no tool named '" + tc.function_name + "' in 'tools'."
                                   : "Invalid value for 'tool_choice': no function named '" + tc.function_name +
                                         "' was specified in 'tools'.",
                         "tool_choice");
  }
  return std::nullopt;
}

}  // namespace

sampling::SamplerConfig sampler_config(const api::GenerationParams& p) {
  // The model card's sampling is the default; every knob the client sends wins, in every mode
  // (thinking included): temperature 0 or top_k 1 is greedy and deterministic.
  sampling::SamplerConfig c;
  const SamplingDefaults d;
  c.temperature = static_cast<float>(p.temperature.value_or(d.temperature));
  c.top_p = static_cast<float>(p.top_p.value_or(d.top_p));
  c.min_p = static_cast<float>(p.min_p.value_or(d.min_p));
  if (p.top_k) c.top_k = static_cast<int32_t>(*p.top_k);
  if (p.presence_penalty) c.presence_penalty = static_cast<float>(*p.presence_penalty);
  if (p.frequency_penalty) c.frequency_penalty = static_cast<float>(*p.frequency_penalty);
  if (p.repetition_penalty) c.repetition_penalty = static_cast<float>(*p.repetition_penalty);
  c.seed = p.seed ? *p.seed : fresh_seed();
  for (const auto& [id, bias] : p.logit_bias) c.logit_bias.emplace_back(id, static_cast<float>(bias));
  return c;
}

std::optional<api::ApiError> prepare_chat(const Engine& engine, const api::ChatCompletionRequest& req, ApiKind kind,
                                          const std::string& default_system_prompt, PreparedRequest& out) {
  out.kind = kind;
  out.model = req.model;
  tokenizer::ChatRequest chat;
  for (size_t i = 0; i < req.messages.size(); ++i) {
    const api::ApiMessage& m = req.messages[i];
    auto role = tokenizer::parse_chat_role(m.role);
    if (!role.ok()) return bad_request(role.status().message(), "messages[" + std::to_string(i) + "].role");
    tokenizer::ChatMessage cm;
    cm.role = *role;
    cm.content = m.content;
    cm.reasoning_content = m.reasoning_content;
    cm.tool_call_id = m.tool_call_id;
    cm.name = m.name;
    for (const api::ApiToolCall& tc : m.tool_calls) cm.tool_calls.push_back({tc.id, tc.name, tc.arguments});
    chat.messages.push_back(std::move(cm));
  }
  for (const api::ApiTool& t : req.tools) chat.tools_json.push_back(t.function_json);
  if (auto err = tool_choice_spec(req, kind, out.gen.tool_choice)) return err;
  chat.response_format_json = req.response_format_json;
  chat.thinking = !req.thinking ? tokenizer::ThinkingMode::kNone
                  : req.reasoning_effort == api::ReasoningEffort::kMax ? tokenizer::ThinkingMode::kMax
                                                                       : tokenizer::ThinkingMode::kHigh;
  chat.context_size = engine.info().ctx;
  if (!default_system_prompt.empty()) tokenizer::apply_default_system_prompt(chat, default_system_prompt);
  auto rendered = engine.render_chat(chat);
  if (!rendered.ok()) return bad_request(rendered.status().message(), "messages");
  out.thinking = rendered->thinking_used != tokenizer::ThinkingMode::kNone;
  out.gen.prompt = engine.tokenize_chat(*rendered);  // request text never becomes special tokens
  out.gen.chat = true;
  out.gen.thinking = out.thinking;
  return finish_prepare(engine, req.params, out);
}

std::optional<api::ApiError> prepare_completion(const Engine& engine, const api::CompletionRequest& req,
                                                PreparedRequest& out) {
  out.kind = ApiKind::kCompletion;
  out.model = req.model;
  // A raw prompt is the client's own token stream: special-token strings in it are parsed (as
  // llama.cpp's /completion does), unlike chat content, which encode_chat keeps plain.
  out.gen.prompt = engine.tokenize(req.prompt, /*parse_special=*/true);
  // Like llama.cpp: a raw prompt gets the model's BOS unless it already starts with it.
  const int32_t bos = engine.info().bos_id;
  if (bos >= 0 && (out.gen.prompt.empty() || out.gen.prompt.front() != bos)) out.gen.prompt.insert(out.gen.prompt.begin(), bos);
  out.gen.chat = false;
  out.gen.thinking = false;
  if (req.echo) out.echo_text = req.prompt;
  api::GenerationParams p = req.params;
  if (!p.max_tokens) p.max_tokens = 16;  // OpenAI's default for /v1/completions
  return finish_prepare(engine, p, out);
}

}  // namespace dsv4::server::serve
