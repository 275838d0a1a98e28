// tests/unit/server_api/responses_test.cpp — /v1/responses: input items → chat messages, tools,
// tool_choice, reasoning.effort → thinking mode, text.format → response_format, refusals; the
// response object and the streaming event sequence.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "parse_test_util.h"
#include "server/api/responses.h"

namespace dsv4::server::api {
namespace {

using testing::parse_err;
using testing::parse_ok;
using J = nlohmann::ordered_json;

ResponsesRequest ok(const std::string& body) { return parse_ok(parse_responses_request, body, body); }
Status err(const std::string& body) { return parse_err(parse_responses_request, body, body); }

TEST(Responses, StringInputIsOneUserMessageAndDefaultsMatchChat) {
  const ResponsesRequest r = ok(R"({"model":"m","input":"hi"})");
  ASSERT_EQ(r.chat.messages.size(), 1u);
  EXPECT_EQ(r.chat.messages[0].role, "user");
  EXPECT_EQ(r.chat.messages[0].content, "hi");
  EXPECT_TRUE(r.chat.thinking);
  EXPECT_EQ(r.chat.reasoning_effort, ReasoningEffort::kHigh);
  EXPECT_TRUE(r.store);
  EXPECT_FALSE(r.instructions);
  EXPECT_FALSE(r.chat.params.max_tokens);
}

TEST(Responses, ItemsBecomeTurnsWithReasoningAndToolCalls) {
  const ResponsesRequest r = ok(R"({"input":[
    {"role":"developer","content":"be brief"},
    {"type":"message","role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]},
    {"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"think"}]},
    {"type":"function_call","call_id":"c1","name":"f","arguments":"{\"x\":1}"},
    {"type":"function_call","call_id":"c2","name":"g","arguments":"{}"},
    {"type":"function_call_output","call_id":"c1","output":"one"},
    {"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"two"}]},
    {"type":"reasoning","summary":[{"type":"summary_text","text":"s"}]},
    {"type":"message","role":"assistant","content":[{"type":"output_text","text":"done"}]}]})");
  const auto& m = r.chat.messages;
  ASSERT_EQ(m.size(), 6u);
  EXPECT_EQ(m[0].role, "developer");
  EXPECT_EQ(m[1].content, "a\n\nb");
  EXPECT_EQ(m[2].role, "assistant");
  EXPECT_EQ(m[2].reasoning_content, "think");
  ASSERT_EQ(m[2].tool_calls.size(), 2u);
  EXPECT_EQ(m[2].tool_calls[0].id, "c1");
  EXPECT_EQ(m[2].tool_calls[1].name, "g");
  EXPECT_EQ(m[3].role, "tool");
  EXPECT_EQ(m[3].tool_call_id, "c1");
  EXPECT_EQ(m[4].content, "two");
  EXPECT_EQ(m[5].role, "assistant");
  EXPECT_EQ(m[5].reasoning_content, "s");
  EXPECT_EQ(m[5].content, "done");
}

TEST(Responses, ToolsToolChoiceReasoningTextFormat) {
  const ResponsesRequest r = ok(R"({"input":"x","instructions":"sys",
    "tools":[{"type":"function","name":"f","description":"d","parameters":{"type":"object","properties":{"b":{},"a":{}}},"strict":true}],
    "tool_choice":{"type":"function","name":"f"},"parallel_tool_calls":false,
    "reasoning":{"effort":"max","summary":"auto"},"max_output_tokens":7,"temperature":0,"top_p":0.5,
    "text":{"format":{"type":"json_schema","name":"o","schema":{"type":"object"},"strict":true}},
    "metadata":{"k":"v"},"user":"u","store":false,"previous_response_id":"resp_1","include":[]})");
  ASSERT_EQ(r.chat.tools.size(), 1u);
  EXPECT_EQ(r.chat.tools[0].function_json,
            R"({"name":"f","description":"d","parameters":{"type":"object","properties":{"b":{},"a":{}}}})");
  EXPECT_EQ(r.chat.tools[0].param_names, (std::vector<std::string>{"b", "a"}));
  EXPECT_EQ(r.chat.tool_choice.kind, ToolChoiceKind::kFunction);
  EXPECT_EQ(r.chat.tool_choice.function_name, "f");
  EXPECT_FALSE(r.chat.parallel_tool_calls);
  EXPECT_EQ(r.chat.reasoning_effort, ReasoningEffort::kMax);
  EXPECT_EQ(*r.chat.params.max_tokens, 7);
  EXPECT_EQ(*r.chat.params.temperature, 0.0);
  EXPECT_EQ(r.chat.response_format_json,
            R"({"type":"json_schema","json_schema":{"name":"o","schema":{"type":"object"},"strict":true}})");
  EXPECT_EQ(*r.instructions, "sys");
  EXPECT_EQ(r.previous_response_id, "resp_1");
  EXPECT_FALSE(r.store);
  EXPECT_EQ(r.metadata_json, R"({"k":"v"})");
  EXPECT_FALSE(ok(R"({"input":"x","reasoning":{"effort":"none"}})").chat.thinking);
  EXPECT_EQ(ok(R"({"input":"x","reasoning":{"effort":"low"}})").chat.reasoning_effort, ReasoningEffort::kHigh);
  EXPECT_EQ(ok(R"({"input":"x","text":{"format":{"type":"json_object"}}})").chat.response_format_json,
            R"({"type":"json_object"})");
}

TEST(Responses, Refusals) {
  EXPECT_ERR(R"({})", kInvalidArgument, "Missing required parameter: 'input'.");
  EXPECT_EQ(err(R"({"input":[]})").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(err(R"({"input":[{"role":"user","content":[{"type":"input_image","image_url":"u"}]}]})").code(),
            StatusCode::kUnsupported);
  EXPECT_EQ(err(R"({"input":[{"type":"item_reference","id":"x"}]})").code(), StatusCode::kUnsupported);
  EXPECT_EQ(err(R"({"input":[{"role":"tool","content":"x"}]})").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(err(R"({"input":"x","tools":[{"type":"web_search"}]})").code(), StatusCode::kUnsupported);
  EXPECT_EQ(err(R"({"input":"x","reasoning":{"effort":"huge"}})").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(err(R"({"input":"x","max_output_tokens":0})").code(), StatusCode::kOutOfRange);
  EXPECT_EQ(err(R"({"input":"x","background":true})").code(), StatusCode::kUnsupported);
  EXPECT_EQ(err(R"({"input":"x","temperature":"hot"})").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(err(R"({"input":[{"type":"function_call_output","output":"x"}]})").code(), StatusCode::kInvalidArgument);
}

ResponsesMeta meta() {
  ResponsesMeta m;
  m.id = "resp_abc";
  m.created_at = 5;
  m.echo.model = "dsv4";
  return m;
}

TEST(Responses, ResponseObjectItemsStatusUsage) {
  CompletionOutput out;
  out.reasoning = "r";
  out.content = "c";
  out.tool_calls = {{"call_1", "f", "{}"}};
  out.finish = FinishReason::kToolCalls;
  out.usage.prompt_tokens = 10;
  out.usage.cached_tokens = 4;
  out.usage.completion_tokens = 3;
  out.usage.reasoning_tokens = 1;
  const J j = J::parse(responses_response_json(meta(), out));
  EXPECT_EQ(j["object"], "response");
  EXPECT_EQ(j["status"], "completed");
  EXPECT_TRUE(j["incomplete_details"].is_null());
  ASSERT_EQ(j["output"].size(), 3u);
  EXPECT_EQ(j["output"][0]["type"], "reasoning");
  EXPECT_EQ(j["output"][0]["id"], "rs_abc_0");
  EXPECT_EQ(j["output"][0]["content"][0]["text"], "r");
  EXPECT_EQ(j["output"][1]["content"][0]["type"], "output_text");
  EXPECT_EQ(j["output"][2]["call_id"], "call_1");
  EXPECT_EQ(j["output"][2]["id"], "fc_abc_2");
  EXPECT_EQ(j["usage"]["input_tokens_details"]["cached_tokens"], 4);
  EXPECT_EQ(j["usage"]["output_tokens_details"]["reasoning_tokens"], 1);
  EXPECT_EQ(j["usage"]["total_tokens"], 13);
  CompletionOutput cut;
  cut.finish = FinishReason::kLength;
  const J k = J::parse(responses_response_json(meta(), cut));
  EXPECT_EQ(k["status"], "incomplete");
  EXPECT_EQ(k["incomplete_details"]["reason"], "max_output_tokens");
  ASSERT_EQ(k["output"].size(), 1u);  // an empty message: output_text always exists
  EXPECT_EQ(k["output"][0]["content"][0]["text"], "");
}

std::vector<J> events_of(const std::string& sse) {
  std::vector<J> out;
  size_t pos = 0;
  while ((pos = sse.find("data: ", pos)) != std::string::npos) {
    const size_t end = sse.find("\n\n", pos);
    out.push_back(J::parse(sse.substr(pos + 6, end - pos - 6)));
    pos = end;
  }
  return out;
}

TEST(Responses, StreamEventSequence) {
  ResponsesStream s(meta());
  std::string sse = s.begin();
  OutputEvent r{OutputEvent::Kind::kReasoning, "th", -1, "", ""};
  OutputEvent c{OutputEvent::Kind::kContent, "hi", -1, "", ""};
  OutputEvent b{OutputEvent::Kind::kToolCallBegin, "", 0, "call_0", "f"};
  OutputEvent a{OutputEvent::Kind::kToolCallArguments, "{}", 0, "", ""};
  OutputEvent e{OutputEvent::Kind::kToolCallEnd, "", 0, "", ""};
  sse += s.events({r, r, c, b, a, e});
  CompletionOutput out;
  out.finish = FinishReason::kToolCalls;
  sse += s.finish(out);
  std::vector<std::string> types;
  const std::vector<J> ev = events_of(sse);
  for (size_t i = 0; i < ev.size(); ++i) {
    types.push_back(ev[i]["type"]);
    EXPECT_EQ(ev[i]["sequence_number"], i);
  }
  EXPECT_EQ(types, (std::vector<std::string>{
                       "response.created", "response.in_progress", "response.output_item.added",
                       "response.content_part.added", "response.reasoning_text.delta", "response.reasoning_text.delta",
                       "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
                       "response.output_item.added", "response.content_part.added", "response.output_text.delta",
                       "response.output_text.done", "response.content_part.done", "response.output_item.done",
                       "response.output_item.added", "response.function_call_arguments.delta",
                       "response.function_call_arguments.done", "response.output_item.done", "response.completed"}));
  const J& fin = ev.back()["response"];
  ASSERT_EQ(fin["output"].size(), 3u);
  EXPECT_EQ(fin["output"][0]["content"][0]["text"], "thth");
  EXPECT_EQ(fin["output"][2]["arguments"], "{}");
  EXPECT_EQ(J::parse(s.final_json()), fin);
}

TEST(Responses, StreamCutInsideACallReportsItIncomplete) {
  ResponsesStream s(meta());
  std::string sse = s.events({{OutputEvent::Kind::kToolCallBegin, "", 0, "call_0", "f"},
                              {OutputEvent::Kind::kToolCallArguments, "{\"a\": ", 0, "", ""}});
  CompletionOutput out;
  out.finish = FinishReason::kLength;
  sse += s.finish(out);
  const std::vector<J> ev = events_of(sse);
  EXPECT_EQ(ev.back()["type"], "response.incomplete");
  EXPECT_EQ(ev.back()["response"]["output"][0]["status"], "incomplete");
  EXPECT_EQ(sse.find("function_call_arguments.done"), std::string::npos);
}

}  // namespace
}  // namespace dsv4::server::api
