// tokenizer/utf8.h — UTF-8 repair and the GPT-2 byte <-> unicode alphabet.
//
// Owns: the one definition of "invalid UTF-8" used by the tokenizer and its decoders, and the
// byte-level (GPT-2) mapping that turns every byte into a printable code point.
// Must not: allocate per byte on hot paths, or depend on anything outside base.
//
// Ill-formed input is repaired exactly like Python's bytes.decode("utf-8", "replace") (and Rust's
// String::from_utf8_lossy, which HF tokenizers uses when decoding): every *maximal subpart* of an
// ill-formed sequence (Unicode 15 §3.9, "U+FFFD substitution of maximal subparts") becomes one
// U+FFFD. So a truncated 3-byte sequence E2 82 becomes one U+FFFD, a stray 0x80 one U+FFFD, and a
// surrogate encoding ED A0 80 three.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dsv4::tokenizer {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

bool is_valid_utf8(std::string_view s);

// Appends `in` to `out` with every ill-formed maximal subpart replaced by U+FFFD.
// If `final` is false, a trailing sequence that is a valid but incomplete prefix (it could still
// be completed by more bytes) is not consumed; the return value is the number of bytes of `in`
// consumed (== in.size() when final).
size_t append_utf8_lossy(std::string_view in, bool final, std::string& out);

// Python's bytes.decode("utf-8", "replace"), re-encoded as UTF-8.
std::string sanitize_utf8(std::string_view in);

// GPT-2 byte-level alphabet: byte b <-> one code point (printable bytes map to themselves,
// the other 68 to U+0100..U+0143).
uint32_t byte_to_codepoint(uint8_t b);
// The UTF-8 encoding of byte_to_codepoint(b) (1 or 2 bytes).
std::string_view byte_to_utf8(uint8_t b);
// The byte for a code point of the alphabet, or -1 when cp is not in it.
int codepoint_to_byte(uint32_t cp);

// Decodes one UTF-8 code point from valid UTF-8 at s[i]; advances i.
uint32_t next_codepoint(std::string_view s, size_t& i);

}  // namespace dsv4::tokenizer
