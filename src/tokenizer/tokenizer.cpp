// tokenizer/tokenizer.cpp — loading tokenizer.ggml.*, special-token splitting, encode/decode.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "tokenizer/utf8.h"

namespace dsv4::tokenizer {

// Byte trie over the control/user-defined token strings, for leftmost-longest matching.
struct Tokenizer::SpecialTrie {
  struct Node {
    int32_t id = -1;                                   // token ending here, -1 if none
    std::vector<std::pair<uint8_t, uint32_t>> kids;    // (byte, node index), unsorted, few
  };
  std::vector<Node> nodes{Node{}};
  bool first[256] = {};

  void insert(std::string_view s, int32_t id) {
    uint32_t at = 0;
    for (const char ch : s) {
      const auto c = static_cast<uint8_t>(ch);
      uint32_t nxt = 0;
      for (const auto& [k, n] : nodes[at].kids) {
        if (k == c) nxt = n;
      }
      if (nxt == 0) {
        nxt = static_cast<uint32_t>(nodes.size());
        nodes[at].kids.emplace_back(c, nxt);
        nodes.emplace_back();
      }
      at = nxt;
    }
    // Two specials with the same string: keep the lower id (the first seen).
    if (nodes[at].id < 0) nodes[at].id = id;
    first[static_cast<uint8_t>(s[0])] = true;
  }
};

namespace {

// Words longer than this are not cached (they rarely repeat and would bloat the cache).
constexpr size_t kCacheMaxWordBytes = 48;
constexpr size_t kCacheSlots = 1 << 16;           // direct-mapped: a collision just overwrites
constexpr size_t kCacheMaxIds = 1 << 20;          // ids storage; the cache resets when full

uint64_t hash_word(std::string_view w) {
  // Short-string hash: 8-byte loads, multiply-xorshift mixing.
  uint64_t h = 0x9E3779B97F4A7C15ull ^ w.size();
  size_t i = 0;
  for (; i + 8 <= w.size(); i += 8) {
    uint64_t x;
    std::memcpy(&x, w.data() + i, 8);
    h = (h ^ x) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, w.data() + i, w.size() - i);
  h = (h ^ tail) * 0x94D049BB133111EBull;
  return h ^ (h >> 29);
}

}  // namespace

// Per-call state: pre-tokenizer buffers and the per-word BPE cache (views into the input text, so it
// must not outlive the call).
struct Tokenizer::EncodeState {
  struct Slot {
    std::string_view word;  // empty: unused
    uint32_t off = 0;       // into ids
    uint32_t len = 0;
  };
  std::vector<Slot> slots;          // [power of two <= kCacheSlots], sized to the input on first use
  size_t text_size = 0;
  std::vector<int32_t> ids;         // cached BPE results
  std::vector<int32_t> symbols;     // BPE work buffer
};

namespace {

std::string quoted(std::string_view s) {
  std::string q;  // built by append: GCC 12's -Wrestrict misfires on "'" + std::string(s) + "'"
  q.reserve(s.size() + 2);
  q += '\'';
  q += s;
  q += '\'';
  return q;
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

Result<Tokenizer> Tokenizer::open(const std::string& gguf_path) {
  DSV4_ASSIGN_OR_RETURN(gguf::GgufFile f, gguf::GgufFile::open(gguf_path));
  return from_gguf(f);
}

Result<Tokenizer> Tokenizer::from_gguf(const gguf::GgufFile& file) {
  Tokenizer t;
  Status s = t.load(file);
  if (!s.ok()) return s.with_context(file.name());
  return t;
}

Status Tokenizer::load(const gguf::GgufFile& f) {
  // --- model / pre ---
  auto model = f.get_string("tokenizer.ggml.model");
  if (!model.ok()) return model.status();
  if (*model != "gpt2") {
    return unsupported("tokenizer.ggml.model is " + quoted(*model) + "; only 'gpt2' (byte-level BPE) is supported");
  }
  auto pre = f.get_string("tokenizer.ggml.pre");
  if (!pre.ok()) return pre.status();
  if (*pre != "joyai-llm" && *pre != "deepseek-v3") {
    return unsupported("tokenizer.ggml.pre is " + quoted(*pre) +
                       "; only the DeepSeek V3/V4 pre-tokenizer ('joyai-llm' or 'deepseek-v3') is supported");
  }

  // --- tokens and types ---
  auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (!tokens.ok()) return tokens.status();
  const size_t n = tokens->size();
  if (n == 0) return corrupt("tokenizer.ggml.tokens is empty");
  if (n > (1u << 30)) return corrupt("tokenizer.ggml.tokens has " + std::to_string(n) + " entries (limit 2^30)");
  auto types = f.get_int_array("tokenizer.ggml.token_type");
  if (!types.ok()) return types.status();
  if (types->size() != n) {
    return corrupt("tokenizer.ggml.token_type has " + std::to_string(types->size()) + " entries but tokenizer.ggml.tokens has " +
                   std::to_string(n));
  }
  types_.resize(n);
  text_off_.resize(n + 1);
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    const int64_t ty = (*types)[i];
    if (ty < 0 || ty > 6) {
      return corrupt("tokenizer.ggml.token_type[" + std::to_string(i) + "] is " + std::to_string(ty) + " (expected 0..6)");
    }
    if ((*tokens)[i].empty()) return corrupt("tokenizer.ggml.tokens[" + std::to_string(i) + "] is empty");
    if (!is_valid_utf8((*tokens)[i])) return corrupt("tokenizer.ggml.tokens[" + std::to_string(i) + "] is not valid UTF-8");
    types_[i] = static_cast<TokenType>(ty);
    total += (*tokens)[i].size();
  }
  if (total >= UINT32_MAX) return corrupt("tokenizer.ggml.tokens: strings too large");
  text_.reserve(total);
  for (size_t i = 0; i < n; ++i) {
    text_off_[i] = static_cast<uint32_t>(text_.size());
    text_ += (*tokens)[i];
  }
  text_off_[n] = static_cast<uint32_t>(text_.size());

  // String -> id. Ordinary tokens first (they are HF's BPE vocab); a duplicate among them is a
  // broken file. Control/user-defined strings fill in only where no ordinary token has them.
  by_text_.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    if (is_special(static_cast<int32_t>(i))) continue;
    const auto [it, fresh] = by_text_.emplace(token_text(static_cast<int32_t>(i)), static_cast<int32_t>(i));
    if (!fresh) {
      return corrupt("tokenizer.ggml.tokens[" + std::to_string(i) + "] " + quoted(token_text(static_cast<int32_t>(i))) +
                     " duplicates token " + std::to_string(it->second));
    }
  }
  specials_ = std::make_unique<SpecialTrie>();
  for (size_t i = 0; i < n; ++i) {
    const auto id = static_cast<int32_t>(i);
    if (!is_special(id)) continue;
    by_text_.emplace(token_text(id), id);
    special_by_text_.emplace(token_text(id), id);
    specials_->insert(token_text(id), id);
  }

