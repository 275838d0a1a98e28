// server/api/anthropic.cpp — Anthropic /v1/messages request → ChatCompletionRequest, with
// Anthropic-style (pydantic-like) error messages: "messages: Field required".
#include "server/api/anthropic.h"

#include <limits>

#include "server/api/request_json.h"

namespace dsv4::server::api {
namespace {

constexpr Dialect kD = Dialect::kAnthropic;

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

Result<std::string> required_string(const Json& obj, const char* key, const std::string& field, bool non_empty) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return err_missing(kD, field);
  if (!it->is_string()) return err_type(kD, field, "a string", *it);
  if (non_empty && it->get_ref<const std::string&>().empty())
    return invalid_argument(field + ": String should have at least 1 character");
  return it->get<std::string>();
}

Result<std::string> block_type(const Json& block, const std::string& field) {
  if (!block.is_object()) return err_type(kD, field, "an object", block);
  return required_string(block, "type", field + ".type", false);
}

// A text block's text; Anthropic rejects empty text blocks.
Result<std::string> text_of(const Json& block, const std::string& field) {
  DSV4_ASSIGN_OR_RETURN(std::string text, required_string(block, "text", field + ".text", false));
  if (text.empty()) return invalid_argument(field + ".text: text content blocks must be non-empty");
  return text;
}

Status unsupported_block(const std::string& field, const std::string& type) {
  std::string what = "'";  // built by appends: GCC 12 warns (-Wrestrict) on "'" + std::string temporaries
  what += clip(type);
  what += "' content blocks are not supported by this server";
  return err_unsupported(kD, field + ".type", what);
}

// `system`, or a tool_result's content: a string or a list of text blocks joined by "\n\n".
// Tool output may legitimately be empty, so tool_result text blocks may be empty (`allow_empty`).
Result<std::string> text_or_text_blocks(const Json& v, const std::string& field, bool allow_empty) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) return err_type(kD, field, "a string or a list of text blocks", v);
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string bf = field_index(kD, field, i);
    DSV4_ASSIGN_OR_RETURN(std::string type, block_type(v[i], bf));
    if (type == "image" || type == "document" || type == "search_result") return unsupported_block(bf, type);
    if (type != "text") return err_enum(kD, bf + ".type", type, {"text"});
    std::string text;
    if (allow_empty) {
      DSV4_ASSIGN_OR_RETURN(text, required_string(v[i], "text", bf + ".text", false));
    } else {
      DSV4_ASSIGN_OR_RETURN(text, text_of(v[i], bf));
    }
    if (i) out += "\n\n";
    out += text;
  }
  return out;
}

// One user message → tool messages (its tool_result blocks, in order) then one user message with
// its text blocks joined by "\n\n" (the DS4 format puts results before the user's text anyway).
Status parse_user(const Json& content, const std::string& field, std::vector<ApiMessage>& out) {
  if (content.is_string()) {
    out.push_back({"user", content.get<std::string>(), "", {}, "", ""});
    return ok_status();
  }
  std::string text;
  bool has_text = false;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string bf = field_index(kD, field, i);
    const Json& b = content[i];
    DSV4_ASSIGN_OR_RETURN(std::string type, block_type(b, bf));
    if (type == "text") {
      DSV4_ASSIGN_OR_RETURN(std::string t, text_of(b, bf));
      if (has_text) text += "\n\n";
      text += t;
      has_text = true;
    } else if (type == "tool_result") {
      ApiMessage m;
      m.role = "tool";
      DSV4_ASSIGN_OR_RETURN(m.tool_call_id, required_string(b, "tool_use_id", bf + ".tool_use_id", true));
      if (const Json* c = find_field(b, "content")) {
        DSV4_ASSIGN_OR_RETURN(m.content, text_or_text_blocks(*c, bf + ".content", /*allow_empty=*/true));
      }
      DSV4_ASSIGN_OR_RETURN(std::optional<bool> is_error, read_bool(b, "is_error", bf + ".is_error", kD));
      (void)is_error;  // rendered as given: the encoder has no error marker
      out.push_back(std::move(m));
    } else if (type == "tool_use" || type == "thinking" || type == "redacted_thinking") {
      return err_value(kD, bf + ".type", "'" + type + "' blocks are only allowed in assistant messages");
    } else if (type == "image" || type == "document" || type == "search_result" || type == "container_upload") {
      return unsupported_block(bf, type);
    } else {
      return err_enum(kD, bf + ".type", type, {"text", "tool_result"});
    }
  }
  if (has_text) out.push_back({"user", std::move(text), "", {}, "", ""});
  return ok_status();
}

