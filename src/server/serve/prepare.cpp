// server/serve/prepare.cpp — request → prompt tokens and sampler settings.
#include "server/serve/prepare.h"

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
std::optional<api::ApiError> finish_prepare(const Engine& engine, const api::GenerationParams& p, bool thinking,
                                            PreparedRequest& out) {
  const int64_t ctx = engine.info().ctx;
  const int64_t n = static_cast<int64_t>(out.gen.prompt.size());
  if (n == 0) return bad_request("The prompt is empty.", "prompt");
  const char* what = out.kind == ApiKind::kCompletion ? "prompt" : "messages";
  if (n >= ctx)
    return bad_request("This model's maximum context length is " + std::to_string(ctx) + " tokens. However, your " +
                       what + " resulted in " + std::to_string(n) + " tokens. Please reduce the length of the " + what +
                       ".", what, "context_length_exceeded");
  if (p.max_tokens) {
    if (n + *p.max_tokens > ctx + 1)
      return bad_request("This model's maximum context length is " + std::to_string(ctx) + " tokens. However, you "
                         "requested " + std::to_string(n + *p.max_tokens) + " tokens (" + std::to_string(n) +
                         " in the messages, " + std::to_string(*p.max_tokens) +
                         " in the completion). Please reduce the length of the messages or completion.",
                         "max_tokens", "context_length_exceeded");
    out.gen.max_tokens = *p.max_tokens;
  } else {
    out.gen.max_tokens = ctx + 1 - n;
  }
  out.gen.sampler = sampler_config(p, thinking, &out.sampler_fixed);
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

}  // namespace

sampling::SamplerConfig sampler_config(const api::GenerationParams& p, bool thinking, bool* fixed) {
  sampling::SamplerConfig c;
  const SamplingDefaults d;
  c.temperature = static_cast<float>(d.temperature);
  c.top_p = static_cast<float>(d.top_p);
  c.min_p = static_cast<float>(d.min_p);
  const bool client_knobs = p.temperature || p.top_p || p.top_k || p.min_p || p.presence_penalty ||
                            p.frequency_penalty || p.repetition_penalty;
  if (fixed) *fixed = thinking && client_knobs;
  if (!thinking) {
    if (p.temperature) c.temperature = static_cast<float>(*p.temperature);
    if (p.top_p) c.top_p = static_cast<float>(*p.top_p);
    if (p.top_k) c.top_k = static_cast<int32_t>(*p.top_k);
    if (p.min_p) c.min_p = static_cast<float>(*p.min_p);
    if (p.presence_penalty) c.presence_penalty = static_cast<float>(*p.presence_penalty);
    if (p.frequency_penalty) c.frequency_penalty = static_cast<float>(*p.frequency_penalty);
    if (p.repetition_penalty) c.repetition_penalty = static_cast<float>(*p.repetition_penalty);
  }
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
  return finish_prepare(engine, req.params, out.thinking, out);
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
  return finish_prepare(engine, p, /*thinking=*/false, out);
}

}  // namespace dsv4::server::serve
