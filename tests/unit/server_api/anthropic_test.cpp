// Unit tests for server/api/anthropic: the /v1/messages → ChatCompletionRequest mapping (system,
// tool_result/tool_use blocks, thinking, tools, tool_choice, sampling) and its Anthropic-style
// errors, each with its exact StatusCode and message.
#include "server/api/anthropic.h"

#include <gtest/gtest.h>

#include "parse_test_util.h"

#include "server/api/output.h"

namespace dsv4::server::api {
namespace {

const std::string kUser = R"("messages":[{"role":"user","content":"hi"}])";

std::string body_with(const std::string& fields) { return "{" + fields + "}"; }

ChatCompletionRequest ok(const std::string& body) {
  return testing::parse_ok(parse_anthropic_messages_request, body, body);
}

Status err(const std::string& body) { return testing::parse_err(parse_anthropic_messages_request, body, body); }

// A body with max_tokens and the standard user message plus `extra` fields.
std::string with(const std::string& extra) {
  return body_with(R"("model":"claude","max_tokens":64,)" + kUser + (extra.empty() ? "" : "," + extra));
}

TEST(Anthropic, MinimalRequest) {
  auto r = ok(with(""));
  EXPECT_EQ(r.model, "claude");
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].role, "user");
  EXPECT_EQ(r.messages[0].content, "hi");
  EXPECT_EQ(*r.params.max_tokens, 64);
  EXPECT_EQ(*r.max_tokens, 64);
  EXPECT_TRUE(r.thinking);  // DeepSeek's Anthropic route thinks by default
  EXPECT_EQ(r.reasoning_effort, ReasoningEffort::kHigh);
  EXPECT_FALSE(r.stream);
  EXPECT_TRUE(r.tools.empty());
}

TEST(Anthropic, SystemAndSampling) {
  auto r = ok(with(R"("system":[{"type":"text","text":"A","cache_control":{"type":"ephemeral"}},{"type":"text","text":"B"}],
      "temperature":0.5,"top_p":0.9,"top_k":20,"stop_sequences":["\n\nHuman:"],"stream":true,
      "metadata":{"user_id":"u"},"unknown_extra":1)"));
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[0].content, "A\n\nB");
  EXPECT_DOUBLE_EQ(*r.params.temperature, 0.5);
  EXPECT_DOUBLE_EQ(*r.params.top_p, 0.9);
  EXPECT_EQ(*r.params.top_k, 20);
  EXPECT_EQ(r.params.stop, (std::vector<std::string>{"\n\nHuman:"}));
  EXPECT_TRUE(r.stream && r.params.stream);
  EXPECT_FALSE(r.params.include_usage);
  EXPECT_EQ(ok(with(R"("system":"S")")).messages[0].content, "S");
  EXPECT_EQ(ok(with(R"("system":"")")).messages.size(), 1u);  // empty system → none
}

