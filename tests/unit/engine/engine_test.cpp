// tests/unit/engine/engine_test.cpp — Engine::generate: greedy equals the session's own argmax
// loop, prefix reuse never changes output (same request twice, shared prefixes, interleaved
// conversations), stop strings, length, cancel, logprobs, context errors.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "backend/registry/registry.h"
#include "engine_fixture.h"
#include "model/model.h"

namespace dsv4 {
namespace {

struct Collect final : GenerationObserver {
  std::vector<int32_t> ids;
  std::string text;
  std::vector<tokenizer::DsmlEvent> events;
  std::vector<GeneratedToken> tokens;
  int64_t cancel_after = -1;
  int prefill_calls = 0;
  bool on_prefill(int64_t, int64_t) override {
    ++prefill_calls;
    return true;
  }
  bool on_delta(const GenerationDelta& d) override {
    for (const auto& t : d.tokens) ids.push_back(t.id);
    tokens.insert(tokens.end(), d.tokens.begin(), d.tokens.end());
    text += d.text;
    events.insert(events.end(), d.events.begin(), d.events.end());
    return cancel_after < 0 || static_cast<int64_t>(ids.size()) < cancel_after;
  }
};

std::vector<int32_t> random_prompt(int n, uint32_t seed, int32_t n_vocab_text = 256) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& t : p) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(n_vocab_text));
  return p;
}

GenerateRequest raw_request(std::vector<int32_t> prompt, int64_t n, float temperature, uint64_t seed) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = n;
  r.chat = false;
  r.sampler.temperature = temperature;
  r.sampler.seed = seed;
  return r;
}

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    engine_ = testing::load_tiny_engine();
    ASSERT_NE(engine_, nullptr);
  }
  Collect run(Engine& e, const GenerateRequest& r, GenerationResult* out = nullptr) {
    Collect c;
    auto res = e.generate(r, c);
    EXPECT_TRUE(res.ok()) << res.status().to_string();
    if (res.ok() && out) *out = *res;
    return c;
  }
  std::unique_ptr<Engine> engine_;
};

TEST_F(EngineTest, GreedyEqualsTheSessionArgmaxLoop) {
  const std::vector<int32_t> prompt = random_prompt(50, 1);
  GenerationResult res;
  const Collect c = run(*engine_, raw_request(prompt, 24, 0.0f, 0), &res);
  // Reference: a bare session, argmax (lowest id on ties), no eos stop (the first eos ends both).
  backend::BackendOptions o;
  o.kind = backend::BackendKind::kCpu;
  o.threads = 1;
  o.simd = SimdLevel::kScalar;
  auto b = backend::create_backend(o);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto m = model::Model::load(testing::tiny_engine_model(), **b);
  ASSERT_TRUE(m.ok());
  model::Session s(**m, 1024);
  ASSERT_TRUE(s.status().ok());
  std::vector<float> logits(static_cast<size_t>((*m)->shape().n_vocab));
  ASSERT_TRUE(s.forward(prompt, logits.data(), false).ok());
  std::vector<int32_t> want;
  for (int i = 0; i < 24; ++i) {
    const int32_t id = sampling::argmax(logits);
    if (id == engine_->info().eos_id) break;
    want.push_back(id);
    ASSERT_TRUE(s.forward(std::span<const int32_t>(&id, 1), logits.data(), false).ok());
  }
  EXPECT_EQ(c.ids, want);
  EXPECT_EQ(res.stats.completion_tokens, static_cast<int64_t>(want.size()));
  EXPECT_EQ(res.stats.prompt_tokens, 50);
  EXPECT_EQ(res.stats.cached_tokens, 0);
}

TEST_F(EngineTest, SameRequestTwiceIsIdenticalAndReusesThePrefix) {
  const GenerateRequest r = raw_request(random_prompt(200, 2), 40, 1.0f, 1234);
  GenerationResult a_res, b_res;
  const Collect a = run(*engine_, r, &a_res);
  const Collect b = run(*engine_, r, &b_res);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.text, b.text);
  EXPECT_EQ(a_res.stats.cached_tokens, 0);
  EXPECT_EQ(b_res.stats.cached_tokens, 199);  // the checkpoint one token before the prompt's end
  // And a fresh engine agrees.
  auto fresh = testing::load_tiny_engine();
  EXPECT_EQ(run(*fresh, r).ids, a.ids);
}

