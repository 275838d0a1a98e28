// server/api/anthropic.h — the Anthropic /v1/messages request → the same native chat request the
// OpenAI route produces (so one renderer serves both).
//
// Mapping: `system` (string or text blocks joined by "\n\n"; empty → no system message) → a
// leading system message. User content blocks: tool_result → a `tool` message (tool_call_id =
// tool_use_id, content string or text blocks joined by "\n\n"; is_error prefixes nothing — the
// content is rendered as given); the message's text blocks → ONE user message (joined by "\n\n")
// placed AFTER that message's tool results (the DS4 prompt puts results before the user's text).
// Assistant blocks: thinking → reasoning_content (several joined by "\n\n", signature ignored),
// text → content, tool_use → tool_calls (arguments = compact JSON of `input`, key order kept),
// redacted_thinking ignored. Images, documents, search results and server-tool blocks → 400 naming
// the block. tools[] {name, description?, input_schema} → function {"name","description",
// "parameters"} (a `type` other than "custom", i.e. a server tool → 400); tool_choice
// auto/any(→ required)/tool(name)/none. thinking {type: enabled (budget_tokens >= 1024, accepted
// and otherwise ignored) | adaptive | disabled}; default: enabled, like DeepSeek's Anthropic route.
// Effort: output_config.effort or thinking.effort (low/medium/high → high, max → max).
// max_tokens is required (1..2^31-1). stop_sequences (<= 16 non-empty strings), temperature [0, 1],
// top_p (0, 1], top_k >= 0, metadata (ignored), stream. Unknown top-level keys are ignored;
// non-empty mcp_servers → 400.
//
// Stricter than nothing, like the real API: roles only user/assistant (system is top level), every
// message non-empty, text blocks non-empty. Not supported: a FINAL assistant message (response
// prefill) → 400, since the DS4 renderer closes every assistant turn with EOS.
// Errors are Anthropic (pydantic) style: "max_tokens: Field required",
// "messages.0.role: Input should be 'user' or 'assistant' (got 'system')".
#pragma once

#include <string_view>

#include "base/status.h"
#include "server/api/openai_chat.h"

namespace dsv4::server::api {

Result<ChatCompletionRequest> parse_anthropic_messages_request(std::string_view json_text);
// POST /v1/messages/count_tokens: the same body, parsed the same way; max_tokens is optional.
Result<ChatCompletionRequest> parse_anthropic_count_tokens_request(std::string_view json_text);

}  // namespace dsv4::server::api
