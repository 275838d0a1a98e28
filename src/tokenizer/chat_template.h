// tokenizer/chat_template.h — the DeepSeek V4 chat prompt renderer (official `encode_messages`).
//
// Owns: turning a native chat request (messages, tools, response_format, thinking mode) into the
// exact prompt text the official Python encoder (`encoding/encoding_dsv4.py`, April V4-Flash)
// builds, byte for byte; and the Python-`json.dumps`-compatible JSON re-serialiser that the
// encoder uses for tool schemas, response_format and non-string tool-call arguments.
// Must not: tokenize (the caller splits specials and runs BPE), know OpenAI/JSON-library types
// (server/api parses requests; apps convert), print or throw.
//
// Rendering rules (docs/spec/prompt-format.md §3.2-3.4), all from the official encoder (encoding_dsv4.py):
//   BOS, [max-effort prefix], then per message after `merge_tool_messages`,
//   `sort_tool_results_by_call_order` and (thinking + no tools) `_drop_thinking_messages`:
//   system = raw content (+ "\n\n" tools block, + "\n\n" response-format block); user/developer =
//   "<｜User｜>" + content; tool results fold into user turns as <tool_result>…</tool_result>
//   joined by "\n\n" with neighbouring user text; assistant = [reasoning "</think>"] content
//   [\n\n DSML tool calls] EOS; latest_reminder = "<｜latest_reminder｜>" + content; after a
//   user/developer turn that is last or followed by assistant/latest_reminder:
//   "<｜Assistant｜>" + "<think>" or "</think>".
// Request-level tools and response_format attach to the FIRST system message; when there is none,
// an empty system message is inserted at position 0 (what vLLM's DeepSeek tokenizer does before
// calling the encoder), so the prompt reads BOS "\n\n## Tools…".
// Rejected, as the encoder rejects them: an empty developer message that is rendered (its
// `assert content`; one dropped by _drop_thinking_messages is not checked, as in the encoder),
// tool-call arguments that are JSON but not an object (the encoder crashes on `.items()`); and an
// empty message list (no prompt). Everything else renders as the encoder renders it: a tool result
// whose tool_call_id matches no call sorts with the first call's result (the encoder's stable sort
// uses key 0 for an unknown id, so unmatched results come first); a tool call with an empty name renders `name=""`; tool_calls or
// reasoning_content on a non-assistant message are ignored, as the encoder ignores them.
//
// Special tokens: RenderedPrompt::request_text lists the byte ranges of `text` that came from the
// request (every content, reasoning, system prompt, tool schema, tool-call name, argument key and
// value, response_format). Tokenizer::encode_chat never turns bytes of those ranges into special
// tokens, so a message containing "<｜Assistant｜>" stays plain text; only the encoder's own markup
// is special. For requests without special-token strings the ids equal encode(text) with specials.
//
//   tokenizer::ChatRequest req;
//   tokenizer::ChatMessage m;
//   m.role = tokenizer::ChatRole::kUser;
//   m.content = "Hello";
//   req.messages.push_back(m);
//   DSV4_ASSIGN_OR_RETURN(tokenizer::RenderedPrompt p, tokenizer::render_chat(req));
//   // p.text == "<｜begin▁of▁sentence｜><｜User｜>Hello<｜Assistant｜><think>"
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dsv4::tokenizer {

enum class ChatRole { kSystem, kUser, kDeveloper, kAssistant, kTool, kLatestReminder };

// "system", "user", "developer", "assistant", "tool", "latest_reminder"; anything else is an error.
Result<ChatRole> parse_chat_role(std::string_view name);
const char* chat_role_name(ChatRole role);

struct ChatToolCall {
  std::string id;              // matched against ChatMessage::tool_call_id of the results
  std::string name;
  std::string arguments_json;  // the OpenAI `arguments` string (JSON object text, or anything)
};

struct ChatMessage {
  ChatRole role = ChatRole::kUser;
  std::string content;            // text; several content blocks are already joined by "\n\n"
  std::string reasoning_content;  // assistant only
  std::vector<ChatToolCall> tool_calls;  // assistant only
  std::string tool_call_id;       // tool only
  std::string name;               // optional participant/tool name; not rendered by the encoder
};

enum class ThinkingMode { kNone, kHigh, kMax };
const char* thinking_mode_name(ThinkingMode mode);  // "none", "high", "max"

// Below this context size a requested `max` renders as `high` (ds4 DS4_THINK_MAX_MIN_CONTEXT).
inline constexpr int64_t kThinkMaxMinContext = 393216;
inline constexpr int64_t kDefaultContextSize = 1048576;

struct ChatRequest {
  std::vector<ChatMessage> messages;
  // One JSON text per tool: the tool's `function` object (name, description, parameters). It is
  // re-serialised the way Python's json.dumps(ensure_ascii=False) prints it, so compact or
  // pretty input both work; key order is kept.
  std::vector<std::string> tools_json;
  std::string response_format_json;  // whole response_format object; empty = none
  ThinkingMode thinking = ThinkingMode::kHigh;
  int64_t context_size = kDefaultContextSize;
};

// A byte range [begin, end) of RenderedPrompt::text.
struct TextRange {
  size_t begin = 0;
  size_t end = 0;
};

struct RenderedPrompt {
  std::string text;
  std::vector<TextRange> request_text;  // ascending, disjoint: bytes that came from the request
  ThinkingMode thinking_used = ThinkingMode::kHigh;  // after the max→high context fallback
};

// The mode actually rendered: kMax falls back to kHigh when context_size < kThinkMaxMinContext.
ThinkingMode effective_thinking_mode(ThinkingMode requested, int64_t context_size);

Result<RenderedPrompt> render_chat(const ChatRequest& request);
Result<std::string> render_prompt(const ChatRequest& request);

// Optional server default system prompt (off unless the caller asks): when `text` is non-empty and
// the request has no system message, inserts {system, text} at position 0. A request that already
// has a system message anywhere is left untouched. Returns whether a message was inserted.
bool apply_default_system_prompt(ChatRequest& request, std::string_view text);

// Parses JSON text (Python json.loads grammar, incl. NaN/Infinity) and prints it like Python's
// json.dumps(value, ensure_ascii=False): ", " and ": " separators, key order kept (a duplicate
// key keeps its first position and last value), floats as Python repr. Errors name the offset.
Result<std::string> python_json_dumps(std::string_view json_text);

}  // namespace dsv4::tokenizer