// One assistant message: thinking → reasoning_content, text → content, tool_use → tool_calls.
Result<ApiMessage> parse_assistant(const Json& content, const std::string& field) {
  ApiMessage m;
  m.role = "assistant";
  if (content.is_string()) {
    m.content = content.get<std::string>();
    return m;
  }
  bool has_text = false, has_thinking = false;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string bf = field_index(kD, field, i);
    const Json& b = content[i];
    DSV4_ASSIGN_OR_RETURN(std::string type, block_type(b, bf));
    if (type == "text") {
      DSV4_ASSIGN_OR_RETURN(std::string t, text_of(b, bf));
      if (has_text) m.content += "\n\n";
      m.content += t;
      has_text = true;
    } else if (type == "thinking") {
      DSV4_ASSIGN_OR_RETURN(std::string t, required_string(b, "thinking", bf + ".thinking", false));
      DSV4_ASSIGN_OR_RETURN(std::optional<std::string> sig, read_string(b, "signature", bf + ".signature", kD));
      (void)sig;
      if (has_thinking) m.reasoning_content += "\n\n";
      m.reasoning_content += t;
      has_thinking = true;
    } else if (type == "redacted_thinking") {
      continue;  // opaque to us: nothing to render
    } else if (type == "tool_use") {
      ApiToolCall call;
      DSV4_ASSIGN_OR_RETURN(call.id, required_string(b, "id", bf + ".id", true));
      DSV4_ASSIGN_OR_RETURN(call.name, required_string(b, "name", bf + ".name", true));
      auto in = b.find("input");
      if (in == b.end() || in->is_null()) return err_missing(kD, bf + ".input");
      if (!in->is_object()) return err_type(kD, bf + ".input", "an object", *in);
      call.arguments = dump(*in);
      m.tool_calls.push_back(std::move(call));
    } else if (type == "tool_result") {
      return err_value(kD, bf + ".type", "'tool_result' blocks are only allowed in user messages");
    } else if (type == "image" || type == "document" || type == "server_tool_use" ||
               type == "web_search_tool_result") {
      return unsupported_block(bf, type);
    } else {
      return err_enum(kD, bf + ".type", type, {"text", "thinking", "redacted_thinking", "tool_use"});
    }
  }
  return m;
}

Status parse_messages(const Json& body, ChatCompletionRequest& out) {
  auto msgs = body.find("messages");
  if (msgs == body.end() || msgs->is_null()) return err_missing(kD, "messages");
  if (!msgs->is_array()) return err_type(kD, "messages", "an array", *msgs);
  if (msgs->empty()) return err_array_length(kD, "messages", /*too_long=*/false, 1, 0);
  for (size_t i = 0; i < msgs->size(); ++i) {
    const std::string f = field_index(kD, "messages", i);
    const Json& m = (*msgs)[i];
    if (!m.is_object()) return err_type(kD, f, "an object", m);
    DSV4_ASSIGN_OR_RETURN(std::string role, required_string(m, "role", f + ".role", false));
    if (role != "user" && role != "assistant") return err_enum(kD, f + ".role", role, {"user", "assistant"});
    auto c = m.find("content");
    if (c == m.end() || c->is_null()) return err_missing(kD, f + ".content");
    if (!c->is_string() && !c->is_array()) return err_type(kD, f + ".content", "a string or a list of content blocks", *c);
    if ((c->is_string() && c->get_ref<const std::string&>().empty()) || (c->is_array() && c->empty()))
      return invalid_argument(f + ": all messages must have non-empty content except for the optional final "
                                  "assistant message");
    if (role == "user") {
      DSV4_RETURN_IF_ERROR(parse_user(*c, f + ".content", out.messages));
    } else {
      if (i + 1 == msgs->size())
        return err_unsupported(kD, f, "a final assistant message (response prefill) is not supported by this server");
      DSV4_ASSIGN_OR_RETURN(ApiMessage a, parse_assistant(*c, f + ".content"));
      out.messages.push_back(std::move(a));
    }
  }
  return ok_status();
}

