// server/api/request_json.h — internal to server/api (no other room includes it): reading a
// request body into JSON and typed field readers whose errors name the field in each API's style.
//
// Owns: the body checks every route shares (empty body, invalid UTF-8 anywhere in the body,
// syntax errors with a byte offset, the limits below, unpaired \u surrogates; parsing is linear in
// the body's size),
// with messages that never echo parser internals; the two error dialects:
//   OpenAI:    Invalid type for 'temperature': expected a number, but got a string instead.
//              Invalid 'temperature': decimal above maximum value. Expected a value <= 2, but got 3 instead.
//              Missing required parameter: 'messages'.
//              Invalid value for 'messages[0].role': 'robot'. Supported values are: 'system' and 'user'.
//   Anthropic: temperature: Input should be a valid number, got a string
//              temperature: Input should be less than or equal to 1
//              messages: Field required
//              messages.0.role: Input should be 'user' or 'assistant'
// and the GenerationParams readers shared by the OpenAI routes (the Anthropic route reads its few
// sampling fields with the same typed readers).
//
// Conventions: a JSON null counts as absent for optional fields. Integer fields also accept a
// float with an exact integral value below 2^53 (Python clients send 16.0). Values echoed in
// messages are cut to 64 bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "server/api/generation_params.h"
#include "server/api/json_limits.h"

namespace dsv4::server::api {

// ordered_json keeps the client's key order (tool schemas are printed into the prompt as sent).
using Json = nlohmann::ordered_json;

enum class Dialect { kOpenAi, kAnthropic };

inline constexpr int64_t kMaxTokensLimit = 2147483647;  // max_tokens above this is absurd → 400
inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxTools = 128;
inline constexpr size_t kMaxLogitBias = 300;

// Body text → a JSON object. Errors (invalid_argument) say what was wrong and at which byte:
// "We could not parse the JSON body of your request. (The request body is not valid UTF-8:
// invalid byte 0xff at offset 12.)" for OpenAI, the bracketed part alone for Anthropic.
Result<Json> parse_json_body(std::string_view text, Dialect d);

// The first invalid UTF-8 byte's offset (overlongs, surrogates and > U+10FFFF are invalid), or
// npos when the text is valid.
size_t find_invalid_utf8(std::string_view text);

const char* json_type_name(const Json& j);  // "a string", "an integer", "null", ...

// Field paths: OpenAI "messages[0].content", Anthropic "messages.0.content".
std::string field_index(Dialect d, const std::string& base, size_t i);
std::string field_key(const std::string& base, const std::string& key);  // "base.key" (or "key")

// `expected` in OpenAI words: "a string", "an integer", "a number", "a boolean", "an array",
// "an object" (translated to Anthropic's "a valid …" words), or any other phrase.
Status err_type(Dialect d, const std::string& field, const std::string& expected, const Json& got);
Status err_missing(Dialect d, const std::string& field);
Status err_enum(Dialect d, const std::string& field, const std::string& value, const std::vector<std::string>& allowed);
// A free-form problem with the field's value: OpenAI "Invalid value for 'f': <what>",
// Anthropic "f: <what>". `code` picks the StatusCode (kInvalidArgument or kUnsupported).
Status err_value(Dialect d, const std::string& field, const std::string& what,
                 StatusCode code = StatusCode::kInvalidArgument);
Status err_unsupported(Dialect d, const std::string& field, const std::string& what);
// Value ↔ a limit: kind is "integer" or "decimal"; op one of "<=", "<", ">=", ">".
Status err_range(Dialect d, const std::string& field, const char* kind, const char* op, double bound, const Json& got);
// Array length: "Invalid 'stop': array too long. Expected an array with maximum length 16, but
// got an array with length 17 instead." / "stop_sequences: List should have at most 16 items".
Status err_array_length(Dialect d, const std::string& field, bool too_long, size_t limit, size_t got);

// Echo a client string in a message: at most 64 bytes (cut at a UTF-8 boundary, then "…").
std::string clip(const std::string& s);
// Prints a number bound or value: integers without a fraction, else shortest round-trip.
std::string number_text(double v);

// Typed optional readers: absent or null → nullopt. `field` is the name used in errors.
const Json* find_field(const Json& obj, const char* key);  // nullptr when absent or null
Result<std::optional<std::string>> read_string(const Json& obj, const char* key, const std::string& field, Dialect d);
Result<std::optional<bool>> read_bool(const Json& obj, const char* key, const std::string& field, Dialect d);

struct NumberRange {
  double lo, hi;
  bool lo_inclusive = true, hi_inclusive = true;
};
Result<std::optional<double>> read_number(const Json& obj, const char* key, const std::string& field, Dialect d,
                                          NumberRange range);
Result<std::optional<int64_t>> read_int(const Json& obj, const char* key, const std::string& field, Dialect d,
                                        int64_t lo, int64_t hi);
// A JSON value → integer (accepting exact integral floats); error names `field`.
Result<int64_t> json_to_int(const Json& v, const std::string& field, Dialect d, int64_t lo, int64_t hi);
// Non-negative integers up to 2^64-1 (seed).
Result<std::optional<uint64_t>> read_uint64(const Json& obj, const char* key, const std::string& field, Dialect d);

// Stop strings: a string or an array of at most kMaxStopStrings non-empty strings
// (`allow_single_string`: OpenAI `stop` accepts a bare string; Anthropic `stop_sequences` does not).
Result<std::vector<std::string>> parse_stop_list(const Json& v, const std::string& field, Dialect d,
                                                 bool allow_single_string);

// --- OpenAI routes -----------------------------------------------------------------------------
enum class OpenAiRoute { kChat, kCompletions };
// Reads every generation field the route shares into `out`: max_tokens (and, for chat,
// max_completion_tokens, which wins), temperature, top_p, top_k, min_p, presence/frequency/
// repetition penalties, seed, stop, logit_bias, stream, stream_options, n, and for chat
// logprobs/top_logprobs; checks the accepted-and-ignored fields' types (user, metadata, store,
// service_tier). Route-specific fields (completions' integer `logprobs`, best_of, …) are read by
// the route's parser.
Status parse_openai_generation_params(const Json& body, OpenAiRoute route, GenerationParams& out);

struct ApiTool;
// Fills tool.param_names / params_known from a JSON-schema object (its `properties` keys).
void read_tool_param_names(const Json& schema, ApiTool& tool);

struct Usage;
// llama.cpp-style per-request timings (prompt_n computed, cached_n reused, ms and tokens/s), the
// vendor `timings` object both APIs' responses carry (output_openai.cpp).
Json timings_json(const Usage& u);

}  // namespace dsv4::server::api
