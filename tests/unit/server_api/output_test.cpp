// Unit tests for server/api/output: the OpenAI chat/completions and Anthropic message JSON shapes
// (parsed back with nlohmann and compared exactly), the SSE framing and event order of the three
// streams, and Status → ApiError → error bodies.
#include "server/api/output.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace dsv4::server::api {
namespace {

using nlohmann::json;

ResponseMeta meta(const std::string& id) { return {id, "deepseek-v4-flash", 1700000000}; }

Usage usage() {
  Usage u;
  u.prompt_tokens = 100;
  u.cached_tokens = 40;
  u.completion_tokens = 20;
  u.reasoning_tokens = 5;
  u.prefill_ms = 120;
  u.decode_ms = 400;
  u.decode_tokens_per_s = 50;
  return u;
}

OutputEvent ev(OutputEvent::Kind k, std::string text, int index = -1, std::string id = "", std::string name = "") {
  OutputEvent e;
  e.kind = k;
  e.text = std::move(text);
  e.index = index;
  e.id = std::move(id);
  e.name = std::move(name);
  return e;
}
using K = OutputEvent::Kind;

TokenLogprobInfo lp(const std::string& tok, double logprob) {
  TokenLogprobInfo t;
  t.token = tok;
  t.bytes = tok;
  t.logprob = logprob;
  t.top = {{tok, tok, logprob}, {"z", "z", -3.5}};
  return t;
}

// OpenAI SSE: every frame "data: <json>\n\n"; the last is [DONE] when `done`.
std::vector<json> openai_frames(const std::string& sse, bool done) {
  std::vector<json> out;
  size_t pos = 0;
  bool saw_done = false;
  while (pos < sse.size()) {
    const size_t end = sse.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos) << "unterminated frame: " << sse.substr(pos);
    if (end == std::string::npos) break;
    const std::string frame = sse.substr(pos, end - pos);
    pos = end + 2;
    EXPECT_EQ(frame.rfind("data: ", 0), 0u) << frame;
    EXPECT_EQ(frame.find('\n'), std::string::npos) << frame;
    EXPECT_FALSE(saw_done) << "data after [DONE]";
    if (frame == "data: [DONE]") {
      saw_done = true;
      continue;
    }
    out.push_back(json::parse(frame.substr(6)));
  }
  EXPECT_EQ(saw_done, done);
  return out;
}

struct AnthropicEvent {
  std::string name;
  json data;
};
// Anthropic SSE: "event: <name>\ndata: <json>\n\n", and data.type == name.
std::vector<AnthropicEvent> anthropic_frames(const std::string& sse) {
  std::vector<AnthropicEvent> out;
  size_t pos = 0;
  while (pos < sse.size()) {
    const size_t end = sse.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos);
    if (end == std::string::npos) break;
    const std::string frame = sse.substr(pos, end - pos);
    pos = end + 2;
    const size_t nl = frame.find('\n');
    EXPECT_EQ(frame.rfind("event: ", 0), 0u) << frame;
    EXPECT_EQ(frame.compare(nl + 1, 6, "data: "), 0) << frame;
    AnthropicEvent e{frame.substr(7, nl - 7), json::parse(frame.substr(nl + 7))};
    EXPECT_EQ(e.data["type"], e.name);
    out.push_back(std::move(e));
  }
  return out;
}

