// tests/unit/tools/convert_parts_test.cpp — the pieces of dsv4 convert: FP8/E8M0/FP4 decoding,
// the safetensors validator, config.json (legacy vs current keys), tokenizer.json, imatrix.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "gguf/reader.h"
#include "tools/convert.h"
#include "tools/hf_config.h"
#include "tools/hf_tensors.h"
#include "tools/safetensors.h"
#include "tools/synth.h"
#include "tools/vocab.h"
#include "convert_test_util.h"

namespace dsv4::tools {
namespace {

namespace fs = std::filesystem;

std::string tmp(const std::string& name) { return ::testing::TempDir() + "/dsv4_convparts_" + name; }

// ---- decoders ----

TEST(ConvertDecode, Fp8E4M3HandValues) {
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_e4m3_to_f32(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0xb8), -1.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x3c), 1.5f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x40), 2.0f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0xff)));
  EXPECT_TRUE(std::signbit(fp8_e4m3_to_f32(0x80)));
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;
    EXPECT_EQ(fp8_e4m3_to_f32(static_cast<uint8_t>(b)), testutil::ref_e4m3(static_cast<uint8_t>(b))) << b;
  }
}

TEST(ConvertDecode, E8M0AndE2M1HandValues) {
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(e8m0_to_f32(128), 2.0f);
  EXPECT_EQ(e8m0_to_f32(120), 1.0f / 128);
  EXPECT_EQ(e8m0_to_f32(0), std::ldexp(1.0f, -127));
  EXPECT_TRUE(std::isnan(e8m0_to_f32(255)));
  EXPECT_EQ(fp4_e2m1_to_f32(0b0111), 6.0f);
  EXPECT_EQ(fp4_e2m1_to_f32(0b1001), -0.5f);
  EXPECT_EQ(fp4_e2m1_to_f32(0b0011), 1.5f);
  EXPECT_EQ(fp4_e2m1_to_f32(0b0101), 3.0f);
  EXPECT_EQ(fp4_e2m1_to_f32(0b1110), -4.0f);
}

// A hand-built FP4 row and FP8 tile decode to the hand-computed values.
TEST(ConvertDecode, RowsOfFp4AndFp8) {
  const std::string dir = tmp("rows");
  fs::create_directories(dir);
  std::vector<uint8_t> fp4(2 * 32), fp4s = {127, 128, 126, 129};  // [2 rows, 64 cols] -> scales [2, 2]
  fp4[0] = 0x97;  // col 0 = 6 (0b0111), col 1 = -0.5 (0b1001)
  fp4[16] = 0x20; // col 32 = 0, col 33 = 1.0, scale 2
  fp4[17] = 0x0e; // col 34 = -4 · 2
  std::vector<uint8_t> fp8(130 * 2, 0x38), fp8s = {127, 129};  // [2, 130] -> scale [1, 2]
  fp8[130 + 129] = 0x01;  // row 1, column 129
  testutil::write_safetensors(dir + "/model.safetensors",
                              {{"a.weight", "I8", {2, 32}, fp4}, {"a.scale", "F8_E8M0", {2, 2}, fp4s},
                               {"b.weight", "F8_E4M3", {2, 130}, fp8}, {"b.scale", "F8_E8M0", {1, 2}, fp8s}});
  auto st = SafetensorsSet::open_dir(dir);
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  SourcePart p;
  p.tensor = st->find("a.weight");
  p.scale = st->find("a.scale");
  p.encoding = SourceEncoding::kFp4;
  p.matrix_rows = 2;
  p.rows = 2;
  p.cols = 64;
  std::vector<float> out(128);
  decode_rows_f32(p, 0, 2, out.data());
  EXPECT_EQ(out[0], 6.0f);
  EXPECT_EQ(out[1], -0.5f);
  EXPECT_EQ(out[32], 0.0f);
  EXPECT_EQ(out[33], 2.0f);
  EXPECT_EQ(out[34], -8.0f);
  EXPECT_EQ(out[64], 0.0f);
  p = SourcePart{};
  p.tensor = st->find("b.weight");
  p.scale = st->find("b.scale");
  p.encoding = SourceEncoding::kFp8Block;
  p.matrix_rows = 2;
  p.rows = 2;
  p.cols = 130;
  out.assign(260, 0);
  decode_rows_f32(p, 1, 1, out.data());  // row 1 only
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[127], 1.0f);
  EXPECT_EQ(out[128], 4.0f);                       // second 128-column tile, scale 2^2
  EXPECT_EQ(out[129], 4.0f * std::ldexp(1.0f, -9));  // 0x01 · 4
}