TEST(Anthropic, ToolRoundTripMapping) {
  auto r = ok(body_with(R"("max_tokens":100,"messages":[
      {"role":"user","content":[{"type":"text","text":"weather?"}]},
      {"role":"assistant","content":[{"type":"thinking","thinking":"let me look","signature":"sig"},
                                     {"type":"redacted_thinking","data":"xx"},
                                     {"type":"text","text":"Checking."},
                                     {"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"z":1,"a":"b"}},
                                     {"type":"tool_use","id":"toolu_2","name":"noop","input":{}}]},
      {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"sunny"},
                                {"type":"tool_result","tool_use_id":"toolu_2","is_error":true,
                                 "content":[{"type":"text","text":"x"},{"type":"text","text":"y"}]},
                                {"type":"text","text":"thanks"},{"type":"text","text":"more"}]}],
      "tools":[{"name":"get_weather","description":"Weather","input_schema":{"type":"object","properties":{"q":{"type":"string"}}},
                "cache_control":{"type":"ephemeral"}},
               {"type":"custom","name":"noop","input_schema":{"type":"object"}}],
      "tool_choice":{"type":"any","disable_parallel_tool_use":true})"));
  ASSERT_EQ(r.messages.size(), 5u);
  EXPECT_EQ(r.messages[0].content, "weather?");
  const ApiMessage& a = r.messages[1];
  EXPECT_EQ(a.role, "assistant");
  EXPECT_EQ(a.reasoning_content, "let me look");
  EXPECT_EQ(a.content, "Checking.");
  ASSERT_EQ(a.tool_calls.size(), 2u);
  EXPECT_EQ(a.tool_calls[0].id, "toolu_1");
  EXPECT_EQ(a.tool_calls[0].name, "get_weather");
  EXPECT_EQ(a.tool_calls[0].arguments, R"({"z":1,"a":"b"})");  // key order kept
  EXPECT_EQ(a.tool_calls[1].arguments, "{}");
  EXPECT_EQ(r.messages[2].role, "tool");
  EXPECT_EQ(r.messages[2].tool_call_id, "toolu_1");
  EXPECT_EQ(r.messages[2].content, "sunny");
  EXPECT_EQ(r.messages[3].role, "tool");
  EXPECT_EQ(r.messages[3].content, "x\n\ny");
  EXPECT_EQ(r.messages[4].role, "user");
  EXPECT_EQ(r.messages[4].content, "thanks\n\nmore");
  ASSERT_EQ(r.tools.size(), 2u);
  EXPECT_EQ(r.tools[0].name, "get_weather");
  EXPECT_EQ(r.tools[0].function_json,
            R"({"name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"q":{"type":"string"}}}})");
  EXPECT_EQ(r.tools[1].function_json, R"({"name":"noop","parameters":{"type":"object"}})");
  EXPECT_EQ(r.tool_choice.kind, ToolChoiceKind::kRequired);
}

TEST(Anthropic, EmptyToolOutputIsFine) {
  auto r = ok(body_with(R"("max_tokens":10,"messages":[{"role":"user","content":"q"},
      {"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}},
                                     {"type":"tool_use","id":"t2","name":"f","input":{}},
                                     {"type":"tool_use","id":"t3","name":"f","input":{}}]},
      {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":""},
                                {"type":"tool_result","tool_use_id":"t2","content":[{"type":"text","text":""}]},
                                {"type":"tool_result","tool_use_id":"t3"}]}])"));
  ASSERT_EQ(r.messages.size(), 5u);
  for (size_t i = 2; i < 5; ++i) {
    EXPECT_EQ(r.messages[i].role, "tool");
    EXPECT_EQ(r.messages[i].content, "");
  }
  EXPECT_ERR(with(R"("system":[{"type":"text","text":""}])"), kInvalidArgument,
             "system.0.text: text content blocks must be non-empty");
}

TEST(Anthropic, ToolChoiceKinds) {
  EXPECT_EQ(ok(with(R"("tool_choice":{"type":"auto"})")).tool_choice.kind, ToolChoiceKind::kAuto);
  EXPECT_EQ(ok(with(R"("tool_choice":{"type":"none"})")).tool_choice.kind, ToolChoiceKind::kNone);
  auto t = ok(with(R"("tool_choice":{"type":"tool","name":"f"})"));
  EXPECT_EQ(t.tool_choice.kind, ToolChoiceKind::kFunction);
  EXPECT_EQ(t.tool_choice.function_name, "f");
  EXPECT_ERR(with(R"("tool_choice":{"type":"tool"})"), kInvalidArgument, "tool_choice.name: Field required");
  EXPECT_ERR(with(R"("tool_choice":{"type":"sometimes"})"), kInvalidArgument,
             "tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none' (got 'sometimes')");
  EXPECT_ERR(with(R"("tool_choice":"auto")"), kInvalidArgument,
             "tool_choice: Input should be a valid dictionary, got a string");
}

