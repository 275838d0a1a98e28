// tests/unit/tools/synth_test.cpp — dsv4 synth: plan totals, determinism, readable output.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "gguf/reader.h"
#include "model/shape.h"
#include "tools/synth.h"

namespace dsv4::tools {
namespace {

std::string temp_path(const std::string& name) { return ::testing::TempDir() + "/" + name; }

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

TEST(Synth, FlashQ2PlanEqualsPublishedFile) {
  const SynthPlan p = plan_synth(*synth_preset("flash"), model::QuantMix::kQ2);
  EXPECT_EQ(p.tensors.size(), 1328u);
  EXPECT_EQ(p.total_params, 284'334'567'511);
  EXPECT_EQ(p.total_bytes, 86'714'775'900);
}

TEST(Synth, Flash4lHasTheRealScheduleHead) {
  const model::Ds4Shape s = *synth_preset("flash-4l");
  ASSERT_EQ(s.n_layer, 4);
  EXPECT_EQ(s.compress_ratio, (std::vector<int64_t>{0, 0, 4, 128}));
  EXPECT_EQ(s.n_embd, 4096);
  EXPECT_TRUE(model::validate_shape(s).ok());
}

TEST(Synth, TinyWritesAReadableDeterministicFile) {
  const model::Ds4Shape shape = *synth_preset("tiny");
  for (auto mix : {model::QuantMix::kF32, model::QuantMix::kQ2, model::QuantMix::kF16}) {
    const SynthPlan plan = plan_synth(shape, mix);
    const std::string a = temp_path("synth_a.gguf"), b = temp_path("synth_b.gguf"), c = temp_path("synth_c.gguf");
    ThreadPool one(1), three(3);
    ASSERT_TRUE(write_synth(plan, 42, a, one).ok());
    ASSERT_TRUE(write_synth(plan, 42, b, three).ok());
    ASSERT_TRUE(write_synth(plan, 43, c, three).ok());
    const std::string ba = slurp(a);
    EXPECT_EQ(ba, slurp(b)) << "same seed, different thread count";
    EXPECT_NE(ba, slurp(c)) << "different seed";
    auto f = gguf::GgufFile::open(a);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    EXPECT_EQ(f->tensors().size(), plan.tensors.size());
    auto s = model::shape_from_gguf(*f);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_EQ(s->n_layer, shape.n_layer);
    EXPECT_EQ(s->compress_ratio, shape.compress_ratio);
    EXPECT_EQ(s->n_hash_layers, shape.n_hash_layers);
    // tid2eid rows hold distinct experts in range.
    const gguf::TensorInfo* t = f->find_tensor("blk.0.ffn_gate_tid2eid.weight");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->type, TensorType::kI32);
    const auto* ids = reinterpret_cast<const int32_t*>(t->data);
    for (int64_t tok = 0; tok < shape.n_vocab; ++tok) {
      const int32_t e0 = ids[tok * 2], e1 = ids[tok * 2 + 1];
      EXPECT_NE(e0, e1);
      EXPECT_TRUE(e0 >= 0 && e0 < shape.n_expert && e1 >= 0 && e1 < shape.n_expert);
    }
    std::remove(a.c_str());
    std::remove(b.c_str());
    std::remove(c.c_str());
  }
}

TEST(Synth, FailedWriteLeavesNoFile) {
  const SynthPlan plan = plan_synth(*synth_preset("tiny"), model::QuantMix::kF32);
  ThreadPool pool(1);
  Status st = write_synth(plan, 1, "/nonexistent-dir/x.gguf", pool);
  EXPECT_FALSE(st.ok());
}

}  // namespace
}  // namespace dsv4::tools

namespace dsv4::tools {
namespace {

// The committed table of the published Flash q2 layout (tests/data/manifests/flash_q2.json):
// every tensor's name, type and ne, in order, must equal the plan.
TEST(Synth, FlashQ2PlanEqualsCommittedManifest) {
  std::ifstream f(std::string(DSV4_TEST_DATA_DIR) + "/manifests/flash_q2.json");
  ASSERT_TRUE(f.good());
  const std::string text((std::istreambuf_iterator<char>(f)), {});
  const SynthPlan p = plan_synth(*synth_preset("flash"), model::QuantMix::kQ2);
  std::string expect;
  for (const SynthTensor& t : p.tensors) {
    std::string ne;
    for (int d = 0; d < t.n_dims; ++d) {
      if (d) ne += ',';
      ne += std::to_string(t.ne[d]);
    }
    expect += "[\"" + t.name + "\",\"" + std::string(tensor_type_name(t.type)) + "\",[" + ne + "]]";
    ASSERT_NE(text.find(expect), std::string::npos) << "manifest differs at or before " << t.name;
    expect += ",\n";
  }
  EXPECT_NE(text.find("\"tensor_count\":1328"), std::string::npos);
  EXPECT_NE(text.find("\"parameters\":284334567511"), std::string::npos);
  EXPECT_NE(text.find("\"bytes\":86714775900"), std::string::npos);
}

}  // namespace
}  // namespace dsv4::tools