Status parse_tools(const Json& t, ChatCompletionRequest& out) {
  if (!t.is_array()) return err_type(kD, "tools", "an array", t);
  if (t.size() > kMaxTools) return err_array_length(kD, "tools", /*too_long=*/true, kMaxTools, t.size());
  for (size_t i = 0; i < t.size(); ++i) {
    const std::string f = field_index(kD, "tools", i);
    const Json& tool = t[i];
    if (!tool.is_object()) return err_type(kD, f, "an object", tool);
    DSV4_ASSIGN_OR_RETURN(std::optional<std::string> type, read_string(tool, "type", f + ".type", kD));
    if (type && *type != "custom")
      return err_unsupported(kD, f + ".type",
                             "server tool '" + clip(*type) + "' is not supported by this server; only custom tools "
                             "(name, description, input_schema) are");
    ApiTool at;
    DSV4_ASSIGN_OR_RETURN(at.name, required_string(tool, "name", f + ".name", true));
    DSV4_ASSIGN_OR_RETURN(std::optional<std::string> desc, read_string(tool, "description", f + ".description", kD));
    auto schema = tool.find("input_schema");
    if (schema == tool.end() || schema->is_null()) return err_missing(kD, f + ".input_schema");
    if (!schema->is_object()) return err_type(kD, f + ".input_schema", "an object", *schema);
    Json fn = Json::object();
    fn["name"] = at.name;
    if (desc) fn["description"] = *desc;
    fn["parameters"] = *schema;
    read_tool_param_names(*schema, at);
    at.function_json = dump(fn);
    out.tools.push_back(std::move(at));
  }
  return ok_status();
}

Status parse_tool_choice(const Json& t, ChatCompletionRequest& out) {
  if (!t.is_object()) return err_type(kD, "tool_choice", "an object", t);
  DSV4_ASSIGN_OR_RETURN(std::string type, required_string(t, "type", "tool_choice.type", false));
  DSV4_ASSIGN_OR_RETURN(std::optional<bool> dp,
                        read_bool(t, "disable_parallel_tool_use", "tool_choice.disable_parallel_tool_use", kD));
  if (dp && *dp) out.parallel_tool_calls = false;
  if (type == "auto") out.tool_choice.kind = ToolChoiceKind::kAuto;
  else if (type == "any") out.tool_choice.kind = ToolChoiceKind::kRequired;
  else if (type == "none") out.tool_choice.kind = ToolChoiceKind::kNone;
  else if (type == "tool") {
    out.tool_choice.kind = ToolChoiceKind::kFunction;
    DSV4_ASSIGN_OR_RETURN(out.tool_choice.function_name, required_string(t, "name", "tool_choice.name", true));
  } else {
    return err_enum(kD, "tool_choice.type", type, {"auto", "any", "tool", "none"});
  }
  return ok_status();
}

Result<ReasoningEffort> parse_effort(const Json& v, const std::string& field) {
  if (!v.is_string()) return err_type(kD, field, "a string", v);
  const std::string s = v.get<std::string>();
  if (s == "minimal" || s == "low" || s == "medium" || s == "high" || s == "xhigh") return ReasoningEffort::kHigh;
  if (s == "max" || s == "ultra") return ReasoningEffort::kMax;
  return err_enum(kD, field, s, {"low", "medium", "high", "max"});
}

// thinking {type: enabled (budget_tokens >= 1024) | adaptive | between_tools | disabled}; effort from
// output_config.effort or thinking.effort. Default: thinking on, effort high.
Status parse_thinking(const Json& body, ChatCompletionRequest& out) {
  out.thinking = true;
  out.reasoning_effort = ReasoningEffort::kHigh;
  std::optional<ReasoningEffort> effort;
  std::string effort_field;
  if (const Json* th = find_field(body, "thinking")) {
    if (!th->is_object()) return err_type(kD, "thinking", "an object", *th);
    DSV4_ASSIGN_OR_RETURN(std::string type, required_string(*th, "type", "thinking.type", false));
    if (type == "enabled") {
      const Json* b = find_field(*th, "budget_tokens");
      if (b == nullptr) return err_missing(kD, "thinking.enabled.budget_tokens");
      DSV4_ASSIGN_OR_RETURN(int64_t budget, json_to_int(*b, "thinking.enabled.budget_tokens", kD, 1024, kMaxTokensLimit));
      (void)budget;  // DeepSeek thinks until it is done; max_tokens is the only cap
    } else if (type == "disabled") {
      out.thinking = false;
    } else if (type != "adaptive" && type != "between_tools") {
      return err_enum(kD, "thinking.type", type, {"enabled", "disabled", "adaptive", "between_tools"});
    }
    if (const Json* e = find_field(*th, "effort")) {
      DSV4_ASSIGN_OR_RETURN(effort, parse_effort(*e, "thinking.effort"));
      effort_field = "thinking.effort";
    }
  }
  if (const Json* oc = find_field(body, "output_config")) {
    if (!oc->is_object()) return err_type(kD, "output_config", "an object", *oc);
    if (const Json* e = find_field(*oc, "effort")) {
      DSV4_ASSIGN_OR_RETURN(ReasoningEffort oe, parse_effort(*e, "output_config.effort"));
      if (effort && *effort != oe)
        return invalid_argument("output_config.effort: conflicts with " + effort_field);
      effort = oe;
    }
  }
  if (effort) out.reasoning_effort = *effort;
  return ok_status();
}