TEST_F(EngineTest, PrefixReuseNeverChangesOutput) {
  // A conversation-like sequence of requests: each prompt extends, forks or abandons the
  // previous one. Every answer must equal a fresh engine's answer to the same request.
  std::mt19937 rng(7);
  std::vector<int32_t> base = random_prompt(150, 3);
  std::vector<GenerateRequest> reqs;
  std::vector<int32_t> convo = base;
  for (int turn = 0; turn < 6; ++turn) {
    GenerateRequest r = raw_request(convo, 12 + turn, 1.0f, 100 + static_cast<uint64_t>(turn));
    reqs.push_back(r);
    const auto more = random_prompt(20 + 15 * turn, 50u + static_cast<uint32_t>(turn));
    if (turn == 3) convo.resize(convo.size() / 2);  // fork from the middle
    convo.insert(convo.end(), more.begin(), more.end());
  }
  reqs.push_back(raw_request(random_prompt(90, 99), 10, 1.0f, 5));  // unrelated
  reqs.push_back(reqs[2]);                                           // back to an old prefix
  int64_t cached_total = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    GenerationResult res;
    const Collect got = run(*engine_, reqs[i], &res);
    cached_total += res.stats.cached_tokens;
    auto fresh = testing::load_tiny_engine(1024, 1, 1 << 20, 7);  // other threads, chunking, no checkpoints
    EXPECT_EQ(run(*fresh, reqs[i]).ids, got.ids) << "request " << i;
  }
  EXPECT_GT(cached_total, 500);
}

TEST_F(EngineTest, StopStringEndsTheTextBeforeIt) {
  const GenerateRequest plain = raw_request(random_prompt(30, 4), 60, 0.0f, 0);
  const Collect full = run(*engine_, plain);
  ASSERT_GE(full.text.size(), 20u);
  // A stop string taken from the middle of the output (on a UTF-8 boundary).
  size_t at = full.text.size() / 2;
  while (at > 0 && (static_cast<unsigned char>(full.text[at]) & 0xC0) == 0x80) --at;
  size_t len = 1;
  while (at + len < full.text.size() && (static_cast<unsigned char>(full.text[at + len]) & 0xC0) == 0x80) ++len;
  const std::string stop = full.text.substr(at, len);
  GenerateRequest r = plain;
  r.stop = {stop, "\x01never-matches"};
  GenerationResult res;
  const Collect c = run(*engine_, r, &res);
  EXPECT_EQ(res.finish, FinishReason::kStopString);
  EXPECT_EQ(res.stop_string, stop);
  EXPECT_EQ(c.text, full.text.substr(0, full.text.find(stop)));
}

TEST_F(EngineTest, HeldBackPartialStopIsReleasedAtTheEnd) {
  const GenerateRequest plain = raw_request(random_prompt(30, 5), 20, 0.0f, 0);
  const Collect full = run(*engine_, plain);
  GenerateRequest r = plain;
  r.stop = {full.text.substr(full.text.size() - 1) + "\x02"};  // its first byte ends the output: held, then released
  GenerationResult res;
  const Collect c = run(*engine_, r, &res);
  EXPECT_EQ(c.text, full.text);
  EXPECT_NE(res.finish, FinishReason::kStopString);
}

TEST_F(EngineTest, LengthCancelAndContextErrors) {
  // EOS banned through logit_bias, so only the limit or the observer can end these.
  const std::pair<int32_t, float> no_eos{engine_->info().eos_id, -100.0f};
  GenerationResult res;
  GenerateRequest lr = raw_request(random_prompt(10, 6), 5, 0.0f, 0);
  lr.sampler.logit_bias = {no_eos};
  Collect c = run(*engine_, lr, &res);
  EXPECT_EQ(res.finish, FinishReason::kLength);
  EXPECT_EQ(c.ids.size(), 5u);
  GenerateRequest r = raw_request(random_prompt(10, 6), 50, 1.0f, 9);
  r.sampler.logit_bias = {no_eos};
  Collect cancel;
  cancel.cancel_after = 3;
  auto cres = engine_->generate(r, cancel);
  ASSERT_TRUE(cres.ok());
  EXPECT_EQ(cres->finish, FinishReason::kCancelled);
  EXPECT_EQ(cancel.ids.size(), 3u);
  EXPECT_FALSE(engine_->generate(raw_request(random_prompt(1000, 7), 100, 0.0f, 0), c).ok());
  EXPECT_FALSE(engine_->generate(raw_request({}, 5, 0.0f, 0), c).ok());
  EXPECT_FALSE(engine_->generate(raw_request({100000}, 5, 0.0f, 0), c).ok());
  // After errors the engine still answers exactly.
  auto fresh = testing::load_tiny_engine();
  const GenerateRequest ok = raw_request(random_prompt(40, 8), 10, 1.0f, 3);
  EXPECT_EQ(run(*engine_, ok).ids, run(*fresh, ok).ids);
}