// --- errors -------------------------------------------------------------------------------
TEST(Output, ApiErrorFromStatus) {
  ApiError e = api_error_from_status(invalid_argument("Invalid value for 'messages[0].role': 'robot'. Supported…"));
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.type, "invalid_request_error");
  EXPECT_EQ(e.param, "messages[0].role");
  EXPECT_EQ(e.code, "");
  EXPECT_EQ(api_error_from_status(unsupported("Unsupported parameter: 'audio': no")).param, "audio");
  EXPECT_EQ(api_error_from_status(out_of_range("x")).http_status, 400);
  EXPECT_EQ(api_error_from_status(not_found("x")).http_status, 400);
  EXPECT_EQ(api_error_from_status(invalid_argument("messages.0.role: Input should be 'user'")).param, "messages.0.role");
  EXPECT_EQ(api_error_from_status(invalid_argument("Invalid type for 'body': expected an object")).param, "");
  EXPECT_EQ(api_error_from_status(invalid_argument("body: Input should be a valid dictionary")).param, "");
  EXPECT_EQ(api_error_from_status(invalid_argument("We could not parse the JSON body of your request. (x)")).param, "");
  ApiError ctx = api_error_from_status(resource_exhausted("too long"));
  EXPECT_EQ(ctx.http_status, 400);
  EXPECT_EQ(ctx.code, "context_length_exceeded");
  EXPECT_EQ(api_error_from_status(Status(StatusCode::kCancelled, "gone")).http_status, 499);
  ApiError internal = api_error_from_status(internal_error("boom 'x'"));
  EXPECT_EQ(internal.http_status, 500);
  EXPECT_EQ(internal.type, "server_error");
  EXPECT_EQ(internal.param, "");
}

TEST(Output, ErrorBodies) {
  ApiError e;
  e.message = "bad";
  e.param = "temperature";
  EXPECT_EQ(json::parse(openai_error_json(e)),
            json::parse(R"({"error":{"message":"bad","type":"invalid_request_error","param":"temperature","code":null}})"));
  e.param.clear();
  e.code = "context_length_exceeded";
  EXPECT_EQ(json::parse(openai_error_json(e))["error"]["param"], nullptr);
  EXPECT_EQ(json::parse(openai_error_json(e))["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(json::parse(anthropic_error_json(e)),
            json::parse(R"({"type":"error","error":{"type":"invalid_request_error","message":"bad"}})"));
  const std::pair<int, const char*> statuses[] = {{401, "authentication_error"}, {403, "permission_error"},
                                                  {404, "not_found_error"},      {413, "request_too_large"},
                                                  {429, "rate_limit_error"},     {500, "api_error"},
                                                  {503, "overloaded_error"},     {499, "invalid_request_error"}};
  for (const auto& [status, type] : statuses) {
    const ApiError s{status, std::string("server_error"), std::string("m"), {}, {}};
    EXPECT_EQ(json::parse(anthropic_error_json(s))["error"]["type"], type) << status;
  }
  ApiError keep;
  keep.http_status = 429;
  keep.type = "overloaded_error";
  EXPECT_EQ(json::parse(anthropic_error_json(keep))["error"]["type"], "overloaded_error");
}

// --- OpenAI chat -------------------------------------------------------------------------
TEST(Output, ChatResponseExactShape) {
  CompletionOutput out;
  out.reasoning = "think";
  out.content = "Hello";
  out.finish = FinishReason::kStop;
  out.usage = usage();
  json j = json::parse(openai_chat_response_json(meta("chatcmpl-1"), out, false));
  json expected = json::parse(R"({
    "id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"deepseek-v4-flash",
    "choices":[{"index":0,"message":{"role":"assistant","content":"Hello","reasoning_content":"think"},
                "logprobs":null,"finish_reason":"stop"}],
    "usage":{"prompt_tokens":100,"completion_tokens":20,"total_tokens":120,
             "prompt_tokens_details":{"cached_tokens":40},"completion_tokens_details":{"reasoning_tokens":5}},
    "timings":{"prompt_n":60,"cached_n":40,"prompt_ms":120.0,"prompt_per_second":500.0,"predicted_n":20,
               "predicted_ms":400.0,"predicted_per_second":50.0}})");
  EXPECT_EQ(j, expected) << j.dump(2);
}

