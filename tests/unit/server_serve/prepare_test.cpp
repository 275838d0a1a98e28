// tests/unit/server_serve/prepare_test.cpp — request preparation: sampling defaults (client knobs
// win), context checks and the max_tokens clamp, completions' BOS and max_tokens default; the job channel
// and the bounded queue; Prometheus text.
#include <gtest/gtest.h>

#include "../engine/engine_fixture.h"
#include "server/serve/job_queue.h"
#include "server/serve/metrics.h"
#include "server/serve/prepare.h"
#include "server/serve/response_store.h"

namespace dsv4::server::serve {
namespace {

TEST(SamplerConfig, DefaultsFollowDeepSeek) {
  api::GenerationParams p;
  const sampling::SamplerConfig c = sampler_config(p);
  EXPECT_EQ(c.temperature, 1.0f);
  EXPECT_EQ(c.top_p, 1.0f);
  EXPECT_EQ(c.min_p, 0.05f);
  EXPECT_EQ(c.top_k, 0);
}

// Issue #15 §3: the client's knobs win in every mode (the sampler no longer knows the mode), and
// a knob left out keeps the model card's default.
TEST(SamplerConfig, ClientKnobsAlwaysWin) {
  api::GenerationParams p;
  p.temperature = 0.0;
  p.top_p = 0.5;
  p.top_k = 7;
  p.min_p = 0.0;
  p.presence_penalty = 1.0;
  p.seed = 42;
  p.logit_bias = {{3, -100.0}};
  sampling::SamplerConfig c = sampler_config(p);
  EXPECT_EQ(c.temperature, 0.0f);
  EXPECT_EQ(c.top_p, 0.5f);
  EXPECT_EQ(c.top_k, 7);
  EXPECT_EQ(c.min_p, 0.0f);
  EXPECT_EQ(c.presence_penalty, 1.0f);
  EXPECT_EQ(c.seed, 42u);
  ASSERT_EQ(c.logit_bias.size(), 1u);
  api::GenerationParams only_k;
  only_k.top_k = 1;
  c = sampler_config(only_k);
  EXPECT_EQ(c.top_k, 1);
  EXPECT_EQ(c.temperature, 1.0f);
  EXPECT_EQ(c.min_p, 0.05f);
}

TEST(SamplerConfig, NoSeedDrawsFreshOnes) {
  api::GenerationParams p;
  EXPECT_NE(sampler_config(p).seed, sampler_config(p).seed);
}

class PrepareTest : public ::testing::Test {
 protected:
  void SetUp() override {
    engine_ = dsv4::testing::load_tiny_engine(256);
    ASSERT_NE(engine_, nullptr);
  }
  api::ChatCompletionRequest chat(const std::string& text) {
    api::ChatCompletionRequest r;
    api::ApiMessage m;
    m.role = "user";
    m.content = text;
    r.messages.push_back(m);
    return r;
  }
  std::unique_ptr<Engine> engine_;
};

TEST_F(PrepareTest, ChatRendersTokenizesAndFillsTheRoom) {
  PreparedRequest p;
  ASSERT_FALSE(prepare_chat(*engine_, chat("hello"), ApiKind::kChat, "", p));
  EXPECT_TRUE(p.thinking);  // default
  EXPECT_TRUE(p.gen.chat && p.gen.thinking);
  const auto want = engine_->tokenize("<｜begin▁of▁sentence｜><｜User｜>hello<｜Assistant｜><think>", true);
  EXPECT_EQ(p.gen.prompt, want);
  EXPECT_EQ(p.gen.max_tokens, 256 + 1 - static_cast<int64_t>(want.size()));
  EXPECT_EQ(p.gen.top_logprobs, -1);
}

TEST_F(PrepareTest, MaxTokensBeyondTheContextIsClamped) {
  PreparedRequest p;
  api::ChatCompletionRequest r = chat("hello");
  r.params.max_tokens = 1000;
  ASSERT_FALSE(prepare_chat(*engine_, r, ApiKind::kChat, "", p));
  EXPECT_EQ(p.gen.max_tokens, 256 + 1 - static_cast<int64_t>(p.gen.prompt.size()));
  r.params.max_tokens = 5;
  ASSERT_FALSE(prepare_chat(*engine_, r, ApiKind::kChat, "", p));
  EXPECT_EQ(p.gen.max_tokens, 5);
}

TEST_F(PrepareTest, ContextErrorsNameTheLimit) {
  PreparedRequest p;
  auto err = prepare_chat(*engine_, chat(std::string(400, 'x')), ApiKind::kChat, "", p);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code, "context_length_exceeded");
  EXPECT_EQ(err->http_status, 400);
  EXPECT_NE(err->message.find("256"), std::string::npos);
  err = prepare_chat(*engine_, chat(std::string(400, 'x')), ApiKind::kChat, "", p);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code, "context_length_exceeded");
  api::ChatCompletionRequest r = chat("hi");
  r.params.logit_bias = {{999999, 1.0}};
  err = prepare_chat(*engine_, r, ApiKind::kChat, "", p);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->param, "logit_bias");
}

