// Unit tests for tokenizer/dsml_parser: round trip against chat_template's DSML rendering at every
// chunk size, recovery cases, held-back partial tags, the reasoning split, open blocks at finish;
// and apply_default_system_prompt.
#include "tokenizer/dsml_parser.h"

#include <gtest/gtest.h>

#include "tokenizer/chat_template.h"

namespace dsv4::tokenizer {
namespace {

const std::string kEos = "<｜end▁of▁sentence｜>";
const std::string D = "｜DSML｜";

struct ParseRun {
  ParsedOutput out;
  Status status;
  std::vector<DsmlEvent> events;
};

ParseRun parse_chunked(std::string_view text, bool thinking, size_t chunk) {
  DsmlParser p(thinking);
  ParseRun r;
  for (size_t i = 0; i < text.size(); i += chunk) p.feed(text.substr(i, chunk), r.events);
  auto s = p.finish(r.events);
  if (!s.ok()) {
    r.status = s.status();
    return r;
  }
  apply_dsml_events(r.events, r.out);
  r.out.finish_reason = s->tool_calls ? "tool_calls" : "stop";
  return r;
}

// The assistant text the renderer produces for `a` after a user turn (what the model generates).
std::string render_generated(const ChatMessage& a, bool thinking) {
  ChatRequest req;
  ChatMessage u;
  u.role = ChatRole::kUser;
  u.content = "hi";
  req.messages = {u, a};
  req.tools_json = {R"({"name":"get_weather","parameters":{}})"};
  req.thinking = thinking ? ThinkingMode::kHigh : ThinkingMode::kNone;
  auto p = render_prompt(req);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  const std::string marker = thinking ? "<｜Assistant｜><think>" : "<｜Assistant｜></think>";
  std::string t = p.value();
  size_t k = t.rfind(marker);
  EXPECT_NE(k, std::string::npos);
  t = t.substr(k + marker.size());
  EXPECT_EQ(t.substr(t.size() - kEos.size()), kEos);
  return t.substr(0, t.size() - kEos.size());
}

TEST(DsmlParser, RoundTripEveryChunkSize) {
  ChatMessage a;
  a.role = ChatRole::kAssistant;
  a.reasoning_content = "Let me think <about> it.\nUse tools.";
  a.content = "Checking the weather.";
  a.tool_calls = {
      {"x1", "get_weather", R"({"city":"Paris \"FR\"\n<b>","days":3,"units":null,"opts":{"a":[1,2.5,true]},"s":""})"},
      {"x2", "noargs", "{}"},
      {"x3", "raw", "not json at all"},
      {"x4", "uni", R"({"q":"日本語 ｜ < </ tab\t ctrl\u0001","neg":-1e5})"},
  };
  for (bool thinking : {true, false}) {
    const std::string gen = render_generated(a, thinking);
    for (size_t chunk = 1; chunk <= gen.size(); ++chunk) {
      ParseRun r = parse_chunked(gen, thinking, chunk);
      ASSERT_TRUE(r.status.ok()) << r.status.to_string() << " chunk " << chunk;
      EXPECT_EQ(r.out.reasoning, thinking ? a.reasoning_content : "") << chunk;
      EXPECT_EQ(r.out.content, a.content) << chunk;
      EXPECT_EQ(r.out.finish_reason, "tool_calls");
      ASSERT_EQ(r.out.tool_calls.size(), a.tool_calls.size()) << chunk;
      for (size_t i = 0; i < a.tool_calls.size(); ++i) {
        const auto& got = r.out.tool_calls[i];
        EXPECT_EQ(got.id, "call_" + std::to_string(i));
        EXPECT_EQ(got.name, a.tool_calls[i].name);
        EXPECT_TRUE(is_valid_json(got.arguments_json)) << got.arguments_json;
        auto want = python_json_dumps(a.tool_calls[i].arguments_json);
        if (want.ok()) {
          EXPECT_EQ(got.arguments_json, want.value()) << "chunk " << chunk;
        } else {
          EXPECT_EQ(got.arguments_json, "{\"arguments\": " + json_quote(a.tool_calls[i].arguments_json) + "}");
        }
      }
      for (const DsmlEvent& e : r.events) {
        if (e.kind == DsmlEvent::Kind::kContent) {
          EXPECT_EQ(e.text.find("DSML"), std::string::npos);
        }
      }
    }
  }
}

TEST(DsmlParser, BeginEventComesWithTheName) {
  DsmlParser p(false);
  std::vector<DsmlEvent> ev;
  p.feed("ok\n\n<" + D + "tool_calls>\n<" + D + "invoke name=\"f\">", ev);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].kind, DsmlEvent::Kind::kContent);
  EXPECT_EQ(ev[0].text, "ok");
  EXPECT_EQ(ev[1].kind, DsmlEvent::Kind::kToolCallBegin);
  EXPECT_EQ(ev[1].name, "f");
  EXPECT_EQ(ev[1].id, "call_0");
  ev.clear();
  p.feed("\n<" + D + "parameter name=\"k\" string=\"true\">ab", ev);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].text, "{\"k\": \"ab");  // string values stream
  ev.clear();
  p.feed("</" + D + "parameter>\n</" + D + "invoke>\n</" + D + "tool_calls>", ev);
  EXPECT_TRUE(p.block_closed());
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].text, "\"}");
  EXPECT_EQ(ev[1].kind, DsmlEvent::Kind::kToolCallEnd);
  auto s = p.finish(ev);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->tool_calls);
}