TEST(Output, ChatResponseToolCallsAndLogprobs) {
  CompletionOutput out;
  out.tool_calls = {{"call_1", "get_weather", R"({"city":"Paris"})"}};
  out.finish = FinishReason::kToolCalls;
  out.logprobs = {lp("é", -0.25)};
  json j = json::parse(openai_chat_response_json(meta("c"), out, true));
  const json& m = j["choices"][0]["message"];
  EXPECT_TRUE(m["content"].is_null());
  EXPECT_FALSE(m.contains("reasoning_content"));
  EXPECT_EQ(m["tool_calls"], json::parse(R"([{"id":"call_1","type":"function",
                                               "function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}])"));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(j["choices"][0]["logprobs"], json::parse(R"({"content":[{"token":"é","logprob":-0.25,"bytes":[195,169],
      "top_logprobs":[{"token":"é","logprob":-0.25,"bytes":[195,169]},{"token":"z","logprob":-3.5,"bytes":[122]}]}]})"));
  // No tool calls: content stays a string even when empty; kCancelled reads as "length".
  CompletionOutput empty;
  empty.finish = FinishReason::kCancelled;
  json e = json::parse(openai_chat_response_json(meta("c"), empty, false));
  EXPECT_EQ(e["choices"][0]["message"], json::parse(R"({"role":"assistant","content":""})"));
  EXPECT_EQ(e["choices"][0]["finish_reason"], "length");
  // A non-finite logprob prints as -9999.0.
  CompletionOutput inf;
  inf.logprobs = {lp("a", -std::numeric_limits<double>::infinity())};
  json i = json::parse(openai_chat_response_json(meta("c"), inf, true));
  EXPECT_EQ(i["choices"][0]["logprobs"]["content"][0]["logprob"], -9999.0);
}

TEST(Output, InvalidUtf8InOutputIsReplacedNotThrown) {
  CompletionOutput out;
  out.content = "a\xff";
  out.tool_calls = {{"t", "f", "{\"k\":\"\xc3\"}"}};
  EXPECT_EQ(json::parse(openai_chat_response_json(meta("c"), out, false))["choices"][0]["message"]["content"],
            "a\xef\xbf\xbd");
  json a = json::parse(anthropic_message_response_json(meta("m"), out));
  EXPECT_EQ(a["content"][0]["text"], "a\xef\xbf\xbd");
  EXPECT_EQ(a["content"][1]["input"], json::parse(R"({"arguments":"{\"k\":\"\ufffd\"}"})"));
  AnthropicStream s(meta("m"));
  EXPECT_FALSE(anthropic_frames(s.events({ev(K::kToolCallBegin, "", 0, "t\xff", "f")})).empty());
}

TEST(Output, ChatStreamSequence) {
  OpenAiChatStream s(meta("chatcmpl-9"), /*include_usage=*/true, /*logprobs=*/false);
  std::string sse = s.begin();
  sse += s.events({ev(K::kReasoning, "Let "), ev(K::kReasoning, "me"), ev(K::kContent, "Hi"), ev(K::kContent, "!")}, {});
  sse += s.events({ev(K::kToolCallBegin, "", 0, "call_0", "f"), ev(K::kToolCallArguments, "{\"a\"", 0),
                   ev(K::kToolCallArguments, ":1}", 0), ev(K::kToolCallEnd, "", 0)},
                  {});
  sse += s.events({}, {});  // nothing → no frame
  CompletionOutput out;
  out.finish = FinishReason::kToolCalls;
  out.usage = usage();
  sse += s.finish(out);
  std::vector<json> f = openai_frames(sse, true);
  ASSERT_EQ(f.size(), 7u);
  for (const json& c : f) {
    EXPECT_EQ(c["id"], "chatcmpl-9");
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    EXPECT_EQ(c["created"], 1700000000);
    EXPECT_EQ(c["model"], "deepseek-v4-flash");
  }
  auto choice = [&](size_t i) { return f[i]["choices"][0]; };
  EXPECT_EQ(choice(0), json::parse(R"({"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null})"));
  EXPECT_TRUE(f[0].contains("usage") && f[0]["usage"].is_null());
  EXPECT_EQ(choice(1)["delta"], json::parse(R"({"reasoning_content":"Let me"})"));
  EXPECT_EQ(choice(2)["delta"], json::parse(R"({"content":"Hi!"})"));
  EXPECT_EQ(choice(3)["delta"], json::parse(R"({"tool_calls":[{"index":0,"id":"call_0","type":"function",
                                                  "function":{"name":"f","arguments":""}}]})"));
  EXPECT_EQ(choice(4)["delta"], json::parse(R"({"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":1}"}}]})"));
  EXPECT_EQ(choice(5)["delta"], json::object());
  EXPECT_EQ(choice(5)["finish_reason"], "tool_calls");
  EXPECT_EQ(f[5]["timings"]["predicted_n"], 20);
  EXPECT_TRUE(f[5]["usage"].is_null());
  EXPECT_EQ(f[6]["choices"], json::array());
  EXPECT_EQ(f[6]["usage"]["total_tokens"], 120);
  EXPECT_EQ(f[6]["usage"]["prompt_tokens_details"]["cached_tokens"], 40);
}

