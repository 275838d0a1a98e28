// Unit tests for tokenizer/chat_template: rendering rules and errors. The byte-exact comparison
// with the official encoder lives in tests/python/test_render_goldens.py (tests/data/chat).
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

namespace dsv4::tokenizer {
namespace {

const std::string kBos = "<｜begin▁of▁sentence｜>";
const std::string kEos = "<｜end▁of▁sentence｜>";

ChatMessage msg(ChatRole role, std::string content, std::string reasoning = "") {
  ChatMessage m;
  m.role = role;
  m.content = std::move(content);
  m.reasoning_content = std::move(reasoning);
  return m;
}

ChatMessage call(std::string id, std::string name, std::string args) {
  ChatMessage m;
  m.role = ChatRole::kAssistant;
  m.tool_calls.push_back({std::move(id), std::move(name), std::move(args)});
  return m;
}

ChatMessage result(std::string id, std::string content) {
  ChatMessage m;
  m.role = ChatRole::kTool;
  m.tool_call_id = std::move(id);
  m.content = std::move(content);
  return m;
}

std::string render(const ChatRequest& r) {
  auto p = render_prompt(r);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p.ok() ? p.value() : std::string();
}

TEST(ChatTemplate, CanonicalTwoTurnThinking) {
  ChatRequest r;
  r.messages = {msg(ChatRole::kSystem, "sys"), msg(ChatRole::kUser, "Hello"),
                msg(ChatRole::kAssistant, "Hi there", "dropped"), msg(ChatRole::kUser, "How are you?")};
  EXPECT_EQ(render(r), kBos + "sys<｜User｜>Hello<｜Assistant｜></think>Hi there" + kEos +
                           "<｜User｜>How are you?<｜Assistant｜><think>");
}

TEST(ChatTemplate, ChatModeClosesThinkEverywhere) {
  ChatRequest r;
  r.thinking = ThinkingMode::kNone;
  r.messages = {msg(ChatRole::kUser, "a"), msg(ChatRole::kAssistant, "b", "r"), msg(ChatRole::kUser, "c")};
  EXPECT_EQ(render(r), kBos + "<｜User｜>a<｜Assistant｜></think>b" + kEos + "<｜User｜>c<｜Assistant｜></think>");
}

TEST(ChatTemplate, ToolsKeepHistoryReasoningAndGoToAnInsertedSystem) {
  ChatRequest r;
  r.tools_json = {R"({"name":"f","parameters":{"type":"object"}})"};
  r.messages = {msg(ChatRole::kUser, "a"), msg(ChatRole::kAssistant, "b", "kept"), msg(ChatRole::kUser, "c")};
  std::string p = render(r);
  EXPECT_EQ(p.rfind(kBos + "\n\n## Tools\n\n", 0), 0u);
  EXPECT_NE(p.find(R"({"name": "f", "parameters": {"type": "object"}})"), std::string::npos);
  EXPECT_NE(p.find("<｜User｜>a<｜Assistant｜><think>kept</think>b" + kEos), std::string::npos);
}

TEST(ChatTemplate, ToolResultsMergeAndSortByCallOrder) {
  ChatRequest r;
  ChatMessage a = call("x", "f", R"({"k": "v", "n": 1.50})");
  a.tool_calls.push_back({"y", "g", "not json"});
  r.messages = {msg(ChatRole::kUser, "q"), a, result("y", "Y"), result("x", "X"), msg(ChatRole::kUser, "then")};
  r.thinking = ThinkingMode::kNone;
  std::string p = render(r);
  EXPECT_NE(p.find("<｜DSML｜parameter name=\"k\" string=\"true\">v</｜DSML｜parameter>\n"
                   "<｜DSML｜parameter name=\"n\" string=\"false\">1.5</｜DSML｜parameter>"),
            std::string::npos);
  EXPECT_NE(p.find("<｜DSML｜parameter name=\"arguments\" string=\"true\">not json</｜DSML｜parameter>"),
            std::string::npos);
  EXPECT_NE(p.find(kEos + "<｜User｜><tool_result>X</tool_result>\n\n<tool_result>Y</tool_result>\n\nthen"
                          "<｜Assistant｜></think>"),
            std::string::npos);
}

TEST(ChatTemplate, MaxNeedsContext) {
  ChatRequest r;
  r.messages = {msg(ChatRole::kUser, "q")};
  r.thinking = ThinkingMode::kMax;
  r.context_size = kThinkMaxMinContext;
  auto big = render_chat(r);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->thinking_used, ThinkingMode::kMax);
  EXPECT_EQ(big->text.rfind(kBos + "Reasoning Effort: Absolute maximum", 0), 0u);
  r.context_size = kThinkMaxMinContext - 1;
  auto small = render_chat(r);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->thinking_used, ThinkingMode::kHigh);
  EXPECT_EQ(small->text, kBos + "<｜User｜>q<｜Assistant｜><think>");
}