TEST_F(EngineTest, LogprobsAreConsistent) {
  GenerateRequest r = raw_request(random_prompt(20, 9), 10, 0.0f, 0);
  r.top_logprobs = 5;
  const Collect c = run(*engine_, r);
  ASSERT_FALSE(c.tokens.empty());
  for (const GeneratedToken& t : c.tokens) {
    ASSERT_EQ(t.top.size(), 5u);
    EXPECT_LE(t.logprob, 0.0f);
    EXPECT_EQ(t.top[0].id, t.id);  // greedy picks the most likely
    EXPECT_EQ(t.top[0].logprob, t.logprob);
    for (size_t k = 1; k < t.top.size(); ++k) EXPECT_LE(t.top[k].logprob, t.top[k - 1].logprob);
  }
}

TEST_F(EngineTest, ChatModeSplitsReasoningAndIsDeterministic) {
  // A rendered chat prompt in thinking mode; sampled output from a random model. Whatever it
  // emits, the events' text must concatenate to the released text minus markup, and two runs
  // (the second reusing the prefix) must agree exactly.
  tokenizer::ChatRequest chat;
  chat.messages.push_back({tokenizer::ChatRole::kUser, "hello there", "", {}, "", ""});
  auto rendered = engine_->render_chat(chat);
  ASSERT_TRUE(rendered.ok());
  GenerateRequest r;
  r.prompt = engine_->tokenize_chat(*rendered);
  r.max_tokens = 80;
  r.chat = true;
  r.thinking = true;
  r.sampler.seed = 77;
  GenerationResult a_res, b_res;
  const Collect a = run(*engine_, r, &a_res);
  const Collect b = run(*engine_, r, &b_res);
  ASSERT_EQ(a.events.size(), b.events.size());
  for (size_t i = 0; i < a.events.size(); ++i) EXPECT_EQ(a.events[i].text, b.events[i].text);
  EXPECT_EQ(a_res.stats.reasoning_tokens, b_res.stats.reasoning_tokens);
  EXPECT_GT(b_res.stats.cached_tokens, 0);
  std::string reasoning;
  for (const auto& e : a.events)
    if (e.kind == tokenizer::DsmlEvent::Kind::kReasoning) reasoning += e.text;
  if (a_res.stats.reasoning_tokens == a_res.stats.completion_tokens) {
    EXPECT_TRUE(a.text.find(reasoning) == 0) << "reasoning events are a prefix of the raw text";
  }
}

TEST_F(EngineTest, ForcedOutputReplaysThroughTheParser) {
  // A complete DSML tool call replayed in thinking mode: the parser reports it and decoding stops
  // at the block's end (finish tool_calls), exactly as if the model had sampled it.
  const std::string dsml =
      "plan</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
      "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  GenerateRequest r = raw_request(random_prompt(12, 10), 200, 1.0f, 1);
  r.chat = true;
  r.thinking = true;
  r.forced_output = engine_->tokenize(dsml, true);
  r.forced_output.push_back(engine_->info().eos_id);
  GenerationResult res;
  const Collect c = run(*engine_, r, &res);
  EXPECT_EQ(res.finish, FinishReason::kToolCalls);
  std::string reasoning, args, name;
  for (const auto& e : c.events) {
    if (e.kind == tokenizer::DsmlEvent::Kind::kReasoning) reasoning += e.text;
    if (e.kind == tokenizer::DsmlEvent::Kind::kToolCallBegin) name = e.name;
    if (e.kind == tokenizer::DsmlEvent::Kind::kToolCallArguments) args += e.text;
  }
  EXPECT_EQ(reasoning, "plan");
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(args, "{\"city\": \"Paris\"}");
  EXPECT_EQ(res.stats.reasoning_tokens, static_cast<int64_t>(engine_->tokenize("plan", true).size()) + 1);  // + </think>
}