TEST(Output, ChatStreamWithoutUsageAndOrderKept) {
  OpenAiChatStream s(meta("c"), false, false);
  // No begin(): the first events() emits the role chunk itself. Interleaving keeps its order.
  std::string sse = s.events({ev(K::kContent, "a"), ev(K::kReasoning, "b"), ev(K::kContent, "c")}, {});
  CompletionOutput out;
  sse += s.finish(out);
  std::vector<json> f = openai_frames(sse, true);
  ASSERT_EQ(f.size(), 5u);
  EXPECT_EQ(f[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(f[1]["choices"][0]["delta"], json::parse(R"({"content":"a"})"));
  EXPECT_EQ(f[2]["choices"][0]["delta"], json::parse(R"({"reasoning_content":"b"})"));
  EXPECT_EQ(f[3]["choices"][0]["delta"], json::parse(R"({"content":"c"})"));
  EXPECT_EQ(f[4]["choices"][0]["finish_reason"], "stop");
  for (const json& c : f) EXPECT_FALSE(c.contains("usage"));
  EXPECT_EQ(s.begin(), "");  // begun already
}

TEST(Output, ChatStreamTwoToolCallsSeparateIndices) {
  OpenAiChatStream s(meta("c"), false, false);
  std::string sse = s.begin();
  sse += s.events({ev(K::kToolCallBegin, "", 0, "call_0", "f"), ev(K::kToolCallArguments, "{}", 0),
                   ev(K::kToolCallEnd, "", 0), ev(K::kToolCallBegin, "", 1, "call_1", "g"),
                   ev(K::kToolCallArguments, "{\"x\":", 1), ev(K::kToolCallArguments, "2}", 1)},
                  {});
  std::vector<json> f = openai_frames(sse, false);
  ASSERT_EQ(f.size(), 5u);
  EXPECT_EQ(f[2]["choices"][0]["delta"]["tool_calls"][0], json::parse(R"({"index":0,"function":{"arguments":"{}"}})"));
  EXPECT_EQ(f[3]["choices"][0]["delta"]["tool_calls"][0]["id"], "call_1");
  EXPECT_EQ(f[3]["choices"][0]["delta"]["tool_calls"][0]["index"], 1);
  EXPECT_EQ(f[4]["choices"][0]["delta"]["tool_calls"][0], json::parse(R"({"index":1,"function":{"arguments":"{\"x\":2}"}})"));
}

TEST(Output, ChatStreamLogprobs) {
  OpenAiChatStream s(meta("c"), false, true);
  std::string sse = s.begin();
  sse += s.events({ev(K::kContent, "He"), ev(K::kContent, "llo")}, {lp("He", -0.1), lp("llo", -0.2)});
  sse += s.events({}, {lp("</think>", -0.3)});  // no visible text: carried to the next chunk
  sse += s.events({ev(K::kContent, "!")}, {lp("!", -0.4)});
  sse += s.events({}, {lp("x", -0.5)});  // carried to the finish chunk
  sse += s.finish(CompletionOutput{});
  std::vector<json> f = openai_frames(sse, true);
  ASSERT_EQ(f.size(), 4u);
  EXPECT_TRUE(f[0]["choices"][0]["logprobs"].is_null());
  const json& a = f[1]["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0]["token"], "He");
  EXPECT_EQ(a[1]["bytes"], json::parse("[108,108,111]"));
  ASSERT_EQ(f[2]["choices"][0]["logprobs"]["content"].size(), 2u);
  EXPECT_EQ(f[2]["choices"][0]["logprobs"]["content"][0]["token"], "</think>");
  EXPECT_EQ(f[3]["choices"][0]["logprobs"]["content"][0]["token"], "x");
}

TEST(Output, ChatStreamError) {
  OpenAiChatStream s(meta("c"), true, false);
  ApiError e;
  e.http_status = 500;
  e.type = "server_error";
  e.message = "engine failed";
  std::vector<json> f = openai_frames(s.error(e), true);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0], json::parse(R"({"error":{"message":"engine failed","type":"server_error","param":null,"code":null}})"));
}

// --- OpenAI completions ------------------------------------------------------------------
TEST(Output, CompletionResponseExactShape) {
  CompletionOutput out;
  out.content = "Once upon a time";
  out.finish = FinishReason::kLength;
  out.usage = usage();
  json j = json::parse(openai_completion_response_json(meta("cmpl-1"), out, false));
  EXPECT_EQ(j["id"], "cmpl-1");
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "deepseek-v4-flash");
  EXPECT_EQ(j["choices"], json::parse(R"([{"text":"Once upon a time","index":0,"logprobs":null,"finish_reason":"length"}])"));
  EXPECT_EQ(j["usage"]["prompt_tokens"], 100);
  EXPECT_EQ(j["usage"]["completion_tokens"], 20);
  EXPECT_EQ(j["usage"]["total_tokens"], 120);
  EXPECT_TRUE(j.contains("timings"));
  out.logprobs = {lp("Once", -0.5), lp(" é", -1.0)};
  json l = json::parse(openai_completion_response_json(meta("cmpl-1"), out, true));
  EXPECT_EQ(l["choices"][0]["logprobs"], json::parse(R"({"tokens":["Once"," é"],"token_logprobs":[-0.5,-1.0],
      "top_logprobs":[{"Once":-0.5,"z":-3.5},{" é":-1.0,"z":-3.5}],"text_offset":[0,4]})"));
}