// ---- safetensors validation ----

std::vector<uint8_t> image(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> v(8 + header.size() + data_bytes);
  const uint64_t n = header.size();
  std::memcpy(v.data(), &n, 8);
  std::memcpy(v.data() + 8, header.data(), header.size());
  return v;
}

Status parse_status(const std::string& header, size_t data_bytes) {
  const auto img = image(header, data_bytes);
  auto r = SafetensorsFile::parse(img.data(), img.size(), "x.safetensors");
  return r.ok() ? ok_status() : r.status();
}

TEST(Safetensors, ValidatesEverything) {
  EXPECT_TRUE(parse_status(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"__metadata__":{"format":"pt"}})", 24).ok());
  struct Bad {
    std::string header;
    size_t data;
    const char* needle;
  };
  const Bad bad[] = {
      {R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})", 20, "past the"},
      {R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 24, "needs 24 bytes"},
      {R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,2]}})", 2, "unknown dtype 'Q4'"},
      {R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]})", 24, "not well-formed"},
      {R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8, "non-negative"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8, "begin <= end"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12, "overlap"},
      {R"({"a":{"dtype":"F32","shape":[2]}})", 8, "data_offsets"},
      {R"([1,2])", 0, "not an object"},
  };
  for (const Bad& b : bad) {
    const Status s = parse_status(b.header, b.data);
    ASSERT_FALSE(s.ok()) << b.header;
    EXPECT_NE(s.message().find(b.needle), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("x.safetensors"), std::string::npos) << s.message();
  }
  // A header length larger than the file.
  auto img = image("{}", 0);
  const uint64_t huge = 1000;
  std::memcpy(img.data(), &huge, 8);
  auto r = SafetensorsFile::parse(img.data(), img.size(), "x.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("header length 1000"), std::string::npos);
  EXPECT_FALSE(SafetensorsFile::parse(img.data(), 5, "x.safetensors").ok());
}

TEST(Safetensors, ShardIndexMustAgreeWithTheShards) {
  const std::string dir = tmp("index");
  fs::remove_all(dir);
  fs::create_directories(dir);
  testutil::write_safetensors(dir + "/s1.safetensors", {{"a", "F32", {1}, std::vector<uint8_t>(4)}});
  testutil::write_safetensors(dir + "/s2.safetensors", {{"b", "BF16", {2}, std::vector<uint8_t>(4)}});
  testutil::write_text(dir + "/model.safetensors.index.json", R"({"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}})");
  auto ok = SafetensorsSet::open_dir(dir);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->tensor_count(), 2u);
  EXPECT_EQ(ok->file_count(), 2u);
  ASSERT_NE(ok->find("b"), nullptr);
  EXPECT_EQ(ok->find("b")->dtype, StDtype::kBF16);
  testutil::write_text(dir + "/model.safetensors.index.json", R"({"weight_map":{"a":"s1.safetensors","b":"s1.safetensors"}})");
  auto bad = SafetensorsSet::open_dir(dir);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'b'"), std::string::npos) << bad.status().message();
  testutil::write_text(dir + "/model.safetensors.index.json", R"({"weight_map":{"a":"s1.safetensors","b":"../s2.safetensors"}})");
  EXPECT_FALSE(SafetensorsSet::open_dir(dir).ok());
  testutil::write_text(dir + "/model.safetensors.index.json", R"({"weight_map": )");
  EXPECT_FALSE(SafetensorsSet::open_dir(dir).ok());
}

// ---- config.json ----

