// server/api/completions.h — the OpenAI /v1/completions request (a raw prompt, no chat template).
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "server/api/generation_params.h"

namespace dsv4::server::api {

struct CompletionRequest {
  std::string model;
  std::string prompt;      // a string, or an array holding exactly one string (n prompts → 400)
  bool echo = false;       // prepend the prompt to the returned text
  GenerationParams params; // max_tokens defaults to 16 when absent (OpenAI); logprobs: int 0..5
};

Result<CompletionRequest> parse_completion_request(std::string_view json_text);

}  // namespace dsv4::server::api
