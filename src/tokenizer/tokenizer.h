// tokenizer/tokenizer.h — the DeepSeek V4 tokenizer: byte-level BPE loaded from GGUF metadata.
//
// Owns: reading and validating `tokenizer.ggml.*` (model gpt2, pre joyai-llm/deepseek-v3, tokens,
// token_type, merges, bos/eos ids), special-token splitting, encoding text to ids and decoding
// ids to bytes/text, and the named special-token lookup the prompt renderer validates against.
// Must not: print, throw, touch device memory, or keep a reference to the GgufFile (everything
// needed is copied at load, so a vocab-only GGUF can be closed right after).
//
// Encoding pipeline (matches HF tokenizers on the V4 tokenizer.json, tested by
// tests/python/test_tokenizer_conformance.py):
//   1. Ill-formed UTF-8 is repaired first, exactly like Python's bytes.decode("utf-8","replace")
//      (see utf8.h); HF tokenizers only accepts str, so this is the str it would be handed.
//   2. Added tokens (token_type control(3) or user-defined(4)) are split out, leftmost-longest,
//      before anything else. HF matches non-normalized then normalized added tokens in two
//      passes; for the V4 vocab one leftmost-longest pass over both gives the same result
//      (checked: no normalized token overlaps a later non-normalized one or contains one).
//   3. Each remaining span goes through the DeepSeek V3 pre-tokenizer (pretokenizer.h: a scanner
//      over the project's Unicode 16.0 table, the version HF tokenizers 0.23.3 matches with).
//   Chat prompts (encode_chat) split out specials only in the encoder's markup, never in request
//   text (RenderedPrompt::request_text), so message content cannot inject role/stop tokens.
//   4. Each pre-token is BPE-merged on its bytes (bpe.h); results are cached per call.
//
// Decoding: normal tokens map back through the GPT-2 byte alphabet (a token with a character
// outside the alphabet is emitted as its raw UTF-8, as HF's ByteLevel decoder does); control and
// user-defined tokens are stored as raw text in GGUF (llama.cpp convention) and emitted as is.
//
//   DSV4_ASSIGN_OR_RETURN(gguf::GgufFile f, gguf::GgufFile::open("vocab.gguf"));
//   DSV4_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::from_gguf(f));
//   std::vector<int32_t> ids = tok.encode("Hello<think>");
//   DSV4_ASSIGN_OR_RETURN(int32_t think, tok.require_special("<think>"));
//   DSV4_ASSIGN_OR_RETURN(std::string text, tok.decode(ids));
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "gguf/reader.h"
#include "tokenizer/bpe.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/pretokenizer.h"

namespace dsv4::tokenizer {

// llama.cpp token types (tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// The specials the DS4 prompt format needs (prompt-format.md §3.1, gguf.md §2.2), checked by
// Tokenizer::require_ds4_specials().
inline constexpr std::string_view kDs4RequiredSpecials[] = {
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
    "<think>", "</think>", "｜DSML｜",
};

struct EncodeOptions {
  bool add_bos = false;       // prepend tokenizer.ggml.bos_token_id (error if the file has none)
  bool parse_special = true;  // false: special-token strings are ordinary text
};

class Tokenizer {
 public:
  Tokenizer();
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Reads tokenizer.ggml.* from `file` (tensors are ignored: vocab-only files work).
  static Result<Tokenizer> from_gguf(const gguf::GgufFile& file);
  static Result<Tokenizer> open(const std::string& gguf_path);

  // Text (any bytes) to ids. Thread-safe (const, no shared mutable state).
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;
  Result<std::vector<int32_t>> encode(std::string_view text, const EncodeOptions& options) const;

  // A rendered chat prompt to ids: special tokens are recognised only outside
  // prompt.request_text, so request text is always ordinary text while the encoder's markup
  // gives its special tokens. Between specials the text is encoded as one span, so the ids equal
  // encode(prompt.text) whenever the request text holds no special-token string.
  std::vector<int32_t> encode_chat(const RenderedPrompt& prompt) const;

