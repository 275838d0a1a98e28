// server/api/output_openai.cpp — OpenAI response shapes: error bodies (and Status → ApiError),
// chat.completion and its chat.completion.chunk stream, text_completion and its stream.
// Built with ordered_json so keys appear in the order the real API sends them.
#include <cctype>
#include <cmath>

#include <nlohmann/json.hpp>

#include "server/api/output.h"
#include "server/api/request_json.h"

namespace dsv4::server::api {
namespace {


std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }
std::string sse(const Json& j) { return "data: " + dump(j) + "\n\n"; }
const char* kDone = "data: [DONE]\n\n";

double safe_logprob(double v) { return std::isfinite(v) ? v : -9999.0; }

Json byte_array(const std::string& bytes) {
  Json a = Json::array();
  for (char c : bytes) a.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return a;
}

Json chat_logprobs(const std::vector<TokenLogprobInfo>& lps) {
  Json content = Json::array();
  for (const TokenLogprobInfo& t : lps) {
    Json top = Json::array();
    for (const TopLogprob& tp : t.top)
      top.push_back({{"token", tp.token}, {"logprob", safe_logprob(tp.logprob)}, {"bytes", byte_array(tp.bytes)}});
    content.push_back({{"token", t.token},
                       {"logprob", safe_logprob(t.logprob)},
                       {"bytes", byte_array(t.bytes)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}};
}

int64_t code_points(const std::string& s) {
  int64_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// Legacy completions logprobs; `offset` advances by each token's code points.
Json completion_logprobs(const std::vector<TokenLogprobInfo>& lps, int64_t& offset) {
  Json tokens = Json::array(), token_lps = Json::array(), tops = Json::array(), offsets = Json::array();
  for (const TokenLogprobInfo& t : lps) {
    tokens.push_back(t.token);
    token_lps.push_back(safe_logprob(t.logprob));
    Json top = Json::object();
    for (const TopLogprob& tp : t.top) top[tp.token] = safe_logprob(tp.logprob);
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += code_points(t.token);
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_lps)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

Json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}},
          {"completion_tokens_details", {{"reasoning_tokens", u.reasoning_tokens}}}};
}

Json head(const ResponseMeta& meta, const char* object) {
  return {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

// One chat.completion.chunk; the pending logprobs ride it when `with_logprobs`.
Json chat_chunk(const ResponseMeta& meta, bool include_usage, bool logprobs, std::vector<TokenLogprobInfo>& pending,
                Json delta, const char* finish, bool with_logprobs) {
  Json j = head(meta, "chat.completion.chunk");
  Json choice = {{"index", 0}, {"delta", std::move(delta)}};
  if (logprobs && with_logprobs && !pending.empty()) {
    choice["logprobs"] = chat_logprobs(pending);
    pending.clear();
  } else {
    choice["logprobs"] = nullptr;
  }
  choice["finish_reason"] = finish ? Json(finish) : Json(nullptr);
  j["choices"] = Json::array({std::move(choice)});
  if (include_usage) j["usage"] = nullptr;
  return j;
}

bool is_path_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '[' || c == ']';
}
bool is_path(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!is_path_char(c)) return false;
  return true;
}

std::string param_from_message(const std::string& m) {
  if (size_t colon = m.find(": "); colon != std::string::npos && is_path(m.substr(0, colon)))
    return m.compare(0, colon, "body") == 0 ? std::string() : m.substr(0, colon);
  for (size_t q = m.find('\''); q != std::string::npos;) {
    const size_t e = m.find('\'', q + 1);
    if (e == std::string::npos) break;
    const std::string cand = m.substr(q + 1, e - q - 1);
    if (is_path(cand)) return cand == "body" ? std::string() : cand;
    q = m.find('\'', e + 1);
  }
  return "";
}

}  // namespace

// llama.cpp-style timings: prompt_n counts the prompt tokens actually computed (not reused).
Json timings_json(const Usage& u) {
  const int64_t prompt_n = u.prompt_tokens - u.cached_tokens;
  return {{"prompt_n", prompt_n},
          {"cached_n", u.cached_tokens},
          {"prompt_ms", u.prefill_ms},
          {"prompt_per_second", u.prefill_ms > 0 ? static_cast<double>(prompt_n) / (u.prefill_ms / 1e3) : 0.0},
          {"predicted_n", u.completion_tokens},
          {"predicted_ms", u.decode_ms},
          {"predicted_per_second", u.decode_tokens_per_s}};
}


