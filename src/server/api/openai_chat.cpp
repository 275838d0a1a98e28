// server/api/openai_chat.cpp — OpenAI chat-completions request parsing and validation.
//
// Uses nlohmann::ordered_json (request_json.h) so tool schemas keep the client's key order (the
// prompt prints them in that order, and any reordering would change the rendered bytes and the KV
// cache key). Sampling/stop/logprobs/stream fields are read by generation_params.cpp.
#include "server/api/openai_chat.h"

#include "server/api/request_json.h"

namespace dsv4::server::api {
namespace {

constexpr Dialect kD = Dialect::kOpenAi;

Status bad_type(const std::string& field, const char* expected, const Json& got) {
  return err_type(kD, field, expected, got);
}
Status missing(const std::string& field) { return err_missing(kD, field); }
Status bad_value(const std::string& field, const std::string& value, const std::vector<std::string>& supported) {
  return err_enum(kD, field, value, supported);
}

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

Result<std::string> get_string(const Json& obj, const std::string& key, const std::string& field, bool required) {
  auto it = obj.find(key);
  if (it == obj.end() || (it->is_null() && !required)) {
    if (required) return missing(field);
    return std::string();
  }
  if (!it->is_string()) return bad_type(field, "a string", *it);
  return it->get<std::string>();
}

// String content, or an array of {"type":"text","text":...} parts joined by "\n\n".
Result<std::string> parse_content(const Json& c, const std::string& field) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) return bad_type(field, "a string or an array of content parts", c);
  if (c.empty()) return err_array_length(kD, field, /*too_long=*/false, 1, 0);
  std::string out;
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string pf = field + "[" + std::to_string(i) + "]";
    const Json& part = c[i];
    if (!part.is_object()) return bad_type(pf, "an object", part);
    DSV4_ASSIGN_OR_RETURN(std::string type, get_string(part, "type", pf + ".type", true));
    if (type != "text")
      return invalid_argument("Invalid value for '" + pf + ".type': '" + clip(type) +
                              "'. Only 'text' content parts are supported.");
    DSV4_ASSIGN_OR_RETURN(std::string text, get_string(part, "text", pf + ".text", true));
    if (i) out += "\n\n";
    out += text;
  }
  return out;
}

Result<ApiMessage> parse_message(const Json& m, const std::string& field) {
  if (!m.is_object()) return bad_type(field, "an object", m);
  ApiMessage out;
  DSV4_ASSIGN_OR_RETURN(out.role, get_string(m, "role", field + ".role", true));
  static const std::vector<std::string> kRoles = {"system", "user", "developer", "assistant", "tool", "latest_reminder"};
  if (out.role != "system" && out.role != "user" && out.role != "developer" && out.role != "assistant" &&
      out.role != "tool" && out.role != "latest_reminder")
    return bad_value(field + ".role", out.role, kRoles);
  const bool assistant = out.role == "assistant";
  auto c = m.find("content");
  if (c == m.end() || c->is_null()) {
    if (!assistant) return missing(field + ".content");
  } else {
    DSV4_ASSIGN_OR_RETURN(out.content, parse_content(*c, field + ".content"));
  }
  DSV4_ASSIGN_OR_RETURN(out.name, get_string(m, "name", field + ".name", false));
  for (const char* key : {"reasoning_content", "tool_calls"}) {
    if (!assistant && m.contains(key) && !m[key].is_null())
      return invalid_argument("Invalid parameter: '" + field + "." + key + "' is only allowed on assistant messages.");
  }
  if (assistant) {
    DSV4_ASSIGN_OR_RETURN(out.reasoning_content,
                          get_string(m, "reasoning_content", field + ".reasoning_content", false));
    auto tcs = m.find("tool_calls");
    if (tcs != m.end() && !tcs->is_null()) {
      if (!tcs->is_array()) return bad_type(field + ".tool_calls", "an array", *tcs);
      for (size_t i = 0; i < tcs->size(); ++i) {
        const std::string tf = field + ".tool_calls[" + std::to_string(i) + "]";
        const Json& tc = (*tcs)[i];
        if (!tc.is_object()) return bad_type(tf, "an object", tc);
        ApiToolCall call;
        DSV4_ASSIGN_OR_RETURN(call.id, get_string(tc, "id", tf + ".id", false));
        DSV4_ASSIGN_OR_RETURN(std::string type, get_string(tc, "type", tf + ".type", false));
        if (!type.empty() && type != "function") return bad_value(tf + ".type", type, {"function"});
        auto fn = tc.find("function");
        if (fn == tc.end()) return missing(tf + ".function");
        if (!fn->is_object()) return bad_type(tf + ".function", "an object", *fn);
        DSV4_ASSIGN_OR_RETURN(call.name, get_string(*fn, "name", tf + ".function.name", true));
        if (call.name.empty()) return invalid_argument("Invalid value for '" + tf + ".function.name': empty string.");
        DSV4_ASSIGN_OR_RETURN(call.arguments, get_string(*fn, "arguments", tf + ".function.arguments", true));
        out.tool_calls.push_back(std::move(call));
      }
    }
  }
  if (out.role == "tool") {
    DSV4_ASSIGN_OR_RETURN(out.tool_call_id, get_string(m, "tool_call_id", field + ".tool_call_id", true));
  }
  return out;
}

