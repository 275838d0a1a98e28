// tokenizer/pretokenizer.cpp — PCRE2 compilation and matching for the DeepSeek V3 splits.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenizer.h"

#include <pcre2.h>

#include <array>

namespace dsv4::tokenizer {
namespace {

// Unicode White_Space (what Oniguruma's \s matches in UTF-8 mode).
constexpr std::string_view kWhiteSpace =
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

std::string pcre2_error_text(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

std::string oniguruma_to_pcre2(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 256);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[i + 1];
      if (!in_class && (n == 's' || n == 'S')) {
        out += n == 's' ? "[" : "[^";
        out += kWhiteSpace;
        out += ']';
      } else {
        out += c;
        out += n;
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

struct PreTokenizer::Impl {
  std::array<pcre2_code*, kLevels> code{};
  std::array<bool, kLevels> jit{};
  ~Impl() {
    for (pcre2_code* c : code) pcre2_code_free(c);
  }
};

PreTokenizer::PreTokenizer() = default;
PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

Result<PreTokenizer> PreTokenizer::deepseek_v3() {
  PreTokenizer pt;
  pt.impl_ = std::make_unique<Impl>();
  for (int i = 0; i < kLevels; ++i) {
    const std::string pattern = oniguruma_to_pcre2(kDeepseekV3Patterns[i]);
    int err = 0;
    PCRE2_SIZE off = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &off, nullptr);
    if (code == nullptr) {
      return internal_error("tokenizer: PCRE2 rejected pre-tokenizer pattern " + std::to_string(i) + " at offset " +
                            std::to_string(off) + ": " + pcre2_error_text(err));
    }
    pt.impl_->code[i] = code;
    // JIT is an optimisation: without it (e.g. W^X-restricted systems) the interpreter is used.
    pt.impl_->jit[i] = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  }
  return pt;
}

PreTokenizer::Scratch::Scratch() { match_data_ = pcre2_match_data_create(1, nullptr); }
PreTokenizer::Scratch::~Scratch() { pcre2_match_data_free(static_cast<pcre2_match_data*>(match_data_)); }

bool PreTokenizer::find(int level, std::string_view text, size_t pos, Scratch& scratch, size_t& b,
                        size_t& e) const {
  auto* md = static_cast<pcre2_match_data*>(scratch.match_data_);
  if (md == nullptr) return false;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  while (pos < text.size()) {
    // The text was validated (or repaired) once up front, so PCRE2's UTF check is skipped.
    const int rc = impl_->jit[level]
                       ? pcre2_jit_match(impl_->code[level], subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr)
                       : pcre2_match(impl_->code[level], subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc < 0) return false;  // no match (or a matching-resource error: treat the rest as a gap)
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (ov[1] > ov[0]) {
      b = ov[0];
      e = ov[1];
      return true;
    }
    // Empty match (none of our patterns can produce one): step over one code point.
    pos = ov[0] + 1;
    while (pos < text.size() && (static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80) ++pos;
  }
  return false;
}

}  // namespace dsv4::tokenizer