TEST_F(PrepareTest, ToolChoiceBecomesTheDecodingConstraint) {
  engine_ = dsv4::testing::load_tiny_engine(4096);  // the DS4 tools block needs room
  ASSERT_NE(engine_, nullptr);
  api::ChatCompletionRequest r = chat("hi");
  PreparedRequest p;
  r.tool_choice.kind = api::ToolChoiceKind::kRequired;
  auto err = prepare_chat(*engine_, r, ApiKind::kChat, "", p);
  ASSERT_TRUE(err);  // required without tools
  EXPECT_EQ(err->param, "tool_choice");
  api::ApiTool t;
  t.name = "f";
  t.function_json = R"({"name":"f"})";
  t.params_known = true;
  r.tools = {t};
  r.parallel_tool_calls = false;
  err = prepare_chat(*engine_, r, ApiKind::kChat, "", p);
  ASSERT_FALSE(err) << err->message;
  EXPECT_EQ(p.gen.tool_choice.mode, tokenizer::ToolChoiceMode::kRequired);
  ASSERT_EQ(p.gen.tool_choice.tools.size(), 1u);
  EXPECT_EQ(p.gen.tool_choice.tools[0].name, "f");
  EXPECT_FALSE(p.gen.tool_choice.parallel);
  r.tool_choice = {api::ToolChoiceKind::kFunction, "g"};
  err = prepare_chat(*engine_, r, ApiKind::kAnthropic, "", p);
  ASSERT_TRUE(err);
  EXPECT_NE(err->message.find("'g'"), std::string::npos);
  r.tool_choice = {api::ToolChoiceKind::kNone, ""};
  PreparedRequest q;
  ASSERT_FALSE(prepare_chat(*engine_, r, ApiKind::kChat, "", q));
  EXPECT_EQ(q.gen.tool_choice.mode, tokenizer::ToolChoiceMode::kNone);
}

TEST_F(PrepareTest, DefaultSystemPromptOnlyWhenAsked) {
  PreparedRequest a, b;
  ASSERT_FALSE(prepare_chat(*engine_, chat("hi"), ApiKind::kChat, "", a));
  ASSERT_FALSE(prepare_chat(*engine_, chat("hi"), ApiKind::kChat, "Be nice.", b));
  EXPECT_GT(b.gen.prompt.size(), a.gen.prompt.size());
}

TEST_F(PrepareTest, CompletionAddsBosAndDefaultsTo16Tokens) {
  api::CompletionRequest r;
  r.prompt = "hello";
  PreparedRequest p;
  ASSERT_FALSE(prepare_completion(*engine_, r, p));
  ASSERT_FALSE(p.gen.prompt.empty());
  EXPECT_EQ(p.gen.prompt.front(), engine_->info().bos_id);
  EXPECT_EQ(p.gen.max_tokens, 16);
  EXPECT_FALSE(p.gen.chat);
  r.prompt = "<｜begin▁of▁sentence｜>hello";  // already there: not doubled
  PreparedRequest q;
  ASSERT_FALSE(prepare_completion(*engine_, r, q));
  EXPECT_EQ(q.gen.prompt, p.gen.prompt);
}

TEST(JobChannel, DeliversInOrderAndTimesOut) {
  JobChannel ch;
  EXPECT_FALSE(ch.pop(std::chrono::milliseconds(1)));
  ch.push(PrefillProgress{1, 2});
  ch.push(JobDone{});
  auto a = ch.pop(std::chrono::milliseconds(1));
  ASSERT_TRUE(a);
  EXPECT_TRUE(std::holds_alternative<PrefillProgress>(*a));
  auto b = ch.pop(std::chrono::milliseconds(1));
  ASSERT_TRUE(b);
  EXPECT_TRUE(std::holds_alternative<JobDone>(*b));
}