TEST(DsmlParser, HoldsBackPartialTags) {
  DsmlParser p(true);
  std::vector<DsmlEvent> ev;
  p.feed("abc</th", ev);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].text, "abc");
  ev.clear();
  p.feed("ink>Hello\n\n<｜DS", ev);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, DsmlEvent::Kind::kContent);
  EXPECT_EQ(ev[0].text, "Hello");
  ev.clear();
  p.feed("Mx", ev);  // not DSML after all: everything flushes
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].text, "\n\n<｜DSMx");
  ev.clear();
  p.feed(" a < b <", ev);
  EXPECT_EQ(ev[0].text, " a < b");  // the space before a possible tag waits too
  ev.clear();
  ASSERT_TRUE(p.finish(ev).ok());
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].text, " <");  // a lone '<' at the end is text
}

TEST(DsmlParser, ReasoningSplitAndDsmlInsideReasoning) {
  std::string t = "think <" + D + "invoke name=\"f\">\n</" + D + "invoke></think>answer";
  auto r = parse_dsml_output(t, true);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->reasoning, "think <" + D + "invoke name=\"f\">\n</" + D + "invoke>");
  EXPECT_EQ(r->content, "answer");
  EXPECT_TRUE(r->tool_calls.empty());
  EXPECT_EQ(r->finish_reason, "stop");
  auto n = parse_dsml_output("no</think>here", false);  // non-thinking: </think> is text
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->content, "no</think>here");
  auto open = parse_dsml_output("never closed", true);
  ASSERT_TRUE(open.ok());
  EXPECT_EQ(open->reasoning, "never closed");
}

std::string one_call(const std::string& open, const std::string& close, const std::string& d) {
  return "x\n\n<" + d + open + ">\n<" + d + "invoke name=\"f\">\n<" + d +
         "parameter name=\"a\" string=\"false\">1</" + d + "parameter>\n</" + d + "invoke>\n</" + d + close + ">";
}

void expect_one_call(const std::string& text) {
  for (size_t chunk : {1u, 2u, 3u, 7u, 1000u}) {
    ParseRun r = parse_chunked(text, false, chunk);
    ASSERT_TRUE(r.status.ok()) << r.status.to_string();
    EXPECT_EQ(r.out.content, "x");
    ASSERT_EQ(r.out.tool_calls.size(), 1u) << text;
    EXPECT_EQ(r.out.tool_calls[0].name, "f");
    EXPECT_EQ(r.out.tool_calls[0].arguments_json, "{\"a\": 1}");
  }
}

TEST(DsmlParser, Recovery) {
  expect_one_call(one_call("tool_calls", "tool_calls", D));
  expect_one_call(one_call("function_calls", "function_calls", D));  // V3.2 name
  expect_one_call(one_call("tool_calls", "tool_calls", "｜｜DSML｜｜"));  // doubled delimiters
  expect_one_call(one_call("tool_calls", "tool_calls", "|DSML|"));      // ASCII delimiters
  // missing wrapper
  expect_one_call("x\n\n<" + D + "invoke name=\"f\">\n<" + D + "parameter name=\"a\" string=\"false\">1</" + D +
                  "parameter>\n</" + D + "invoke>");
  // unterminated wrapper
  expect_one_call("x\n\n<" + D + "tool_calls>\n<" + D + "invoke name=\"f\">\n<" + D +
                  "parameter name=\"a\" string=\"false\">1</" + D + "parameter>\n</" + D + "invoke>\n");
  // typographic quotes, missing </parameter> and </invoke>
  expect_one_call("x\n\n<" + D + "tool_calls>\n<" + D + "invoke name=“f”>\n<" + D +
                  "parameter name=“a” string=“false”>1\n</" + D + "tool_calls>");
}