TEST(Anthropic, Thinking) {
  EXPECT_FALSE(ok(with(R"("thinking":{"type":"disabled"})")).thinking);
  EXPECT_TRUE(ok(with(R"("thinking":{"type":"enabled","budget_tokens":1024})")).thinking);
  EXPECT_TRUE(ok(with(R"("thinking":{"type":"adaptive"})")).thinking);
  EXPECT_EQ(ok(with(R"("output_config":{"effort":"max"})")).reasoning_effort, ReasoningEffort::kMax);
  EXPECT_EQ(ok(with(R"("output_config":{"effort":"low"})")).reasoning_effort, ReasoningEffort::kHigh);
  EXPECT_EQ(ok(with(R"("thinking":{"type":"enabled","budget_tokens":2048,"effort":"max"})")).reasoning_effort,
            ReasoningEffort::kMax);
  EXPECT_ERR(with(R"("thinking":{"type":"enabled"})"), kInvalidArgument, "thinking.enabled.budget_tokens: Field required");
  EXPECT_ERR(with(R"("thinking":{"type":"enabled","budget_tokens":1023})"), kOutOfRange,
             "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024");
  EXPECT_ERR(with(R"("thinking":{"type":"on"})"), kInvalidArgument,
             "thinking.type: Input should be 'enabled', 'disabled', 'adaptive' or 'between_tools' (got 'on')");
  EXPECT_ERR(with(R"("thinking":true)"), kInvalidArgument, "thinking: Input should be a valid dictionary, got a boolean");
  EXPECT_ERR(with(R"("thinking":{})"), kInvalidArgument, "thinking.type: Field required");
  EXPECT_ERR(with(R"("output_config":{"effort":"huge"})"), kInvalidArgument,
             "output_config.effort: Input should be 'low', 'medium', 'high' or 'max' (got 'huge')");
  EXPECT_ERR(with(R"("thinking":{"type":"adaptive","effort":"max"},"output_config":{"effort":"low"})"), kInvalidArgument,
             "output_config.effort: conflicts with thinking.effort");
}

TEST(Anthropic, RequiredFieldsAndTypes) {
  EXPECT_ERR(R"({"max_tokens":10})", kInvalidArgument, "messages: Field required");
  EXPECT_ERR(body_with(kUser), kInvalidArgument, "max_tokens: Field required");
  EXPECT_ERR(body_with(kUser + R"(,"max_tokens":null)"), kInvalidArgument, "max_tokens: Field required");
  EXPECT_ERR(body_with(kUser + R"(,"max_tokens":0)"), kOutOfRange, "max_tokens: Input should be greater than or equal to 1");
  EXPECT_ERR(body_with(kUser + R"(,"max_tokens":"10")"), kInvalidArgument,
             "max_tokens: Input should be a valid integer, got a string");
  EXPECT_ERR(body_with(kUser + R"(,"max_tokens":4294967296)"), kOutOfRange,
             "max_tokens: Input should be less than or equal to 2147483647");
  EXPECT_ERR(R"({"max_tokens":10,"messages":[]})", kInvalidArgument,
             "messages: List should have at least 1 item after validation, not 0");
  EXPECT_ERR(R"({"max_tokens":10,"messages":"hi"})", kInvalidArgument, "messages: Input should be a valid list, got a string");
  EXPECT_ERR(with(R"("model":5)"), kInvalidArgument, "model: Input should be a valid string, got an integer");
  EXPECT_ERR(with(R"("stream":"yes")"), kInvalidArgument, "stream: Input should be a valid boolean, got a string");
  EXPECT_ERR(with(R"("metadata":[])"), kInvalidArgument, "metadata: Input should be a valid dictionary, got an array");
}

TEST(Anthropic, SamplingRanges) {
  EXPECT_ERR(with(R"("temperature":1.5)"), kOutOfRange, "temperature: Input should be less than or equal to 1");
  EXPECT_ERR(with(R"("temperature":-1)"), kOutOfRange, "temperature: Input should be greater than or equal to 0");
  EXPECT_ERR(with(R"("temperature":"0.5")"), kInvalidArgument, "temperature: Input should be a valid number, got a string");
  EXPECT_ERR(with(R"("top_p":0)"), kOutOfRange, "top_p: Input should be greater than 0");
  EXPECT_ERR(with(R"("top_k":-3)"), kOutOfRange, "top_k: Input should be greater than or equal to 0");
  EXPECT_ERR(with(R"("top_k":2.5)"), kInvalidArgument, "top_k: Input should be a valid integer, got a number");
  EXPECT_ERR(with(R"("stop_sequences":"x")"), kInvalidArgument, "stop_sequences: Input should be a valid list, got a string");
  EXPECT_ERR(with(R"("stop_sequences":[""])"), kInvalidArgument, "stop_sequences.0: String should have at least 1 character");
  EXPECT_ERR(with(R"("stop_sequences":[1])"), kInvalidArgument, "stop_sequences.0: Input should be a valid string, got an integer");
  EXPECT_ERR(with(R"("stop_sequences":["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17"])"),
             kInvalidArgument, "stop_sequences: List should have at most 16 items after validation, not 17");
}

