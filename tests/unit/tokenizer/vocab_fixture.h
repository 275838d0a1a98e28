// tests/unit/tokenizer/vocab_fixture.h — builds tiny hand-made vocab GGUFs with gguf::GgufWriter.
//
// The base vocab: the 256 GPT-2 byte tokens (id == byte), then merged tokens and specials the
// tests add. Knobs let a test break one key at a time (wrong type, bad merges, ...).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "gguf/writer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace dsv4::tokenizer::testing {

struct VocabSpec {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<std::string> merges;
  std::string model = "gpt2";
  std::string pre = "joyai-llm";
  int64_t bos = -1;  // -1: key absent
  int64_t eos = -1;
  bool tokens_as_ints = false;     // write tokenizer.ggml.tokens as an i32 array (wrong type)
  bool types_as_strings = false;   // write tokenizer.ggml.token_type as strings (wrong type)
  bool omit_merges = false;

  // 256 byte tokens, types normal.
  static VocabSpec bytes_only() {
    VocabSpec s;
    for (int b = 0; b < 256; ++b) {
      s.tokens.emplace_back(byte_to_utf8(static_cast<uint8_t>(b)));
      s.types.push_back(1);
    }
    return s;
  }
  // Byte-level string of raw bytes ("€" -> "âĤ¬").
  static std::string bl(std::string_view raw) {
    std::string out;
    for (const char c : raw) out += byte_to_utf8(static_cast<uint8_t>(c));
    return out;
  }
  int32_t add(std::string text, int32_t type = 1) {
    tokens.push_back(std::move(text));
    types.push_back(type);
    return static_cast<int32_t>(tokens.size() - 1);
  }
  // Adds the merge "l r" (byte-level strings) and its merged token; returns the merged id.
  int32_t merge(const std::string& l, const std::string& r) {
    merges.push_back(l + " " + r);
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] == l + r) return static_cast<int32_t>(i);
    }
    return add(l + r);
  }
};

inline std::string temp_path(const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("dsv4_tokenizer_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}

inline Status write_vocab(const std::string& path, const VocabSpec& s) {
  gguf::GgufWriter w(path);
  DSV4_RETURN_IF_ERROR(w.add_string("general.architecture", "deepseek4"));
  DSV4_RETURN_IF_ERROR(w.add_string("tokenizer.ggml.model", s.model));
  DSV4_RETURN_IF_ERROR(w.add_string("tokenizer.ggml.pre", s.pre));
  if (s.tokens_as_ints) {
    std::vector<int32_t> v(s.tokens.size(), 7);
    DSV4_RETURN_IF_ERROR(w.add_array_i32("tokenizer.ggml.tokens", v));
  } else {
    DSV4_RETURN_IF_ERROR(w.add_array_string("tokenizer.ggml.tokens", std::span<const std::string>(s.tokens)));
  }
  if (s.types_as_strings) {
    std::vector<std::string> v(s.types.size(), "1");
    DSV4_RETURN_IF_ERROR(w.add_array_string("tokenizer.ggml.token_type", std::span<const std::string>(v)));
  } else {
    DSV4_RETURN_IF_ERROR(w.add_array_i32("tokenizer.ggml.token_type", s.types));
  }
  if (!s.omit_merges) {
    DSV4_RETURN_IF_ERROR(w.add_array_string("tokenizer.ggml.merges", std::span<const std::string>(s.merges)));
  }
  if (s.bos >= 0) DSV4_RETURN_IF_ERROR(w.add_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(s.bos)));
  if (s.eos >= 0) DSV4_RETURN_IF_ERROR(w.add_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(s.eos)));
  return w.finish();
}

inline Result<Tokenizer> load_vocab(const VocabSpec& s, const std::string& name = "vocab.gguf") {
  const std::string path = temp_path(name);
  DSV4_RETURN_IF_ERROR(write_vocab(path, s));
  return Tokenizer::open(path);
}

}  // namespace dsv4::tokenizer::testing
