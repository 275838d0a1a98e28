// server/api/responses.cpp — /v1/responses request parsing and validation (mapping in the header).
// ordered_json keeps the client's key order in tool schemas (printed into the prompt as sent).
#include "server/api/responses.h"

#include "server/api/request_json.h"

namespace dsv4::server::api {
namespace {

constexpr Dialect kD = Dialect::kOpenAi;

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

Result<std::string> get_string(const Json& obj, const std::string& key, const std::string& field, bool required) {
  auto it = obj.find(key);
  if (it == obj.end() || (it->is_null() && !required)) {
    if (required) return err_missing(kD, field);
    return std::string();
  }
  if (!it->is_string()) return err_type(kD, field, "a string", *it);
  return it->get<std::string>();
}

// A string, or an array of text parts (`allowed` part types) joined by "\n\n".
Result<std::string> parse_text_parts(const Json& c, const std::string& field, const std::vector<std::string>& allowed) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) return err_type(kD, field, "a string or an array of content parts", c);
  std::string out;
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string pf = field + "[" + std::to_string(i) + "]";
    const Json& part = c[i];
    if (!part.is_object()) return err_type(kD, pf, "an object", part);
    DSV4_ASSIGN_OR_RETURN(std::string type, get_string(part, "type", pf + ".type", true));
    bool ok = false;
    for (const std::string& a : allowed) ok = ok || a == type;
    if (!ok) {
      if (type == "input_image" || type == "input_file" || type == "input_audio")
        return err_unsupported(kD, pf + ".type", "'" + type + "' content is not supported by this server (text only).");
      return err_enum(kD, pf + ".type", type, allowed);
    }
    const char* key = type == "refusal" ? "refusal" : "text";
    DSV4_ASSIGN_OR_RETURN(std::string text, get_string(part, key, pf + "." + key, true));
    if (i) out += "\n\n";
    out += text;
  }
  return out;
}

// Builds chat messages from Responses input items (see the header for the mapping).
class InputBuilder {
 public:
  explicit InputBuilder(std::vector<ApiMessage>& out) : out_(out) {}

  Status item(const Json& it, const std::string& f) {
    if (!it.is_object()) return err_type(kD, f, "an object", it);
    DSV4_ASSIGN_OR_RETURN(std::string type, get_string(it, "type", f + ".type", false));
    if (type.empty() || type == "message") return message(it, f);
    if (type == "reasoning") return reasoning(it, f);
    if (type == "function_call") return function_call(it, f);
    if (type == "function_call_output") return function_call_output(it, f);
    if (type == "item_reference")
      return err_unsupported(kD, f + ".type", "item references are not supported; send the item itself, or use "
                                              "'previous_response_id'.");
    return err_unsupported(kD, f + ".type", "input items of type '" + clip(type) + "' are not supported by this server.");
  }

  Status finish(const std::string& field) {
    if (!pending_reasoning_.empty()) {
      // A reasoning item with nothing after it: an assistant turn of reasoning only.
      ApiMessage m;
      m.role = "assistant";
      m.reasoning_content = std::move(pending_reasoning_);
      out_.push_back(std::move(m));
    }
    if (out_.empty()) return err_value(kD, field, "the input has no items.");
    return ok_status();
  }

 private:
  Status message(const Json& it, const std::string& f) {
    ApiMessage m;
    DSV4_ASSIGN_OR_RETURN(m.role, get_string(it, "role", f + ".role", true));
    if (m.role != "user" && m.role != "system" && m.role != "developer" && m.role != "assistant")
      return err_enum(kD, f + ".role", m.role, {"user", "system", "developer", "assistant"});
    auto c = it.find("content");
    if (c == it.end() || c->is_null()) return err_missing(kD, f + ".content");
    const bool assistant = m.role == "assistant";
    DSV4_ASSIGN_OR_RETURN(m.content, parse_text_parts(*c, f + ".content",
                                                      assistant ? std::vector<std::string>{"output_text", "refusal", "input_text"}
                                                                : std::vector<std::string>{"input_text", "output_text"}));
    if (assistant) {
      m.reasoning_content = std::move(pending_reasoning_);
      pending_reasoning_.clear();
    } else if (!pending_reasoning_.empty()) {
      DSV4_RETURN_IF_ERROR(finish_reasoning_only());
    }
    out_.push_back(std::move(m));
    return ok_status();
  }

  Status finish_reasoning_only() {
    ApiMessage r;
    r.role = "assistant";
    r.reasoning_content = std::move(pending_reasoning_);
    pending_reasoning_.clear();
    out_.push_back(std::move(r));
    return ok_status();
  }

