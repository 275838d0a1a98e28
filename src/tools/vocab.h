// tools/vocab.h — HF tokenizer.json (+ tokenizer_config.json) → GGUF tokenizer.ggml.* keys.
//
// Owns: reading a byte-level BPE tokenizer.json (model.vocab, model.merges in either the "a b"
// string or the ["a", "b"] list form, added_tokens) into the GGUF token table the way llama.cpp's
// gpt2 vocab does: added tokens at their ids, id gaps filled with "[PAD<id>]" tokens of type
// unused, types 1 normal / 3 control (special added) / 4 user-defined (non-special added); bos/eos
// from tokenizer_config.json (else by the DeepSeek strings), add_bos_token, chat_template.
// Must not: tokenize anything (the tokenizer room does that from the GGUF keys).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/writer.h"

namespace dsv4::tools {

enum class TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

struct Vocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> token_types;
  std::vector<std::string> merges;
  std::optional<uint32_t> bos_id, eos_id;
  bool add_bos = true;  // DeepSeek tokenizers prepend BOS; tokenizer_config.json may say otherwise
  std::optional<bool> add_eos;
  std::string chat_template;
  int64_t n_padded = 0;  // ids filled with [PAD<id>]
};

// tokenizer_config_path may be empty or name a missing file (then defaults apply). n_vocab > 0
// pads the table to that size (the model's vocab_size) and rejects larger ids.
Result<Vocab> load_vocab(const std::string& tokenizer_json_path, const std::string& tokenizer_config_path,
                         int64_t n_vocab);
// Parses from text (names are used in messages).
Result<Vocab> parse_vocab(std::string_view tokenizer_json, const std::string& name, std::string_view tokenizer_config,
                          const std::string& config_name, int64_t n_vocab);

Status write_vocab_metadata(gguf::GgufWriter& w, const Vocab& v);

}  // namespace dsv4::tools
