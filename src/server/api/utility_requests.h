// server/api/utility_requests.h — the bodies of the llama.cpp-style helper routes, read with the
// same JSON body parser and limits as every other route (request_json.h):
//   POST /tokenize   {"content": "text"}   → the text
//   POST /detokenize {"tokens": [ids]}     → the ids, each in [0, n_vocab)
// Errors are invalid_argument Statuses in the OpenAI wording.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dsv4::server::api {

Result<std::string> parse_tokenize_request(std::string_view json_text);
Result<std::vector<int32_t>> parse_detokenize_request(std::string_view json_text, int64_t n_vocab);

}  // namespace dsv4::server::api