  Status reasoning(const Json& it, const std::string& f) {
    std::string text;
    if (auto c = it.find("content"); c != it.end() && !c->is_null() && !(c->is_array() && c->empty())) {
      DSV4_ASSIGN_OR_RETURN(text, parse_text_parts(*c, f + ".content", {"reasoning_text"}));
    } else if (auto s = it.find("summary"); s != it.end() && !s->is_null()) {
      if (!s->is_array()) return err_type(kD, f + ".summary", "an array", *s);
      DSV4_ASSIGN_OR_RETURN(text, parse_text_parts(*s, f + ".summary", {"summary_text"}));
    }
    if (!pending_reasoning_.empty() && !text.empty()) pending_reasoning_ += "\n\n";
    pending_reasoning_ += text;
    return ok_status();
  }

  Status function_call(const Json& it, const std::string& f) {
    ApiToolCall call;
    DSV4_ASSIGN_OR_RETURN(call.id, get_string(it, "call_id", f + ".call_id", true));
    DSV4_ASSIGN_OR_RETURN(call.name, get_string(it, "name", f + ".name", true));
    if (call.name.empty()) return err_value(kD, f + ".name", "empty string.");
    DSV4_ASSIGN_OR_RETURN(call.arguments, get_string(it, "arguments", f + ".arguments", true));
    // The current assistant turn: the last message when it is an assistant one and no reasoning
    // item started a new turn since.
    if (out_.empty() || out_.back().role != "assistant" || !pending_reasoning_.empty()) {
      ApiMessage m;
      m.role = "assistant";
      m.reasoning_content = std::move(pending_reasoning_);
      pending_reasoning_.clear();
      out_.push_back(std::move(m));
    }
    out_.back().tool_calls.push_back(std::move(call));
    return ok_status();
  }

  Status function_call_output(const Json& it, const std::string& f) {
    if (!pending_reasoning_.empty()) DSV4_RETURN_IF_ERROR(finish_reasoning_only());
    ApiMessage m;
    m.role = "tool";
    DSV4_ASSIGN_OR_RETURN(m.tool_call_id, get_string(it, "call_id", f + ".call_id", true));
    auto o = it.find("output");
    if (o == it.end() || o->is_null()) return err_missing(kD, f + ".output");
    DSV4_ASSIGN_OR_RETURN(m.content, parse_text_parts(*o, f + ".output", {"input_text", "output_text"}));
    out_.push_back(std::move(m));
    return ok_status();
  }

  std::vector<ApiMessage>& out_;
  std::string pending_reasoning_;
};

Status parse_tools(const Json& t, ResponsesRequest& out) {
  if (!t.is_array()) return err_type(kD, "tools", "an array", t);
  if (t.size() > kMaxTools) return err_array_length(kD, "tools", /*too_long=*/true, kMaxTools, t.size());
  Json echo = Json::array();
  for (size_t i = 0; i < t.size(); ++i) {
    const std::string f = "tools[" + std::to_string(i) + "]";
    const Json& tool = t[i];
    if (!tool.is_object()) return err_type(kD, f, "an object", tool);
    DSV4_ASSIGN_OR_RETURN(std::string type, get_string(tool, "type", f + ".type", true));
    if (type != "function")
      return err_unsupported(kD, f + ".type", "tools of type '" + clip(type) + "' are not supported by this server; "
                                              "only 'function' tools are.");
    ApiTool at;
    DSV4_ASSIGN_OR_RETURN(at.name, get_string(tool, "name", f + ".name", true));
    if (at.name.empty()) return err_value(kD, f + ".name", "empty string.");
    DSV4_ASSIGN_OR_RETURN(std::optional<std::string> desc, read_string(tool, "description", f + ".description", kD));
    DSV4_ASSIGN_OR_RETURN(std::optional<bool> strict, read_bool(tool, "strict", f + ".strict", kD));
    Json fn = Json::object();
    fn["name"] = at.name;
    if (desc) fn["description"] = *desc;
    if (const Json* params = find_field(tool, "parameters")) {
      if (!params->is_object()) return err_type(kD, f + ".parameters", "an object", *params);
      fn["parameters"] = *params;
      read_tool_param_names(*params, at);
    } else {
      at.params_known = true;
    }
    at.function_json = dump(fn);
    out.chat.tools.push_back(std::move(at));
    Json e = {{"type", "function"}, {"name", fn["name"]}, {"description", desc ? Json(*desc) : Json(nullptr)},
              {"parameters", fn.contains("parameters") ? fn["parameters"] : Json(nullptr)},
              {"strict", strict ? Json(*strict) : Json(nullptr)}};
    echo.push_back(std::move(e));
  }
  out.tools_json = dump(echo);
  return ok_status();
}

