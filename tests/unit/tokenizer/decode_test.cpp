// tests/unit/tokenizer/decode_test.cpp — UTF-8 repair (Python "replace" semantics), decoding, and
// the streaming decoder never emitting a partial code point.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "tokenizer/utf8.h"
#include "vocab_fixture.h"

namespace dsv4::tokenizer {
namespace {

using testing::load_vocab;
using testing::VocabSpec;
using Ids = std::vector<int32_t>;

const std::string R = "\xEF\xBF\xBD";

TEST(Utf8, RepairMatchesPythonReplace) {
  // Expected values are Python's bytes.decode("utf-8", "replace").encode().
  struct Case {
    std::string in, out;
  };
  const Case cases[] = {
      {"abc", "abc"},
      {"\x80", R},
      {"\xE2\x82", R},                        // truncated 3-byte: one maximal subpart
      {"\xE2\x82x", R + "x"},
      {"\xED\xA0\x80", R + R + R},            // surrogate: ED A0 is not a valid prefix
      {"\xC0\xAF", R + R},                    // overlong lead C0
      {"\xE0\x80\xAF", R + R + R},            // overlong E0 80
      {"\xF0\x9F\x98", R},
      {"\xF0\x9F\x98\x80", "\xF0\x9F\x98\x80"},
      {"\xF4\x90\x80\x80", R + R + R + R},    // above U+10FFFF
      {"\xF8\x88\x80\x80\x80", R + R + R + R + R},
      {"\xFF\xFE", R + R},
      {"a\xC3", "a" + R},
      {"\xE2\x28\xA1", R + "(" + R},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(sanitize_utf8(c.in), c.out);
    EXPECT_EQ(is_valid_utf8(c.in), c.in == c.out);
  }
}

TEST(Utf8, NonFinalHoldsBackOnlyValidPrefixes) {
  std::string out;
  EXPECT_EQ(append_utf8_lossy("ab\xE2\x82", false, out), 2u);
  EXPECT_EQ(out, "ab");
  out.clear();
  EXPECT_EQ(append_utf8_lossy("ab\xED\xA0", false, out), 4u);  // ED A0 can never complete
  EXPECT_EQ(out, "ab" + R + R);
}

TEST(Utf8, GptByteAlphabetIsABijection) {
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(codepoint_to_byte(byte_to_codepoint(static_cast<uint8_t>(b))), b);
  }
  EXPECT_EQ(byte_to_utf8(' '), "Ġ");
  EXPECT_EQ(byte_to_utf8('\n'), "Ċ");
  EXPECT_EQ(byte_to_utf8('a'), "a");
}

VocabSpec euro_vocab() {
  // "€" = E2 82 AC; the vocab has "âĤ" (E2 82) but no full "€", so € spans two tokens.
  VocabSpec s = VocabSpec::bytes_only();
  s.merge(VocabSpec::bl("\xE2"), VocabSpec::bl("\x82"));
  s.add("<think>", 4);
  s.add("<ctl>", 3);
  return s;
}

TEST(StreamDecoder, HoldsBackSplitCodePoints) {
  auto t = load_vocab(euro_vocab());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  const Ids ids = t->encode("€u");
  ASSERT_EQ(ids.size(), 3u);
  StreamDecoder d(*t);
  EXPECT_EQ(*d.push(ids[0]), "");
  EXPECT_EQ(d.pending_bytes(), 2u);
  EXPECT_EQ(*d.push(ids[1]), "€");
  EXPECT_EQ(*d.push(ids[2]), "u");
  EXPECT_EQ(d.flush(), "");

  // A 4-byte emoji fed byte token by byte token: nothing until the last byte.
  StreamDecoder e(*t);
  const std::string emoji = "\xF0\x9F\x98\x80";
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(*e.push(static_cast<uint8_t>(emoji[i])), "");
  EXPECT_EQ(*e.push(static_cast<uint8_t>(emoji[3])), emoji);
}

TEST(StreamDecoder, IllFormedBytesAndFlush) {
  auto t = load_vocab(euro_vocab());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  StreamDecoder d(*t);
  EXPECT_EQ(*d.push(0xFF), R);          // can never start a sequence: replaced at once
  EXPECT_EQ(*d.push(0xE2), "");
  EXPECT_EQ(*d.push('x'), R + "x");     // E2 then 'x': E2 was a dead end
  EXPECT_EQ(*d.push(0xF0), "");
  EXPECT_EQ(d.flush(), R);              // incomplete at the end
  EXPECT_FALSE(d.push(100000).ok());    // unknown id: error, not a crash
}

TEST(StreamDecoder, ConcatenationEqualsDecodeAndChunksAreValid) {
  auto t = load_vocab(euro_vocab());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  std::mt19937 rng(123);
  for (int iter = 0; iter < 500; ++iter) {
    Ids ids;
    const int n = 1 + static_cast<int>(rng() % 24);
    for (int k = 0; k < n; ++k) ids.push_back(static_cast<int32_t>(rng() % t->n_tokens()));
    StreamDecoder d(*t);
    std::string all;
    for (const int32_t id : ids) {
      const std::string chunk = *d.push(id);
      ASSERT_TRUE(is_valid_utf8(chunk));
      ASSERT_LE(d.pending_bytes(), 3u);
      all += chunk;
    }
    all += d.flush();
    EXPECT_EQ(all, *t->decode(ids));
  }
}

TEST(Decode, SpecialsAreRawTextAndCanBeSkipped) {
  auto t = load_vocab(euro_vocab());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  const Ids ids = t->encode("a<think>b<ctl>");
  EXPECT_EQ(*t->decode(ids), "a<think>b<ctl>");
  EXPECT_EQ(*t->decode(ids, true), "a<think>b");  // skip_special drops control tokens only
  const Ids bad = {1, -1};
  auto r = t->decode(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace dsv4::tokenizer