Result<std::vector<ApiTool>> parse_tools(const Json& t) {
  if (!t.is_array()) return bad_type("tools", "an array", t);
  if (t.size() > kMaxTools) return err_array_length(kD, "tools", /*too_long=*/true, kMaxTools, t.size());
  std::vector<ApiTool> out;
  for (size_t i = 0; i < t.size(); ++i) {
    const std::string f = "tools[" + std::to_string(i) + "]";
    const Json& tool = t[i];
    if (!tool.is_object()) return bad_type(f, "an object", tool);
    DSV4_ASSIGN_OR_RETURN(std::string type, get_string(tool, "type", f + ".type", true));
    if (type != "function") return bad_value(f + ".type", type, {"function"});
    auto fn = tool.find("function");
    if (fn == tool.end()) return missing(f + ".function");
    if (!fn->is_object()) return bad_type(f + ".function", "an object", *fn);
    ApiTool at;
    DSV4_ASSIGN_OR_RETURN(at.name, get_string(*fn, "name", f + ".function.name", true));
    if (at.name.empty()) return invalid_argument("Invalid value for '" + f + ".function.name': empty string.");
    DSV4_ASSIGN_OR_RETURN(std::string desc, get_string(*fn, "description", f + ".function.description", false));
    (void)desc;
    auto params = fn->find("parameters");
    if (params != fn->end() && !params->is_object()) return bad_type(f + ".function.parameters", "an object", *params);
    if (params != fn->end()) {
      read_tool_param_names(*params, at);
    } else {
      at.params_known = true;  // no parameters at all
    }
    at.function_json = dump(*fn);
    out.push_back(std::move(at));
  }
  return out;
}

Result<ToolChoice> parse_tool_choice(const Json& t) {
  ToolChoice out;
  if (t.is_string()) {
    const std::string s = t.get<std::string>();
    if (s == "auto") out.kind = ToolChoiceKind::kAuto;
    else if (s == "none") out.kind = ToolChoiceKind::kNone;
    else if (s == "required") out.kind = ToolChoiceKind::kRequired;
    else return bad_value("tool_choice", s, {"none", "auto", "required"});
    return out;
  }
  if (!t.is_object()) return bad_type("tool_choice", "a string or an object", t);
  DSV4_ASSIGN_OR_RETURN(std::string type, get_string(t, "type", "tool_choice.type", true));
  if (type != "function") return bad_value("tool_choice.type", type, {"function"});
  auto fn = t.find("function");
  if (fn == t.end()) return missing("tool_choice.function");
  if (!fn->is_object()) return bad_type("tool_choice.function", "an object", *fn);
  DSV4_ASSIGN_OR_RETURN(out.function_name, get_string(*fn, "name", "tool_choice.function.name", true));
  out.kind = ToolChoiceKind::kFunction;
  return out;
}

// One thinking control's opinion: enabled or not, and (when enabled) an effort.
struct ThinkingVote {
  std::string source;
  bool enabled = true;
  std::optional<ReasoningEffort> effort;
  bool switches = true;  // an on/off control; an effort level (enabled, with an effort) is not
};

