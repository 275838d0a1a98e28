// tokenizer/utf8.cpp — maximal-subpart UTF-8 repair and the GPT-2 byte alphabet tables.
#include "tokenizer/utf8.h"

#include <array>

namespace dsv4::tokenizer {
namespace {

// Expected sequence length for a lead byte (0 = never valid as a lead), and the allowed range of
// the *second* byte (later continuation bytes are always 80..BF).
struct LeadInfo {
  uint8_t len;
  uint8_t lo;
  uint8_t hi;
};

constexpr LeadInfo lead_info(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

struct ByteTables {
  std::array<uint32_t, 256> cp{};
  std::array<char[3], 256> utf8{};
  std::array<uint8_t, 256> utf8_len{};
  std::array<int16_t, 324> byte_of{};  // code points 0..323 cover the whole alphabet
};

ByteTables make_tables() {
  ByteTables t;
  t.byte_of.fill(-1);
  uint32_t extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const uint32_t cp = printable ? static_cast<uint32_t>(b) : 256 + extra++;
    t.cp[b] = cp;
    t.byte_of[cp] = static_cast<int16_t>(b);
    if (cp < 0x80) {
      t.utf8[b][0] = static_cast<char>(cp);
      t.utf8_len[b] = 1;
    } else {
      t.utf8[b][0] = static_cast<char>(0xC0 | (cp >> 6));
      t.utf8[b][1] = static_cast<char>(0x80 | (cp & 0x3F));
      t.utf8_len[b] = 2;
    }
  }
  return t;
}

const ByteTables& tables() {
  static const ByteTables t = make_tables();
  return t;
}

}  // namespace

size_t append_utf8_lossy(std::string_view in, bool final, std::string& out) {
  const auto* p = reinterpret_cast<const uint8_t*>(in.data());
  const size_t n = in.size();
  size_t i = 0;
  size_t run = 0;  // start of the pending run of valid bytes, copied in bulk
  while (i < n) {
    const uint8_t b = p[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    const LeadInfo li = lead_info(b);
    if (li.len == 0) {
      out.append(in.data() + run, i - run);
      out.append(kReplacementChar);
      run = ++i;
      continue;
    }
    size_t k = 1;
    bool bad = false;
    for (; k < li.len; ++k) {
      if (i + k >= n) break;
      const uint8_t c = p[i + k];
      const bool ok = k == 1 ? (c >= li.lo && c <= li.hi) : (c >= 0x80 && c <= 0xBF);
      if (!ok) {
        bad = true;
        break;
      }
    }
    if (!bad && k == li.len) {
      i += k;
      continue;
    }
    if (!bad && !final) {  // a valid prefix cut by the end of the input: hold it back
      out.append(in.data() + run, i - run);
      return i;
    }
    out.append(in.data() + run, i - run);
    out.append(kReplacementChar);
    i += k;
    run = i;
  }
  out.append(in.data() + run, n - run);
  return n;
}

bool is_valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      __builtin_memcpy(&w, p + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    const uint8_t b = p[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    const LeadInfo li = lead_info(b);
    if (li.len == 0 || i + li.len > n) return false;
    if (p[i + 1] < li.lo || p[i + 1] > li.hi) return false;
    for (size_t k = 2; k < li.len; ++k) {
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return false;
    }
    i += li.len;
  }
  return true;
}

std::string sanitize_utf8(std::string_view in) {
  std::string out;
  out.reserve(in.size() + 8);
  append_utf8_lossy(in, true, out);
  return out;
}

uint32_t byte_to_codepoint(uint8_t b) { return tables().cp[b]; }

std::string_view byte_to_utf8(uint8_t b) {
  const ByteTables& t = tables();
  return {t.utf8[b], t.utf8_len[b]};
}

int codepoint_to_byte(uint32_t cp) { return cp < 324 ? tables().byte_of[cp] : -1; }

uint32_t next_codepoint(std::string_view s, size_t& i) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const uint8_t b = p[i];
  const size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  if (i + len > s.size()) {  // not valid UTF-8; callers pass valid text, stay in bounds anyway
    ++i;
    return 0xFFFD;
  }
  uint32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (p[i + k] & 0x3F);
  i += len;
  return cp;
}

}  // namespace dsv4::tokenizer
