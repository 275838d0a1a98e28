// tokenizer/unicode_classes.h — the Unicode character classes the pre-tokenizer's regexes use.
//
// Owns: the lookup of a code point's general-category major class (L, M, N, P, S) and its
// White_Space property, from the project's own generated table (unicode_classes.inc, made by
// scripts/gen_unicode_classes.py from the pinned unicodedata2 — the Unicode version HF
// `tokenizers` matches with, measured: 16.0.0).
// Must not: depend on a system regex/Unicode library (their tables follow the distribution's
// release, not the reference tokenizer's).
#pragma once

#include <cstdint>

namespace dsv4::tokenizer {

// Bits of unicode_classes(); values fixed by the generator.
enum UnicodeClass : uint8_t {
  kUnicodeLetter = 1,       // \p{L}
  kUnicodeMark = 2,         // \p{M}
  kUnicodeNumber = 4,       // \p{N}
  kUnicodePunctuation = 8,  // \p{P}
  kUnicodeSymbol = 16,      // \p{S}
  kUnicodeWhiteSpace = 32,  // \s (White_Space)
};

inline constexpr uint32_t kUnicodeCodePoints = 0x110000;

// [kUnicodeCodePoints] class bits per code point. Thread-safe; the first call builds the 1.1 MB
// flat table from the generated ranges.
const uint8_t* unicode_class_table();

// Class bits of `cp`; 0 for unassigned/other code points and anything above U+10FFFF.
inline uint8_t unicode_classes(uint32_t cp) { return cp < kUnicodeCodePoints ? unicode_class_table()[cp] : 0; }

// The Unicode version of the table ("16.0.0").
const char* unicode_classes_version();

}  // namespace dsv4::tokenizer