  // Decoded bytes of every token.
  bytes_off_.resize(n + 1);
  bytes_.reserve(total);
  for (size_t i = 0; i < n; ++i) {
    const auto id = static_cast<int32_t>(i);
    bytes_off_[i] = static_cast<uint32_t>(bytes_.size());
    const std::string_view s = token_text(id);
    if (is_special(id)) {
      bytes_ += s;
      continue;
    }
    std::string mapped;
    bool all_mapped = true;
    for (size_t k = 0; k < s.size();) {
      const int b = codepoint_to_byte(next_codepoint(s, k));
      if (b < 0) {
        all_mapped = false;
        break;
      }
      mapped += static_cast<char>(b);
    }
    bytes_ += all_mapped ? mapped : std::string(s);
  }
  bytes_off_[n] = static_cast<uint32_t>(bytes_.size());

  // Byte tokens: every byte must be representable, or some input could not be encoded.
  for (int b = 0; b < 256; ++b) {
    const int32_t id = find_token(byte_to_utf8(static_cast<uint8_t>(b)));
    if (id < 0 || is_special(id)) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      return corrupt("tokenizer.ggml.tokens lacks the byte-level token " + quoted(byte_to_utf8(static_cast<uint8_t>(b))) +
                     " for byte " + hex);
    }
    byte_token_[b] = id;
  }

  // --- merges ---
  auto merges = f.get_string_array("tokenizer.ggml.merges");
  if (!merges.ok()) return merges.status();
  if (merges->size() >= static_cast<size_t>(MergeTable::kNoRank)) return corrupt("tokenizer.ggml.merges: too many entries");
  merges_.reserve(merges->size());
  std::string joined;
  for (size_t r = 0; r < merges->size(); ++r) {
    const std::string_view m = (*merges)[r];
    const auto where = [&] { return "tokenizer.ggml.merges[" + std::to_string(r) + "] " + quoted(m) + ": "; };
    const size_t sp = m.find(' ');
    if (sp == std::string_view::npos || sp == 0 || sp + 1 == m.size() || m.find(' ', sp + 1) != std::string_view::npos) {
      return corrupt(where() + "expected two tokens separated by one space");
    }
    const std::string_view a = m.substr(0, sp), b = m.substr(sp + 1);
    const auto ia = by_text_.find(a), ib = by_text_.find(b);
    if (ia == by_text_.end()) return corrupt(where() + quoted(a) + " is not a token");
    if (ib == by_text_.end()) return corrupt(where() + quoted(b) + " is not a token");
    joined.assign(a);
    joined += b;
    const auto im = by_text_.find(joined);
    if (im == by_text_.end()) return corrupt(where() + "the merged token " + quoted(joined) + " is not in the vocab");
    merges_.add(ia->second, ib->second, static_cast<int32_t>(r), im->second);  // duplicates: first (lowest rank) wins
  }

