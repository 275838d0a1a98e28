// Unit tests for server/api/openai_chat: request parsing, thinking controls and error messages.
#include "server/api/openai_chat.h"

#include <gtest/gtest.h>

namespace dsv4::server::api {
namespace {

ChatCompletionRequest ok(const std::string& body) {
  auto r = parse_chat_completion_request(body);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? r.value() : ChatCompletionRequest{};
}

std::string err(const std::string& body) {
  auto r = parse_chat_completion_request(body);
  EXPECT_FALSE(r.ok()) << body;
  return r.ok() ? std::string() : r.status().message();
}

TEST(OpenAiChat, BasicMessagesAndDefaults) {
  auto r = ok(R"({"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"hi"}]})");
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1].role, "user");
  EXPECT_EQ(r.messages[1].content, "hi");
  EXPECT_TRUE(r.thinking);
  EXPECT_EQ(r.reasoning_effort, ReasoningEffort::kHigh);
  EXPECT_TRUE(r.response_format_json.empty());
}

TEST(OpenAiChat, ContentPartsJoined) {
  auto r = ok(R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]})");
  EXPECT_EQ(r.messages[0].content, "a\n\nb");
  EXPECT_NE(err(R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})")
                .find("'messages[0].content[0].type': 'image_url'"),
            std::string::npos);
}

TEST(OpenAiChat, ToolsKeepKeyOrderAndToolCalls) {
  auto r = ok(R"({"messages":[{"role":"user","content":"q"},
      {"role":"assistant","content":null,"reasoning_content":"r","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},
      {"role":"tool","tool_call_id":"c1","content":"res"}],
    "tools":[{"type":"function","function":{"name":"f","parameters":{"z":1,"a":2}}}],
    "tool_choice":{"type":"function","function":{"name":"f"}}})");
  ASSERT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.tools[0].function_json, R"({"name":"f","parameters":{"z":1,"a":2}})");
  EXPECT_EQ(r.messages[1].content, "");
  EXPECT_EQ(r.messages[1].reasoning_content, "r");
  ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments, R"({"x":1})");
  EXPECT_EQ(r.messages[2].tool_call_id, "c1");
  EXPECT_EQ(r.tool_choice.kind, ToolChoiceKind::kFunction);
  EXPECT_EQ(r.tool_choice.function_name, "f");
}

TEST(OpenAiChat, ThinkingControls) {
  const std::string m = R"("messages":[{"role":"user","content":"q"}])";
  EXPECT_FALSE(ok("{" + m + R"(,"thinking":{"type":"disabled"}})").thinking);
  EXPECT_FALSE(ok("{" + m + R"(,"reasoning_effort":"none"})").thinking);
  EXPECT_FALSE(ok("{" + m + R"(,"chat_template_kwargs":{"thinking":false}})").thinking);
  auto mx = ok("{" + m + R"(,"reasoning_effort":"max"})");
  EXPECT_TRUE(mx.thinking);
  EXPECT_EQ(mx.reasoning_effort, ReasoningEffort::kMax);
  EXPECT_EQ(ok("{" + m + R"(,"reasoning_effort":"medium"})").reasoning_effort, ReasoningEffort::kHigh);
  EXPECT_EQ(ok("{" + m + R"(,"chat_template_kwargs":{"reasoning_effort":"max"}})").reasoning_effort,
            ReasoningEffort::kMax);
  // Thinking off wins over an effort level (the official encoder adds the max prompt only when thinking).
  auto off_max = ok("{" + m + R"(,"thinking":{"type":"disabled"},"reasoning_effort":"max"})");
  EXPECT_FALSE(off_max.thinking);
  EXPECT_FALSE(ok("{" + m + R"(,"reasoning_effort":"max","chat_template_kwargs":{"enable_thinking":false}})").thinking);
  // Switches that disagree, or two different levels, are still an error.
  EXPECT_NE(err("{" + m + R"(,"thinking":{"type":"enabled"},"reasoning_effort":"none"})").find("Conflicting"),
            std::string::npos);
  EXPECT_NE(err("{" + m + R"(,"reasoning_effort":"max","chat_template_kwargs":{"reasoning_effort":"low"}})")
                .find("different reasoning efforts"),
            std::string::npos);
  EXPECT_NE(err("{" + m + R"(,"thinking":{"type":"maybe"}})").find("'thinking.type': 'maybe'"), std::string::npos);
  EXPECT_NE(err("{" + m + R"(,"reasoning_effort":3})").find("'reasoning_effort': expected a string"),
            std::string::npos);
}

TEST(OpenAiChat, ResponseFormat) {
  const std::string m = R"("messages":[{"role":"user","content":"q"}])";
  EXPECT_TRUE(ok("{" + m + R"(,"response_format":{"type":"text"}})").response_format_json.empty());
  EXPECT_EQ(ok("{" + m + R"(,"response_format":{"type":"json_object"}})").response_format_json,
            R"({"type":"json_object"})");
  EXPECT_NE(err("{" + m + R"(,"response_format":{"type":"json_schema"}})").find("response_format.json_schema"),
            std::string::npos);
  EXPECT_NE(err("{" + m + R"(,"response_format":{"type":"xml"}})").find("'response_format.type': 'xml'"),
            std::string::npos);
}

TEST(OpenAiChat, Errors) {
  EXPECT_NE(err("{not json").find("could not parse the JSON body"), std::string::npos);
  EXPECT_NE(err("[1]").find("'body': expected an object"), std::string::npos);
  EXPECT_NE(err("{}").find("Missing required parameter: 'messages'"), std::string::npos);
  EXPECT_NE(err(R"({"messages":{}})").find("'messages': expected an array, but got an object"), std::string::npos);
  EXPECT_NE(err(R"({"messages":[]})").find("empty array"), std::string::npos);
  EXPECT_NE(err(R"({"messages":[{"role":"robot","content":"x"}]})").find("'messages[0].role': 'robot'"),
            std::string::npos);
  EXPECT_NE(err(R"({"messages":[{"content":"x"}]})").find("'messages[0].role'"), std::string::npos);
  EXPECT_NE(err(R"({"messages":[{"role":"user","content":5}]})").find("'messages[0].content': expected a string or"),
            std::string::npos);
  EXPECT_NE(err(R"({"messages":[{"role":"user"}]})").find("Missing required parameter: 'messages[0].content'"),
            std::string::npos);
  EXPECT_NE(err(R"({"messages":[{"role":"tool","content":"x"}]})").find("'messages[0].tool_call_id'"),
            std::string::npos);
  EXPECT_NE(err(R"({"messages":[{"role":"user","content":"x","tool_calls":[]}]})").find("only allowed on assistant"),
            std::string::npos);
  EXPECT_NE(err(R"({"messages":[{"role":"assistant","content":"x","tool_calls":[{"function":{"name":"f","arguments":{}}}]}]})")
                .find("'messages[0].tool_calls[0].function.arguments': expected a string"),
            std::string::npos);
  EXPECT_NE(err(R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]})")
                .find("Missing required parameter: 'tools[0].function'"),
            std::string::npos);
  EXPECT_NE(err(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"sometimes"})").find("'tool_choice'"),
            std::string::npos);
  EXPECT_NE(err(R"({"messages":[{"role":"user","content":"x"}],"max_tokens":1.5})").find("'max_tokens'"),
            std::string::npos);
}

}  // namespace
}  // namespace dsv4::server::api