TEST(Output, CompletionStream) {
  OpenAiCompletionStream s(meta("cmpl-2"), true, true);
  std::string sse = s.text("Hel", {lp("Hel", -0.1)});
  sse += s.text("", {});  // nothing
  sse += s.text("lo", {lp("lo", -0.2)});
  CompletionOutput out;
  out.finish = FinishReason::kStop;
  out.usage = usage();
  sse += s.finish(out);
  std::vector<json> f = openai_frames(sse, true);
  ASSERT_EQ(f.size(), 4u);
  EXPECT_EQ(f[0]["object"], "text_completion");
  EXPECT_EQ(f[0]["choices"][0]["text"], "Hel");
  EXPECT_TRUE(f[0]["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(f[0]["usage"].is_null());
  EXPECT_EQ(f[1]["choices"][0]["logprobs"]["text_offset"], json::parse("[3]"));  // continues across chunks
  EXPECT_EQ(f[2]["choices"][0]["text"], "");
  EXPECT_EQ(f[2]["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(f[3]["choices"], json::array());
  EXPECT_EQ(f[3]["usage"]["total_tokens"], 120);
  OpenAiCompletionStream plain(meta("c"), false, false);
  std::vector<json> p = openai_frames(plain.text("x", {lp("x", -1)}) + plain.finish(out), true);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_TRUE(p[0]["choices"][0]["logprobs"].is_null());
  EXPECT_FALSE(p[0].contains("usage"));
  EXPECT_EQ(openai_frames(plain.error(ApiError{}), true).size(), 1u);
}

// --- Anthropic ---------------------------------------------------------------------------
TEST(Output, AnthropicMessageExactShape) {
  CompletionOutput out;
  out.reasoning = "hmm";
  out.content = "Let me check.";
  out.tool_calls = {{"toolu_1", "get_weather", R"({"city":"Paris","days":[1,2]})"}};
  out.finish = FinishReason::kToolCalls;
  out.usage = usage();
  json j = json::parse(anthropic_message_response_json(meta("msg_1"), out));
  json expected = json::parse(R"({
    "id":"msg_1","type":"message","role":"assistant","model":"deepseek-v4-flash",
    "content":[{"type":"thinking","thinking":"hmm","signature":""},
               {"type":"text","text":"Let me check."},
               {"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris","days":[1,2]}}],
    "stop_reason":"tool_use","stop_sequence":null,
    "usage":{"input_tokens":60,"cache_creation_input_tokens":0,"cache_read_input_tokens":40,"output_tokens":20},
    "timings":{"prompt_n":60,"cached_n":40,"prompt_ms":120.0,"prompt_per_second":500.0,"predicted_n":20,"predicted_ms":400.0,"predicted_per_second":50.0}})");
  EXPECT_EQ(j, expected) << j.dump(2);
}

TEST(Output, AnthropicStopReasons) {
  auto stop = [](FinishReason f, const std::string& seq) {
    CompletionOutput out;
    out.content = "x";
    out.finish = f;
    out.stop_sequence = seq;
    return json::parse(anthropic_message_response_json(meta("m"), out));
  };
  EXPECT_EQ(stop(FinishReason::kStop, "")["stop_reason"], "end_turn");
  EXPECT_TRUE(stop(FinishReason::kStop, "")["stop_sequence"].is_null());
  EXPECT_EQ(stop(FinishReason::kStop, "END")["stop_reason"], "stop_sequence");
  EXPECT_EQ(stop(FinishReason::kStop, "END")["stop_sequence"], "END");
  EXPECT_EQ(stop(FinishReason::kLength, "")["stop_reason"], "max_tokens");
  EXPECT_EQ(stop(FinishReason::kCancelled, "")["stop_reason"], "max_tokens");
  // Nothing produced → one empty text block; odd arguments → {"arguments": text} / {}.
  CompletionOutput empty;
  EXPECT_EQ(json::parse(anthropic_message_response_json(meta("m"), empty))["content"],
            json::parse(R"([{"type":"text","text":""}])"));
  CompletionOutput odd;
  odd.tool_calls = {{"t1", "f", "not json"}, {"t2", "g", ""}};
  json o = json::parse(anthropic_message_response_json(meta("m"), odd));
  EXPECT_EQ(o["content"][0]["input"], json::parse(R"({"arguments":"not json"})"));
  EXPECT_EQ(o["content"][1]["input"], json::object());
}

TEST(Output, AnthropicStreamSequence) {
  AnthropicStream s(meta("msg_7"));
  Usage start;
  start.prompt_tokens = 100;
  std::string sse = s.begin(start);
  sse += s.ping();
  sse += s.events({ev(K::kReasoning, "a"), ev(K::kReasoning, "b"), ev(K::kContent, "Hi")});
  sse += s.events({ev(K::kContent, " there"), ev(K::kToolCallBegin, "", 0, "toolu_x", "f"),
                   ev(K::kToolCallArguments, "{\"q\":", 0), ev(K::kToolCallArguments, "1}", 0),
                   ev(K::kToolCallEnd, "", 0)});
  CompletionOutput out;
  out.finish = FinishReason::kToolCalls;
  out.usage = usage();
  sse += s.finish(out);
  std::vector<AnthropicEvent> e = anthropic_frames(sse);
  std::vector<std::string> names;
  for (const auto& x : e) names.push_back(x.name);
  EXPECT_EQ(names, (std::vector<std::string>{"message_start", "ping", "content_block_start", "content_block_delta",
                                             "content_block_delta", "content_block_stop", "content_block_start",
                                             "content_block_delta", "content_block_delta", "content_block_stop",
                                             "content_block_start", "content_block_delta", "content_block_stop",
                                             "message_delta", "message_stop"}));
  EXPECT_EQ(e[0].data, json::parse(R"({"type":"message_start","message":{"id":"msg_7","type":"message",
      "role":"assistant","model":"deepseek-v4-flash","content":[],"stop_reason":null,"stop_sequence":null,
      "usage":{"input_tokens":100,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}})"));
  EXPECT_EQ(e[2].data, json::parse(R"({"type":"content_block_start","index":0,
      "content_block":{"type":"thinking","thinking":"","signature":""}})"));
  EXPECT_EQ(e[3].data, json::parse(R"({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"ab"}})"));
  EXPECT_EQ(e[4].data, json::parse(R"({"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":""}})"));
  EXPECT_EQ(e[5].data, json::parse(R"({"type":"content_block_stop","index":0})"));
  EXPECT_EQ(e[6].data, json::parse(R"({"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}})"));
  EXPECT_EQ(e[7].data["delta"], json::parse(R"({"type":"text_delta","text":"Hi"})"));
  EXPECT_EQ(e[8].data["delta"], json::parse(R"({"type":"text_delta","text":" there"})"));
  EXPECT_EQ(e[9].data, json::parse(R"({"type":"content_block_stop","index":1})"));
  EXPECT_EQ(e[10].data, json::parse(R"({"type":"content_block_start","index":2,
      "content_block":{"type":"tool_use","id":"toolu_x","name":"f","input":{}}})"));
  EXPECT_EQ(e[11].data, json::parse(R"({"type":"content_block_delta","index":2,
      "delta":{"type":"input_json_delta","partial_json":"{\"q\":1}"}})"));
  EXPECT_EQ(e[12].data, json::parse(R"({"type":"content_block_stop","index":2})"));
  EXPECT_EQ(e[13].data, json::parse(R"({"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},
      "usage":{"input_tokens":60,"cache_creation_input_tokens":0,"cache_read_input_tokens":40,"output_tokens":20},
      "timings":{"prompt_n":60,"cached_n":40,"prompt_ms":120.0,"prompt_per_second":500.0,"predicted_n":20,"predicted_ms":400.0,"predicted_per_second":50.0}})"));
  EXPECT_EQ(e[14].data, json::parse(R"({"type":"message_stop"})"));
}