  // --- bos / eos (optional; checked when used) ---
  for (auto [key, dst] : {std::pair{"tokenizer.ggml.bos_token_id", &bos_}, std::pair{"tokenizer.ggml.eos_token_id", &eos_}}) {
    if (!f.has(key)) continue;
    auto v = f.get_int(key);
    if (!v.ok()) return v.status();
    if (*v < 0 || *v >= static_cast<int64_t>(n)) {
      return corrupt(std::string(key) + " is " + std::to_string(*v) + ", outside the vocab of " + std::to_string(n));
    }
    *dst = static_cast<int32_t>(*v);
  }

  DSV4_ASSIGN_OR_RETURN(pre_, PreTokenizer::deepseek_v3());
  return ok_status();
}

bool Tokenizer::is_special(int32_t id) const {
  const TokenType t = types_[static_cast<size_t>(id)];
  return t == TokenType::kControl || t == TokenType::kUserDefined;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  const auto i = static_cast<size_t>(id);
  return std::string_view(bytes_).substr(bytes_off_[i], bytes_off_[i + 1] - bytes_off_[i]);
}

int32_t Tokenizer::find_token(std::string_view text) const {
  const auto it = by_text_.find(text);
  return it == by_text_.end() ? -1 : it->second;
}

Result<int32_t> Tokenizer::require_special(std::string_view name) const {
  const auto it = special_by_text_.find(name);
  if (it != special_by_text_.end()) return it->second;
  if (find_token(name) >= 0) {
    return not_found("tokenizer: " + quoted(name) + " is in the vocab only as an ordinary token (token_type must be control or user-defined)");
  }
  return not_found("tokenizer: the vocab lacks the special token " + quoted(name));
}

Status Tokenizer::require_ds4_specials() const {
  std::string missing;
  for (std::string_view s : kDs4RequiredSpecials) {
    if (!require_special(s).ok()) missing += (missing.empty() ? "" : ", ") + quoted(s);
  }
  if (missing.empty()) return ok_status();
  return not_found("tokenizer: the vocab lacks special tokens required by the DS4 prompt format: " + missing);
}

Result<int32_t> Tokenizer::bos_id() const {
  if (bos_ < 0) return not_found("tokenizer: the file has no tokenizer.ggml.bos_token_id");
  return bos_;
}

Result<int32_t> Tokenizer::eos_id() const {
  if (eos_ < 0) return not_found("tokenizer: the file has no tokenizer.ggml.eos_token_id");
  return eos_;
}

size_t Tokenizer::match_special(std::string_view text, size_t pos, int32_t* id) const {
  const SpecialTrie& t = *specials_;
  size_t best = 0;
  uint32_t at = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto c = static_cast<uint8_t>(text[i]);
    uint32_t nxt = 0;
    for (const auto& [k, nd] : t.nodes[at].kids) {
      if (k == c) {
        nxt = nd;
        break;
      }
    }
    if (nxt == 0) break;
    at = nxt;
    if (t.nodes[at].id >= 0) {
      best = i + 1 - pos;
      *id = t.nodes[at].id;
    }
  }
  return best;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  std::vector<int32_t> out;
  if (text.empty() || types_.empty()) return out;
  std::string repaired;
  if (!is_valid_utf8(text)) {
    repaired = sanitize_utf8(text);
    text = repaired;
  }
  if (!parse_special) {
    EncodeState st;
    st.text_size = text.size();
    out.reserve(text.size() / 3 + 4);
    encode_plain(text, st, out);
    return out;
  }
  encode_specials(text, {}, out);
  return out;
}

std::vector<int32_t> Tokenizer::encode_chat(const RenderedPrompt& prompt) const {
  std::vector<int32_t> out;
  if (prompt.text.empty() || types_.empty()) return out;
  if (is_valid_utf8(prompt.text)) {
    encode_specials(prompt.text, prompt.request_text, out);
    return out;
  }
  // Repair each markup/request piece on its own so the ranges stay on the repaired text.
  std::string text;
  std::vector<TextRange> literal;
  size_t at = 0;
  const std::string_view src = prompt.text;
  for (const TextRange& r : prompt.request_text) {
    if (r.begin < at || r.end < r.begin || r.end > src.size()) break;  // malformed ranges: stop trusting them
    text += sanitize_utf8(src.substr(at, r.begin - at));
    const size_t b = text.size();
    text += sanitize_utf8(src.substr(r.begin, r.end - r.begin));
    literal.push_back(TextRange{b, text.size()});
    at = r.end;
  }
  if (at < src.size()) {
    const size_t b = text.size();
    text += sanitize_utf8(src.substr(at));
    // After malformed ranges the rest is request text as far as the tokenizer is concerned.
    if (literal.size() != prompt.request_text.size()) literal.push_back(TextRange{b, text.size()});
  }
  encode_specials(text, literal, out);
  return out;
}

