// server/api/completions.h — the OpenAI /v1/completions request (a raw prompt, no chat template).
//
// Decided here: `prompt` is required and non-empty (OpenAI would default it to "<|endoftext|>");
// token-id prompts and several prompts → 400 unsupported. `suffix` other than ""/null, best_of > 1
// and n > 1 → 400. `logprobs` is an integer 0..5 (a boolean is a type error); echo together with
// logprobs → 400 (prompt logprobs are not computed). Sampling, stop, logit_bias, seed, stream and
// stream_options are read exactly as on the chat route; unknown keys are ignored.
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
