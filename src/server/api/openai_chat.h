// server/api/openai_chat.h — the OpenAI chat-completions request: JSON text → native struct.
//
// Owns: parsing and validating a /v1/chat/completions body (messages with string or
// content-part-array content, tools, tool_choice, thinking controls, response_format) with
// OpenAI-style error messages that name the offending field. Must not: render prompts or include
// any room other than base (apps convert this struct into tokenizer::ChatRequest).
//
// Conventions decided here:
//   - Content-part arrays: only {"type":"text","text":...} parts; they are joined with "\n\n"
//     (the encoder's rule for several content blocks). Other part types are rejected.
//   - Roles: system, user, developer, assistant, tool, and the DeepSeek extension latest_reminder.
//   - Thinking is ON (effort high) by default. Off by thinking:{type:"disabled"},
//     reasoning_effort:"none", or chat_template_kwargs {thinking:false} / {enable_thinking:false}.
//     reasoning_effort (also inside chat_template_kwargs) maps minimal/low/medium/high/xhigh → high
//     and max/ultra → max. Precedence (as the official encoder, which adds the max-effort prompt only
//     in thinking mode): an effort level never turns thinking on, so "thinking off" wins over any
//     effort (type "disabled" + effort "max" = thinking off); only on/off switches that disagree
//     (thinking on + reasoning_effort "none") or two different effort levels are an error.
//   - Top-level tools: each tool's `function` object is kept as compact JSON text, key order kept.
//     The renderer attaches them to the first system message (an empty system message is
//     inserted first when there is none). tool_choice does not change the prompt (the official
//     encoder has no tool_choice); serve turns it into a decoding constraint (none: no call;
//     required/function: one DSML call block). required or a function without tools is refused
//     there (serve/prepare.cpp), for every API. Known limit: an integer outside the
//     int64/uint64 range inside a tool schema or response_format is held as a double by
//     nlohmann_json, so it prints as a float where Python would print every digit.
//   - response_format {"type":"text"} means no constraint (empty response_format_json); json_object
//     and json_schema keep the whole object as JSON text for the response-format block.
//   - Unknown top-level keys are IGNORED, not rejected: clients (Open WebUI, LangChain, LiteLLM)
//     send vendor extras, and OpenAI's own "Unrecognized request argument" 400 would break them.
//     Known keys are always type- and range-checked (generation_params.cpp), and known OpenAI
//     features this server lacks are a 400 naming the field: audio, modalities containing "audio",
//     prediction, web_search_options, n > 1, and the legacy functions/function_call (→ use tools).
//     Accepted and ignored: user, metadata, store, service_tier (types checked).
//   - Limits: at most 128 tools; content-part arrays must not be empty; the body must be valid
//     UTF-8 and nest at most 256 levels (request_json.h).
//
//   auto req = server::api::parse_chat_completion_request(body);
//   if (!req.ok()) return http_400(req.status().message());
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "server/api/generation_params.h"

namespace dsv4::server::api {

struct ApiToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // the JSON text string exactly as sent
};

struct ApiMessage {
  std::string role;     // one of the roles listed above
  std::string content;  // text; content-part arrays already joined; null → ""
  std::string reasoning_content;  // assistant only
  std::vector<ApiToolCall> tool_calls;  // assistant only
  std::string tool_call_id;  // tool only (required there)
  std::string name;          // optional
};

struct ApiTool {
  std::string name;
  std::string function_json;  // compact JSON of the tool's `function` object, key order kept
  // The parameters schema's property names (tool_choice required/function constrain a call's
  // keys to them); params_known is false when the schema lists no `properties` object (then any
  // key goes), true with an empty list for a schema that has no properties.
  std::vector<std::string> param_names;
  bool params_known = false;
};

enum class ToolChoiceKind { kAuto, kNone, kRequired, kFunction };

struct ToolChoice {
  ToolChoiceKind kind = ToolChoiceKind::kAuto;
  std::string function_name;  // kFunction only
};

enum class ReasoningEffort { kHigh, kMax };

struct ChatCompletionRequest {
  std::string model;
  std::vector<ApiMessage> messages;
  std::vector<ApiTool> tools;
  ToolChoice tool_choice;
  bool thinking = true;
  ReasoningEffort reasoning_effort = ReasoningEffort::kHigh;
  std::string response_format_json;  // empty = none
  bool parallel_tool_calls = true;   // false: at most one call (enforced under tool_choice required)
  bool stream = false;
  std::optional<int64_t> max_tokens;  // max_completion_tokens or max_tokens
  GenerationParams params;            // sampling, stop, logprobs, stream (params.stream == stream),
                                      // params.max_tokens == max_tokens
};

Result<ChatCompletionRequest> parse_chat_completion_request(std::string_view json_text);

}  // namespace dsv4::server::api
