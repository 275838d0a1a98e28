// tests/unit/tokenizer/load_errors_test.cpp — malformed tokenizer.ggml.* keys give clear errors
// (naming the key, the index and what was expected), never crashes.
#include <gtest/gtest.h>

#include <string>

#include "vocab_fixture.h"

namespace dsv4::tokenizer {
namespace {

using testing::load_vocab;
using testing::VocabSpec;

void expect_error(const VocabSpec& s, StatusCode code, const std::vector<std::string>& needles) {
  auto t = load_vocab(s, "bad.gguf");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), code) << t.status().to_string();
  for (const std::string& n : needles) {
    EXPECT_NE(t.status().message().find(n), std::string::npos) << "'" << n << "' not in: " << t.status().to_string();
  }
}

TEST(TokenizerLoad, VocabOnlyFileLoads) {
  auto t = load_vocab(VocabSpec::bytes_only());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->n_tokens(), 256);
}

TEST(TokenizerLoad, MergeReferencingUnknownToken) {
  VocabSpec s = VocabSpec::bytes_only();
  s.merges.push_back("a zz");
  expect_error(s, StatusCode::kCorrupt, {"tokenizer.ggml.merges[0]", "'zz' is not a token"});
}

TEST(TokenizerLoad, MergeWhoseResultIsNotAToken) {
  VocabSpec s = VocabSpec::bytes_only();
  s.merges.push_back("a b");  // "ab" never added
  expect_error(s, StatusCode::kCorrupt, {"merges[0]", "'ab' is not in the vocab"});
}

TEST(TokenizerLoad, MergeWithoutTwoParts) {
  for (const char* m : {"ab", "a  b", " a", "a b c"}) {
    VocabSpec s = VocabSpec::bytes_only();
    s.merges.push_back(m);
    expect_error(s, StatusCode::kCorrupt, {"merges[0]", "two tokens separated by one space"});
  }
}

TEST(TokenizerLoad, WrongTypes) {
  VocabSpec a = VocabSpec::bytes_only();
  a.tokens_as_ints = true;
  expect_error(a, StatusCode::kInvalidArgument, {"tokenizer.ggml.tokens"});
  VocabSpec b = VocabSpec::bytes_only();
  b.types_as_strings = true;
  expect_error(b, StatusCode::kInvalidArgument, {"tokenizer.ggml.token_type"});
}

TEST(TokenizerLoad, MissingMerges) {
  VocabSpec s = VocabSpec::bytes_only();
  s.omit_merges = true;
  expect_error(s, StatusCode::kNotFound, {"tokenizer.ggml.merges"});
}

TEST(TokenizerLoad, TokenTypeProblems) {
  VocabSpec a = VocabSpec::bytes_only();
  a.types.pop_back();
  expect_error(a, StatusCode::kCorrupt, {"token_type has 255 entries", "256"});
  VocabSpec b = VocabSpec::bytes_only();
  b.types[3] = 9;
  expect_error(b, StatusCode::kCorrupt, {"token_type[3] is 9"});
}

TEST(TokenizerLoad, UnsupportedModelOrPre) {
  VocabSpec a = VocabSpec::bytes_only();
  a.model = "llama";
  expect_error(a, StatusCode::kUnsupported, {"tokenizer.ggml.model", "'llama'"});
  VocabSpec b = VocabSpec::bytes_only();
  b.pre = "qwen2";
  expect_error(b, StatusCode::kUnsupported, {"tokenizer.ggml.pre", "'qwen2'"});
  VocabSpec c = VocabSpec::bytes_only();
  c.pre = "deepseek-v3";
  EXPECT_TRUE(load_vocab(c).ok());
}

TEST(TokenizerLoad, MissingByteToken) {
  VocabSpec s = VocabSpec::bytes_only();
  s.tokens[0x41] = "not-A";
  expect_error(s, StatusCode::kCorrupt, {"byte-level token 'A'", "0x41"});
}

TEST(TokenizerLoad, DuplicateOrdinaryToken) {
  VocabSpec s = VocabSpec::bytes_only();
  s.add("a");
  expect_error(s, StatusCode::kCorrupt, {"tokens[256]", "duplicates token 97"});
}

TEST(TokenizerLoad, BosOutOfRange) {
  VocabSpec s = VocabSpec::bytes_only();
  s.bos = 999;
  expect_error(s, StatusCode::kCorrupt, {"bos_token_id is 999"});
}

TEST(TokenizerLoad, ErrorsNameTheFile) {
  VocabSpec s = VocabSpec::bytes_only();
  s.model = "bert";
  auto t = load_vocab(s, "named.gguf");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("named.gguf"), std::string::npos) << t.status().to_string();
}

TEST(TokenizerLoad, NotAGgufFile) {
  auto t = Tokenizer::open("/nonexistent/dir/x.gguf");
  EXPECT_FALSE(t.ok());
}

}  // namespace
}  // namespace dsv4::tokenizer