ApiError api_error_from_status(const Status& s) {
  ApiError e;
  e.message = s.message();
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kUnsupported:
    case StatusCode::kNotFound:
      e.http_status = 400;
      e.type = "invalid_request_error";
      break;
    case StatusCode::kResourceExhausted:
      e.http_status = 400;
      e.type = "invalid_request_error";
      e.code = "context_length_exceeded";
      break;
    case StatusCode::kCancelled:
      e.http_status = 499;
      e.type = "request_cancelled";
      break;
    default:
      e.http_status = 500;
      e.type = "server_error";
      break;
  }
  if (e.http_status >= 400 && e.http_status < 500) e.param = param_from_message(e.message);
  if (e.message.empty()) e.message = status_code_name(s.code());
  return e;
}

std::string openai_error_json(const ApiError& e) {
  Json err = {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? Json(nullptr) : Json(e.param)},
              {"code", e.code.empty() ? Json(nullptr) : Json(e.code)}};
  return dump({{"error", std::move(err)}});
}

const char* openai_finish_reason(FinishReason f) {
  switch (f) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kToolCalls: return "tool_calls";
    case FinishReason::kCancelled: return "length";
  }
  return "stop";
}

// --- chat -----------------------------------------------------------------------------------
std::string openai_chat_response_json(const ResponseMeta& meta, const CompletionOutput& out, bool logprobs) {
  Json msg = {{"role", "assistant"}};
  msg["content"] = out.content.empty() && !out.tool_calls.empty() ? Json(nullptr) : Json(out.content);
  if (!out.reasoning.empty()) msg["reasoning_content"] = out.reasoning;
  if (!out.tool_calls.empty()) {
    Json calls = Json::array();
    for (const ToolCallOut& tc : out.tool_calls)
      calls.push_back(
          {{"id", tc.id}, {"type", "function"}, {"function", {{"name", tc.name}, {"arguments", tc.arguments}}}});
    msg["tool_calls"] = std::move(calls);
  }
  Json choice = {{"index", 0}, {"message", std::move(msg)}};
  choice["logprobs"] = logprobs ? chat_logprobs(out.logprobs) : Json(nullptr);
  choice["finish_reason"] = openai_finish_reason(out.finish);
  Json j = head(meta, "chat.completion");
  j["choices"] = Json::array({std::move(choice)});
  j["usage"] = usage_json(out.usage);
  j["timings"] = timings_json(out.usage);
  return dump(j);
}

OpenAiChatStream::OpenAiChatStream(ResponseMeta meta, bool include_usage, bool logprobs)
    : meta_(std::move(meta)), include_usage_(include_usage), logprobs_(logprobs) {}

std::string OpenAiChatStream::begin() {
  if (begun_) return "";
  begun_ = true;
  return sse(chat_chunk(meta_, include_usage_, logprobs_, pending_lps_, {{"role", "assistant"}, {"content", ""}},
                        nullptr, false));
}

