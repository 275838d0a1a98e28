// tokenizer/pretokenizer.cpp — the hand-written scanner for the DeepSeek V3 splits (rules in the
// header). Works on decoded code points; every level walks one piece [b, e) as its own subject.
#include "tokenizer/pretokenizer.h"

#include "tokenizer/unicode_classes.h"
#include "tokenizer/utf8.h"

namespace dsv4::tokenizer {
namespace {

// One subject's worth of matching over valid UTF-8, by byte offsets. Code points are decoded on
// the fly (no per-call buffers: a 5 MB prompt would otherwise need ~60 MB of them).
struct Scanner {
  std::string_view text;
  const uint8_t* classes;  // unicode_class_table()

  // The code point at byte i and its length.
  uint32_t at(size_t i, size_t* len) const {
    const auto b0 = static_cast<uint8_t>(text[i]);
    if (b0 < 0x80) {
      *len = 1;
      return b0;
    }
    size_t j = i;
    const uint32_t cp = next_codepoint(text, j);
    *len = j - i;
    return cp;
  }
  bool has(uint32_t cp, uint8_t bits) const { return cp < kUnicodeCodePoints && (classes[cp] & bits) != 0; }
  bool letter_or_mark(uint32_t cp) const { return has(cp, kUnicodeLetter | kUnicodeMark); }
  bool punct_or_symbol(uint32_t cp) const { return has(cp, kUnicodePunctuation | kUnicodeSymbol); }
  bool space(uint32_t cp) const { return has(cp, kUnicodeWhiteSpace); }
  static bool cr_lf(uint32_t cp) { return cp == '\r' || cp == '\n'; }
  static bool ascii_letter(uint32_t cp) { return (cp >= 'A' && cp <= 'Z') || (cp >= 'a' && cp <= 'z'); }
  // P3's first class: !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~
  static bool ascii_punct(uint32_t cp) {
    return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
           (cp >= 0x7B && cp <= 0x7E);
  }
  // P2: [一-龥぀-ゟ゠-ヿ]
  static bool cjk(uint32_t cp) { return (cp >= 0x4E00 && cp <= 0x9FA5) || (cp >= 0x3040 && cp <= 0x30FF); }

  // Extends j over code points satisfying pred, up to e.
  template <typename Pred>
  size_t run(size_t j, size_t e, Pred pred) const {
    size_t len = 0;
    while (j < e && pred(at(j, &len))) j += len;
    return j;
  }

  // End of the P1 match at i (up to three numbers), or i when none.
  size_t match_numbers(size_t i, size_t e) const {
    size_t j = i, len = 0;
    for (int k = 0; k < 3 && j < e && has(at(j, &len), kUnicodeNumber); ++k) j += len;
    return j;
  }

  size_t match_cjk(size_t i, size_t e) const { return run(i, e, cjk); }

  // End of the P3 match at i within the subject [.., e), or i when no alternative matches here.
  size_t match_words(size_t i, size_t e) const {
    size_t len = 0;
    const uint32_t cp = at(i, &len);
    const size_t after = i + len;
    size_t next_len = 0;
    const uint32_t next = after < e ? at(after, &next_len) : 0xFFFFFFFFu;
    auto lm = [this](uint32_t c) { return letter_or_mark(c); };
    // A1 [ASCII punct][A-Za-z]+
    if (ascii_punct(cp) && after < e && ascii_letter(next)) return run(after, e, ascii_letter);
    // A2 [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ (the optional char only when a letter/mark follows)
    if (!cr_lf(cp) && !has(cp, kUnicodeLetter | kUnicodePunctuation | kUnicodeSymbol) && after < e &&
        letter_or_mark(next))
      return run(after, e, lm);
    if (letter_or_mark(cp)) return run(after, e, lm);
    // A3 ' '?[\p{P}\p{S}]+[\r\n]*
    {
      const bool sp = cp == ' ';
      if (sp ? (after < e && punct_or_symbol(next)) : punct_or_symbol(cp)) {
        const size_t j = run(after, e, [this](uint32_t c) { return punct_or_symbol(c); });
        return run(j, e, cr_lf);
      }
    }
    if (!space(cp)) return i;
    // The whitespace run [i, end) and its last \r or \n.
    size_t end = i, last_len = 0, last_cr_lf = e;
    while (end < e) {
      const uint32_t c = at(end, &len);
      if (!space(c)) break;
      if (cr_lf(c)) last_cr_lf = end;
      last_len = len;
      end += len;
    }
    // A4 \s*[\r\n]+
    if (last_cr_lf != e) return last_cr_lf + 1;
    // A5 \s+(?!\S): the run at the subject's end, else the run minus its last char (2+ chars)
    if (end == e) return end;
    if (end - last_len > i) return end - last_len;
    // A6 \s+
    return end;
  }
};

// Splits [b, e) with `match` (matches and gaps both become pieces), handing each piece to next.
template <typename Match, typename Next>
void split_isolated(const Scanner& sc, size_t b, size_t e, Match match, Next next) {
  size_t gap = b;
  size_t i = b;
  while (i < e) {
    const size_t m = match(i, e);
    if (m == i) {
      size_t len = 0;
      sc.at(i, &len);
      i += len;
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

void PreTokenizer::split_raw(std::string_view text, PieceSink sink, void* ctx) const {
  const Scanner sc{text, unicode_class_table()};
  auto emit = [&](size_t b, size_t e) { sink(ctx, b, e); };
  auto level3 = [&](size_t b, size_t e) {
    split_isolated(sc, b, e, [&sc](size_t i, size_t end) { return sc.match_words(i, end); }, emit);
  };
  auto level2 = [&](size_t b, size_t e) {
    split_isolated(sc, b, e, [&sc](size_t i, size_t end) { return sc.match_cjk(i, end); }, level3);
  };
  split_isolated(sc, 0, text.size(), [&sc](size_t i, size_t end) { return sc.match_numbers(i, end); }, level2);
}

std::vector<std::string> PreTokenizer::split_to_strings(std::string_view text) const {
  std::vector<std::string> out;
  split(text, [&](std::string_view piece) { out.emplace_back(piece); });
  return out;
}

}  // namespace dsv4::tokenizer