Result<ThinkingVote> parse_effort(const Json& v, const std::string& field) {
  if (!v.is_string()) return bad_type(field, "a string", v);
  const std::string s = v.get<std::string>();
  ThinkingVote vote{field, true, std::nullopt, false};
  if (s == "none") {
    vote.enabled = false;
    vote.switches = true;
  }
  else if (s == "minimal" || s == "low" || s == "medium" || s == "high" || s == "xhigh") vote.effort = ReasoningEffort::kHigh;
  else if (s == "max" || s == "ultra") vote.effort = ReasoningEffort::kMax;
  else return bad_value(field, s, {"none", "minimal", "low", "medium", "high", "xhigh", "max", "ultra"});
  return vote;
}

Status resolve_thinking(const Json& body, ChatCompletionRequest& out) {
  std::vector<ThinkingVote> votes;
  if (auto it = body.find("thinking"); it != body.end() && !it->is_null()) {
    if (it->is_boolean()) {
      votes.push_back({"thinking", it->get<bool>(), std::nullopt});
    } else {
      if (!it->is_object()) return bad_type("thinking", "an object", *it);
      DSV4_ASSIGN_OR_RETURN(std::string type, get_string(*it, "type", "thinking.type", true));
      if (type != "enabled" && type != "disabled") return bad_value("thinking.type", type, {"enabled", "disabled"});
      votes.push_back({"thinking.type", type == "enabled", std::nullopt});
    }
  }
  if (auto it = body.find("reasoning_effort"); it != body.end() && !it->is_null()) {
    DSV4_ASSIGN_OR_RETURN(ThinkingVote v, parse_effort(*it, "reasoning_effort"));
    votes.push_back(v);
  }
  if (auto it = body.find("chat_template_kwargs"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return bad_type("chat_template_kwargs", "an object", *it);
    for (const char* key : {"thinking", "enable_thinking"}) {
      if (auto k = it->find(key); k != it->end() && !k->is_null()) {
        const std::string f = std::string("chat_template_kwargs.") + key;
        if (!k->is_boolean()) return bad_type(f, "a boolean", *k);
        votes.push_back({f, k->get<bool>(), std::nullopt});
      }
    }
    if (auto k = it->find("reasoning_effort"); k != it->end() && !k->is_null()) {
      DSV4_ASSIGN_OR_RETURN(ThinkingVote v, parse_effort(*k, "chat_template_kwargs.reasoning_effort"));
      votes.push_back(v);
    }
  }
  out.thinking = true;
  out.reasoning_effort = ReasoningEffort::kHigh;
  const ThinkingVote* first = nullptr;
  const ThinkingVote* effort_vote = nullptr;
  for (const ThinkingVote& v : votes) {
    if (!v.switches) {
      // An effort level: picks the effort when thinking is on, never switches it on.
      if (effort_vote != nullptr && *effort_vote->effort != *v.effort)
        return invalid_argument("Conflicting thinking controls: '" + effort_vote->source + "' and '" + v.source +
                                "' ask for different reasoning efforts.");
      effort_vote = &v;
      continue;
    }
    if (first != nullptr && first->enabled != v.enabled)
      return invalid_argument("Conflicting thinking controls: '" + first->source + "' turns thinking " +
                              (first->enabled ? "on" : "off") + " but '" + v.source + "' turns it " +
                              (v.enabled ? "on" : "off") + ".");
    if (first == nullptr) first = &v;
    if (v.effort) {
      if (effort_vote != nullptr && *effort_vote->effort != *v.effort)
        return invalid_argument("Conflicting thinking controls: '" + effort_vote->source + "' and '" + v.source +
                                "' ask for different reasoning efforts.");
      effort_vote = &v;
    }
  }
  if (first != nullptr) out.thinking = first->enabled;
  if (effort_vote != nullptr) out.reasoning_effort = *effort_vote->effort;
  return ok_status();
}

Status parse_response_format(const Json& rf, ChatCompletionRequest& out) {
  if (!rf.is_object()) return bad_type("response_format", "an object", rf);
  DSV4_ASSIGN_OR_RETURN(std::string type, get_string(rf, "type", "response_format.type", true));
  if (type == "text") return ok_status();
  if (type == "json_schema") {
    auto js = rf.find("json_schema");
    if (js == rf.end()) return missing("response_format.json_schema");
    if (!js->is_object()) return bad_type("response_format.json_schema", "an object", *js);
  } else if (type != "json_object") {
    return bad_value("response_format.type", type, {"text", "json_object", "json_schema"});
  }
  out.response_format_json = dump(rf);
  return ok_status();
}

// Parameters of OpenAI features this server does not have: a clear 400 rather than a silent ignore.
Status reject_unsupported(const Json& body) {
  if (const Json* f = find_field(body, "functions"); f != nullptr && !(f->is_array() && f->empty()))
    return err_unsupported(kD, "functions", "the legacy 'functions' parameter is not supported; use 'tools' instead.");
  if (find_field(body, "function_call") != nullptr)
    return err_unsupported(kD, "function_call",
                           "the legacy 'function_call' parameter is not supported; use 'tool_choice' instead.");
  if (find_field(body, "audio") != nullptr)
    return err_unsupported(kD, "audio", "audio output is not supported by this server.");
  if (const Json* m = find_field(body, "modalities")) {
    if (!m->is_array()) return bad_type("modalities", "an array", *m);
    for (size_t i = 0; i < m->size(); ++i) {
      const std::string f = "modalities[" + std::to_string(i) + "]";
      if (!(*m)[i].is_string()) return bad_type(f, "a string", (*m)[i]);
      const std::string mod = (*m)[i].get<std::string>();
      if (mod == "audio") return err_unsupported(kD, f, "audio output is not supported by this server.");
      if (mod != "text") return bad_value(f, mod, {"text"});
    }
  }
  if (find_field(body, "prediction") != nullptr)
    return err_unsupported(kD, "prediction", "predicted outputs are not supported by this server.");
  if (find_field(body, "web_search_options") != nullptr)
    return err_unsupported(kD, "web_search_options", "web search is not supported by this server.");
  return ok_status();
}

}  // namespace