void expect_same_shape(const model::Ds4Shape& a, const model::Ds4Shape& b) {
  EXPECT_EQ(a.n_layer, b.n_layer);
  EXPECT_EQ(a.n_ctx_train, b.n_ctx_train);
  EXPECT_EQ(a.n_embd, b.n_embd);
  EXPECT_EQ(a.n_vocab, b.n_vocab);
  EXPECT_EQ(a.n_head, b.n_head);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.n_rot, b.n_rot);
  EXPECT_EQ(a.q_lora_rank, b.q_lora_rank);
  EXPECT_EQ(a.o_lora_rank, b.o_lora_rank);
  EXPECT_EQ(a.o_groups, b.o_groups);
  EXPECT_EQ(a.n_swa, b.n_swa);
  EXPECT_EQ(a.compress_ratio, b.compress_ratio);
  EXPECT_EQ(a.idx_n_head, b.idx_n_head);
  EXPECT_EQ(a.idx_head_dim, b.idx_head_dim);
  EXPECT_EQ(a.idx_topk, b.idx_topk);
  EXPECT_EQ(a.n_expert, b.n_expert);
  EXPECT_EQ(a.n_expert_used, b.n_expert_used);
  EXPECT_EQ(a.n_expert_shared, b.n_expert_shared);
  EXPECT_EQ(a.n_ff_exp, b.n_ff_exp);
  EXPECT_EQ(a.n_hash_layers, b.n_hash_layers);
  EXPECT_EQ(a.expert_weights_scale, b.expert_weights_scale);
  EXPECT_EQ(a.expert_weights_norm, b.expert_weights_norm);
  EXPECT_EQ(a.swiglu_clamp_exp, b.swiglu_clamp_exp);
  EXPECT_EQ(a.swiglu_clamp_shexp, b.swiglu_clamp_shexp);
  EXPECT_EQ(a.hc_mult, b.hc_mult);
  EXPECT_EQ(a.hc_sinkhorn_iters, b.hc_sinkhorn_iters);
  EXPECT_EQ(a.hc_eps, b.hc_eps);
  EXPECT_EQ(a.rms_eps, b.rms_eps);
  EXPECT_EQ(a.rope_base, b.rope_base);
  EXPECT_EQ(a.compress_rope_base, b.compress_rope_base);
  EXPECT_EQ(a.yarn_factor, b.yarn_factor);
  EXPECT_EQ(a.yarn_beta_fast, b.yarn_beta_fast);
  EXPECT_EQ(a.yarn_beta_slow, b.yarn_beta_slow);
  EXPECT_EQ(a.yarn_orig_ctx, b.yarn_orig_ctx);
}

TEST(HfConfig, LegacyAndCurrentKeysGiveTheSameShape) {
  model::Ds4Shape no_yarn = *synth_preset("tiny");
  no_yarn.yarn_orig_ctx = 0;
  no_yarn.yarn_factor = 1;
  for (const model::Ds4Shape& s : {*synth_preset("tiny"), model::ds4_flash_shape(), no_yarn}) {
    auto cur = shape_from_hf_config(testutil::config_json(s, false), "current.json");
    auto leg = shape_from_hf_config(testutil::config_json(s, true), "legacy.json");
    ASSERT_TRUE(cur.ok()) << cur.status().to_string();
    ASSERT_TRUE(leg.ok()) << leg.status().to_string();
    expect_same_shape(*cur, *leg);
    expect_same_shape(*cur, s);
  }
}

TEST(HfConfig, FlatRopeParametersAreTheCompressYarn) {
  const model::Ds4Shape s = *synth_preset("tiny");
  nlohmann::json j = nlohmann::json::parse(testutil::config_json(s, false));
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 16.0}, {"original_max_position_embeddings", 64},
                          {"beta_fast", 32.0}, {"beta_slow", 1.0}};
  auto r = shape_from_hf_config(j.dump(), "flat.json");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_same_shape(*r, s);
}

TEST(HfConfig, TheCommittedHfGoldenConfigParses) {
  const std::string p = std::string(DSV4_TEST_DATA_DIR) + "/hf/tiny_a/config.json";
  if (!fs::exists(p)) GTEST_SKIP();
  auto r = load_hf_config(p);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  model::Ds4Shape want = *synth_preset("tiny");  // tiny_a is the tiny preset with 4 output groups
  want.o_groups = 4;
  want.o_lora_rank = 8;
  expect_same_shape(*r, want);
}

TEST(HfConfig, ClearErrors) {
  const model::Ds4Shape s = *synth_preset("tiny");
  const nlohmann::json base = nlohmann::json::parse(testutil::config_json(s, false));
  auto err = [&](const nlohmann::json& j) {
    auto r = shape_from_hf_config(j.dump(), "cfg.json");
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : r.status().message();
  };
  EXPECT_NE(shape_from_hf_config("{\"a\": ", "cfg.json").status().message().find("cfg.json: not well-formed JSON"),
            std::string::npos);
  EXPECT_FALSE(shape_from_hf_config("[1]", "cfg.json").ok());
  nlohmann::json j = base;
  j.erase("hidden_size");
  EXPECT_NE(err(j).find("'hidden_size' is missing"), std::string::npos);
  j = base;
  j["num_attention_heads"] = "four";
  EXPECT_NE(err(j).find("'num_attention_heads' must be an integer"), std::string::npos);
  j = base;
  j.erase("layer_types");
  EXPECT_NE(err(j).find("layer_types"), std::string::npos);
  j = base;
  j["layer_types"][1] = "full_attention";
  EXPECT_NE(err(j).find("layer_types[1]"), std::string::npos);
  j = base;
  j["mlp_layer_types"] = {"moe", "hash_moe", "moe", "moe"};
  EXPECT_NE(err(j).find("hash_moe"), std::string::npos);
  j = base;
  j["num_hash_layers"] = 2;
  EXPECT_NE(err(j).find("disagree"), std::string::npos);
  j = base;
  j["num_key_value_heads"] = 4;
  EXPECT_NE(err(j).find("num_key_value_heads"), std::string::npos);
  j = base;
  j.erase("partial_rotary_factor");
  j["rope_parameters"]["main"].erase("partial_rotary_factor");
  j["rope_parameters"]["compress"].erase("partial_rotary_factor");
  EXPECT_NE(err(j).find("qk_rope_head_dim"), std::string::npos);
  j = nlohmann::json::parse(testutil::config_json(s, true));
  j["compress_ratios"] = {0, 4};
  EXPECT_NE(err(j).find("compress_ratios"), std::string::npos);
}

