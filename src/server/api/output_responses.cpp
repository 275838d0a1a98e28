// server/api/output_responses.cpp — the Responses API `response` object and its streaming events.
// Keys appear in the order OpenAI sends them (ordered_json). Item ids derive from the response id
// ("resp_<hex>" → "rs_<hex>_<i>", "msg_<hex>_<i>", "fc_<hex>_<i>", i = output index), so a stream
// and the stored object agree.
#include "server/api/request_json.h"
#include "server/api/responses.h"

namespace dsv4::server::api {
namespace {

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

Json parse_or(const std::string& text, Json fallback) {
  Json j = Json::parse(text, nullptr, false);
  return j.is_discarded() ? fallback : j;
}

std::string id_suffix(const std::string& response_id) {
  return response_id.rfind("resp_", 0) == 0 ? response_id.substr(5) : response_id;
}
std::string item_id(const std::string& response_id, const char* prefix, size_t index) {
  return std::string(prefix) + id_suffix(response_id) + "_" + std::to_string(index);
}

Json usage_json(const Usage& u) {
  return {{"input_tokens", u.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
          {"output_tokens", u.completion_tokens},
          {"output_tokens_details", {{"reasoning_tokens", u.reasoning_tokens}}},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

Json reasoning_item(const std::string& id, const std::string& text, const char* status) {
  Json content = Json::array();
  if (!text.empty() || std::string(status) == "completed") content.push_back({{"type", "reasoning_text"}, {"text", text}});
  return {{"id", id}, {"type", "reasoning"}, {"summary", Json::array()}, {"content", std::move(content)}, {"status", status}};
}
Json text_part(const std::string& text) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", Json::array()}, {"logprobs", Json::array()}};
}
Json message_item(const std::string& id, const std::string& text, const char* status, bool with_part) {
  Json content = Json::array();
  if (with_part) content.push_back(text_part(text));
  return {{"id", id}, {"type", "message"}, {"status", status}, {"role", "assistant"}, {"content", std::move(content)}};
}
Json call_item(const std::string& id, const std::string& call_id, const std::string& name, const std::string& args,
               const char* status) {
  return {{"id", id}, {"type", "function_call"}, {"status", status}, {"arguments", args}, {"call_id", call_id},
          {"name", name}};
}

// The response object around `output` (status, incomplete_details, error, usage as given).
Json response_object(const ResponsesMeta& meta, const std::string& status, Json output, const Json& usage,
                     const Json& incomplete_details, const Json& error) {
  const ResponsesEcho& e = meta.echo;
  Json j = {{"id", meta.id},
            {"object", "response"},
            {"created_at", meta.created_at},
            {"status", status},
            {"background", false},
            {"error", error},
            {"incomplete_details", incomplete_details},
            {"instructions", e.instructions ? Json(*e.instructions) : Json(nullptr)},
            {"max_output_tokens", e.max_output_tokens ? Json(*e.max_output_tokens) : Json(nullptr)},
            {"max_tool_calls", nullptr},
            {"model", e.model},
            {"output", std::move(output)},
            {"parallel_tool_calls", e.parallel_tool_calls},
            {"previous_response_id", e.previous_response_id.empty() ? Json(nullptr) : Json(e.previous_response_id)},
            {"reasoning", {{"effort", e.reasoning_effort ? Json(*e.reasoning_effort) : Json(nullptr)}, {"summary", nullptr}}},
            {"service_tier", "default"},
            {"store", e.store},
            {"temperature", e.temperature.value_or(1.0)},
            {"text", {{"format", parse_or(e.text_format_json, Json{{"type", "text"}})}, {"verbosity", "medium"}}},
            {"tool_choice", parse_or(e.tool_choice_json, Json("auto"))},
            {"tools", parse_or(e.tools_json, Json::array())},
            {"top_logprobs", 0},
            {"top_p", e.top_p.value_or(1.0)},
            {"truncation", e.truncation},
            {"usage", usage},
            {"user", e.user ? Json(*e.user) : Json(nullptr)},
            {"metadata", parse_or(e.metadata_json, Json::object())}};
  return j;
}

bool cut_short(FinishReason f) { return f == FinishReason::kLength || f == FinishReason::kCancelled; }
Json incomplete_of(FinishReason f) {
  return cut_short(f) ? Json{{"reason", "max_output_tokens"}} : Json(nullptr);
}

}  // namespace

std::string responses_response_json(const ResponsesMeta& meta, const CompletionOutput& out) {
  Json output = Json::array();
  if (!out.reasoning.empty())
    output.push_back(reasoning_item(item_id(meta.id, "rs_", output.size()), out.reasoning, "completed"));
  if (!out.content.empty() || (out.reasoning.empty() && out.tool_calls.empty()))
    output.push_back(message_item(item_id(meta.id, "msg_", output.size()), out.content,
                                  cut_short(out.finish) && out.tool_calls.empty() ? "incomplete" : "completed", true));
  for (const ToolCallOut& tc : out.tool_calls)
    output.push_back(call_item(item_id(meta.id, "fc_", output.size()), tc.id, tc.name, tc.arguments, "completed"));
  const bool incomplete = cut_short(out.finish);
  return dump(response_object(meta, incomplete ? "incomplete" : "completed", std::move(output), usage_json(out.usage),
                              incomplete_of(out.finish), nullptr));
}

std::string responses_failed_json(const ResponsesMeta& meta, const ApiError& e) {
  return dump(response_object(meta, "failed", Json::array(), nullptr, nullptr,
                              Json{{"code", e.code.empty() ? "server_error" : e.code}, {"message", e.message}}));
}

// --- streaming ---------------------------------------------------------------------------------
ResponsesStream::ResponsesStream(ResponsesMeta meta) : meta_(std::move(meta)) {}

std::string ResponsesStream::emit(const char* type, std::string data_json) {
  // data_json: the event's fields as a JSON object text; "type" first, "sequence_number" last.
  Json fields = Json::parse(data_json, nullptr, false);
  Json j = {{"type", type}};
  if (fields.is_object())
    for (auto it = fields.begin(); it != fields.end(); ++it) j[it.key()] = *it;
  j["sequence_number"] = seq_++;
  return std::string("event: ") + type + "\ndata: " + dump(j) + "\n\n";
}

std::string ResponsesStream::begin() {
  if (begun_) return "";
  begun_ = true;
  const Json r = response_object(meta_, "in_progress", Json::array(), nullptr, nullptr, nullptr);
  std::string s = emit("response.created", dump(Json{{"response", r}}));
  s += emit("response.in_progress", dump(Json{{"response", r}}));
  return s;
}

std::string ResponsesStream::open_item(int kind) {
  const size_t index = done_items_.size();
  open_kind_ = kind;
  open_text_.clear();
  Json item;
  std::string s;
  switch (static_cast<OutputEvent::Kind>(kind)) {
    case OutputEvent::Kind::kReasoning:
      open_id_ = item_id(meta_.id, "rs_", index);
      item = reasoning_item(open_id_, "", "in_progress");
      s = emit("response.output_item.added", dump(Json{{"output_index", index}, {"item", item}}));
      s += emit("response.content_part.added",
                dump(Json{{"item_id", open_id_}, {"output_index", index}, {"content_index", 0},
                          {"part", {{"type", "reasoning_text"}, {"text", ""}}}}));
      break;
    case OutputEvent::Kind::kContent:
      open_id_ = item_id(meta_.id, "msg_", index);
      item = message_item(open_id_, "", "in_progress", false);
      s = emit("response.output_item.added", dump(Json{{"output_index", index}, {"item", item}}));
      s += emit("response.content_part.added", dump(Json{{"item_id", open_id_}, {"output_index", index},
                                                          {"content_index", 0}, {"part", text_part("")}}));
      break;
    default:
      open_id_ = item_id(meta_.id, "fc_", index);
      item = call_item(open_id_, call_id_, call_name_, "", "in_progress");
      s = emit("response.output_item.added", dump(Json{{"output_index", index}, {"item", item}}));
      break;
  }
  return s;
}

std::string ResponsesStream::close_item(bool complete) {
  if (open_kind_ < 0) return "";
  const size_t index = done_items_.size();
  const char* status = complete ? "completed" : "incomplete";
  Json item;
  std::string s;
  switch (static_cast<OutputEvent::Kind>(open_kind_)) {
    case OutputEvent::Kind::kReasoning: {
      const Json part = {{"type", "reasoning_text"}, {"text", open_text_}};
      s = emit("response.reasoning_text.done",
               dump(Json{{"item_id", open_id_}, {"output_index", index}, {"content_index", 0}, {"text", open_text_}}));
      s += emit("response.content_part.done",
                dump(Json{{"item_id", open_id_}, {"output_index", index}, {"content_index", 0}, {"part", part}}));
      item = reasoning_item(open_id_, open_text_, status);
      break;
    }
    case OutputEvent::Kind::kContent:
      s = emit("response.output_text.done", dump(Json{{"item_id", open_id_}, {"output_index", index}, {"content_index", 0},
                                                      {"text", open_text_}, {"logprobs", Json::array()}}));
      s += emit("response.content_part.done", dump(Json{{"item_id", open_id_}, {"output_index", index},
                                                         {"content_index", 0}, {"part", text_part(open_text_)}}));
      item = message_item(open_id_, open_text_, status, true);
      break;
    default:
      if (complete)
        s = emit("response.function_call_arguments.done",
                 dump(Json{{"item_id", open_id_}, {"output_index", index}, {"name", call_name_}, {"arguments", open_text_}}));
      item = call_item(open_id_, call_id_, call_name_, open_text_, status);
      break;
  }
  s += emit("response.output_item.done", dump(Json{{"output_index", index}, {"item", item}}));
  done_items_.push_back(dump(item));
  open_kind_ = -1;
  open_text_.clear();
  return s;
}

std::string ResponsesStream::events(const std::vector<OutputEvent>& ev) {
  std::string s = begin();
  for (const OutputEvent& e : ev) {
    const int kind = static_cast<int>(e.kind);
    switch (e.kind) {
      case OutputEvent::Kind::kReasoning:
      case OutputEvent::Kind::kContent: {
        if (e.text.empty()) break;
        if (open_kind_ != kind) {
          s += close_item(true);
          s += open_item(kind);
        }
        open_text_ += e.text;
        const size_t index = done_items_.size();
        if (e.kind == OutputEvent::Kind::kReasoning)
          s += emit("response.reasoning_text.delta",
                    dump(Json{{"item_id", open_id_}, {"output_index", index}, {"content_index", 0}, {"delta", e.text}}));
        else
          s += emit("response.output_text.delta", dump(Json{{"item_id", open_id_}, {"output_index", index},
                                                             {"content_index", 0}, {"delta", e.text},
                                                             {"logprobs", Json::array()}}));
        break;
      }
      case OutputEvent::Kind::kToolCallBegin:
        s += close_item(true);
        call_id_ = e.id;
        call_name_ = e.name;
        s += open_item(static_cast<int>(OutputEvent::Kind::kToolCallBegin));
        break;
      case OutputEvent::Kind::kToolCallArguments:
        if (e.text.empty() || open_kind_ != static_cast<int>(OutputEvent::Kind::kToolCallBegin)) break;
        open_text_ += e.text;
        s += emit("response.function_call_arguments.delta",
                  dump(Json{{"item_id", open_id_}, {"output_index", done_items_.size()}, {"delta", e.text}}));
        break;
      case OutputEvent::Kind::kToolCallEnd:
        if (open_kind_ == static_cast<int>(OutputEvent::Kind::kToolCallBegin)) s += close_item(true);
        break;
    }
  }
  return s;
}

std::string ResponsesStream::finish_with(const char* event, const std::string& status, const std::string& extra_json) {
  Json output = Json::array();
  for (const std::string& item : done_items_) output.push_back(Json::parse(item, nullptr, false));
  const Json extra = Json::parse(extra_json, nullptr, false);
  const Json r = response_object(meta_, status, std::move(output), extra.value("usage", Json(nullptr)),
                                 extra.value("incomplete_details", Json(nullptr)), extra.value("error", Json(nullptr)));
  final_json_ = dump(r);
  return emit(event, dump(Json{{"response", r}}));
}

std::string ResponsesStream::finish(const CompletionOutput& out) {
  std::string s = begin();
  const bool incomplete = cut_short(out.finish);
  // An open tool call here was never closed (cut by the limit): it is reported incomplete.
  s += close_item(!(incomplete && open_kind_ == static_cast<int>(OutputEvent::Kind::kToolCallBegin)));
  if (done_items_.empty()) {  // nothing at all: one empty message, as the non-streamed object has
    s += open_item(static_cast<int>(OutputEvent::Kind::kContent));
    s += close_item(!incomplete);
  }
  const Json extra = {{"usage", usage_json(out.usage)}, {"incomplete_details", incomplete_of(out.finish)}};
  s += finish_with(incomplete ? "response.incomplete" : "response.completed", incomplete ? "incomplete" : "completed",
                   dump(extra));
  return s;
}

std::string ResponsesStream::fail(const ApiError& e) {
  std::string s = begin();
  s += close_item(false);
  const Json extra = {{"error", {{"code", e.code.empty() ? "server_error" : e.code}, {"message", e.message}}}};
  s += finish_with("response.failed", "failed", dump(extra));
  return s;
}

}  // namespace dsv4::server::api