Result<ChatCompletionRequest> parse_chat_completion_request(std::string_view json_text) {
  DSV4_ASSIGN_OR_RETURN(Json body, parse_json_body(json_text, kD));
  ChatCompletionRequest out;
  DSV4_ASSIGN_OR_RETURN(out.model, get_string(body, "model", "model", false));
  auto msgs = body.find("messages");
  if (msgs == body.end()) return missing("messages");
  if (!msgs->is_array()) return bad_type("messages", "an array", *msgs);
  if (msgs->empty()) return err_array_length(kD, "messages", /*too_long=*/false, 1, 0);
  for (size_t i = 0; i < msgs->size(); ++i) {
    DSV4_ASSIGN_OR_RETURN(ApiMessage m, parse_message((*msgs)[i], "messages[" + std::to_string(i) + "]"));
    out.messages.push_back(std::move(m));
  }
  DSV4_RETURN_IF_ERROR(reject_unsupported(body));
  if (auto it = body.find("tools"); it != body.end() && !it->is_null()) {
    DSV4_ASSIGN_OR_RETURN(out.tools, parse_tools(*it));
  }
  if (auto it = body.find("tool_choice"); it != body.end() && !it->is_null()) {
    DSV4_ASSIGN_OR_RETURN(out.tool_choice, parse_tool_choice(*it));
  }
  DSV4_ASSIGN_OR_RETURN(std::optional<bool> parallel, read_bool(body, "parallel_tool_calls", "parallel_tool_calls", kD));
  out.parallel_tool_calls = parallel.value_or(true);
  DSV4_RETURN_IF_ERROR(resolve_thinking(body, out));
  if (auto it = body.find("response_format"); it != body.end() && !it->is_null()) {
    DSV4_RETURN_IF_ERROR(parse_response_format(*it, out));
  }
  DSV4_RETURN_IF_ERROR(parse_openai_generation_params(body, OpenAiRoute::kChat, out.params));
  out.stream = out.params.stream;
  out.max_tokens = out.params.max_tokens;
  return out;
}

}  // namespace dsv4::server::api