// ---- tokenizer ----

const char* kTokenizer = R"({
  "added_tokens": [
    {"id": 0, "content": "<｜begin▁of▁sentence｜>", "special": true},
    {"id": 1, "content": "<｜end▁of▁sentence｜>", "special": true},
    {"id": 7, "content": "<think>", "special": false}
  ],
  "model": {"type": "BPE",
            "vocab": {"<｜begin▁of▁sentence｜>": 0, "<｜end▁of▁sentence｜>": 1, "a": 2, "b": 3, "ab": 4, "Ġa": 6},
            "merges": ["a b", ["Ġ", "a"]]}
})";

TEST(Vocab, GapsAddedTokensMergesAndSpecials) {
  auto v = parse_vocab(kTokenizer, "tokenizer.json", "", "", 10);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  ASSERT_EQ(v->tokens.size(), 10u);
  EXPECT_EQ(v->tokens[5], "[PAD5]");
  EXPECT_EQ(v->tokens[9], "[PAD9]");
  EXPECT_EQ(v->tokens[7], "<think>");
  EXPECT_EQ(v->n_padded, 3);
  EXPECT_EQ(v->token_types, (std::vector<int32_t>{3, 3, 1, 1, 1, 5, 1, 4, 5, 5}));
  EXPECT_EQ(v->merges, (std::vector<std::string>{"a b", "Ġ a"}));
  EXPECT_EQ(v->bos_id, 0u);
  EXPECT_EQ(v->eos_id, 1u);
  EXPECT_TRUE(v->add_bos);
  auto c = parse_vocab(kTokenizer, "tokenizer.json",
                       R"({"bos_token": {"content": "a"}, "eos_token": "b", "add_bos_token": false, "chat_template": "{{x}}"})",
                       "tokenizer_config.json", 0);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->tokens.size(), 8u);
  EXPECT_EQ(c->bos_id, 2u);
  EXPECT_EQ(c->eos_id, 3u);
  EXPECT_FALSE(c->add_bos);
  EXPECT_EQ(c->chat_template, "{{x}}");
  EXPECT_FALSE(parse_vocab(kTokenizer, "t.json", "", "", 5).ok());  // id 7 >= vocab_size 5
  EXPECT_FALSE(parse_vocab("{\"model\": 3}", "t.json", "", "", 0).ok());
  EXPECT_FALSE(parse_vocab("{{", "t.json", "", "", 0).ok());
  EXPECT_FALSE(parse_vocab(kTokenizer, "t.json", R"({"bos_token": "zzz"})", "c.json", 0).ok());
}

TEST(Vocab, VocabOnlyGguf) {
  const std::string dir = tmp("vocab_only");
  fs::remove_all(dir);
  fs::create_directories(dir);
  testutil::write_text(dir + "/tokenizer.json", kTokenizer);
  ThreadPool pool(1);
  ConvertOptions o;
  o.hf_dir = dir;
  o.out = dir + "/vocab.gguf";
  o.vocab_only = true;
  auto r = convert_checkpoint(o, pool);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto f = gguf::GgufFile::open(o.out);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->tensors().size(), 0u);
  EXPECT_EQ(*f->get_string("general.architecture"), "deepseek4");
  EXPECT_EQ(*f->get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(*f->get_string("tokenizer.ggml.pre"), "joyai-llm");
  auto toks = f->get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(toks.ok());
  EXPECT_EQ(toks->size(), 8u);
  EXPECT_EQ((*toks)[7], "<think>");
  EXPECT_EQ(*f->get_int("tokenizer.ggml.bos_token_id"), 0);
  EXPECT_EQ(*f->get_int("tokenizer.ggml.eos_token_id"), 1);
  EXPECT_EQ(*f->get_int_array("tokenizer.ggml.token_type"), (std::vector<int64_t>{3, 3, 1, 1, 1, 5, 1, 4}));
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.merges")->size(), 2u);
  EXPECT_TRUE(*f->get_bool("tokenizer.ggml.add_bos_token"));
  // Without any tokenizer it is an error and nothing is written.
  fs::remove(dir + "/tokenizer.json");
  o.out = dir + "/none.gguf";
  EXPECT_FALSE(convert_checkpoint(o, pool).ok());
  EXPECT_FALSE(fs::exists(o.out));
}