void Tokenizer::encode_specials(std::string_view text, std::span<const TextRange> literal,
                                std::vector<int32_t>& out) const {
  out.reserve(out.size() + text.size() / 3 + 4);
  EncodeState st;
  st.text_size = text.size();
  const SpecialTrie& trie = *specials_;
  size_t start = 0;  // start of the pending plain span
  size_t next_literal = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    // Skip request text; a special may only end where the next literal range begins.
    while (next_literal < literal.size() && literal[next_literal].end <= i) ++next_literal;
    size_t limit = text.size();
    if (next_literal < literal.size()) {
      if (literal[next_literal].begin <= i) {
        i = literal[next_literal].end - 1;
        continue;
      }
      limit = literal[next_literal].begin;
    }
    if (!trie.first[static_cast<uint8_t>(text[i])]) continue;
    int32_t id = -1;
    const size_t len = match_special(text.substr(0, limit), i, &id);
    if (len == 0) continue;
    encode_plain(text.substr(start, i - start), st, out);
    out.push_back(id);
    start = i + len;
    i = start - 1;
  }
  encode_plain(text.substr(start), st, out);
}

Result<std::vector<int32_t>> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  std::vector<int32_t> ids;
  if (options.add_bos) {
    DSV4_ASSIGN_OR_RETURN(int32_t bos, bos_id());
    ids.push_back(bos);
  }
  std::vector<int32_t> body = encode(text, options.parse_special);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

void Tokenizer::encode_plain(std::string_view text, EncodeState& st, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  pre_.split(text, [&](std::string_view word) { encode_word(word, st, out); });
}

void Tokenizer::encode_word(std::string_view word, EncodeState& st, std::vector<int32_t>& out) const {
  if (word.size() == 1) {
    out.push_back(byte_token_[static_cast<uint8_t>(word[0])]);
    return;
  }
  EncodeState::Slot* slot = nullptr;
  if (word.size() <= kCacheMaxWordBytes) {
    if (st.slots.empty()) {
      // About one slot per 8 input bytes, so short calls (chat turns) stay cheap.
      size_t n = 64;
      while (n < kCacheSlots && n * 8 < st.text_size) n <<= 1;
      st.slots.resize(n);
    }
    slot = &st.slots[hash_word(word) & (st.slots.size() - 1)];
    if (slot->word == word) {
      const int32_t* p = st.ids.data() + slot->off;
      out.insert(out.end(), p, p + slot->len);
      return;
    }
  }
  std::vector<int32_t>& sym = st.symbols;
  sym.resize(word.size());
  for (size_t i = 0; i < word.size(); ++i) sym[i] = byte_token_[static_cast<uint8_t>(word[i])];
  bpe_merge(merges_, sym);
  out.insert(out.end(), sym.begin(), sym.end());
  if (slot != nullptr) {
    if (st.ids.size() + sym.size() > kCacheMaxIds) {
      std::fill(st.slots.begin(), st.slots.end(), EncodeState::Slot{});
      st.ids.clear();
    }
    *slot = EncodeState::Slot{word, static_cast<uint32_t>(st.ids.size()), static_cast<uint32_t>(sym.size())};
    st.ids.insert(st.ids.end(), sym.begin(), sym.end());
  }
}

Result<std::string> Tokenizer::decode_bytes(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  for (const int32_t id : ids) {
    if (id < 0 || id >= n_tokens()) {
      return out_of_range("tokenizer: token id " + std::to_string(id) + " is outside the vocab (0.." +
                          std::to_string(n_tokens() - 1) + ")");
    }
    if (skip_special && token_type(id) == TokenType::kControl) continue;
    out += token_bytes(id);
  }
  return out;
}

Result<std::string> Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  DSV4_ASSIGN_OR_RETURN(std::string raw, decode_bytes(ids, skip_special));
  if (is_valid_utf8(raw)) return raw;
  return sanitize_utf8(raw);
}

Result<std::string> StreamDecoder::push(int32_t id) {
  const int32_t one[1] = {id};
  DSV4_ASSIGN_OR_RETURN(std::string raw, tok_->decode_bytes(one, skip_special_));
  pending_ += raw;
  std::string out;
  const size_t used = append_utf8_lossy(pending_, false, out);
  pending_.erase(0, used);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  append_utf8_lossy(pending_, true, out);
  pending_.clear();
  return out;
}

}  // namespace dsv4::tokenizer