TEST(ChatTemplate, DeveloperDroppedBeforeLastUserInThinkingMode) {
  ChatRequest r;
  r.messages = {msg(ChatRole::kDeveloper, "rules"), msg(ChatRole::kUser, "q1"), msg(ChatRole::kAssistant, "a1"),
                msg(ChatRole::kUser, "q2")};
  EXPECT_EQ(render(r), kBos + "<｜User｜>q1<｜Assistant｜></think>a1" + kEos + "<｜User｜>q2<｜Assistant｜><think>");
  r.thinking = ThinkingMode::kNone;
  EXPECT_EQ(render(r).rfind(kBos + "<｜User｜>rules<｜User｜>q1", 0), 0u);
}

TEST(ChatTemplate, LatestReminderAndResponseFormat) {
  ChatRequest r;
  r.response_format_json = R"({"type":"json_object"})";
  r.messages = {msg(ChatRole::kSystem, "S"), msg(ChatRole::kLatestReminder, "R"), msg(ChatRole::kUser, "q")};
  EXPECT_EQ(render(r), kBos +
                           "S\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n"
                           "{\"type\": \"json_object\"}<｜latest_reminder｜>R<｜User｜>q<｜Assistant｜><think>");
}

TEST(ChatTemplate, Errors) {
  // Only what the official encoder rejects (or no prompt at all).
  ChatRequest r;
  auto empty = render_prompt(r);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("at least one message"), std::string::npos);

  // The encoder's `assert content` on a rendered developer message.
  r.messages = {msg(ChatRole::kDeveloper, "")};
  EXPECT_NE(render_prompt(r).status().message().find("messages[0]: developer message content must not be empty"),
            std::string::npos);
  r.messages = {msg(ChatRole::kUser, "q"), msg(ChatRole::kDeveloper, "")};
  EXPECT_NE(render_prompt(r).status().message().find("messages[1]: developer"), std::string::npos);

  // Arguments that are JSON but not an object: the encoder crashes on `.items()`.
  for (const char* args : {"[1, 2]", "\"text\"", "3", "null", "true"}) {
    r.messages = {msg(ChatRole::kUser, "q"), call("a", "f", args)};
    EXPECT_NE(render_prompt(r).status().message().find("not an object"), std::string::npos) << args;
  }

  r.messages = {msg(ChatRole::kUser, "q")};
  r.tools_json = {"{bad"};
  EXPECT_NE(render_prompt(r).status().message().find("tools[0]: invalid JSON"), std::string::npos);

  auto role = parse_chat_role("robot");
  ASSERT_FALSE(role.ok());
  EXPECT_NE(role.status().message().find("unknown role 'robot'"), std::string::npos);
  EXPECT_EQ(parse_chat_role("latest_reminder").value(), ChatRole::kLatestReminder);
}

// Each case below is one the official encoder renders; the expected text is what it renders
// (tests/data/chat has the same cases as byte-exact goldens through `dsv4 render`).
TEST(ChatTemplateParity, UnmatchedToolResultRendersFirst) {
  ChatRequest r;
  r.thinking = ThinkingMode::kNone;
  r.messages = {msg(ChatRole::kUser, "q"), call("a", "f", "{}"), result("zzz", "late"), result("a", "A")};
  // Sort key 0 for the unknown id, stable: the unmatched result stays in front.
  EXPECT_EQ(render(r), kBos + "<｜User｜>q<｜Assistant｜></think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n\n"
                           "</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + kEos +
                           "<｜User｜><tool_result>late</tool_result>\n\n<tool_result>A</tool_result><｜Assistant｜></think>");
  ChatMessage two = call("a", "f", "{}");
  two.tool_calls.push_back({"b", "g", "{}"});
  r.messages = {msg(ChatRole::kUser, "q"), two, result("b", "B"), result("nope", "N"), result("a", "A")};
  const std::string p = render(r);
  EXPECT_NE(p.find("<｜User｜><tool_result>N</tool_result>\n\n<tool_result>A</tool_result>\n\n<tool_result>B</tool_result>"),
            std::string::npos) << p;
}

TEST(ChatTemplateParity, ToolResultWithoutAnyCallBecomesAUserTurn) {
  ChatRequest r;
  r.thinking = ThinkingMode::kNone;
  r.messages = {result("x", "orphan"), msg(ChatRole::kUser, "q")};
  EXPECT_EQ(render(r), kBos + "<｜User｜><tool_result>orphan</tool_result>\n\nq<｜Assistant｜></think>");
}

TEST(ChatTemplateParity, EmptyDeveloperDroppedBeforeLastUserIsNotChecked) {
  // _drop_thinking_messages removes it before render_message could assert.
  ChatRequest r;
  r.messages = {msg(ChatRole::kDeveloper, ""), msg(ChatRole::kUser, "q")};
  EXPECT_EQ(render(r), kBos + "<｜User｜>q<｜Assistant｜><think>");
}

