// server/api/generation_params.h — the generation controls every endpoint shares, as parsed from
// a request body (OpenAI chat/completions, Anthropic messages). Values stay optional: serve
// decides defaults (DeepSeek guidance: temperature 1, top_p 1, min_p 0.05, used only for what the
// client leaves out), so the parser only checks
// types and ranges and names the offending field. Filled by parse_chat_completion_request,
// parse_completion_request (both via parse_openai_generation_params in the room-internal
// request_json.h) and parse_anthropic_messages_request. logit_bias token ids are only checked to
// be decimal 0..2^31-1 here; serve checks them against the vocabulary.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dsv4::server::api {

struct GenerationParams {
  std::optional<int64_t> max_tokens;      // >= 1 (OpenAI max_completion_tokens|max_tokens, Anthropic max_tokens)
  std::optional<double> temperature;      // [0, 2]
  std::optional<double> top_p;            // (0, 1]
  std::optional<int64_t> top_k;           // >= 0 (0 = off)  [vendor extension on OpenAI routes]
  std::optional<double> min_p;            // [0, 1)          [vendor extension]
  std::optional<double> presence_penalty;   // [-2, 2]
  std::optional<double> frequency_penalty;  // [-2, 2]
  std::optional<double> repetition_penalty; // (0, 10]       [vendor extension]
  std::optional<uint64_t> seed;           // any non-negative integer (negative → 400)
  std::vector<std::string> stop;          // <= 16 non-empty strings (OpenAI `stop`, Anthropic `stop_sequences`)
  bool logprobs = false;                  // OpenAI chat: logprobs; completions: logprobs=N → true, top=N
  int32_t top_logprobs = 0;               // [0, 20]
  std::vector<std::pair<int32_t, double>> logit_bias;  // token id (decimal string key) → [-100, 100]
  bool stream = false;
  bool include_usage = false;             // stream_options.include_usage (OpenAI)
};

}  // namespace dsv4::server::api