TEST(EngineWorker, BoundedQueueCancelledJobsAndOrder) {
  auto engine = dsv4::testing::load_tiny_engine(256);
  ASSERT_NE(engine, nullptr);
  std::vector<std::string> finished;
  std::mutex mu;
  EngineWorker worker(*engine, 2, [&](const Job& j, const Result<GenerationResult>&, double) {
    std::lock_guard<std::mutex> lock(mu);
    finished.push_back(j.route);
  });
  auto make = [&](const std::string& name, bool cancelled) {
    auto j = std::make_shared<Job>();
    j->route = name;
    j->request.prompt = engine->tokenize("hello", true);
    j->request.max_tokens = 3;
    j->request.chat = false;
    j->cancelled = cancelled;
    return j;
  };
  std::vector<std::shared_ptr<Job>> jobs;
  int accepted = 0;
  for (int i = 0; i < 6; ++i) {
    jobs.push_back(make("j" + std::to_string(i), i == 1));
    accepted += worker.submit(jobs.back()) ? 1 : 0;
  }
  EXPECT_GE(accepted, 2);  // the queue holds 2 waiting jobs (+ the running one)
  EXPECT_LE(accepted, 3);
  for (int i = 0; i < accepted; ++i) {
    for (;;) {
      auto m = jobs[static_cast<size_t>(i)]->channel.pop(std::chrono::milliseconds(10000));
      ASSERT_TRUE(m);
      if (auto* d = std::get_if<JobDone>(&*m)) {
        ASSERT_TRUE(d->result.ok());
        if (i == 1) {
          EXPECT_EQ(d->result->finish, FinishReason::kCancelled);
        }
        break;
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(static_cast<int>(finished.size()), accepted);
  for (int i = 0; i < accepted; ++i) EXPECT_EQ(finished[static_cast<size_t>(i)], "j" + std::to_string(i));  // FIFO
}

TEST(ResponseStore, BoundedOldestFirstEraseAndOff) {
  ResponseStore store(2);
  auto put = [&](const std::string& id) {
    api::ApiMessage m;
    m.role = "user";
    m.content = id;
    store.put({id, "{\"id\":\"" + id + "\"}", {m}});
  };
  put("a");
  put("b");
  put("c");  // evicts a
  EXPECT_EQ(store.size(), 2u);
  EXPECT_EQ(store.get("a"), nullptr);
  ASSERT_NE(store.get("b"), nullptr);
  EXPECT_EQ(store.get("c")->conversation.at(0).content, "c");
  auto held = store.get("b");
  EXPECT_TRUE(store.erase("b"));
  EXPECT_FALSE(store.erase("b"));
  EXPECT_EQ(held->response_json, "{\"id\":\"b\"}");  // a reader keeps its copy alive
  ResponseStore off(0);
  off.put({"x", "{}", {}});
  EXPECT_EQ(off.get("x"), nullptr);
  EXPECT_EQ(off.size(), 0u);
}

TEST(Metrics, PrometheusText) {
  Metrics m;
  m.request("/v1/chat/completions", 200);
  m.request("/v1/chat/completions", 200);
  m.error("bad_request");
  m.generation(100, 40, 10, 50.0, 100.0, 1.0);
  const std::string t = m.prometheus(3, true, 1024, 7, 2, 99);
  EXPECT_NE(t.find("dsv4_requests_total{route=\"/v1/chat/completions\",status=\"200\"} 2\n"), std::string::npos);
  EXPECT_NE(t.find("dsv4_errors_total{kind=\"bad_request\"} 1\n"), std::string::npos);
  EXPECT_NE(t.find("dsv4_prompt_tokens_total 100\n"), std::string::npos);
  EXPECT_NE(t.find("dsv4_completion_tokens_total 10\n"), std::string::npos);
  EXPECT_NE(t.find("dsv4_decode_tokens_per_second 100\n"), std::string::npos);
  EXPECT_NE(t.find("dsv4_prefill_tokens_per_second 1200\n"), std::string::npos);
  EXPECT_NE(t.find("dsv4_queue_depth 3\n"), std::string::npos);
  EXPECT_NE(t.find("# TYPE dsv4_busy gauge\n"), std::string::npos);
}

}  // namespace
}  // namespace dsv4::server::serve