TEST(ChatTemplateParity, EmptyToolNameAndStrayFieldsRender) {
  ChatRequest r;
  r.thinking = ThinkingMode::kNone;
  ChatMessage u = msg(ChatRole::kUser, "q", "ignored reasoning");
  u.tool_calls.push_back({"x", "ignored", "{}"});
  ChatMessage sys = msg(ChatRole::kSystem, "S", "ignored too");
  r.messages = {sys, u, call("a", "", R"({"k": 1})")};
  EXPECT_EQ(render(r), kBos + "S<｜User｜>q<｜Assistant｜></think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"\">\n"
                           "<｜DSML｜parameter name=\"k\" string=\"false\">1</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
                           "</｜DSML｜tool_calls>" + kEos);
}

TEST(ChatTemplateParity, MaxEffortWithThinkingOffIsPlainChat) {
  // The server maps thinking off to kNone whatever the effort; the encoder adds the max prefix only
  // in thinking mode.
  ChatRequest r;
  r.thinking = ThinkingMode::kNone;
  r.messages = {msg(ChatRole::kUser, "q")};
  EXPECT_EQ(render(r), kBos + "<｜User｜>q<｜Assistant｜></think>");
}

// Every byte of request text is inside RenderedPrompt::request_text; markup never is.
TEST(ChatTemplate, RequestTextRangesCoverExactlyTheRequest) {
  ChatRequest r;
  r.tools_json = {R"({"name":"T1","parameters":{}})"};
  r.response_format_json = R"({"type":"json_object","x":"RF"})";
  ChatMessage a = call("c1", "N1", R"({"K1": "V1", "K2": [2]})");
  a.content = "C1";
  a.reasoning_content = "R1";
  a.tool_calls.push_back({"c2", "N2", "RAW2"});
  r.messages = {msg(ChatRole::kSystem, "S1"), msg(ChatRole::kUser, "U1"), a, result("c1", "TR1"),
                msg(ChatRole::kDeveloper, "D1"), msg(ChatRole::kLatestReminder, "L1")};
  auto p = render_chat(r);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  std::string covered;
  size_t prev_end = 0;
  for (const TextRange& t : p->request_text) {
    ASSERT_LE(prev_end, t.begin);
    ASSERT_LT(t.begin, t.end);
    ASSERT_LE(t.end, p->text.size());
    covered += p->text.substr(t.begin, t.end - t.begin) + "|";
    prev_end = t.end;
  }
  for (const char* want : {"S1", "T1", "RF", "U1", "R1", "C1", "N1", "K1", "V1", "K2", "[2]", "N2", "RAW2", "TR1", "D1",
                           "L1", "arguments"}) {
    EXPECT_NE(covered.find(want), std::string::npos) << want << " not in request ranges: " << covered;
  }
  for (const char* markup : {"<｜User｜>", "<｜Assistant｜>", "</think>", "｜DSML｜", "<tool_result>", "## Tools",
                             "<｜latest_reminder｜>", "## Response Format", "<｜end▁of▁sentence｜>"}) {
    EXPECT_EQ(covered.find(markup), std::string::npos) << markup << " inside request ranges: " << covered;
  }
}

TEST(PythonJsonDumps, MatchesPythonFormatting) {
  auto d = [](const char* s) {
    auto r = python_json_dumps(s);
    return r.ok() ? r.value() : "ERR: " + r.status().message();
  };
  EXPECT_EQ(d(R"({"a":1,"b":[true,false,null],"c":{}})"), R"({"a": 1, "b": [true, false, null], "c": {}})");
  EXPECT_EQ(d("1.0"), "1.0");
  EXPECT_EQ(d("1e16"), "1e+16");
  EXPECT_EQ(d("1e15"), "1000000000000000.0");
  EXPECT_EQ(d("0.0001"), "0.0001");
  EXPECT_EQ(d("0.00001"), "1e-05");
  EXPECT_EQ(d("-0.0"), "-0.0");
  EXPECT_EQ(d("-0"), "0");
  EXPECT_EQ(d("1.5e300"), "1.5e+300");
  EXPECT_EQ(d("1e999"), "Infinity");
  EXPECT_EQ(d("0.1"), "0.1");
  EXPECT_EQ(d("123456789012345678901234567890"), "123456789012345678901234567890");
  EXPECT_EQ(d(R"("\u00e9\ud83d\ude00\u0001\n\"\\/")"), "\"é😀\\u0001\\n\\\"\\\\/\"");
  EXPECT_EQ(d(R"({"k":1,"j":2,"k":3})"), R"({"k": 3, "j": 2})");
  EXPECT_EQ(d(" [ ] "), "[]");
  EXPECT_NE(d("[1,]").find("ERR: invalid JSON at offset"), std::string::npos);
  EXPECT_NE(d("{} x").find("extra data"), std::string::npos);
  EXPECT_NE(d(R"("\ud800")").find("surrogate"), std::string::npos);
}

}  // namespace
}  // namespace dsv4::tokenizer