TEST(Vocab, FullConversionCarriesTheTokenizerPaddedToVocabSize) {
  const model::Ds4Shape s = *synth_preset("tiny");
  const std::string dir = tmp("with_tok");
  fs::remove_all(dir);
  testutil::write_checkpoint_files(dir, testutil::Generator(s, testutil::Scheme::kOfficial, 1).build().tensors, 0);
  testutil::write_text(dir + "/config.json", testutil::config_json(s, true));
  testutil::write_text(dir + "/tokenizer.json", kTokenizer);
  ThreadPool pool(2);
  ConvertOptions o;
  o.hf_dir = dir;
  o.out = dir + "/m.gguf";
  o.mix = model::QuantMix::kF16;
  auto r = convert_checkpoint(o, pool);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto f = gguf::GgufFile::open(o.out);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.tokens")->size(), 97u);
  EXPECT_EQ(*f->get_int("deepseek4.vocab_size"), 97);
}

// ---- imatrix ----

void write_imatrix(const std::string& path, const std::vector<std::pair<std::string, std::vector<float>>>& entries,
                   int32_t ncall) {
  std::ofstream f(path, std::ios::binary);
  const int32_t n = static_cast<int32_t>(entries.size());
  f.write(reinterpret_cast<const char*>(&n), 4);
  for (const auto& [name, v] : entries) {
    const int32_t len = static_cast<int32_t>(name.size()), nv = static_cast<int32_t>(v.size());
    f.write(reinterpret_cast<const char*>(&len), 4);
    f.write(name.data(), len);
    f.write(reinterpret_cast<const char*>(&ncall), 4);
    f.write(reinterpret_cast<const char*>(&nv), 4);
    f.write(reinterpret_cast<const char*>(v.data()), nv * 4);
  }
  const int32_t chunks = 10;
  f.write(reinterpret_cast<const char*>(&chunks), 4);
}

TEST(Imatrix, ReadsLegacyDatAndWeightsTheQuantizers) {
  const std::string dir = tmp("imatrix");
  fs::remove_all(dir);
  model::Ds4Shape s = with_layers(*synth_preset("tiny"), 2);
  s.n_embd = 256;
  s.n_ff_exp = 256;
  s.n_expert = 4;
  testutil::write_checkpoint_files(dir, testutil::Generator(s, testutil::Scheme::kOfficial, 2).build().tensors, 0);
  testutil::write_text(dir + "/config.json", testutil::config_json(s, false));
  const std::string im = dir + "/imatrix.dat";
  write_imatrix(im, {{"blk.1.ffn_gate_exps.weight", std::vector<float>(256 * 4, 4.0f)},
                     {"blk.1.ffn_down_exps.weight.expert.2", std::vector<float>(256, 2.0f)},
                     {"blk.0.attn_q_a.weight", std::vector<float>(256, 1.0f)}},
                2);
  auto loaded = load_imatrix(im);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->size(), 3u);
  EXPECT_EQ(loaded->at("blk.1.ffn_gate_exps.weight")[5], 2.0f);  // divided by ncall
  ThreadPool pool(2);
  ConvertOptions o;
  o.hf_dir = dir;
  o.out = dir + "/q2.gguf";
  o.mix = model::QuantMix::kQ2;
  o.imatrix = im;
  auto r = convert_checkpoint(o, pool);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->imatrix_used, 3u);
  auto f = gguf::GgufFile::open(o.out);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f->get_int("quantize.imatrix.entries_count"), 3);
  // A wrong-length entry is an error naming it.
  write_imatrix(im, {{"blk.1.ffn_gate_exps.weight", std::vector<float>(100, 1.0f)}}, 1);
  o.out = dir + "/bad.gguf";
  auto bad = convert_checkpoint(o, pool);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("blk.1.ffn_gate_exps.weight"), std::string::npos);
  EXPECT_FALSE(fs::exists(o.out));
  // Truncated.
  fs::resize_file(im, 10);
  EXPECT_FALSE(load_imatrix(im).ok());
}

}  // namespace
}  // namespace dsv4::tools
