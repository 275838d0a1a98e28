// server/api/utility_requests.cpp — /tokenize and /detokenize bodies through parse_json_body.
#include "server/api/utility_requests.h"

#include "server/api/request_json.h"

namespace dsv4::server::api {

Result<std::string> parse_tokenize_request(std::string_view json_text) {
  DSV4_ASSIGN_OR_RETURN(Json body, parse_json_body(json_text, Dialect::kOpenAi));
  const Json* content = find_field(body, "content");
  if (content == nullptr || !content->is_string()) return invalid_argument("Expected {\"content\": \"text\"}.");
  return content->get<std::string>();
}

Result<std::vector<int32_t>> parse_detokenize_request(std::string_view json_text, int64_t n_vocab) {
  DSV4_ASSIGN_OR_RETURN(Json body, parse_json_body(json_text, Dialect::kOpenAi));
  const Json* tokens = find_field(body, "tokens");
  const std::string expected = "Expected {\"tokens\": [ids]} with ids below " + std::to_string(n_vocab) + ".";
  if (tokens == nullptr || !tokens->is_array()) return invalid_argument(expected);
  std::vector<int32_t> ids;
  ids.reserve(tokens->size());
  for (const Json& v : *tokens) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= n_vocab) return invalid_argument(expected);
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

}  // namespace dsv4::server::api