TEST(Anthropic, MessageErrors) {
  auto msgs = [](const std::string& m) { return R"({"max_tokens":10,"messages":)" + m + "}"; };
  EXPECT_ERR(msgs(R"([{"role":"system","content":"s"}])"), kInvalidArgument,
             "messages.0.role: Input should be 'user' or 'assistant' (got 'system')");
  EXPECT_ERR(msgs(R"([{"content":"s"}])"), kInvalidArgument, "messages.0.role: Field required");
  EXPECT_ERR(msgs(R"([{"role":"user"}])"), kInvalidArgument, "messages.0.content: Field required");
  EXPECT_ERR(msgs(R"([{"role":"user","content":""}])"), kInvalidArgument,
             "messages.0: all messages must have non-empty content except for the optional final assistant message");
  EXPECT_ERR(msgs(R"([{"role":"user","content":[]}])"), kInvalidArgument,
             "messages.0: all messages must have non-empty content except for the optional final assistant message");
  EXPECT_ERR(msgs(R"([{"role":"user","content":5}])"), kInvalidArgument,
             "messages.0.content: Input should be a string or a list of content blocks, got an integer");
  EXPECT_ERR(msgs(R"(["hi"])"), kInvalidArgument, "messages.0: Input should be a valid dictionary, got a string");
  EXPECT_ERR(msgs(R"([{"role":"user","content":[{"type":"text","text":""}]}])"), kInvalidArgument,
             "messages.0.content.0.text: text content blocks must be non-empty");
  EXPECT_ERR(msgs(R"([{"role":"user","content":[{"type":"text"}]}])"), kInvalidArgument,
             "messages.0.content.0.text: Field required");
  EXPECT_ERR(msgs(R"([{"role":"user","content":[{"text":"a"}]}])"), kInvalidArgument,
             "messages.0.content.0.type: Field required");
  EXPECT_ERR(msgs(R"([{"role":"user","content":["a"]}])"), kInvalidArgument,
             "messages.0.content.0: Input should be a valid dictionary, got a string");
  EXPECT_ERR(msgs(R"([{"role":"user","content":[{"type":"image","source":{}}]}])"), kUnsupported,
             "messages.0.content.0.type: 'image' content blocks are not supported by this server");
  EXPECT_ERR(msgs(R"([{"role":"user","content":[{"type":"document","source":{}}]}])"), kUnsupported,
             "messages.0.content.0.type: 'document' content blocks are not supported by this server");
  EXPECT_ERR(msgs(R"([{"role":"user","content":[{"type":"video"}]}])"), kInvalidArgument,
             "messages.0.content.0.type: Input should be 'text' or 'tool_result' (got 'video')");
  EXPECT_ERR(msgs(R"([{"role":"user","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]}])"),
             kInvalidArgument, "messages.0.content.0.type: 'tool_use' blocks are only allowed in assistant messages");
  EXPECT_ERR(msgs(R"([{"role":"user","content":[{"type":"tool_result","content":"x"}]}])"), kInvalidArgument,
             "messages.0.content.0.tool_use_id: Field required");
  EXPECT_ERR(msgs(R"([{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image"}]}]}])"),
             kUnsupported, "messages.0.content.0.content.0.type: 'image' content blocks are not supported by this server");
  EXPECT_ERR(msgs(R"([{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":7}]}])"),
             kInvalidArgument,
             "messages.0.content.0.content: Input should be a string or a list of text blocks, got an integer");
  EXPECT_ERR(msgs(R"([{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","is_error":"no"}]}])"),
             kInvalidArgument, "messages.0.content.0.is_error: Input should be a valid boolean, got a string");
  const std::string u = R"({"role":"user","content":"q"})";
  EXPECT_ERR(msgs("[" + u + R"(,{"role":"assistant","content":[{"type":"tool_use","name":"f","input":{}}]},)" + u + "]"),
             kInvalidArgument, "messages.1.content.0.id: Field required");
  EXPECT_ERR(msgs("[" + u + R"(,{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":"{}"}]},)" +
                  u + "]"),
             kInvalidArgument, "messages.1.content.0.input: Input should be a valid dictionary, got a string");
  EXPECT_ERR(msgs("[" + u + R"(,{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"","input":{}}]},)" +
                  u + "]"),
             kInvalidArgument, "messages.1.content.0.name: String should have at least 1 character");
  EXPECT_ERR(msgs("[" + u + R"(,{"role":"assistant","content":[{"type":"tool_result","tool_use_id":"t"}]},)" + u + "]"),
             kInvalidArgument, "messages.1.content.0.type: 'tool_result' blocks are only allowed in user messages");
  EXPECT_ERR(msgs("[" + u + R"(,{"role":"assistant","content":[{"type":"thinking"}]},)" + u + "]"), kInvalidArgument,
             "messages.1.content.0.thinking: Field required");
  EXPECT_ERR(msgs("[" + u + R"(,{"role":"assistant","content":"Sure, "}])"), kUnsupported,
             "messages.1: a final assistant message (response prefill) is not supported by this server");
  EXPECT_ERR(msgs("[" + u + R"(,{"role":"assistant","content":""},)" + u + "]"), kInvalidArgument,
             "messages.1: all messages must have non-empty content except for the optional final assistant message");
}

