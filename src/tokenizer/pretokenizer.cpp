// tokenizer/pretokenizer.cpp — the hand-written scanner for the DeepSeek V3 splits (rules in the
// header). Works on decoded code points; every level walks one piece [b, e) as its own subject.
#include "tokenizer/pretokenizer.h"

#include "tokenizer/unicode_classes.h"
#include "tokenizer/utf8.h"

namespace dsv4::tokenizer {
namespace {

using Cps = std::vector<uint32_t>;

bool has(uint32_t cp, uint8_t bits) { return (unicode_classes(cp) & bits) != 0; }
bool is_letter_or_mark(uint32_t cp) { return has(cp, kUnicodeLetter | kUnicodeMark); }
bool is_punct_or_symbol(uint32_t cp) { return has(cp, kUnicodePunctuation | kUnicodeSymbol); }
bool is_space(uint32_t cp) { return has(cp, kUnicodeWhiteSpace); }
bool is_cr_lf(uint32_t cp) { return cp == '\r' || cp == '\n'; }
bool is_ascii_letter(uint32_t cp) { return (cp >= 'A' && cp <= 'Z') || (cp >= 'a' && cp <= 'z'); }
// P3's first class: !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~
bool is_ascii_punct(uint32_t cp) {
  return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
         (cp >= 0x7B && cp <= 0x7E);
}
// P2: [一-龥぀-ゟ゠-ヿ]
bool is_cjk(uint32_t cp) { return (cp >= 0x4E00 && cp <= 0x9FA5) || (cp >= 0x3040 && cp <= 0x30FF); }

// End of the P1 match at i, or i when none: up to three numbers.
size_t match_numbers(const Cps& c, size_t i, size_t e) {
  size_t j = i;
  while (j < e && j - i < 3 && has(c[j], kUnicodeNumber)) ++j;
  return j;
}

size_t match_cjk(const Cps& c, size_t i, size_t e) {
  size_t j = i;
  while (j < e && is_cjk(c[j])) ++j;
  return j;
}

// End of the P3 match at i within the subject [.., e), or i when no alternative matches here.
size_t match_words(const Cps& c, size_t i, size_t e) {
  const uint32_t cp = c[i];
  // A1 [ASCII punct][A-Za-z]+
  if (is_ascii_punct(cp) && i + 1 < e && is_ascii_letter(c[i + 1])) {
    size_t j = i + 1;
    while (j < e && is_ascii_letter(c[j])) ++j;
    return j;
  }
  // A2 [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
  {
    size_t j = i;
    if (!is_cr_lf(cp) && !has(cp, kUnicodeLetter | kUnicodePunctuation | kUnicodeSymbol) && i + 1 < e &&
        is_letter_or_mark(c[i + 1])) {
      j = i + 1;  // the optional char, then the run
    }
    if (is_letter_or_mark(c[j])) {
      while (j < e && is_letter_or_mark(c[j])) ++j;
      return j;
    }
  }
  // A3 ' '?[\p{P}\p{S}]+[\r\n]*
  {
    size_t j = cp == ' ' ? i + 1 : i;
    if (j < e && is_punct_or_symbol(c[j])) {
      while (j < e && is_punct_or_symbol(c[j])) ++j;
      while (j < e && is_cr_lf(c[j])) ++j;
      return j;
    }
  }
  if (!is_space(cp)) return i;
  size_t run = i;
  size_t last_cr_lf = e;
  while (run < e && is_space(c[run])) {
    if (is_cr_lf(c[run])) last_cr_lf = run;
    ++run;
  }
  // A4 \s*[\r\n]+
  if (last_cr_lf != e) return last_cr_lf + 1;
  // A5 \s+(?!\S)
  if (run == e) return run;
  if (run - i >= 2) return run - 1;
  // A6 \s+
  return run;
}

// Splits [b, e) with `match` (matches and gaps both become pieces), handing each piece to next.
template <typename Match, typename Next>
void split_isolated(const Cps& c, size_t b, size_t e, Match match, Next next) {
  size_t gap = b;
  size_t i = b;
  while (i < e) {
    const size_t m = match(c, i, e);
    if (m == i) {
      ++i;
      continue;
    }
    if (i > gap) next(gap, i);
    next(i, m);
    i = gap = m;
  }
  if (e > gap) next(gap, e);
}

}  // namespace

Result<PreTokenizer> PreTokenizer::deepseek_v3() { return PreTokenizer(); }

void PreTokenizer::cut(std::string_view text, Scratch& s) const {
  s.cps.clear();
  s.offsets.clear();
  s.cuts.clear();
  for (size_t i = 0; i < text.size();) {
    s.offsets.push_back(i);
    s.cps.push_back(next_codepoint(text, i));
  }
  s.offsets.push_back(text.size());
  const Cps& c = s.cps;
  s.cuts.push_back(0);
  auto emit = [&](size_t, size_t e) { s.cuts.push_back(e); };
  auto level3 = [&](size_t b, size_t e) { split_isolated(c, b, e, match_words, emit); };
  auto level2 = [&](size_t b, size_t e) { split_isolated(c, b, e, match_cjk, level3); };
  split_isolated(c, 0, c.size(), match_numbers, level2);
}

std::vector<std::string> PreTokenizer::split_to_strings(std::string_view text) const {
  std::vector<std::string> out;
  Scratch scratch;
  split(text, scratch, [&](std::string_view piece) { out.emplace_back(piece); });
  return out;
}

}  // namespace dsv4::tokenizer
