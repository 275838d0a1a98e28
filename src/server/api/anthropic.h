// server/api/anthropic.h — the Anthropic /v1/messages request → the same native chat request the
// OpenAI route produces (so one renderer serves both).
//
// Mapping: `system` (string or text blocks) → a leading system message; user content blocks:
// text → user text, tool_result → a `tool` message (tool_call_id = tool_use_id, content string or
// text blocks joined by "\n\n"; is_error prefixes nothing — the content is rendered as given);
// assistant blocks: thinking → reasoning_content, text → content, tool_use → tool_calls
// (arguments = compact JSON of `input`, key order kept), redacted_thinking ignored. Images,
// documents and other block types → 400 naming the block. tools[] {name, description,
// input_schema} → function {"name","description","parameters"}; tool_choice auto/any/tool/none.
// thinking {type: enabled|disabled, budget_tokens} (default: enabled, like DeepSeek's Anthropic
// route; output_config.effort / thinking effort "max" → max). max_tokens is required.
// stop_sequences, temperature, top_p, top_k, metadata (ignored), stream.
#pragma once

#include <string_view>

#include "base/status.h"
#include "server/api/openai_chat.h"

namespace dsv4::server::api {

Result<ChatCompletionRequest> parse_anthropic_messages_request(std::string_view json_text);

}  // namespace dsv4::server::api