TEST(DsmlParser, LiteralValues) {
  auto r = parse_dsml_output("<" + D + "invoke name=\"f\">\n<" + D + "parameter name=\"bad\" string=\"false\">{oops</" +
                                 D + "parameter>\n<" + D + "parameter name=\"auto\">[1, 2]</" + D + "parameter>\n<" +
                                 D + "parameter name=\"bad\" string=\"true\">dup</" + D + "parameter>\n</" + D +
                                 "invoke>",
                             false);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->tool_calls.size(), 1u);
  EXPECT_EQ(r->tool_calls[0].arguments_json, "{\"bad\": \"{oops\", \"auto\": [1, 2]}");
  EXPECT_FALSE(r->warnings.empty());
}

TEST(DsmlParser, OpenBlockAtFinishIsAnError) {
  const std::string full = one_call("tool_calls", "tool_calls", D);
  const size_t invoke = full.find("<" + D + "invoke");
  const size_t end_invoke = full.find("</" + D + "invoke>") + ("</" + D + "invoke>").size();
  for (size_t cut = invoke + 1; cut < end_invoke; ++cut) {
    ParseRun r = parse_chunked(full.substr(0, cut), false, 5);
    EXPECT_FALSE(r.status.ok()) << "cut " << cut << ": " << full.substr(0, cut);
  }
  ParseRun r = parse_chunked(full.substr(0, end_invoke), false, 5);
  EXPECT_TRUE(r.status.ok());
  ParseRun partial = parse_chunked("hello <｜DSML｜too", false, 4);
  EXPECT_FALSE(partial.status.ok());
  EXPECT_NE(partial.status.message().find("DSML"), std::string::npos);
}

TEST(DsmlParser, InvokeWithoutNameIsAnError) {
  auto r = parse_dsml_output("<" + D + "tool_calls>\n<" + D + "invoke>\n</" + D + "invoke>", false);
  EXPECT_FALSE(r.ok());
}

TEST(DsmlParser, JsonHelpers) {
  EXPECT_TRUE(is_valid_json("{\"a\": [1, -2.5e3, true, false, null, \"\\u00e9\"]}"));
  EXPECT_FALSE(is_valid_json("NaN"));
  EXPECT_FALSE(is_valid_json("01"));
  EXPECT_FALSE(is_valid_json("[1,]"));
  EXPECT_FALSE(is_valid_json(std::string(100000, '[')));
  EXPECT_EQ(json_quote("a\"\\\n\x01"), "\"a\\\"\\\\\\n\\u0001\"");
}

TEST(DefaultSystemPrompt, InsertsOnlyWhenNone) {
  ChatRequest req;
  ChatMessage u;
  u.role = ChatRole::kUser;
  u.content = "hi";
  req.messages = {u};
  EXPECT_FALSE(apply_default_system_prompt(req, ""));
  EXPECT_EQ(req.messages.size(), 1u);
  EXPECT_TRUE(apply_default_system_prompt(req, "Be brief."));
  ASSERT_EQ(req.messages.size(), 2u);
  EXPECT_EQ(req.messages[0].role, ChatRole::kSystem);
  EXPECT_EQ(req.messages[0].content, "Be brief.");
  auto p = render_prompt(req);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p.value(), "<｜begin▁of▁sentence｜>Be brief.<｜User｜>hi<｜Assistant｜><think>");

  ChatRequest mine;
  ChatMessage s;
  s.role = ChatRole::kSystem;
  s.content = "Caller system.";
  mine.messages = {u, s};  // a system message anywhere counts
  auto before = render_prompt(mine);
  EXPECT_FALSE(apply_default_system_prompt(mine, "Be brief."));
  ASSERT_EQ(mine.messages.size(), 2u);
  EXPECT_EQ(mine.messages[1].content, "Caller system.");
  auto after = render_prompt(mine);
  ASSERT_TRUE(before.ok() && after.ok());
  EXPECT_EQ(before.value(), after.value());
}

}  // namespace
}  // namespace dsv4::tokenizer
