// server/api/output.h — what a generation produced, in API-neutral native types, and the
// serialisers that turn it into each API's exact JSON / SSE shape.
//
// Owns: OpenAI chat.completion / chat.completion.chunk, OpenAI text_completion, Anthropic message
// and its streaming event sequence, and the error bodies of both APIs. Must not: call the engine
// or include any room but base (serve converts engine events into OutputEvent).
//
// Streaming: one *Stream object per response. Each method returns the complete SSE text to write
// ("data: {...}\n\n" for OpenAI, "event: X\ndata: {...}\n\n" for Anthropic), possibly empty.
// A stream whose begin() was not called emits it before its first output.
//
// Decisions:
//   - FinishReason::kCancelled → OpenAI "length", Anthropic "max_tokens": the output was cut short
//     (not a natural end), told with values every SDK knows; usually nobody reads it anyway.
//   - A tool call's arguments that are not a JSON object become Anthropic input {"arguments": text}
//     (empty → {}), mirroring the DS4 rule for non-JSON arguments.
//   - Anthropic usage: input_tokens = prompt_tokens - cached_tokens (Anthropic counts cache reads
//     separately), cache_read_input_tokens = cached_tokens, cache_creation_input_tokens = 0; the
//     final message_delta repeats input/cache counts (known only at the end) with output_tokens.
//   - An Anthropic response with no blocks at all gets one empty text block (content[0] exists).
//   - Logprob values that are not finite print as -9999.0 (OpenAI's floor), JSON has no -inf.
//   - Invalid UTF-8 in any output string is replaced by U+FFFD when serialised (never throws).
//   - OpenAI chat streams: logprobs ride the chunk made from the same events() call (the last one
//     when it makes several); tokens that produced no visible text keep theirs for the next chunk
//     (at worst the finish chunk). Every chunk carries "logprobs" (null when not asked).
//   - The llama.cpp-style `timings` object rides the non-streamed response and the streamed chunk
//     that carries finish_reason.
//   - Completions logprobs.text_offset counts Unicode code points from the start of the generated
//     text (echo is refused together with logprobs, so that is the start of `text`).
//
//   OpenAiChatStream s(meta, /*include_usage=*/true, /*logprobs=*/false);
//   write(s.begin());
//   for (batch of events) write(s.events(events, logprobs));
//   write(s.finish(result));      // last delta with finish_reason, usage chunk, "data: [DONE]"
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace dsv4::server::api {

// Mirrors tokenizer::DsmlEvent (serve copies the fields).
struct OutputEvent {
  enum class Kind { kReasoning, kContent, kToolCallBegin, kToolCallArguments, kToolCallEnd };
  Kind kind = Kind::kContent;
  std::string text;  // reasoning/content text, or an arguments JSON delta
  int index = -1;    // tool call index
  std::string id;    // kToolCallBegin: the call id
  std::string name;  // kToolCallBegin: the function name
};

struct TopLogprob {
  std::string token;  // the token's text (valid UTF-8; partial sequences shown with U+FFFD)
  std::string bytes;  // the token's raw bytes
  double logprob = 0;
};
struct TokenLogprobInfo {
  std::string token, bytes;
  double logprob = 0;
  std::vector<TopLogprob> top;
};

enum class FinishReason { kStop, kLength, kToolCalls, kCancelled };

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;      // prompt tokens whose state was reused from the previous request
  int64_t completion_tokens = 0;
  int64_t reasoning_tokens = 0;   // completion tokens before `</think>`
  double prefill_ms = 0;
  double decode_ms = 0;           // first sampled token to the end
  double decode_tokens_per_s = 0;
};

struct ToolCallOut {
  std::string id, name, arguments;  // arguments: JSON object text
};

struct ResponseMeta {
  std::string id;       // "chatcmpl-…", "cmpl-…" or "msg_…"
  std::string model;    // echoed model name
  int64_t created = 0;  // unix seconds
};

// The whole output of one request (non-streaming responses, and the tail of a stream).
struct CompletionOutput {
  std::string reasoning, content;  // content: for /v1/completions the raw text
  std::vector<ToolCallOut> tool_calls;
  FinishReason finish = FinishReason::kStop;
  std::string stop_sequence;       // the stop string that ended it, if any
  Usage usage;
  std::vector<TokenLogprobInfo> logprobs;  // when asked
};

