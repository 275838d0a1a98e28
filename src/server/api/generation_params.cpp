// server/api/generation_params.cpp — the generation fields the OpenAI routes share
// (/v1/chat/completions and /v1/completions) → GenerationParams, with OpenAI-style errors.
#include <cctype>
#include <cstdint>
#include <limits>
#include <optional>

#include "server/api/request_json.h"

namespace dsv4::server::api {
namespace {

constexpr Dialect kD = Dialect::kOpenAi;

// logit_bias: {"<token id>": bias, ...}; keys decimal digits only, value fits int32.
Status parse_logit_bias(const Json& v, GenerationParams& out) {
  if (!v.is_object()) return err_type(kD, "logit_bias", "an object", v);
  if (v.size() > kMaxLogitBias)
    return invalid_argument("Invalid 'logit_bias': too many entries. Expected at most " +
                            std::to_string(kMaxLogitBias) + " token ids, but got " + std::to_string(v.size()) +
                            " instead.");
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string& key = it.key();
    bool digits = !key.empty() && key.size() <= 10;
    for (char c : key) digits = digits && std::isdigit(static_cast<unsigned char>(c));
    const int64_t id = digits ? std::stoll(key) : -1;
    if (!digits || id > std::numeric_limits<int32_t>::max())
      return invalid_argument("Invalid key in 'logit_bias': '" + clip(key) +
                              "'. Keys must be token ids written as decimal integers (0 to 2147483647).");
    const std::string field = "logit_bias." + key;
    if (!it->is_number()) return err_type(kD, field, "a number", *it);
    const double bias = it->get<double>();
    if (bias < -100) return err_range(kD, field, "decimal", ">=", -100, *it);
    if (bias > 100) return err_range(kD, field, "decimal", "<=", 100, *it);
    out.logit_bias.emplace_back(static_cast<int32_t>(id), bias);
  }
  return ok_status();
}

}  // namespace

Status parse_openai_generation_params(const Json& body, OpenAiRoute route, GenerationParams& out) {
  const bool chat = route == OpenAiRoute::kChat;
  // Token limits: both names are checked; max_completion_tokens (the newer name) wins.
  DSV4_ASSIGN_OR_RETURN(std::optional<int64_t> max_tokens, read_int(body, "max_tokens", "max_tokens", kD, 1, kMaxTokensLimit));
  out.max_tokens = max_tokens;
  if (chat) {
    DSV4_ASSIGN_OR_RETURN(std::optional<int64_t> mct, read_int(body, "max_completion_tokens", "max_completion_tokens", kD,
                                                               1, kMaxTokensLimit));
    if (mct) out.max_tokens = mct;
  }

  DSV4_ASSIGN_OR_RETURN(out.temperature, read_number(body, "temperature", "temperature", kD, {0, 2}));
  DSV4_ASSIGN_OR_RETURN(out.top_p, read_number(body, "top_p", "top_p", kD, {0, 1, false, true}));
  DSV4_ASSIGN_OR_RETURN(out.top_k, read_int(body, "top_k", "top_k", kD, 0, std::numeric_limits<int32_t>::max()));
  DSV4_ASSIGN_OR_RETURN(out.min_p, read_number(body, "min_p", "min_p", kD, {0, 1, true, false}));
  DSV4_ASSIGN_OR_RETURN(out.presence_penalty, read_number(body, "presence_penalty", "presence_penalty", kD, {-2, 2}));
  DSV4_ASSIGN_OR_RETURN(out.frequency_penalty, read_number(body, "frequency_penalty", "frequency_penalty", kD, {-2, 2}));
  DSV4_ASSIGN_OR_RETURN(out.repetition_penalty,
                        read_number(body, "repetition_penalty", "repetition_penalty", kD, {0, 10, false, true}));
  DSV4_ASSIGN_OR_RETURN(out.seed, read_uint64(body, "seed", "seed", kD));

  if (const Json* stop = find_field(body, "stop")) {
    DSV4_ASSIGN_OR_RETURN(out.stop, parse_stop_list(*stop, "stop", kD, /*allow_single_string=*/true));
  }
  if (const Json* lb = find_field(body, "logit_bias")) DSV4_RETURN_IF_ERROR(parse_logit_bias(*lb, out));

  DSV4_ASSIGN_OR_RETURN(std::optional<bool> stream, read_bool(body, "stream", "stream", kD));
  out.stream = stream.value_or(false);
  if (const Json* so = find_field(body, "stream_options")) {
    if (!so->is_object()) return err_type(kD, "stream_options", "an object", *so);
    if (!out.stream)
      return invalid_argument("Invalid value for 'stream_options': the 'stream_options' parameter is only allowed "
                              "when 'stream' is enabled.");
    DSV4_ASSIGN_OR_RETURN(std::optional<bool> usage,
                          read_bool(*so, "include_usage", "stream_options.include_usage", kD));
    out.include_usage = usage.value_or(false);
  }

  DSV4_ASSIGN_OR_RETURN(std::optional<int64_t> n, read_int(body, "n", "n", kD, 1, std::numeric_limits<int64_t>::max()));
  if (n && *n > 1)
    return err_value(kD, "n", "n > 1 is not supported (got " + std::to_string(*n) + "); send one request per choice.",
                     StatusCode::kUnsupported);

  if (chat) {
    DSV4_ASSIGN_OR_RETURN(std::optional<bool> logprobs, read_bool(body, "logprobs", "logprobs", kD));
    out.logprobs = logprobs.value_or(false);
    DSV4_ASSIGN_OR_RETURN(std::optional<int64_t> top, read_int(body, "top_logprobs", "top_logprobs", kD, 0, 20));
    if (top) {
      if (!out.logprobs)
        return err_value(kD, "top_logprobs", "'logprobs' must be set to true when 'top_logprobs' is used.");
      out.top_logprobs = static_cast<int32_t>(*top);
    }
  }

  // Accepted and ignored, but their types are still checked (as OpenAI does).
  DSV4_ASSIGN_OR_RETURN(std::optional<std::string> user, read_string(body, "user", "user", kD));
  DSV4_ASSIGN_OR_RETURN(std::optional<std::string> tier, read_string(body, "service_tier", "service_tier", kD));
  DSV4_ASSIGN_OR_RETURN(std::optional<bool> store, read_bool(body, "store", "store", kD));
  if (const Json* md = find_field(body, "metadata"); md != nullptr && !md->is_object())
    return err_type(kD, "metadata", "an object", *md);
  (void)user;
  (void)tier;
  (void)store;
  return ok_status();
}

}  // namespace dsv4::server::api