Status parse_tool_choice(const Json& t, ResponsesRequest& out) {
  ToolChoice& tc = out.chat.tool_choice;
  if (t.is_string()) {
    const std::string s = t.get<std::string>();
    if (s == "auto") tc.kind = ToolChoiceKind::kAuto;
    else if (s == "none") tc.kind = ToolChoiceKind::kNone;
    else if (s == "required") tc.kind = ToolChoiceKind::kRequired;
    else return err_enum(kD, "tool_choice", s, {"none", "auto", "required"});
  } else {
    if (!t.is_object()) return err_type(kD, "tool_choice", "a string or an object", t);
    DSV4_ASSIGN_OR_RETURN(std::string type, get_string(t, "type", "tool_choice.type", true));
    if (type != "function")
      return err_unsupported(kD, "tool_choice.type", "tool_choice of type '" + clip(type) +
                                                         "' is not supported by this server; use 'function'.");
    DSV4_ASSIGN_OR_RETURN(tc.function_name, get_string(t, "name", "tool_choice.name", true));
    tc.kind = ToolChoiceKind::kFunction;
  }
  out.tool_choice_json = dump(t);
  return ok_status();
}

Status parse_reasoning(const Json& r, ResponsesRequest& out) {
  if (!r.is_object()) return err_type(kD, "reasoning", "an object", r);
  DSV4_ASSIGN_OR_RETURN(std::optional<std::string> effort, read_string(r, "effort", "reasoning.effort", kD));
  DSV4_ASSIGN_OR_RETURN(std::optional<std::string> summary, read_string(r, "summary", "reasoning.summary", kD));
  (void)summary;
  if (!effort) return ok_status();
  const std::string& s = *effort;
  if (s == "none") {
    out.chat.thinking = false;
  } else if (s == "minimal" || s == "low" || s == "medium" || s == "high" || s == "xhigh") {
    out.chat.reasoning_effort = ReasoningEffort::kHigh;
  } else if (s == "max") {
    out.chat.reasoning_effort = ReasoningEffort::kMax;
  } else {
    return err_enum(kD, "reasoning.effort", s, {"none", "minimal", "low", "medium", "high", "xhigh", "max"});
  }
  out.reasoning_effort = s;
  return ok_status();
}

Status parse_text(const Json& t, ResponsesRequest& out) {
  if (!t.is_object()) return err_type(kD, "text", "an object", t);
  DSV4_ASSIGN_OR_RETURN(std::optional<std::string> verbosity, read_string(t, "verbosity", "text.verbosity", kD));
  (void)verbosity;
  const Json* fmt = find_field(t, "format");
  if (fmt == nullptr) return ok_status();
  if (!fmt->is_object()) return err_type(kD, "text.format", "an object", *fmt);
  DSV4_ASSIGN_OR_RETURN(std::string type, get_string(*fmt, "type", "text.format.type", true));
  out.text_format_json = dump(*fmt);
  if (type == "text") return ok_status();
  if (type == "json_object") {
    out.chat.response_format_json = dump(Json{{"type", "json_object"}});
    return ok_status();
  }
  if (type != "json_schema") return err_enum(kD, "text.format.type", type, {"text", "json_object", "json_schema"});
  // The chat route's shape: {"type":"json_schema","json_schema":{name, description?, schema, strict?}}.
  DSV4_ASSIGN_OR_RETURN(std::string name, get_string(*fmt, "name", "text.format.name", true));
  const Json* schema = find_field(*fmt, "schema");
  if (schema == nullptr) return err_missing(kD, "text.format.schema");
  if (!schema->is_object()) return err_type(kD, "text.format.schema", "an object", *schema);
  Json js = Json::object();
  js["name"] = name;
  if (const Json* d = find_field(*fmt, "description")) {
    if (!d->is_string()) return err_type(kD, "text.format.description", "a string", *d);
    js["description"] = *d;
  }
  js["schema"] = *schema;
  if (const Json* s = find_field(*fmt, "strict")) {
    if (!s->is_boolean()) return err_type(kD, "text.format.strict", "a boolean", *s);
    js["strict"] = *s;
  }
  out.chat.response_format_json = dump(Json{{"type", "json_schema"}, {"json_schema", std::move(js)}});
  return ok_status();
}

}  // namespace