TEST(Output, AnthropicStreamClosesOpenBlockAndEmptyOutput) {
  AnthropicStream s(meta("m"));
  std::string sse = s.begin(Usage{}) + s.events({ev(K::kContent, "partial")});
  CompletionOutput out;
  out.finish = FinishReason::kStop;
  out.stop_sequence = "END";
  sse += s.finish(out);
  std::vector<AnthropicEvent> e = anthropic_frames(sse);
  ASSERT_EQ(e.size(), 6u);
  EXPECT_EQ(e[3].name, "content_block_stop");
  EXPECT_EQ(e[4].data["delta"], json::parse(R"({"stop_reason":"stop_sequence","stop_sequence":"END"})"));

  AnthropicStream empty(meta("m"));  // no begin(), no events: still a well-formed message
  std::vector<AnthropicEvent> z = anthropic_frames(empty.finish(CompletionOutput{}));
  std::vector<std::string> names;
  for (const auto& x : z) names.push_back(x.name);
  EXPECT_EQ(names, (std::vector<std::string>{"message_start", "content_block_start", "content_block_stop",
                                             "message_delta", "message_stop"}));
  EXPECT_EQ(z[1].data["content_block"], json::parse(R"({"type":"text","text":""})"));
}

TEST(Output, AnthropicStreamError) {
  AnthropicStream s(meta("m"));
  ApiError e;
  e.http_status = 503;
  e.type = "server_error";
  e.message = "overloaded";
  std::vector<AnthropicEvent> f = anthropic_frames(s.error(e));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].name, "error");
  EXPECT_EQ(f[0].data, json::parse(R"({"type":"error","error":{"type":"overloaded_error","message":"overloaded"}})"));
}

}  // namespace
}  // namespace dsv4::server::api
