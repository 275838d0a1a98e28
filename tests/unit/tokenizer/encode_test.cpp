// tests/unit/tokenizer/encode_test.cpp — encoding on a tiny hand-built vocab: merge order, special
// splitting (longest match), every byte representable, pre-token boundaries, round trips, BOS.
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

int32_t byte_id(char c) { return static_cast<uint8_t>(c); }  // the fixture puts byte b at id b

TEST(TokenizerEncode, MergesApplyByRankNotByOrderOfAppearance) {
  // Vocab A: "a b" (rank 0) beats "b c" (rank 1); then "ab c" (rank 2) completes "abc".
  VocabSpec a = VocabSpec::bytes_only();
  const int32_t ab = a.merge("a", "b");
  a.merge("b", "c");
  const int32_t abc = a.merge("ab", "c");
  auto ta = load_vocab(a, "a.gguf");
  ASSERT_TRUE(ta.ok()) << ta.status().to_string();
  EXPECT_EQ(ta->encode("abc"), (Ids{abc}));
  EXPECT_EQ(ta->encode("abd"), (Ids{ab, byte_id('d')}));

  // Vocab B: same merges, "b c" first: "abc" -> a + bc, and "a bc" is not a merge.
  VocabSpec b = VocabSpec::bytes_only();
  const int32_t bc = b.merge("b", "c");
  b.merge("a", "b");
  b.merge("ab", "c");
  auto tb = load_vocab(b, "b.gguf");
  ASSERT_TRUE(tb.ok()) << tb.status().to_string();
  EXPECT_EQ(tb->encode("abc"), (Ids{byte_id('a'), bc}));
}

TEST(TokenizerEncode, EqualRanksMergeLeftmostFirst) {
  VocabSpec s = VocabSpec::bytes_only();
  const int32_t aa = s.merge("a", "a");
  auto t = load_vocab(s);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->encode("aaa"), (Ids{aa, byte_id('a')}));
  EXPECT_EQ(t->encode("aaaa"), (Ids{aa, aa}));
}

TEST(TokenizerEncode, LongWordsUseTheHeapPathWithTheSameResult) {
  VocabSpec s = VocabSpec::bytes_only();
  const int32_t ab = s.merge("a", "b");
  const int32_t abab = s.merge("ab", "ab");
  auto t = load_vocab(s);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  std::string word;
  for (int i = 0; i < 301; ++i) word += "ab";  // 602 letters: one pre-token, heap path
  const Ids ids = t->encode(word);
  ASSERT_EQ(ids.size(), 151u);
  for (size_t i = 0; i + 1 < ids.size(); ++i) EXPECT_EQ(ids[i], abab);
  EXPECT_EQ(ids.back(), ab);
}

TEST(TokenizerEncode, PreTokensBoundMerges) {
  // "a b" merges inside a word, never across the split between "a" and "1" or across a space word.
  VocabSpec s = VocabSpec::bytes_only();
  const int32_t sp_a = s.merge(VocabSpec::bl(" "), "a");
  s.merge("a", "1");
  auto t = load_vocab(s);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->encode(" a1"), (Ids{sp_a, byte_id('1')}));        // digits are split off first
  EXPECT_EQ(t->encode("1234"), (Ids{byte_id('1'), byte_id('2'), byte_id('3'), byte_id('4')}));
}

VocabSpec special_vocab() {
  VocabSpec s = VocabSpec::bytes_only();
  s.add("<s>", 3);
  s.add("</s>", 3);
  s.add("<th", 3);       // a shorter special that is a prefix of <think>
  s.add("<think>", 4);   // user-defined
  s.add("｜DSML｜", 4);
  s.add("<｜User｜>", 3);
  s.add("<｜Assistant｜>", 3);
  s.add("</think>", 4);
  s.add("<｜begin▁of▁sentence｜>", 3);
  s.add("<｜end▁of▁sentence｜>", 3);
  s.bos = 256 + 8;
  s.eos = 256 + 9;
  return s;
}

TEST(TokenizerEncode, SpecialTokensSplitLongestMatchFirst) {
  auto t = load_vocab(special_vocab());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  const int32_t s_open = t->find_token("<s>"), s_close = t->find_token("</s>"), th = t->find_token("<th");
  const int32_t think = t->find_token("<think>"), dsml = t->find_token("｜DSML｜");
  EXPECT_EQ(t->encode("x<think>y"), (Ids{byte_id('x'), think, byte_id('y')}));
  EXPECT_EQ(t->encode("<th>"), (Ids{th, byte_id('>')}));
  EXPECT_EQ(t->encode("<thin"), (Ids{th, byte_id('i'), byte_id('n')}));
  EXPECT_EQ(t->encode("<s></s><s>"), (Ids{s_open, s_close, s_open}));
  const Ids d = t->encode("<｜DSML｜tool");
  ASSERT_EQ(d.size(), 6u);
  EXPECT_EQ(d[0], byte_id('<'));
  EXPECT_EQ(d[1], dsml);
  // Specials off: the text is plain bytes.
  const Ids plain = t->encode("<s>", false);
  EXPECT_EQ(plain, (Ids{byte_id('<'), byte_id('s'), byte_id('>')}));
}