Result<ResponsesRequest> parse_responses_request(std::string_view json_text) {
  DSV4_ASSIGN_OR_RETURN(Json body, parse_json_body(json_text, kD));
  ResponsesRequest out;
  ChatCompletionRequest& chat = out.chat;
  DSV4_ASSIGN_OR_RETURN(chat.model, get_string(body, "model", "model", false));
  for (const char* key : {"conversation", "prompt"})
    if (find_field(body, key) != nullptr)
      return err_unsupported(kD, key, std::string("'") + key + "' is not supported by this server.");
  DSV4_ASSIGN_OR_RETURN(std::optional<bool> background, read_bool(body, "background", "background", kD));
  if (background && *background)
    return err_unsupported(kD, "background", "background responses are not supported by this server.");

  const Json* input = find_field(body, "input");
  if (input == nullptr) return err_missing(kD, "input");
  if (input->is_string()) {
    ApiMessage m;
    m.role = "user";
    m.content = input->get<std::string>();
    chat.messages.push_back(std::move(m));
  } else {
    if (!input->is_array()) return err_type(kD, "input", "a string or an array of input items", *input);
    InputBuilder b(chat.messages);
    for (size_t i = 0; i < input->size(); ++i) DSV4_RETURN_IF_ERROR(b.item((*input)[i], "input[" + std::to_string(i) + "]"));
    DSV4_RETURN_IF_ERROR(b.finish("input"));
  }
  DSV4_ASSIGN_OR_RETURN(out.instructions, read_string(body, "instructions", "instructions", kD));
  DSV4_ASSIGN_OR_RETURN(std::optional<std::string> prev, read_string(body, "previous_response_id", "previous_response_id", kD));
  out.previous_response_id = prev.value_or("");

  if (const Json* t = find_field(body, "tools")) DSV4_RETURN_IF_ERROR(parse_tools(*t, out));
  if (const Json* t = find_field(body, "tool_choice")) DSV4_RETURN_IF_ERROR(parse_tool_choice(*t, out));
  DSV4_ASSIGN_OR_RETURN(std::optional<bool> parallel, read_bool(body, "parallel_tool_calls", "parallel_tool_calls", kD));
  chat.parallel_tool_calls = parallel.value_or(true);
  if (const Json* r = find_field(body, "reasoning")) DSV4_RETURN_IF_ERROR(parse_reasoning(*r, out));
  if (const Json* t = find_field(body, "text")) DSV4_RETURN_IF_ERROR(parse_text(*t, out));
  DSV4_ASSIGN_OR_RETURN(std::optional<std::string> truncation, read_string(body, "truncation", "truncation", kD));
  if (truncation) {
    if (*truncation != "disabled" && *truncation != "auto")
      return err_enum(kD, "truncation", *truncation, {"auto", "disabled"});
    out.truncation = *truncation;
  }
  if (const Json* inc = find_field(body, "include"); inc != nullptr && !inc->is_array())
    return err_type(kD, "include", "an array", *inc);

  // Sampling and the shared fields (the chat route's reader; Responses has no max_tokens/stop,
  // which nobody sends here).
  DSV4_RETURN_IF_ERROR(parse_openai_generation_params(body, OpenAiRoute::kCompletions, chat.params));
  DSV4_ASSIGN_OR_RETURN(std::optional<int64_t> max_out,
                        read_int(body, "max_output_tokens", "max_output_tokens", kD, 1, kMaxTokensLimit));
  chat.params.max_tokens = max_out;
  chat.params.include_usage = true;
  chat.stream = chat.params.stream;
  chat.max_tokens = max_out;

  DSV4_ASSIGN_OR_RETURN(std::optional<bool> store, read_bool(body, "store", "store", kD));
  out.store = store.value_or(true);
  if (const Json* md = find_field(body, "metadata")) out.metadata_json = dump(*md);
  DSV4_ASSIGN_OR_RETURN(out.user, read_string(body, "user", "user", kD));
  return out;
}

ResponsesEcho responses_echo(const ResponsesRequest& r) {
  ResponsesEcho e;
  e.model = r.chat.model;
  e.instructions = r.instructions;
  e.max_output_tokens = r.chat.params.max_tokens;
  e.temperature = r.chat.params.temperature;
  e.top_p = r.chat.params.top_p;
  e.parallel_tool_calls = r.chat.parallel_tool_calls;
  e.previous_response_id = r.previous_response_id;
  e.reasoning_effort = r.reasoning_effort;
  e.store = r.store;
  e.metadata_json = r.metadata_json;
  e.tools_json = r.tools_json;
  e.tool_choice_json = r.tool_choice_json;
  e.text_format_json = r.text_format_json;
  e.user = r.user;
  e.truncation = r.truncation;
  return e;
}

}  // namespace dsv4::server::api
