// server/api/output_anthropic.cpp — Anthropic response shapes: the error body, the `message`
// object, and the streaming event sequence (message_start, content_block_start/delta/stop,
// message_delta, message_stop, ping, error). Built with ordered_json in the real API's key order.
#include <nlohmann/json.hpp>

#include "server/api/request_json.h"

#include "server/api/output.h"

namespace dsv4::server::api {
namespace {

using Json = nlohmann::ordered_json;

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }
std::string event(const char* name, const Json& data) {
  return std::string("event: ") + name + "\ndata: " + dump(data) + "\n\n";
}

constexpr int kThinking = static_cast<int>(OutputEvent::Kind::kReasoning);
constexpr int kText = static_cast<int>(OutputEvent::Kind::kContent);
constexpr int kTool = static_cast<int>(OutputEvent::Kind::kToolCallBegin);

Json input_object(const std::string& arguments) {
  if (arguments.empty()) return Json::object();
  Json j = Json::parse(arguments, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) return j;
  return {{"arguments", arguments}};
}

Json usage_json(const Usage& u, bool with_output) {
  Json j = {{"input_tokens", u.prompt_tokens - u.cached_tokens},
            {"cache_creation_input_tokens", 0},
            {"cache_read_input_tokens", u.cached_tokens}};
  if (with_output) j["output_tokens"] = u.completion_tokens;
  return j;
}

bool is_anthropic_type(const std::string& t) {
  for (const char* k : {"invalid_request_error", "authentication_error", "permission_error", "not_found_error",
                        "request_too_large", "rate_limit_error", "api_error", "overloaded_error"})
    if (t == k) return true;
  return false;
}

Json error_object(const ApiError& e) {
  std::string type = e.type;
  if (!is_anthropic_type(type)) {
    const int s = e.http_status;
    type = s == 401   ? "authentication_error"
           : s == 403 ? "permission_error"
           : s == 404 ? "not_found_error"
           : s == 413 ? "request_too_large"
           : s == 429 ? "rate_limit_error"
           : s == 503 || s == 529 ? "overloaded_error"
           : s >= 500 ? "api_error"
                      : "invalid_request_error";
  }
  return {{"type", "error"}, {"error", {{"type", type}, {"message", e.message}}}};
}

}  // namespace

std::string anthropic_error_json(const ApiError& e) { return dump(error_object(e)); }

const char* anthropic_stop_reason(FinishReason f, const std::string& stop_sequence) {
  switch (f) {
    case FinishReason::kStop: return stop_sequence.empty() ? "end_turn" : "stop_sequence";
    case FinishReason::kLength: return "max_tokens";
    case FinishReason::kToolCalls: return "tool_use";
    case FinishReason::kCancelled: return "max_tokens";
  }
  return "end_turn";
}

std::string anthropic_message_response_json(const ResponseMeta& meta, const CompletionOutput& out) {
  Json content = Json::array();
  if (!out.reasoning.empty())
    content.push_back({{"type", "thinking"}, {"thinking", out.reasoning}, {"signature", ""}});
  if (!out.content.empty()) content.push_back({{"type", "text"}, {"text", out.content}});
  for (const ToolCallOut& tc : out.tool_calls)
    content.push_back({{"type", "tool_use"}, {"id", tc.id}, {"name", tc.name}, {"input", input_object(tc.arguments)}});
  if (content.empty()) content.push_back({{"type", "text"}, {"text", ""}});
  const bool stopped = out.finish == FinishReason::kStop && !out.stop_sequence.empty();
  Json j = {{"id", meta.id},
            {"type", "message"},
            {"role", "assistant"},
            {"model", meta.model},
            {"content", std::move(content)},
            {"stop_reason", anthropic_stop_reason(out.finish, out.stop_sequence)},
            {"stop_sequence", stopped ? Json(out.stop_sequence) : Json(nullptr)}};
  j["usage"] = usage_json(out.usage, true);
  j["timings"] = timings_json(out.usage);  // vendor extension (llama.cpp style); SDKs keep extras
  return dump(j);
}

AnthropicStream::AnthropicStream(ResponseMeta meta) : meta_(std::move(meta)) {}

