// tests/unit/tools/convert_test.cpp — dsv4 convert end to end: both naming schemes, sharded and
// single-file, every --type, values read back; legacy vs current config bytes; failure cleanup.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "backend/cpu/quant.h"
#include "gguf/reader.h"
#include "model/quant_policy.h"
#include "tools/convert.h"
#include "tools/safetensors.h"
#include "tools/synth.h"
#include "convert_test_util.h"

namespace dsv4::tools {
namespace {

namespace fs = std::filesystem;
using testutil::Checkpoint;
using testutil::Scheme;

std::string tmp(const std::string& name) {
  const std::string p = ::testing::TempDir() + "/dsv4_convert_" + name;
  return p;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

model::Ds4Shape tiny() { return *synth_preset("tiny"); }

// Tiny but wide enough (row length 256) for Q2_K / Q4_K / IQ2_XXS experts.
model::Ds4Shape wide() {
  model::Ds4Shape s = with_layers(tiny(), 2);
  s.n_embd = 256;
  s.n_ff_exp = 256;
  s.n_expert = 4;
  return s;
}

Checkpoint make_checkpoint(const std::string& dir, const model::Ds4Shape& s, Scheme scheme, int shards, bool legacy,
                           uint32_t seed = 7) {
  fs::remove_all(dir);
  Checkpoint ck = testutil::Generator(s, scheme, seed).build();
  testutil::write_checkpoint_files(dir, ck.tensors, shards);
  testutil::write_text(dir + "/config.json", testutil::config_json(s, legacy));
  return ck;
}

Result<ConvertSummary> run_convert(const std::string& dir, const std::string& out, model::QuantMix mix,
                                   std::vector<std::string>* notes = nullptr, const std::string& imatrix = "") {
  ThreadPool pool(2);
  ConvertOptions o;
  o.hf_dir = dir;
  o.out = out;
  o.mix = mix;
  o.imatrix = imatrix;
  o.chunk_bytes = 4096;  // many chunks per tensor, to exercise the chunking
  ConvertCallbacks cb;
  cb.note = [notes](const std::string& s) {
    if (notes) notes->push_back(s);
  };
  return convert_checkpoint(o, pool, cb);
}

struct ErrorBound {
  double rel_rmse;  // < 0: per-element bound below
  double rel_elem;
};

ErrorBound bound_for(TensorType t) {
  switch (t) {
    case TensorType::kF32: return {-1, 0};
    case TensorType::kF16: return {-1, 1.0 / 2048};
    case TensorType::kBF16: return {-1, 1.0 / 256};
    case TensorType::kQ8_0: return {0.01, 0};
    case TensorType::kQ4_K: return {0.12, 0};
    case TensorType::kQ2_K: return {0.45, 0};
    case TensorType::kIQ2_XXS: return {0.5, 0};
    default: return {0.5, 0};
  }
}

// Every manifest tensor present with its type and ne, values equal to the source within the type's error.
void check_gguf(const std::string& path, const model::Ds4Shape& s, model::QuantMix mix, const Checkpoint& ck) {
  auto f = gguf::GgufFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  const auto manifest = model::ds4_tensor_manifest(s);
  ASSERT_EQ(f->tensors().size(), manifest.size());
  auto shape = model::shape_from_gguf(*f);
  ASSERT_TRUE(shape.ok()) << shape.status().to_string();
  EXPECT_EQ(shape->compress_ratio, s.compress_ratio);
  EXPECT_EQ(shape->n_hash_layers, s.n_hash_layers);
  EXPECT_EQ(shape->n_rot, s.n_rot);
  EXPECT_EQ(shape->yarn_orig_ctx, s.yarn_orig_ctx);
  for (size_t i = 0; i < manifest.size(); ++i) {
    const model::TensorSpec& spec = manifest[i];
    const gguf::TensorInfo& t = f->tensors()[i];
    ASSERT_EQ(t.name, spec.name);
    const TensorType want = model::choose_tensor_type(mix, spec).type;
    ASSERT_EQ(t.type, want) << spec.name;
    ASSERT_EQ(static_cast<int>(t.n_dims), spec.n_dims) << spec.name;
    for (int d = 0; d < spec.n_dims; ++d) ASSERT_EQ(t.ne[d], spec.ne[d]) << spec.name;
    if (t.type == TensorType::kI32) {
      const auto& ids = ck.expected_ids.at(spec.name);
      ASSERT_EQ(t.n_bytes, ids.size() * 4);
      EXPECT_EQ(std::memcmp(t.data, ids.data(), t.n_bytes), 0) << spec.name;
      continue;
    }
    const std::vector<float>& exp = ck.expected.at(spec.name);
    ASSERT_EQ(static_cast<int64_t>(exp.size()), spec.n_elements()) << spec.name;
    const int64_t n = spec.ne[0], rows = spec.n_elements() / n;
    const int64_t rb = tensor_row_bytes(t.type, n);
    std::vector<float> got(static_cast<size_t>(spec.n_elements()));
    const cpu::TypeKernels* k = cpu::type_kernels(t.type);
    ASSERT_NE(k, nullptr);
    for (int64_t r = 0; r < rows; ++r) k->dequantize_row(t.data + r * rb, got.data() + r * n, n);
    const ErrorBound b = bound_for(t.type);
    if (b.rel_rmse < 0) {
      for (size_t j = 0; j < exp.size(); ++j) {
        if (t.type == TensorType::kF32) {
          ASSERT_EQ(f32_bits(got[j]), f32_bits(exp[j])) << spec.name << " [" << j << "]";
        } else {
          ASSERT_LE(std::fabs(got[j] - exp[j]), std::fabs(exp[j]) * b.rel_elem + 6e-8) << spec.name << " [" << j << "]";
        }
      }
    } else {
      double se = 0, ss = 0;
      for (size_t j = 0; j < exp.size(); ++j) {
        se += (got[j] - exp[j]) * static_cast<double>(got[j] - exp[j]);
        ss += exp[j] * static_cast<double>(exp[j]);
      }
      const double rel = std::sqrt(se / std::max(ss, 1e-30));
      EXPECT_LT(rel, b.rel_rmse) << spec.name << " as " << tensor_type_name(t.type);
    }
  }
}

constexpr model::QuantMix kAllMixes[] = {model::QuantMix::kF32, model::QuantMix::kF16, model::QuantMix::kBF16,
                                         model::QuantMix::kQ8_0, model::QuantMix::kQ4, model::QuantMix::kQ2};

struct Case {
  Scheme scheme;
  int shards;
  const char* name;
};

class ConvertAll : public ::testing::TestWithParam<Case> {};

TEST_P(ConvertAll, EveryTypeReadsBackTheSourceValues) {
  const Case c = GetParam();
  for (const model::Ds4Shape& s : {tiny(), wide()}) {
    const std::string dir = tmp(std::string(c.name) + "_ck" + std::to_string(s.n_embd));
    const Checkpoint ck = make_checkpoint(dir, s, c.scheme, c.shards, /*legacy=*/false);
    for (model::QuantMix mix : kAllMixes) {
      SCOPED_TRACE(std::string(c.name) + " D=" + std::to_string(s.n_embd) + " " + model::quant_mix_name(mix));
      const std::string out = dir + "/out_" + model::quant_mix_name(mix) + ".gguf";
      auto r = run_convert(dir, out, mix);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      EXPECT_EQ(r->tensor_count, model::ds4_tensor_manifest(s).size());
      EXPECT_FALSE(fs::exists(out + ".tmp"));
      check_gguf(out, s, mix, ck);
      fs::remove(out);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Schemes, ConvertAll,
                         ::testing::Values(Case{Scheme::kOfficial, 0, "official_single"},
                                           Case{Scheme::kOfficial, 3, "official_sharded"},
                                           Case{Scheme::kOfficialModelPrefix, 2, "official_model_prefix"},
                                           Case{Scheme::kHf, 0, "hf_single"}, Case{Scheme::kHf, 4, "hf_sharded"}),
                         [](const ::testing::TestParamInfo<Case>& p) { return std::string(p.param.name); });

TEST(Convert, WideQ2UsesTheRealExpertTypes) {
  const model::Ds4Shape s = wide();
  const std::string dir = tmp("wide_types");
  make_checkpoint(dir, s, Scheme::kOfficial, 0, false);
  auto r = run_convert(dir, dir + "/q2.gguf", model::QuantMix::kQ2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto f = gguf::GgufFile::open(dir + "/q2.gguf");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->find_tensor("blk.1.ffn_gate_exps.weight")->type, TensorType::kIQ2_XXS);
  EXPECT_EQ(f->find_tensor("blk.1.ffn_down_exps.weight")->type, TensorType::kQ2_K);
  EXPECT_EQ(f->find_tensor("blk.1.attn_q_a.weight")->type, TensorType::kQ8_0);
}

TEST(Convert, LegacyAndCurrentConfigKeysGiveIdenticalBytes) {
  for (const model::Ds4Shape& s : {tiny(), wide()}) {
    const std::string a = tmp("cfg_current"), b = tmp("cfg_legacy");
    make_checkpoint(a, s, Scheme::kOfficial, 0, /*legacy=*/false, 11);
    make_checkpoint(b, s, Scheme::kOfficial, 2, /*legacy=*/true, 11);
    ASSERT_NE(slurp(a + "/config.json"), slurp(b + "/config.json"));
    ASSERT_TRUE(run_convert(a, a + "/o.gguf", model::QuantMix::kQ8_0).ok());
    auto r = run_convert(b, b + "/o.gguf", model::QuantMix::kQ8_0);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    const std::string x = slurp(a + "/o.gguf"), y = slurp(b + "/o.gguf");
    EXPECT_GT(x.size(), 1000u);
    EXPECT_TRUE(x == y) << "legacy-key and current-key configs produced different GGUFs";
  }
}

TEST(Convert, FallbacksAndDroppedTensorsAreReported) {
  const std::string dir = tmp("notes");
  Checkpoint ck = testutil::Generator(tiny(), Scheme::kOfficial, 3).build();
  ck.tensors.push_back({"mtp.0.e_proj.weight", "BF16", {2, 2}, std::vector<uint8_t>(8)});
  ck.tensors.push_back({"layers.0.attn.rotary_emb.inv_freq", "F32", {4}, std::vector<uint8_t>(16)});
  fs::remove_all(dir);
  testutil::write_checkpoint_files(dir, ck.tensors, 0);
  testutil::write_text(dir + "/config.json", testutil::config_json(tiny(), false));
  std::vector<std::string> notes;
  auto r = run_convert(dir, dir + "/o.gguf", model::QuantMix::kQ2, &notes);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->ignored_sources, 2u);
  EXPECT_GT(r->fallbacks, 0u);
  std::string all;
  for (const auto& n : notes) all += n + "\n";
  EXPECT_NE(all.find("mtp.0.e_proj.weight"), std::string::npos) << all;
  EXPECT_NE(all.find("does not fit iq2_xxs"), std::string::npos) << all;
  EXPECT_NE(all.find("no tokenizer.json"), std::string::npos) << all;
}

TEST(Convert, HfFp8WithWeightScaleInv) {
  const std::string dir = tmp("hf_fp8");
  Checkpoint ck = testutil::Generator(tiny(), Scheme::kHf, 9).build();
  std::vector<float> want(24 * 64);
  for (auto& t : ck.tensors)
    if (t.name == "model.layers.0.self_attn.q_a_proj.weight") {
      t.dtype = "F8_E4M3";
      t.bytes.assign(24 * 64, 0);
      for (size_t i = 0; i < t.bytes.size(); ++i) {
        t.bytes[i] = static_cast<uint8_t>((i * 37) % 256);
        if ((t.bytes[i] & 0x7f) == 0x7f) t.bytes[i] = 0x38;
        want[i] = testutil::ref_e4m3(t.bytes[i]) * 0.25f;
      }
    }
  const float inv = 0.25f;
  std::vector<uint8_t> sb(4);
  std::memcpy(sb.data(), &inv, 4);
  ck.tensors.push_back({"model.layers.0.self_attn.q_a_proj.weight_scale_inv", "F32", {1, 1}, sb});
  fs::remove_all(dir);
  testutil::write_checkpoint_files(dir, ck.tensors, 0);
  testutil::write_text(dir + "/config.json", testutil::config_json(tiny(), false));
  auto r = run_convert(dir, dir + "/o.gguf", model::QuantMix::kF32);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto f = gguf::GgufFile::open(dir + "/o.gguf");
  ASSERT_TRUE(f.ok());
  const gguf::TensorInfo* t = f->find_tensor("blk.0.attn_q_a.weight");
  ASSERT_TRUE(t != nullptr && t->n_bytes == want.size() * 4);
  EXPECT_EQ(std::memcmp(t->data, want.data(), t->n_bytes), 0);
}

// ---- failures: a clear error naming the problem, and no output file left behind ----

void expect_failure(const std::string& dir, const std::vector<std::string>& needles) {
  const std::string out = dir + "/bad.gguf";
  auto r = run_convert(dir, out, model::QuantMix::kQ8_0);
  ASSERT_FALSE(r.ok());
  const std::string msg = r.status().to_string();
  for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".tmp"));
}

Checkpoint base_ck() { return testutil::Generator(tiny(), Scheme::kOfficial, 5).build(); }

void write_dir(const std::string& dir, const std::vector<testutil::RawTensor>& ts, int shards = 0) {
  fs::remove_all(dir);
  testutil::write_checkpoint_files(dir, ts, shards);
  testutil::write_text(dir + "/config.json", testutil::config_json(tiny(), false));
}

TEST(ConvertFailure, TruncatedSafetensors) {
  const std::string dir = tmp("f_trunc");
  write_dir(dir, base_ck().tensors);
  const std::string p = dir + "/model.safetensors";
  fs::resize_file(p, fs::file_size(p) - 100);
  expect_failure(dir, {"model.safetensors", "truncated"});
}

TEST(ConvertFailure, HeaderLiesAboutASize) {
  const std::string dir = tmp("f_lie");
  Checkpoint ck = base_ck();
  for (auto& t : ck.tensors)
    if (t.name == "layers.1.attn.wq_b.weight") t.bytes.resize(t.bytes.size() - 24);  // shape says more
  write_dir(dir, ck.tensors);
  expect_failure(dir, {"layers.1.attn.wq_b.weight", "data_offsets span"});
}

TEST(ConvertFailure, GarbledConfig) {
  const std::string dir = tmp("f_cfg");
  write_dir(dir, base_ck().tensors);
  testutil::write_text(dir + "/config.json", "{\"hidden_size\": 64, \"num_hidden_layers\": [");
  expect_failure(dir, {"config.json", "JSON"});
}

TEST(ConvertFailure, ConfigMissingAKey) {
  const std::string dir = tmp("f_cfg_key");
  write_dir(dir, base_ck().tensors);
  std::string c = testutil::config_json(tiny(), false);
  const size_t at = c.find("\"hidden_size\"");
  c.replace(at, std::string("\"hidden_size\"").size(), "\"hidden_sizzle\"");
  testutil::write_text(dir + "/config.json", c);
  expect_failure(dir, {"config.json", "'hidden_size'", "missing"});
}

TEST(ConvertFailure, TensorWithTheWrongShape) {
  const std::string dir = tmp("f_shape");
  Checkpoint ck = base_ck();
  for (auto& t : ck.tensors)
    if (t.name == "layers.2.attn_norm.weight") {
      t.shape = {63};
      t.bytes.resize(63 * 2);
    }
  write_dir(dir, ck.tensors);
  expect_failure(dir, {"layers.2.attn_norm.weight", "[63]", "expected [64]", "blk.2.attn_norm.weight"});
}

TEST(ConvertFailure, MissingTensor) {
  const std::string dir = tmp("f_missing");
  Checkpoint ck = base_ck();
  std::erase_if(ck.tensors, [](const auto& t) { return t.name == "layers.3.ffn.experts.5.w2.weight"; });
  write_dir(dir, ck.tensors, 2);
  expect_failure(dir, {"missing", "blk.3.ffn_down_exps.weight expert 5"});
}

TEST(ConvertFailure, MissingScale) {
  const std::string dir = tmp("f_scale");
  Checkpoint ck = base_ck();
  std::erase_if(ck.tensors, [](const auto& t) { return t.name == "layers.0.attn.wkv.scale"; });
  write_dir(dir, ck.tensors);
  expect_failure(dir, {"layers.0.attn.wkv.weight", "scale"});
}

TEST(ConvertFailure, UnknownTensor) {
  const std::string dir = tmp("f_unknown");
  Checkpoint ck = base_ck();
  ck.tensors.push_back({"layers.0.attn.mystery.weight", "F32", {2}, std::vector<uint8_t>(8)});
  write_dir(dir, ck.tensors);
  expect_failure(dir, {"unknown", "layers.0.attn.mystery.weight"});
}

TEST(ConvertFailure, ExpertIdOutOfRange) {
  const std::string dir = tmp("f_tid");
  Checkpoint ck = base_ck();
  for (auto& t : ck.tensors)
    if (t.name == "layers.0.ffn.gate.tid2eid") {
      const int64_t bad = 8;  // == n_expert
      std::memcpy(t.bytes.data() + 8 * 13, &bad, 8);
    }
  write_dir(dir, ck.tensors);
  expect_failure(dir, {"layers.0.ffn.gate.tid2eid", "[6, 1] = 8"});
}

TEST(ConvertFailure, ShardIndexNamesAMissingShard) {
  const std::string dir = tmp("f_shard");
  write_dir(dir, base_ck().tensors, 3);
  fs::remove(dir + "/model-00002-of-00003.safetensors");
  expect_failure(dir, {"model-00002-of-00003.safetensors"});
}

// Writes a larger official-format checkpoint for manual RSS / speed measurements of `dsv4 convert`
// (DSV4_CONVERT_BIG_DIR=/path unit_tools --gtest_filter=*BigCheckpoint*); skipped otherwise.
TEST(Convert, BigCheckpointForManualMeasurement) {
  const char* dir = std::getenv("DSV4_CONVERT_BIG_DIR");
  if (dir == nullptr) GTEST_SKIP() << "set DSV4_CONVERT_BIG_DIR to write it";
  model::Ds4Shape s = with_layers(tiny(), 4);
  s.n_embd = 1024;
  s.n_ff_exp = 1024;
  s.n_expert = 64;
  s.n_vocab = 16384;
  s.q_lora_rank = 256;
  s.o_lora_rank = 128;
  fs::remove_all(dir);
  Checkpoint ck = testutil::Generator(s, Scheme::kOfficial, 1, /*keep_expected=*/false).build();
  testutil::write_checkpoint_files(dir, ck.tensors, 4);
  testutil::write_text(std::string(dir) + "/config.json", testutil::config_json(s, true));
}

// ---- the transformers save_pretrained goldens committed under tests/data/hf ----

TEST(Convert, HfGoldenCheckpointsConvertExactly) {
  for (const char* c : {"tiny_a", "tiny_d", "tiny_e"}) {
    const std::string dir = std::string(DSV4_TEST_DATA_DIR) + "/hf/" + c;
    if (!fs::exists(dir + "/model.safetensors")) GTEST_SKIP() << dir << " not present";
    const std::string out = tmp(std::string("golden_") + c + ".gguf");
    auto r = run_convert(dir, out, model::QuantMix::kF32);
    ASSERT_TRUE(r.ok()) << c << ": " << r.status().to_string();
    auto f = gguf::GgufFile::open(out);
    ASSERT_TRUE(f.ok());
    auto st = SafetensorsSet::open_dir(dir);
    ASSERT_TRUE(st.ok());
    // Spot checks: F32/BF16 sources become exactly their f32 values; experts stack expert-major;
    // tid2eid narrows to I32.
    auto same = [&](const char* gguf_name, const char* src, size_t offset_elems) {
      const gguf::TensorInfo* t = f->find_tensor(gguf_name);
      const StTensor* s = st->find(src);
      ASSERT_NE(t, nullptr) << gguf_name;
      ASSERT_NE(s, nullptr) << src;
      ASSERT_EQ(t->type, TensorType::kF32);
      ASSERT_LE((offset_elems + static_cast<size_t>(s->n_elements())) * 4, t->n_bytes);
      for (int64_t i = 0; i < s->n_elements(); ++i) {
        float want, got;
        if (s->dtype == StDtype::kBF16) {
          uint16_t b;
          std::memcpy(&b, s->data + 2 * i, 2);
          want = bf16_to_f32(b);
        } else {
          ASSERT_EQ(s->dtype, StDtype::kF32);
          std::memcpy(&want, s->data + 4 * i, 4);
        }
        std::memcpy(&got, t->data + 4 * (offset_elems + static_cast<size_t>(i)), 4);
        ASSERT_EQ(f32_bits(got), f32_bits(want)) << gguf_name << " vs " << src << " [" << i << "]";
      }
    };
    same("token_embd.weight", "model.embed_tokens.weight", 0);
    same("output.weight", "head.weight", 0);
    same("blk.1.attn_kv_a_norm.weight", "model.layers.1.attn.norm.weight", 0);
    const gguf::TensorInfo* g = f->find_tensor("blk.1.ffn_gate_exps.weight");
    same("blk.1.ffn_gate_exps.weight", "model.layers.1.ffn.experts.3.w1.weight", static_cast<size_t>(3 * g->ne[0] * g->ne[1]));
    const gguf::TensorInfo* tid = f->find_tensor("blk.0.ffn_gate_tid2eid.weight");
    const StTensor* src = st->find("model.layers.0.ffn.gate.tid2eid");
    ASSERT_TRUE(tid && src);
    for (int64_t i = 0; i < src->n_elements(); ++i) {
      int64_t a;
      int32_t b;
      std::memcpy(&a, src->data + 8 * i, 8);
      std::memcpy(&b, tid->data + 4 * i, 4);
      ASSERT_EQ(a, b);
    }
  }
}

}  // namespace
}  // namespace dsv4::tools