// Issue #15 §3: generated special tokens that are not output markup never reach the text.
TEST_F(EngineTest, GeneratedSpecialTokensAreNotReleasedAsText) {
  GenerateRequest r = raw_request(random_prompt(8, 11), 50, 1.0f, 1);
  r.forced_output = engine_->tokenize("a<｜User｜>b<｜Assistant｜>c<｜latest_reminder｜><think>d</think>", true);
  r.forced_output.push_back(engine_->info().eos_id);
  Collect c = run(*engine_, r);
  EXPECT_EQ(c.text, "abc<think>d</think>");  // raw: the think markup stays, role markers go
  EXPECT_EQ(c.ids.size(), r.forced_output.size() - 1);  // every id still counts as a token

  r.chat = true;
  r.thinking = true;
  r.forced_output = engine_->tokenize("x<think>y<｜User｜></think>z</think>w<｜Assistant｜>", true);
  r.forced_output.push_back(engine_->info().eos_id);
  c = run(*engine_, r);
  std::string reasoning, content;
  for (const auto& e : c.events) {
    if (e.kind == tokenizer::DsmlEvent::Kind::kReasoning) reasoning += e.text;
    if (e.kind == tokenizer::DsmlEvent::Kind::kContent) content += e.text;
  }
  EXPECT_EQ(reasoning, "xy");
  EXPECT_EQ(content, "zw");  // a second </think> is dropped too
}

// tool_choice none: after "<" the DSML marker is masked even when the client biases it to +100.
TEST_F(EngineTest, ToolChoiceNoneMasksTheDsmlOpener) {
  const int32_t dsml = engine_->tokenize("｜DSML｜", true).at(0);
  GenerateRequest r = raw_request(random_prompt(8, 12), 4, 0.0f, 1);
  r.chat = true;
  r.sampler.logit_bias = {{dsml, 100.0f}};
  r.forced_output = engine_->tokenize("<", true);
  Collect c = run(*engine_, r);
  ASSERT_GE(c.ids.size(), 2u);
  EXPECT_EQ(c.ids[1], dsml);  // auto: the bias wins
  r.tool_choice.mode = tokenizer::ToolChoiceMode::kNone;
  c = run(*engine_, r);
  ASSERT_GE(c.ids.size(), 2u);
  EXPECT_NE(c.ids[1], dsml);
  for (const auto& e : c.events) EXPECT_NE(e.kind, tokenizer::DsmlEvent::Kind::kToolCallBegin);
}

// tool_choice required / function: the random model calls the tool, in the DSML syntax.
TEST_F(EngineTest, ToolChoiceRequiredMakesTheModelCallATool) {
  for (auto mode : {tokenizer::ToolChoiceMode::kRequired, tokenizer::ToolChoiceMode::kFunction}) {
    GenerateRequest r = raw_request(random_prompt(8, 13), 300, 0.0f, 1);
    r.chat = true;
    r.tool_choice.mode = mode;
    r.tool_choice.tools = {{"get_time", {}, true}};
    GenerationResult res;
    Collect c = run(*engine_, r, &res);
    EXPECT_EQ(res.finish, FinishReason::kToolCalls) << c.text;
    EXPECT_TRUE(res.output_error.ok()) << res.output_error.message();
    std::string name, args, content;
    for (const auto& e : c.events) {
      if (e.kind == tokenizer::DsmlEvent::Kind::kToolCallBegin) name = e.name;
      if (e.kind == tokenizer::DsmlEvent::Kind::kToolCallArguments) args += e.text;
      if (e.kind == tokenizer::DsmlEvent::Kind::kContent) content += e.text;
    }
    EXPECT_EQ(name, "get_time");
    EXPECT_EQ(args, "{}");
    EXPECT_EQ(content, "");
  }
}

}  // namespace
}  // namespace dsv4