  // Raw bytes of the ids (may end inside a code point); kOutOfRange for an unknown id.
  Result<std::string> decode_bytes(std::span<const int32_t> ids, bool skip_special = false) const;
  // Valid UTF-8 text: decode_bytes with ill-formed parts replaced by U+FFFD (HF decode).
  Result<std::string> decode(std::span<const int32_t> ids, bool skip_special = false) const;

  int32_t n_tokens() const { return static_cast<int32_t>(types_.size()); }
  // The GGUF vocab string ("Ġthe", "<think>"); the id must be in range.
  std::string_view token_text(int32_t id) const {
    return std::string_view(text_).substr(text_off_[static_cast<size_t>(id)],
                                          text_off_[static_cast<size_t>(id) + 1] - text_off_[static_cast<size_t>(id)]);
  }
  // The bytes the id decodes to.
  std::string_view token_bytes(int32_t id) const;
  TokenType token_type(int32_t id) const { return types_[static_cast<size_t>(id)]; }
  bool is_special(int32_t id) const;  // control or user-defined

  // The id of a control/user-defined token by its exact string; kNotFound with a message naming
  // the token when the vocab lacks it (or has it only as an ordinary token).
  Result<int32_t> require_special(std::string_view name) const;
  // Checks every entry of kDs4RequiredSpecials; the error lists all missing ones.
  Status require_ds4_specials() const;
  // Any token by its exact GGUF string; -1 if absent.
  int32_t find_token(std::string_view text) const;

  Result<int32_t> bos_id() const;
  Result<int32_t> eos_id() const;

 private:
  struct SpecialTrie;
  struct EncodeState;

  Status load(const gguf::GgufFile& file);
  void encode_plain(std::string_view text, EncodeState& st, std::vector<int32_t>& out) const;
  // Specials split out of `text` (valid UTF-8), except inside `literal` (ascending, disjoint).
  void encode_specials(std::string_view text, std::span<const TextRange> literal, std::vector<int32_t>& out) const;
  void encode_word(std::string_view word, EncodeState& st, std::vector<int32_t>& out) const;
  // Length of the longest special token starting at text[pos]; its id in *id. 0 if none.
  size_t match_special(std::string_view text, size_t pos, int32_t* id) const;

  std::string text_;                       // concatenated GGUF strings of every token
  std::vector<uint32_t> text_off_;         // [n_tokens + 1] offsets into text_
  std::vector<uint32_t> bytes_off_;        // [n_tokens + 1] offsets into bytes_
  std::string bytes_;                      // concatenated decoded bytes of every token
  std::vector<TokenType> types_;           // [n_tokens]
  std::unordered_map<std::string_view, int32_t> by_text_;     // views into text_
  std::unordered_map<std::string_view, int32_t> special_by_text_;
  int32_t byte_token_[256] = {};           // id of the single-byte token for each byte
  MergeTable merges_;
  PreTokenizer pre_;
  std::unique_ptr<SpecialTrie> specials_;
  int32_t bos_ = -1;
  int32_t eos_ = -1;
};

// Incremental ids -> text for streaming: never emits a partial code point. Bytes of an incomplete
// trailing UTF-8 sequence are held back until the next id completes it; ill-formed sequences
// become U+FFFD as soon as they are known to be ill-formed; flush() emits what is left (an
// incomplete tail becomes U+FFFD). The concatenation of all push() and flush() outputs equals
// Tokenizer::decode() of the same ids.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special = false) : tok_(&tok), skip_special_(skip_special) {}
  // The text that became complete with this id (possibly empty).
  Result<std::string> push(int32_t id);
  std::string flush();
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  std::string pending_;  // at most 3 bytes: a valid prefix of one UTF-8 sequence
};

}  // namespace dsv4::tokenizer
