// tests/unit/engine/engine_fixture.h — a tiny DS4 model with random weights and a small
// byte-level vocabulary (256 byte tokens, a few merges, the DS4 specials), written once per test
// binary with dsv4's own synth, so engine and server tests need no downloads and run in seconds.
// With ~270 tokens, a random model emits specials (</think>, ｜DSML｜) often enough that the
// reasoning split and the DSML parser are exercised by plain sampling.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "base/thread_pool.h"
#include "dsv4/engine.h"
#include "tokenizer/utf8.h"
#include "tools/synth.h"

namespace dsv4::testing {

inline std::string write_tiny_tokenizer_json(const std::string& path) {
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (int b = 0; b < 256; ++b) vocab[tokenizer::byte_to_utf8(static_cast<uint8_t>(b))] = b;
  const char* merges[] = {"h e", "l l", "he ll", "hell o", "Ġ t", "Ġt h", "Ġth e"};
  int id = 256;
  for (const char* m : merges) {
    std::string s(m);
    const size_t sp = s.find(' ');
    vocab[s.substr(0, sp) + s.substr(sp + 1)] = id++;
  }
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  const char* specials[] = {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
                            "<think>", "</think>", "｜DSML｜", "<｜latest_reminder｜>"};
  for (const char* sp : specials) added.push_back({{"id", id++}, {"content", sp}, {"special", true}});
  nlohmann::ordered_json j = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
                              {"added_tokens", added}};
  std::ofstream(path) << j.dump();
  return path;
}

// Writes the model (once) and returns its path.
inline const std::string& tiny_engine_model() {
  // Leaked on purpose: the atexit handler below must still see it after statics are destroyed.
  static const std::string& path = *new std::string([] {
    const std::string dir = ::testing::TempDir();
    // Per-process names: ctest -j runs several test processes at once, and a shared tokenizer path
    // let one process read the file while another rewrote it (a flaky "not a well-formed JSON").
    const std::string pid = std::to_string(::getpid());
    const std::string tok = write_tiny_tokenizer_json(dir + "/engine_tiny_tokenizer_" + pid + ".json");
    const std::string out = dir + "/engine_tiny_" + pid + ".gguf";
    tools::SynthPlan plan = tools::plan_synth(*tools::synth_preset("tiny"), model::QuantMix::kF32);
    EXPECT_TRUE(tools::with_tokenizer(plan, tok).ok());
    ThreadPool pool(2);
    const Status s = tools::write_synth(plan, 5, out, pool);
    EXPECT_TRUE(s.ok()) << s.to_string();
    std::remove(tok.c_str());  // its content now lives in the GGUF
    return out;
  }());
  static const bool cleanup = [] { return std::atexit([] { std::remove(tiny_engine_model().c_str()); }) == 0; }();
  (void)cleanup;
  return path;
}

inline std::unique_ptr<Engine> load_tiny_engine(int64_t ctx = 1024, int threads = 2, int64_t interval = 64,
                                                int64_t chunk = 512) {
  EngineOptions o;
  o.model_path = tiny_engine_model();
  o.ctx = ctx;
  o.threads = threads;
  o.simd = detected_simd_level();
  o.amx = true;  // used where the CPU has it, as dsv4 serve does by default
  o.checkpoint_interval = interval;
  o.prefill_chunk = chunk;
  auto e = Engine::load(o);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(*e) : nullptr;
}

}  // namespace dsv4::testing
