// server/api/responses.h — the OpenAI Responses API (/v1/responses): request JSON → native struct,
// and the response object / streaming event serialisers (output_responses.cpp).
//
// Owns: parsing and validating a /v1/responses body into the same ChatCompletionRequest the chat
// route produces (so one renderer, sampler and parser serve every API), plus what the Responses
// API echoes back; the `response` object and its SSE event sequence. Must not: render prompts,
// keep state (the store of earlier responses lives in serve/response_store.h) or include any room
// but base.
//
// Input mapping (conventions decided here):
//   - `input` string → one user message. `input` items, in order:
//       message (type "message" or absent) with role user/system/developer/assistant; content a
//         string or parts input_text/output_text/refusal (text, joined by "\n\n"); images, files
//         and audio → 400 naming the part.
//       reasoning {content:[reasoning_text] | summary:[summary_text]} → reasoning_content of the
//         next assistant turn (content wins over summary; parts joined by "\n\n").
//       function_call {call_id, name, arguments} → a tool call of the current assistant turn (the
//         assistant message just before it, else a new one).
//       function_call_output {call_id, output (string or text parts)} → a tool message.
//       Other item types (item_reference, hosted tool calls, …) → 400 naming the item.
//   - `instructions` → a system message placed first (it is not carried into a follow-up, as
//     OpenAI documents; the follow-up sends its own).
//   - tools: {type:"function", name, description?, parameters?, strict?} (flat) → the chat
//     route's function objects; hosted tools (web_search, file_search, …) → 400.
//     tool_choice: "auto" | "none" | "required" | {type:"function", name}.
//   - reasoning.effort: none → thinking off; minimal/low/medium/high/xhigh → DS4 thinking high;
//     max → DS4 thinking max (as reasoning_effort on the chat route). No reasoning → thinking on,
//     high (the chat route's default). reasoning.summary is accepted and ignored.
//   - text.format: text | json_object | json_schema {name, schema, description?, strict?} → the
//     chat route's response_format. text.verbosity accepted and ignored.
//   - max_output_tokens → max_tokens; temperature, top_p and the vendor knobs the chat route
//     accepts (top_k, min_p, penalties, seed, logit_bias) read by parse_openai_generation_params.
//   - Accepted and echoed: metadata (object), user, store (default true), parallel_tool_calls
//     (false: one call at most under tool_choice required), truncation (disabled|auto),
//     previous_response_id (serve resolves it). Accepted and ignored: include, service_tier,
//     prompt_cache_key, safety_identifier, stream_options. background:true, conversation and
//     prompt → 400 (not supported).
//
//   auto req = parse_responses_request(body);
//   if (!req.ok()) return http_400(req.status().message());
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "server/api/openai_chat.h"
#include "server/api/output.h"

namespace dsv4::server::api {

struct ResponsesRequest {
  // messages = this request's input items only (serve prepends the stored conversation of
  // previous_response_id and the instructions); tools, tool_choice, thinking, effort,
  // response_format_json, params (max_tokens = max_output_tokens, stream).
  ChatCompletionRequest chat;
  std::optional<std::string> instructions;
  std::string previous_response_id;  // empty = none
  bool store = true;
  // Echoed in the response object, as compact JSON text.
  std::string metadata_json = "{}";
  std::string tools_json = "[]";              // the tools in Responses shape
  std::string tool_choice_json = "\"auto\"";
  std::string text_format_json = "{\"type\":\"text\"}";
  std::optional<std::string> user;
  std::optional<std::string> reasoning_effort;  // as sent
  std::string truncation = "disabled";
};

Result<ResponsesRequest> parse_responses_request(std::string_view json_text);

// What the response object echoes of its request (kept by the store for GET as well).
struct ResponsesEcho {
  std::string model;
  std::optional<std::string> instructions;
  std::optional<int64_t> max_output_tokens;
  std::optional<double> temperature, top_p;
  bool parallel_tool_calls = true;
  std::string previous_response_id;
  std::optional<std::string> reasoning_effort;
  bool store = true;
  std::string metadata_json = "{}", tools_json = "[]", tool_choice_json = "\"auto\"";
  std::string text_format_json = "{\"type\":\"text\"}";
  std::optional<std::string> user;
  std::string truncation = "disabled";
};
ResponsesEcho responses_echo(const ResponsesRequest& r);

// Ids of one response: "resp_<hex>"; its items are "rs_<hex>_<i>", "msg_<hex>_<i>", "fc_<hex>_<i>".
struct ResponsesMeta {
  std::string id;
  int64_t created_at = 0;
  ResponsesEcho echo;
};

// The whole `response` object (status completed, or incomplete with reason max_output_tokens
// when the output was cut by the token limit, the context or a cancel). Output items: reasoning
// (when there is reasoning text), message with one output_text part (when there is content, or
// when there is nothing else), one function_call per complete tool call (call_id = its id).
std::string responses_response_json(const ResponsesMeta& meta, const CompletionOutput& out);
// A failed response (status failed, error {code, message}), e.g. for GET of a stream that failed.
std::string responses_failed_json(const ResponsesMeta& meta, const ApiError& e);

// The streaming event sequence, each "event: <type>\ndata: {…,"sequence_number":n}\n\n":
// response.created, response.in_progress, then per output item output_item.added,
// (content_part.added, reasoning_text.delta… / output_text.delta…, *.done, content_part.done |
// function_call_arguments.delta…/.done), output_item.done, and finally response.completed,
// response.incomplete or response.failed (whose `response` lists exactly the items streamed).
class ResponsesStream {
 public:
  explicit ResponsesStream(ResponsesMeta meta);
  std::string begin();  // response.created + response.in_progress
  std::string events(const std::vector<OutputEvent>& ev);
  std::string finish(const CompletionOutput& out);
  std::string fail(const ApiError& e);  // closes open items, response.failed
  // The final response object (valid after finish()/fail()): what GET returns for this id.
  const std::string& final_json() const { return final_json_; }

 private:
  std::string emit(const char* type, std::string data_json);
  std::string open_item(int kind);
  std::string close_item(bool complete);
  std::string finish_with(const char* event, const std::string& status, const std::string& extra_json);

  ResponsesMeta meta_;
  bool begun_ = false;
  int64_t seq_ = 0;
  std::vector<std::string> done_items_;  // JSON of every item closed so far, in output order
  int open_kind_ = -1;                   // OutputEvent::Kind of the open item, -1 = none
  std::string open_id_, open_text_, call_id_, call_name_;
  std::string final_json_;
};

}  // namespace dsv4::server::api