TEST(Anthropic, SystemAndToolErrors) {
  EXPECT_ERR(with(R"("system":5)"), kInvalidArgument, "system: Input should be a string or a list of text blocks, got an integer");
  EXPECT_ERR(with(R"("system":[{"type":"image"}])"), kUnsupported,
             "system.0.type: 'image' content blocks are not supported by this server");
  EXPECT_ERR(with(R"("system":[{"type":"tool_use"}])"), kInvalidArgument,
             "system.0.type: Input should be 'text' (got 'tool_use')");
  EXPECT_ERR(with(R"("tools":{})"), kInvalidArgument, "tools: Input should be a valid list, got an object");
  EXPECT_ERR(with(R"("tools":[{"input_schema":{}}])"), kInvalidArgument, "tools.0.name: Field required");
  EXPECT_ERR(with(R"("tools":[{"name":"f"}])"), kInvalidArgument, "tools.0.input_schema: Field required");
  EXPECT_ERR(with(R"("tools":[{"name":"f","input_schema":"{}"}])"), kInvalidArgument,
             "tools.0.input_schema: Input should be a valid dictionary, got a string");
  EXPECT_ERR(with(R"("tools":[{"name":"f","input_schema":{},"description":1}])"), kInvalidArgument,
             "tools.0.description: Input should be a valid string, got an integer");
  EXPECT_ERR(with(R"("tools":[{"type":"web_search_20250305","name":"web_search","max_uses":5}])"), kUnsupported,
             "tools.0.type: server tool 'web_search_20250305' is not supported by this server; only custom tools "
             "(name, description, input_schema) are");
  std::string many = R"("tools":[)";
  for (int i = 0; i < 129; ++i)
    many += std::string(i ? "," : "") + R"({"name":"t)" + std::to_string(i) + R"(","input_schema":{}})";
  EXPECT_ERR(with(many + "]"), kInvalidArgument, "tools: List should have at most 128 items after validation, not 129");
  EXPECT_ERR(with(R"("mcp_servers":[{"type":"url","url":"http://x","name":"x"}])"), kUnsupported,
             "mcp_servers: MCP servers are not supported by this server");
}

TEST(Anthropic, BodyErrorsAreAnthropicStyle) {
  EXPECT_ERR("", kInvalidArgument, "The request body is empty; expected a JSON object.");
  EXPECT_ERR("{", kInvalidArgument, "The request body is not valid JSON: unexpected end of input at offset 1.");
  EXPECT_ERR("{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"\x80\"}]}", kInvalidArgument,
             "The request body is not valid UTF-8: invalid byte 0x80 at offset 54.");
  EXPECT_ERR("[]", kInvalidArgument, "body: Input should be a valid dictionary, got an array");
}

TEST(Anthropic, ErrorBodyUsesAnthropicTypes) {
  const ApiError e = api_error_from_status(err(body_with(kUser)));
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(anthropic_error_json(e),
            R"({"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}})");
}

}  // namespace
}  // namespace dsv4::server::api
