// tests/unit/model/manifest_test.cpp — the DS4 tensor manifest against the published Flash numbers.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "model/quant_policy.h"
#include "model/tensor_manifest.h"

namespace dsv4::model {
namespace {

struct Totals {
  int64_t tensors = 0, params = 0, bytes = 0;
  std::map<TensorType, int64_t> count, type_bytes;
};

Totals totals(const Ds4Shape& s, QuantMix mix) {
  Totals t;
  for (const TensorSpec& spec : ds4_tensor_manifest(s)) {
    const TypeChoice c = choose_tensor_type(mix, spec);
    const int64_t bytes = tensor_row_bytes(c.type, spec.ne[0]) * spec.ne[1] * spec.ne[2] * spec.ne[3];
    t.tensors++;
    t.params += spec.n_elements();
    t.bytes += bytes;
    t.count[c.type]++;
    t.type_bytes[c.type] += bytes;
    EXPECT_FALSE(c.fell_back) << spec.name;
  }
  return t;
}

// docs/spec/gguf.md §3.5: the published q2 and q4 files.
TEST(Manifest, FlashQ2MatchesPublishedFile) {
  const Totals t = totals(ds4_flash_shape(), QuantMix::kQ2);
  EXPECT_EQ(t.tensors, 1328);
  EXPECT_EQ(t.params, 284'334'567'511);
  EXPECT_EQ(t.bytes, 86'714'775'900);  // 80.76 GiB
  EXPECT_EQ(t.count.at(TensorType::kF32), 492);
  EXPECT_EQ(t.count.at(TensorType::kF16), 359);
  EXPECT_EQ(t.count.at(TensorType::kI32), 3);
  EXPECT_EQ(t.count.at(TensorType::kQ8_0), 345);
  EXPECT_EQ(t.count.at(TensorType::kIQ2_XXS), 86);
  EXPECT_EQ(t.count.at(TensorType::kQ2_K), 43);
  EXPECT_EQ(t.type_bytes.at(TensorType::kF32), 1'845'596);
  EXPECT_EQ(t.type_bytes.at(TensorType::kF16), 2'191'345'664);
  EXPECT_EQ(t.type_bytes.at(TensorType::kQ8_0), 6'598'885'376);
  EXPECT_EQ(t.type_bytes.at(TensorType::kIQ2_XXS), 47'613'739'008);
  EXPECT_EQ(t.type_bytes.at(TensorType::kQ2_K), 30'299'652'096);
}

TEST(Manifest, FlashQ4MatchesPublishedFile) {
  const Totals t = totals(ds4_flash_shape(), QuantMix::kQ4);
  EXPECT_EQ(t.bytes, 164'628'167'004);  // 153.32 GiB
  EXPECT_EQ(t.count.at(TensorType::kQ4_K), 129);
}

TEST(Manifest, NamesUniqueAndLayerKindsRight) {
  const Ds4Shape s = ds4_flash_shape();
  EXPECT_TRUE(validate_shape(s).ok());
  std::set<std::string> names;
  for (const TensorSpec& t : ds4_tensor_manifest(s)) EXPECT_TRUE(names.insert(t.name).second) << t.name;
  EXPECT_TRUE(names.count("blk.2.indexer.attn_q_b.weight"));
  EXPECT_FALSE(names.count("blk.3.indexer.attn_q_b.weight"));  // HCA: no indexer
  EXPECT_FALSE(names.count("blk.1.attn_compressor_kv.weight"));  // sliding
  EXPECT_TRUE(names.count("blk.2.ffn_gate_tid2eid.weight"));
  EXPECT_TRUE(names.count("blk.3.exp_probs_b.bias"));
  EXPECT_EQ(s.attention_kind(42), AttentionKind::kCsa);
  EXPECT_EQ(s.attention_kind(41), AttentionKind::kHca);
}

TEST(Manifest, TinyShapeFallsBackWhereBlocksDoNotFit) {
  Ds4Shape s = ds4_flash_shape();
  s.n_layer = 4;
  s.n_embd = 64;
  s.n_vocab = 97;
  s.n_ff_exp = 32;
  s.compress_ratio = {0, 4, 8, 4};
  s.swiglu_clamp_exp.assign(4, 10.0);
  s.swiglu_clamp_shexp.assign(4, 10.0);
  ASSERT_TRUE(validate_shape(s).ok());
  for (const TensorSpec& t : ds4_tensor_manifest(s)) {
    const TypeChoice c = choose_tensor_type(QuantMix::kQ2, t);
    EXPECT_GE(tensor_row_bytes(c.type, t.ne[0]), 0) << t.name;
    if (t.role == TensorRole::kExpertDown) {  // ne0 = 32: Q2_K cannot hold it
      EXPECT_TRUE(c.fell_back);
      EXPECT_EQ(c.type, TensorType::kQ8_0);
    }
  }
}

TEST(Shape, ValidationNamesTheField) {
  Ds4Shape s = ds4_flash_shape();
  s.o_groups = 7;
  Status st = validate_shape(s);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("output_group_count"), std::string::npos);
  s = ds4_flash_shape();
  s.compress_ratio.pop_back();
  EXPECT_NE(validate_shape(s).message().find("compress_ratios"), std::string::npos);
}

}  // namespace
}  // namespace dsv4::model