Status parse_sampling(const Json& body, GenerationParams& p) {
  const Json* mt = find_field(body, "max_tokens");
  if (mt == nullptr) return err_missing(kD, "max_tokens");
  DSV4_ASSIGN_OR_RETURN(int64_t max_tokens, json_to_int(*mt, "max_tokens", kD, 1, kMaxTokensLimit));
  p.max_tokens = max_tokens;
  DSV4_ASSIGN_OR_RETURN(p.temperature, read_number(body, "temperature", "temperature", kD, {0, 1}));
  DSV4_ASSIGN_OR_RETURN(p.top_p, read_number(body, "top_p", "top_p", kD, {0, 1, false, true}));
  DSV4_ASSIGN_OR_RETURN(p.top_k, read_int(body, "top_k", "top_k", kD, 0, std::numeric_limits<int32_t>::max()));
  if (const Json* s = find_field(body, "stop_sequences")) {
    DSV4_ASSIGN_OR_RETURN(p.stop, parse_stop_list(*s, "stop_sequences", kD, /*allow_single_string=*/false));
  }
  DSV4_ASSIGN_OR_RETURN(std::optional<bool> stream, read_bool(body, "stream", "stream", kD));
  p.stream = stream.value_or(false);
  p.include_usage = false;  // Anthropic streams always carry usage in message_start/message_delta
  if (const Json* md = find_field(body, "metadata"); md != nullptr && !md->is_object())
    return err_type(kD, "metadata", "an object", *md);
  if (const Json* mcp = find_field(body, "mcp_servers"); mcp != nullptr && !(mcp->is_array() && mcp->empty()))
    return err_unsupported(kD, "mcp_servers", "MCP servers are not supported by this server");
  return ok_status();
}

}  // namespace

namespace {

Result<ChatCompletionRequest> parse_anthropic_body(const Json& body) {
  ChatCompletionRequest out;
  DSV4_ASSIGN_OR_RETURN(std::optional<std::string> model, read_string(body, "model", "model", kD));
  out.model = model.value_or("");
  if (const Json* sys = find_field(body, "system")) {
    DSV4_ASSIGN_OR_RETURN(std::string system, text_or_text_blocks(*sys, "system", /*allow_empty=*/false));
    if (!system.empty()) out.messages.push_back({"system", std::move(system), "", {}, "", ""});
  }
  DSV4_RETURN_IF_ERROR(parse_messages(body, out));
  DSV4_RETURN_IF_ERROR(parse_sampling(body, out.params));
  if (const Json* t = find_field(body, "tools")) DSV4_RETURN_IF_ERROR(parse_tools(*t, out));
  if (const Json* tc = find_field(body, "tool_choice")) DSV4_RETURN_IF_ERROR(parse_tool_choice(*tc, out));
  DSV4_RETURN_IF_ERROR(parse_thinking(body, out));
  out.stream = out.params.stream;
  out.max_tokens = out.params.max_tokens;
  return out;
}

}  // namespace

Result<ChatCompletionRequest> parse_anthropic_messages_request(std::string_view json_text) {
  DSV4_ASSIGN_OR_RETURN(Json body, parse_json_body(json_text, kD));
  return parse_anthropic_body(body);
}

Result<ChatCompletionRequest> parse_anthropic_count_tokens_request(std::string_view json_text) {
  DSV4_ASSIGN_OR_RETURN(Json body, parse_json_body(json_text, kD));
  if (find_field(body, "max_tokens") == nullptr) body["max_tokens"] = 1;  // count_tokens has none
  return parse_anthropic_body(body);
}

}  // namespace dsv4::server::api
