// server/api/completions.cpp — OpenAI /v1/completions request parsing and validation.
#include "server/api/completions.h"

#include <limits>

#include "server/api/request_json.h"

namespace dsv4::server::api {
namespace {

constexpr Dialect kD = Dialect::kOpenAi;

Result<std::string> parse_prompt(const Json& body) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return err_missing(kD, "prompt");
  const Json& p = *it;
  std::string prompt;
  if (p.is_string()) {
    prompt = p.get<std::string>();
  } else if (p.is_array()) {
    if (p.empty()) return err_array_length(kD, "prompt", /*too_long=*/false, 1, 0);
    if (p[0].is_number_integer() || p[0].is_array())
      return err_unsupported(kD, "prompt", "token-id prompts are not supported; send the prompt as a string.");
    if (p.size() > 1)
      return err_unsupported(kD, "prompt",
                             "several prompts in one request are not supported (got " + std::to_string(p.size()) +
                                 "); send one request per prompt.");
    if (!p[0].is_string()) return err_type(kD, "prompt[0]", "a string", p[0]);
    prompt = p[0].get<std::string>();
  } else {
    return err_type(kD, "prompt", "a string or an array of strings", p);
  }
  if (prompt.empty())
    return invalid_argument("Invalid 'prompt': empty string. Expected a string with minimum length 1, but got an "
                            "empty string instead.");
  return prompt;
}

}  // namespace

Result<CompletionRequest> parse_completion_request(std::string_view json_text) {
  DSV4_ASSIGN_OR_RETURN(Json body, parse_json_body(json_text, kD));
  CompletionRequest out;
  DSV4_ASSIGN_OR_RETURN(std::optional<std::string> model, read_string(body, "model", "model", kD));
  out.model = model.value_or("");
  DSV4_ASSIGN_OR_RETURN(out.prompt, parse_prompt(body));
  DSV4_ASSIGN_OR_RETURN(std::optional<bool> echo, read_bool(body, "echo", "echo", kD));
  out.echo = echo.value_or(false);

  DSV4_ASSIGN_OR_RETURN(std::optional<std::string> suffix, read_string(body, "suffix", "suffix", kD));
  if (suffix && !suffix->empty())
    return err_unsupported(kD, "suffix", "insertion (a prompt suffix) is not supported by this server.");
  DSV4_ASSIGN_OR_RETURN(std::optional<int64_t> best_of,
                        read_int(body, "best_of", "best_of", kD, 1, std::numeric_limits<int64_t>::max()));
  if (best_of && *best_of > 1)
    return err_value(kD, "best_of", "best_of > 1 is not supported (got " + std::to_string(*best_of) + ").",
                     StatusCode::kUnsupported);

  DSV4_RETURN_IF_ERROR(parse_openai_generation_params(body, OpenAiRoute::kCompletions, out.params));
  if (!out.params.max_tokens) out.params.max_tokens = 16;  // OpenAI's default for this route

  // logprobs: an integer 0..5 = how many alternatives per token (0: the sampled token's only).
  if (const Json* lp = find_field(body, "logprobs")) {
    if (lp->is_boolean()) return err_type(kD, "logprobs", "an integer", *lp);
    DSV4_ASSIGN_OR_RETURN(int64_t n, json_to_int(*lp, "logprobs", kD, 0, 5));
    out.params.logprobs = true;
    out.params.top_logprobs = static_cast<int32_t>(n);
  }
  if (out.echo && out.params.logprobs)
    return err_unsupported(kD, "echo", "echo together with logprobs (prompt token logprobs) is not supported.");
  return out;
}

}  // namespace dsv4::server::api
