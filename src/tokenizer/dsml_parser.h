// tokenizer/dsml_parser.h — streaming parser from generated text to structured output: reasoning
// vs content (split at `</think>`) and DSML tool calls with JSON arguments. The inverse of
// chat_template's assistant rendering (docs: docs/spec/prompt-format.md §3.3, §3.5).
//
// Owns: splitting detokenized text deltas into events; holding back text that may still become
// markup (a partial `</think>` or DSML tag, and the whitespace right before a block) so no partial
// markup ever reaches content; tolerant recovery of the known DSML failure modes.
// Must not: tokenize, stop generation (the caller reads block_closed()), print or throw.
//
// Events, in order, per feed()/finish():
//   kReasoning / kContent  text (thinking mode only: everything before `</think>` is reasoning;
//                          DSML inside reasoning is reasoning text, never a call)
//   kToolCallBegin         as soon as an invoke's name is parsed: index, id "call_<index>", name
//   kToolCallArguments     JSON text deltas; the deltas of one call concatenate to one JSON object
//                          printed like Python json.dumps: {"key": value, "key2": value}
//   kToolCallEnd           the call's `</｜DSML｜invoke>` (or an implied end) was seen
// Arguments: string="true" → a JSON string of the raw text (escaped like json.dumps,
// ensure_ascii=False); string="false" → the raw text (whitespace-trimmed) when it is valid strict
// JSON, otherwise — the model wrote something that is not JSON — the raw text as a JSON string
// (a warning is recorded). A missing string attribute is treated like string="false".
// Values are kept verbatim (the renderer does no escaping). A duplicate parameter name keeps the
// first value (warning). Parameters arrive in order; literal values are sent when complete,
// string values stream.
// Recovery (prompt-format.md §3.3): the V3.2 block name `function_calls`; an invoke without the
// `tool_calls` wrapper; an unterminated wrapper when every invoke was closed; doubled `｜｜` or
// ASCII `|` delimiters and spaces around them; typographic or single quotes around attributes;
// a missing `</parameter>` or `</invoke>` implied by the next DSML tag.
// finish() at EOS / the length limit: an open invoke or parameter, or a partial DSML tag, is an
// error (no partial call is ever reported; the caller must drop the streamed call events).
//
//   DsmlParser p(/*thinking=*/true);
//   std::vector<DsmlEvent> ev;
//   for (auto& delta : deltas) p.feed(delta, ev);
//   DSV4_ASSIGN_OR_RETURN(DsmlSummary s, p.finish(ev));  // s.tool_calls → finish_reason tool_calls
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dsv4::tokenizer {

struct DsmlEvent {
  enum class Kind { kReasoning, kContent, kToolCallBegin, kToolCallArguments, kToolCallEnd };
  Kind kind = Kind::kContent;
  std::string text;  // reasoning/content text, or an arguments JSON delta
  int index = -1;    // tool call index (call events)
  std::string id;    // kToolCallBegin: "call_<index>"
  std::string name;  // kToolCallBegin: the function name
};

struct DsmlSummary {
  bool tool_calls = false;  // at least one complete call → finish_reason "tool_calls"
  int n_calls = 0;
  std::vector<std::string> warnings;  // recoveries applied, for logs
};

class DsmlParser {
 public:
  explicit DsmlParser(bool thinking);

  // Appends the events decided by `delta` (UTF-8 text as the detokenizer emits it).
  void feed(std::string_view delta, std::vector<DsmlEvent>& out);
  // End of generation: flushes held text; an error when a call is still open.
  Result<DsmlSummary> finish(std::vector<DsmlEvent>& out);

  // True once a `</｜DSML｜tool_calls>` closed a block and nothing is open: the caller may stop
  // decoding (ds4 does, without sampling EOS).
  bool block_closed() const { return block_closed_; }
  int calls_completed() const { return n_calls_; }

 private:
  enum class State { kReasoning, kContent, kBlock, kInvoke, kParam, kFailed };
  void process(std::vector<DsmlEvent>& out, bool at_end);
  bool step_reasoning(std::vector<DsmlEvent>& out, bool at_end);
  bool step_content(std::vector<DsmlEvent>& out, bool at_end);
  bool step_block(std::vector<DsmlEvent>& out, bool at_end);
  bool step_invoke(std::vector<DsmlEvent>& out, bool at_end);
  bool step_param(std::vector<DsmlEvent>& out, bool at_end);
  void emit_text(DsmlEvent::Kind kind, std::string_view text, std::vector<DsmlEvent>& out);
  void emit_args(std::string_view text, std::vector<DsmlEvent>& out);
  void begin_call(const std::string& name, std::vector<DsmlEvent>& out);
  void end_call(std::vector<DsmlEvent>& out);
  void end_param(std::vector<DsmlEvent>& out);
  void fail(std::string message);

  State state_;
  std::string buf_;  // undecided text
  size_t pos_ = 0;   // consumed prefix of buf_
  bool wrapper_ = false;        // the current block has a tool_calls/function_calls opener
  bool block_closed_ = false;
  int n_calls_ = 0;             // calls begun so far (the next index)
  int n_params_ = 0;            // parameters of the current call
  std::vector<std::string> keys_;  // parameter names of the current call
  std::string call_name_;
  bool param_string_ = true;
  bool param_skip_ = false;     // duplicate key: value dropped
  std::string param_value_;     // literal values are buffered until their end
  std::string param_key_;
  std::string error_;
  std::vector<std::string> warnings_;
};

// Whole-text convenience (tests, non-streaming responses).
struct ParsedToolCall {
  std::string id, name, arguments_json;
};
struct ParsedOutput {
  std::string reasoning, content;
  std::vector<ParsedToolCall> tool_calls;
  std::string finish_reason;  // "tool_calls" or "stop"
  std::vector<std::string> warnings;
};
Result<ParsedOutput> parse_dsml_output(std::string_view text, bool thinking);
// Collects events into a ParsedOutput (appending).
void apply_dsml_events(const std::vector<DsmlEvent>& events, ParsedOutput& out);

// Strict RFC 8259 JSON text check (no NaN/Infinity, nesting depth ≤ 512).
bool is_valid_json(std::string_view text);
// `s` as a JSON string literal, escaped like Python json.dumps(ensure_ascii=False).
std::string json_quote(std::string_view s);

}  // namespace dsv4::tokenizer