// --- errors ---------------------------------------------------------------------------------
struct ApiError {
  int http_status = 400;
  std::string type = "invalid_request_error";  // OpenAI type / Anthropic error.type
  std::string message;
  std::string param;  // OpenAI only; empty → null
  std::string code;   // OpenAI only; empty → null (e.g. "context_length_exceeded")
};
// Status → ApiError: kInvalidArgument/kOutOfRange/kUnsupported/kNotFound → 400
// invalid_request_error, kResourceExhausted → 400 invalid_request_error with code
// "context_length_exceeded", kCancelled → 499 "request_cancelled", else 500 server_error.
// For 4xx the OpenAI `param` is recovered from the message: the leading "path: " of an
// Anthropic-style message, else the first quoted field path ('messages[0].role'); 'body' → none.
ApiError api_error_from_status(const Status& s);
// {"error":{"message":…,"type":…,"param":…,"code":…}}
std::string openai_error_json(const ApiError& e);
// {"type":"error","error":{"type":…,"message":…}} with Anthropic's type names
// (invalid_request_error, authentication_error, not_found_error, request_too_large,
// rate_limit_error, api_error, overloaded_error).
std::string anthropic_error_json(const ApiError& e);

const char* openai_finish_reason(FinishReason f);                           // stop|length|tool_calls
const char* anthropic_stop_reason(FinishReason f, const std::string& stop_sequence);  // end_turn|…

// --- OpenAI chat completions ---------------------------------------------------------------
std::string openai_chat_response_json(const ResponseMeta& meta, const CompletionOutput& out, bool logprobs);

class OpenAiChatStream {
 public:
  OpenAiChatStream(ResponseMeta meta, bool include_usage, bool logprobs);
  std::string begin();  // the role chunk
  // Text/tool-call events of some tokens, and their logprobs (empty unless asked).
  std::string events(const std::vector<OutputEvent>& ev, const std::vector<TokenLogprobInfo>& lps);
  std::string finish(const CompletionOutput& out);  // finish chunk, usage chunk if asked, [DONE]
  // An error after the stream began: a data chunk {"error":{…}} then [DONE].
  std::string error(const ApiError& e);
 private:
  ResponseMeta meta_;
  bool include_usage_, logprobs_;
  bool begun_ = false;
  std::vector<TokenLogprobInfo> pending_lps_;  // logprobs not yet sent (no chunk since)
};

// --- OpenAI completions (raw prompt) -------------------------------------------------------
std::string openai_completion_response_json(const ResponseMeta& meta, const CompletionOutput& out, bool logprobs);
class OpenAiCompletionStream {
 public:
  OpenAiCompletionStream(ResponseMeta meta, bool include_usage, bool logprobs);
  std::string text(const std::string& delta, const std::vector<TokenLogprobInfo>& lps);
  std::string finish(const CompletionOutput& out);
  std::string error(const ApiError& e);
 private:
  ResponseMeta meta_;
  bool include_usage_, logprobs_;
  int64_t text_offset_ = 0;  // code points of token text sent so far (logprobs.text_offset)
};

// --- Anthropic messages --------------------------------------------------------------------
// stop_reason: end_turn, max_tokens, stop_sequence, tool_use. Reasoning → a "thinking" block
// (signature ""), content → "text" blocks, tool calls → "tool_use" blocks with input objects.
std::string anthropic_message_response_json(const ResponseMeta& meta, const CompletionOutput& out);
class AnthropicStream {
 public:
  explicit AnthropicStream(ResponseMeta meta);
  std::string begin(const Usage& usage);  // message_start (input_tokens known)
  std::string events(const std::vector<OutputEvent>& ev);  // content_block_start/delta/stop
  std::string finish(const CompletionOutput& out);  // closes the open block, message_delta, message_stop
  std::string ping();
  std::string error(const ApiError& e);  // event: error
 private:
  std::string open_block(int kind, const std::string& block_json);
  std::string close_block();
  ResponseMeta meta_;
  bool begun_ = false;
  int block_index_ = -1;          // index of the open block, -1 = none
  int open_kind_ = -1;            // OutputEvent::Kind of the open block (reasoning/content/tool)
  int tool_blocks_ = 0;
};

}  // namespace dsv4::server::api
