// server/serve/prepare.h — from a parsed API request to the engine's native GenerateRequest:
// chat messages → tokenizer::ChatRequest → rendered prompt → tokens; sampling defaults, the
// tool_choice constraint, context checks. Runs on HTTP threads (Engine's const, thread-safe part).
//
// Special tokens: chat prompts are tokenized with Engine::tokenize_chat, so request text (any
// role's content, system, tool names/arguments/results, reasoning) is always plain text and only
// the encoder's own markup yields special tokens. A raw /v1/completions prompt is tokenized with
// special-token parsing on (the client writes the token stream itself; llama.cpp does the same).
//
// Sampling policy: DeepSeek's guidance for V4 (temperature 1, top_p 1, min_p 0.05) is the default
// for whatever the client does not send; every knob the client sends wins, in every mode
// (thinking included), so temperature 0 or top_k 1 is greedy and deterministic. With no seed,
// each request draws a fresh one.
// Context: a prompt that does not fit --ctx is a 400 context_length_exceeded; max_tokens beyond
// the room left is clamped to it (finish_reason "length" when the context fills); without
// max_tokens the completion may use all the remaining room.
// tool_choice: becomes GenerateRequest::tool_choice (a decoding constraint, tokenizer/
// tool_call_grammar.h); required or a named function without that tool in `tools` is a 400.
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
};

// Fills `out` or returns the error to send.
std::optional<api::ApiError> prepare_chat(const Engine& engine, const api::ChatCompletionRequest& req, ApiKind kind,
                                          const std::string& default_system_prompt, PreparedRequest& out);
std::optional<api::ApiError> prepare_completion(const Engine& engine, const api::CompletionRequest& req,
                                                PreparedRequest& out);

// GenerationParams → SamplerConfig (defaults for what the client left out, a fresh seed when none).
sampling::SamplerConfig sampler_config(const api::GenerationParams& p);

}  // namespace dsv4::server::serve