TEST(TokenizerEncode, SpecialTokenEndsThePreTokenBeforeIt) {
  // " a<s> b": the space word before <s> and the one after are separate spans.
  VocabSpec s = special_vocab();
  auto t = load_vocab(s);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  const Ids ids = t->encode(" a<s> b");
  EXPECT_EQ(ids, (Ids{byte_id(' '), byte_id('a'), t->find_token("<s>"), byte_id(' '), byte_id('b')}));
}

TEST(TokenizerEncode, EveryByteHasAToken) {
  auto t = load_vocab(VocabSpec::bytes_only());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  for (int b = 0; b < 256; ++b) {
    const std::string one(1, static_cast<char>(b));
    const int32_t id = t->find_token(byte_to_utf8(static_cast<uint8_t>(b)));
    ASSERT_EQ(id, b);
    EXPECT_EQ(t->token_bytes(id), one) << b;                 // byte token decodes to its byte
    const int32_t ids[1] = {id};
    EXPECT_EQ(*t->decode_bytes(ids), one);
    const Ids enc = t->encode(one);
    if (b < 0x80) {
      EXPECT_EQ(enc, (Ids{b})) << b;
    } else {
      // A lone byte >= 0x80 is ill-formed UTF-8: it is encoded as U+FFFD (EF BF BD).
      EXPECT_EQ(enc, (Ids{0xEF, 0xBF, 0xBD})) << b;
    }
  }
  // Every 2-byte code point's bytes are byte tokens.
  std::string all2;
  for (uint32_t cp = 0x80; cp < 0x800; ++cp) {
    all2 += static_cast<char>(0xC0 | (cp >> 6));
    all2 += static_cast<char>(0x80 | (cp & 0x3F));
  }
  const Ids ids = t->encode(all2);
  EXPECT_EQ(ids.size(), all2.size());
  EXPECT_EQ(*t->decode(ids), all2);
}

TEST(TokenizerEncode, RoundTripsArbitraryText) {
  VocabSpec s = special_vocab();
  s.merge("t", "h");
  s.merge("th", "e");
  s.merge(VocabSpec::bl(" "), "the");
  s.merge(VocabSpec::bl("\xE2"), VocabSpec::bl("\x82"));
  auto t = load_vocab(s);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  const std::string cases[] = {
      "", "the", " the the  the\n\n", "€100 and 你好世界 😀👨‍👩‍👧", "tabs\tand\r\nCRLF  ", "e\xCC\x81", "<s>the</s><think>",
      "｜DSML｜<｜User｜>hi<｜Assistant｜></think>", "12345678901234567890", "\xE2\x80\xA8\xC2\x85 x",
  };
  for (const std::string& c : cases) {
    const Ids ids = t->encode(c);
    EXPECT_EQ(*t->decode(ids), c) << c;
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    std::string txt;
    const int n = static_cast<int>(rng() % 40);
    for (int k = 0; k < n; ++k) {
      const uint32_t pick = rng() % 6;
      const char* const parts[] = {"the", " ", "€", "\n", "<s>", "ab1"};
      txt += parts[pick];
    }
    EXPECT_EQ(*t->decode(t->encode(txt)), txt);
  }
}

TEST(TokenizerEncode, InvalidUtf8IsReplacedNotFatal) {
  auto t = load_vocab(VocabSpec::bytes_only());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  const Ids ids = t->encode("a\xE2\x82z\xFF");
  EXPECT_EQ(*t->decode(ids), "a\xEF\xBF\xBDz\xEF\xBF\xBD");
}

TEST(TokenizerEncode, BosOnRequestOnly) {
  auto t = load_vocab(special_vocab());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EncodeOptions o;
  EXPECT_EQ(*t->encode("a", o), (Ids{byte_id('a')}));
  o.add_bos = true;
  EXPECT_EQ(*t->encode("a", o), (Ids{256 + 8, byte_id('a')}));
  EXPECT_EQ(*t->eos_id(), 256 + 9);
  auto plain = load_vocab(VocabSpec::bytes_only(), "nobos.gguf");
  ASSERT_TRUE(plain.ok());
  auto r = plain->encode("a", o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("bos_token_id"), std::string::npos);
}

TEST(TokenizerEncode, RequireSpecialByName) {
  auto t = load_vocab(special_vocab());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(*t->require_special("<think>"), t->find_token("<think>"));
  EXPECT_TRUE(t->require_ds4_specials().ok()) << t->require_ds4_specials().to_string();
  auto miss = t->require_special("<｜latest_reminder｜>");
  ASSERT_FALSE(miss.ok());
  EXPECT_EQ(miss.status().code(), StatusCode::kNotFound);
  EXPECT_NE(miss.status().message().find("<｜latest_reminder｜>"), std::string::npos);
  // Present only as an ordinary token: also an error, saying so.
  auto ordinary = t->require_special("a");
  ASSERT_FALSE(ordinary.ok());
  EXPECT_NE(ordinary.status().message().find("ordinary"), std::string::npos);
}

TEST(TokenizerEncode, MissingDs4SpecialsAreAllListed) {
  VocabSpec s = VocabSpec::bytes_only();
  s.add("<think>", 3);
  auto t = load_vocab(s);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  const Status st = t->require_ds4_specials();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("<｜User｜>"), std::string::npos);
  EXPECT_NE(st.message().find("｜DSML｜"), std::string::npos);
  EXPECT_EQ(st.message().find("'<think>'"), std::string::npos);
}

}  // namespace
}  // namespace dsv4::tokenizer
