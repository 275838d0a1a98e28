// server/serve/prepare.h — from a parsed API request to the engine's native GenerateRequest:
// chat messages → tokenizer::ChatRequest → rendered prompt → tokens; sampling defaults and the
// thinking-mode rule; context checks. Runs on HTTP threads (Engine's const, thread-safe part).
//
// Special tokens: chat prompts are tokenized with Engine::tokenize_chat, so request text (any
// role's content, system, tool names/arguments/results, reasoning) is always plain text and only
// the encoder's own markup yields special tokens. A raw /v1/completions prompt is tokenized with
// special-token parsing on (the client writes the token stream itself; llama.cpp does the same).
//
// Sampling policy (DeepSeek's guidance for V4): temperature 1, top_p 1, min_p 0.05 by default;
// temperature 0 is greedy. In thinking mode the sampler is fixed like the DeepSeek API: the
// client's temperature, top_p, top_k, min_p and penalties are ignored (seed, logit_bias, stop and
// logprobs still apply). With no seed, each request draws a fresh one.
// Context: prompt + max_tokens must fit --ctx (400 context_length_exceeded otherwise); without
// max_tokens the completion may use all the remaining room.
#pragma once

#include <optional>
#include <string>

#include "dsv4/engine.h"
#include "server/api/anthropic.h"
#include "server/api/completions.h"
#include "server/api/openai_chat.h"
#include "server/api/output.h"

namespace dsv4::server::serve {

enum class ApiKind { kChat, kCompletion, kAnthropic };

struct SamplingDefaults {
  double temperature = 1.0, top_p = 1.0, min_p = 0.05;
};

struct PreparedRequest {
  ApiKind kind = ApiKind::kChat;
  GenerateRequest gen;
  std::string model;       // echoed back
  bool stream = false, include_usage = false, logprobs = false;
  bool thinking = false;
  std::string echo_text;   // /v1/completions with echo: the prompt text
  bool sampler_fixed = false;  // thinking mode ignored the client's sampling knobs
};

// Fills `out` or returns the error to send.
std::optional<api::ApiError> prepare_chat(const Engine& engine, const api::ChatCompletionRequest& req, ApiKind kind,
                                          const std::string& default_system_prompt, PreparedRequest& out);
std::optional<api::ApiError> prepare_completion(const Engine& engine, const api::CompletionRequest& req,
                                                PreparedRequest& out);

// GenerationParams → SamplerConfig (defaults, the thinking rule, a fresh seed when none).
sampling::SamplerConfig sampler_config(const api::GenerationParams& p, bool thinking, bool* fixed);

}  // namespace dsv4::server::serve
