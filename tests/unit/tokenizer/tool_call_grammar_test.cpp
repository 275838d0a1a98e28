// tests/unit/tokenizer/tool_call_grammar_test.cpp — the tool_choice automaton: what none refuses,
// what required/function accept (the DS4 DSML call syntax) and refuse, at any byte split.
#include <gtest/gtest.h>

#include "tokenizer/dsml_parser.h"
#include "tokenizer/tool_call_grammar.h"

namespace dsv4::tokenizer {
namespace {

using State = ToolCallGrammar::State;

ToolChoiceSpec spec(ToolChoiceMode mode, std::vector<ToolGrammarTool> tools = {}, bool parallel = true) {
  ToolChoiceSpec s;
  s.mode = mode;
  s.tools = std::move(tools);
  s.parallel = parallel;
  return s;
}

// Feeds `text` in pieces of `step` bytes; false at the first refused piece.
bool accepts(const ToolCallGrammar& g, State& s, const std::string& text, size_t step = 1) {
  for (size_t i = 0; i < text.size(); i += step)
    if (!g.feed(s, std::string_view(text).substr(i, step))) return false;
  return true;
}

const std::string kCall =
    "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";

ToolGrammarTool weather() { return {"get_weather", {"city", "days"}, true}; }
ToolGrammarTool clock() { return {"get_time", {}, true}; }

TEST(ToolCallGrammar, AutoConstrainsNothing) {
  ToolCallGrammar g(spec(ToolChoiceMode::kAuto, {weather()}), false);
  EXPECT_FALSE(g.active());
  State s = g.start();
  EXPECT_TRUE(g.free(s));
  EXPECT_FALSE(g.lt_only(s));
  EXPECT_TRUE(accepts(g, s, "anything" + kCall));
  EXPECT_TRUE(g.end_allowed(s));
}

TEST(ToolCallGrammar, RequiredAcceptsTheDs4CallSyntaxAtAnySplit) {
  for (size_t step : {1, 2, 3, 5, 7, 64}) {
    ToolCallGrammar g(spec(ToolChoiceMode::kRequired, {weather(), clock()}), false);
    State s = g.start();
    EXPECT_FALSE(g.end_allowed(s));
    EXPECT_FALSE(g.free(s));
    ASSERT_TRUE(accepts(g, s, kCall, step)) << step;
    EXPECT_TRUE(g.end_allowed(s));
  }
  // Nothing may follow the block, not even inside the token that closes it (seen: ">::").
  ToolCallGrammar g(spec(ToolChoiceMode::kRequired, {weather()}), false);
  State s = g.start();
  ASSERT_TRUE(accepts(g, s, kCall.substr(0, kCall.size() - 1)));
  State t = s;
  EXPECT_FALSE(g.feed(t, ">::"));
  EXPECT_TRUE(g.feed(s, ">"));
  // And the parser reads what the grammar accepts as one call.
  auto parsed = parse_dsml_output(kCall, false);
  ASSERT_TRUE(parsed.ok());
  ASSERT_EQ(parsed->tool_calls.size(), 1u);
  EXPECT_EQ(parsed->tool_calls[0].arguments_json, "{\"city\": \"Paris\", \"days\": 3}");
}

TEST(ToolCallGrammar, RequiredRefusesText) {
  ToolCallGrammar g(spec(ToolChoiceMode::kRequired, {weather()}), false);
  State s = g.start();
  EXPECT_FALSE(accepts(g, s, "Sure!"));
  s = g.start();
  EXPECT_FALSE(g.feed(s, ""));  // a token that adds nothing makes no progress: refused
  s = g.start();
  EXPECT_FALSE(accepts(g, s, "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"rm_rf\">"));  // unknown tool
  s = g.start();
  EXPECT_FALSE(accepts(g, s, "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
                             "<｜DSML｜parameter name=\"country\""));  // not a schema property
}

TEST(ToolCallGrammar, ToolWithoutParametersMustCloseAtOnce) {
  ToolCallGrammar g(spec(ToolChoiceMode::kFunction, {clock()}), false);
  State s = g.start();
  const std::string head = "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_time\">\n";
  ASSERT_TRUE(accepts(g, s, head));
  State t = s;
  EXPECT_FALSE(accepts(g, t, "<｜DSML｜parameter"));
  ASSERT_TRUE(accepts(g, s, "</｜DSML｜invoke>\n"));
  t = s;
  EXPECT_FALSE(accepts(g, t, "<｜DSML｜invoke"));  // function: exactly one call
  ASSERT_TRUE(accepts(g, s, "</｜DSML｜tool_calls>"));
  EXPECT_TRUE(g.end_allowed(s));
}

TEST(ToolCallGrammar, ParallelAllowsMoreInvokesUnlessOff) {
  const std::string one = "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_time\">\n</｜DSML｜invoke>\n";
  ToolCallGrammar par(spec(ToolChoiceMode::kRequired, {clock()}, true), false);
  State s = par.start();
  ASSERT_TRUE(accepts(par, s, one + "<｜DSML｜invoke name=\"get_time\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"));
  ToolCallGrammar single(spec(ToolChoiceMode::kRequired, {clock()}, false), false);
  s = single.start();
  EXPECT_FALSE(accepts(single, s, one + "<｜DSML｜invoke"));
}

TEST(ToolCallGrammar, FreeKeysWhenTheSchemaListsNone) {
  ToolCallGrammar g(spec(ToolChoiceMode::kRequired, {{"run", {}, false}}), false);
  State s = g.start();
  ASSERT_TRUE(accepts(g, s, "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"run\">\n<｜DSML｜parameter name=\"any key\" "
                            "string=\"true\">x</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"));
  s = g.start();
  EXPECT_FALSE(accepts(g, s, "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"run\">\n<｜DSML｜parameter name=\"" +
                                 std::string(kMaxFreeKeyBytes + 1, 'k')));
}

TEST(ToolCallGrammar, ThinkingIsFreeUntilTheReasoningEnds) {
  ToolCallGrammar g(spec(ToolChoiceMode::kRequired, {weather()}), true);
  State s = g.start();
  EXPECT_TRUE(g.lt_only(s));
  EXPECT_FALSE(g.end_allowed(s));  // required: the turn may not end while reasoning
  ASSERT_TRUE(accepts(g, s, "I will call <｜DSML｜invoke in my head. </thin"));
  EXPECT_FALSE(g.lt_only(s));  // a partial "</think>" is open: every token must be checked
  ASSERT_TRUE(accepts(g, s, "k>"));
  EXPECT_FALSE(g.free(s));
  EXPECT_FALSE(g.lt_only(s));
  // A token that ends the reasoning and goes on must go on inside the grammar.
  State u = g.start();
  EXPECT_FALSE(accepts(g, u, "ok</think>Sure"));
  u = g.start();
  EXPECT_TRUE(accepts(g, u, "ok</think>\n\n<｜DSML｜", 100));
  State t = s;
  EXPECT_FALSE(accepts(g, t, "Hello"));
  EXPECT_TRUE(accepts(g, s, kCall));
}

TEST(ToolCallGrammar, NoneRefusesOpeningADsmlTag) {
  for (bool thinking : {false, true}) {
    ToolCallGrammar g(spec(ToolChoiceMode::kNone), thinking);
    State s = g.start();
    if (thinking) {
      ASSERT_TRUE(accepts(g, s, "think <｜DSML｜tool_calls> freely</think>"));
    }
    EXPECT_TRUE(g.end_allowed(s));
    State t = s;
    EXPECT_TRUE(accepts(g, t, "Plain text with < and <b> and DSM, and a ｜ bar."));
    for (const char* bad : {"\n\n<｜DSML｜tool_calls>", "<｜DSML｜invoke name=", "<|DSML|tool_calls>", "< ｜ DSML",
                            "</｜DSML｜tool_calls>", "<｜｜DSML｜｜"}) {
      t = s;
      EXPECT_FALSE(accepts(g, t, bad, 1)) << bad;
      t = s;
      EXPECT_FALSE(accepts(g, t, bad, 100)) << bad;
    }
  }
}

}  // namespace
}  // namespace dsv4::tokenizer