std::string AnthropicStream::begin(const Usage& usage) {
  if (begun_) return "";
  begun_ = true;
  Json msg = {{"id", meta_.id},
              {"type", "message"},
              {"role", "assistant"},
              {"model", meta_.model},
              {"content", Json::array()},
              {"stop_reason", nullptr},
              {"stop_sequence", nullptr}};
  Usage u = usage;
  u.completion_tokens = 0;
  msg["usage"] = usage_json(u, true);
  return event("message_start", {{"type", "message_start"}, {"message", std::move(msg)}});
}

std::string AnthropicStream::open_block(int kind, const std::string& block_json) {
  std::string s = close_block();
  ++block_index_;
  open_kind_ = kind;
  if (kind == kTool) ++tool_blocks_;
  Json block = Json::parse(block_json, nullptr, /*allow_exceptions=*/false);
  return s + event("content_block_start",
                   {{"type", "content_block_start"}, {"index", block_index_}, {"content_block", std::move(block)}});
}

std::string AnthropicStream::close_block() {
  if (open_kind_ < 0) return "";
  std::string s;
  if (open_kind_ == kThinking)
    s += event("content_block_delta", {{"type", "content_block_delta"},
                                       {"index", block_index_},
                                       {"delta", {{"type", "signature_delta"}, {"signature", ""}}}});
  s += event("content_block_stop", {{"type", "content_block_stop"}, {"index", block_index_}});
  open_kind_ = -1;
  return s;
}

std::string AnthropicStream::events(const std::vector<OutputEvent>& ev) {
  std::string out = begin(Usage{});
  std::string pending;     // merged text of a run of thinking/text (or argument) events
  const char* pending_type = nullptr;
  auto flush = [&]() {
    if (pending_type == nullptr) return;
    const bool args = std::string(pending_type) == "input_json_delta";
    const char* key = args ? "partial_json" : std::string(pending_type) == "thinking_delta" ? "thinking" : "text";
    out += event("content_block_delta", {{"type", "content_block_delta"},
                                         {"index", block_index_},
                                         {"delta", {{"type", pending_type}, {key, pending}}}});
    pending.clear();
    pending_type = nullptr;
  };
  for (const OutputEvent& e : ev) {
    switch (e.kind) {
      case OutputEvent::Kind::kReasoning:
      case OutputEvent::Kind::kContent: {
        if (e.text.empty()) break;
        const bool thinking = e.kind == OutputEvent::Kind::kReasoning;
        const int kind = thinking ? kThinking : kText;
        if (open_kind_ != kind) {
          flush();
          out += open_block(kind, thinking ? R"({"type":"thinking","thinking":"","signature":""})"
                                           : R"({"type":"text","text":""})");
        }
        pending_type = thinking ? "thinking_delta" : "text_delta";
        pending += e.text;
        break;
      }
      case OutputEvent::Kind::kToolCallBegin: {
        flush();
        Json block = {{"type", "tool_use"}, {"id", e.id}, {"name", e.name}, {"input", Json::object()}};
        out += open_block(kTool, dump(block));
        break;
      }
      case OutputEvent::Kind::kToolCallArguments:
        if (e.text.empty() || open_kind_ != kTool) break;
        pending_type = "input_json_delta";
        pending += e.text;
        break;
      case OutputEvent::Kind::kToolCallEnd:
        flush();
        out += close_block();
        break;
    }
  }
  flush();
  return out;
}

std::string AnthropicStream::finish(const CompletionOutput& out) {
  std::string s = begin(out.usage);
  s += close_block();
  if (block_index_ < 0) {  // nothing was produced: still one (empty) text block, like the JSON response
    s += open_block(kText, R"({"type":"text","text":""})");
    s += close_block();
  }
  const bool stopped = out.finish == FinishReason::kStop && !out.stop_sequence.empty();
  Json delta = {{"stop_reason", anthropic_stop_reason(out.finish, out.stop_sequence)},
                {"stop_sequence", stopped ? Json(out.stop_sequence) : Json(nullptr)}};
  s += event("message_delta",
             {{"type", "message_delta"}, {"delta", std::move(delta)}, {"usage", usage_json(out.usage, true)},
              {"timings", timings_json(out.usage)}});
  s += event("message_stop", {{"type", "message_stop"}});
  return s;
}

std::string AnthropicStream::ping() { return event("ping", {{"type", "ping"}}); }

std::string AnthropicStream::error(const ApiError& e) { return event("error", error_object(e)); }

}  // namespace dsv4::server::api