std::string OpenAiChatStream::events(const std::vector<OutputEvent>& ev, const std::vector<TokenLogprobInfo>& lps) {
  std::string out = begin();
  if (logprobs_) pending_lps_.insert(pending_lps_.end(), lps.begin(), lps.end());
  // Merge runs of the same kind (same tool call for argument deltas) into one delta each.
  enum class Run { kNone, kReasoning, kContent, kArgs };
  std::vector<Json> deltas;
  Run last = Run::kNone;
  int last_index = -1;
  for (const OutputEvent& e : ev) {
    switch (e.kind) {
      case OutputEvent::Kind::kReasoning:
      case OutputEvent::Kind::kContent: {
        if (e.text.empty()) break;
        const Run r = e.kind == OutputEvent::Kind::kReasoning ? Run::kReasoning : Run::kContent;
        const char* key = r == Run::kReasoning ? "reasoning_content" : "content";
        if (last == r) {
          deltas.back()[key] = deltas.back()[key].get<std::string>() + e.text;
        } else {
          deltas.push_back({{key, e.text}});
          last = r;
        }
        break;
      }
      case OutputEvent::Kind::kToolCallBegin:
        deltas.push_back({{"tool_calls", Json::array({{{"index", e.index},
                                                       {"id", e.id},
                                                       {"type", "function"},
                                                       {"function", {{"name", e.name}, {"arguments", ""}}}}})}});
        last = Run::kNone;
        break;
      case OutputEvent::Kind::kToolCallArguments: {
        if (e.text.empty()) break;
        if (last == Run::kArgs && last_index == e.index) {
          Json& args = deltas.back()["tool_calls"][0]["function"]["arguments"];
          args = args.get<std::string>() + e.text;
        } else {
          deltas.push_back(
              {{"tool_calls", Json::array({{{"index", e.index}, {"function", {{"arguments", e.text}}}}})}});
          last = Run::kArgs;
          last_index = e.index;
        }
        break;
      }
      case OutputEvent::Kind::kToolCallEnd: break;
    }
  }
  for (size_t i = 0; i < deltas.size(); ++i)
    out += sse(chat_chunk(meta_, include_usage_, logprobs_, pending_lps_, std::move(deltas[i]), nullptr,
                          i + 1 == deltas.size()));
  return out;
}

std::string OpenAiChatStream::finish(const CompletionOutput& out) {
  std::string s = begin();
  Json j = chat_chunk(meta_, include_usage_, logprobs_, pending_lps_, Json::object(), openai_finish_reason(out.finish),
                      true);
  j["timings"] = timings_json(out.usage);
  s += sse(j);
  if (include_usage_) {
    Json u = head(meta_, "chat.completion.chunk");
    u["choices"] = Json::array();
    u["usage"] = usage_json(out.usage);
    s += sse(u);
  }
  return s + kDone;
}

std::string OpenAiChatStream::error(const ApiError& e) { return "data: " + openai_error_json(e) + "\n\n" + kDone; }

// --- completions ------------------------------------------------------------------------------
std::string openai_completion_response_json(const ResponseMeta& meta, const CompletionOutput& out, bool logprobs) {
  int64_t offset = 0;
  Json choice = {{"text", out.content}, {"index", 0}};
  choice["logprobs"] = logprobs ? completion_logprobs(out.logprobs, offset) : Json(nullptr);
  choice["finish_reason"] = openai_finish_reason(out.finish);
  Json j = head(meta, "text_completion");
  j["choices"] = Json::array({std::move(choice)});
  j["usage"] = usage_json(out.usage);
  j["timings"] = timings_json(out.usage);
  return dump(j);
}

OpenAiCompletionStream::OpenAiCompletionStream(ResponseMeta meta, bool include_usage, bool logprobs)
    : meta_(std::move(meta)), include_usage_(include_usage), logprobs_(logprobs) {}

std::string OpenAiCompletionStream::text(const std::string& delta, const std::vector<TokenLogprobInfo>& lps) {
  if (delta.empty() && (lps.empty() || !logprobs_)) return "";
  Json choice = {{"text", delta}, {"index", 0}};
  choice["logprobs"] = logprobs_ ? completion_logprobs(lps, text_offset_) : Json(nullptr);
  choice["finish_reason"] = nullptr;
  Json j = head(meta_, "text_completion");
  j["choices"] = Json::array({std::move(choice)});
  if (include_usage_) j["usage"] = nullptr;
  return sse(j);
}

std::string OpenAiCompletionStream::finish(const CompletionOutput& out) {
  Json choice = {{"text", ""}, {"index", 0}, {"logprobs", nullptr}, {"finish_reason", openai_finish_reason(out.finish)}};
  Json j = head(meta_, "text_completion");
  j["choices"] = Json::array({std::move(choice)});
  if (include_usage_) j["usage"] = nullptr;
  j["timings"] = timings_json(out.usage);
  std::string s = sse(j);
  if (include_usage_) {
    Json u = head(meta_, "text_completion");
    u["choices"] = Json::array();
    u["usage"] = usage_json(out.usage);
    s += sse(u);
  }
  return s + kDone;
}

std::string OpenAiCompletionStream::error(const ApiError& e) {
  return "data: " + openai_error_json(e) + "\n\n" + kDone;
}

}  // namespace dsv4::server::api
