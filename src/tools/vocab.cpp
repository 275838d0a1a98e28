// tools/vocab.cpp — tokenizer.json parsing and the tokenizer.ggml.* writer.
#include "tools/vocab.h"
#include "base/mapped_file.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

namespace dsv4::tools {
namespace {

using Json = nlohmann::json;

std::optional<int64_t> json_int(const Json& j) {
  if (j.is_number_integer()) return j.get<int64_t>();
  return std::nullopt;
}

// A special-token entry of tokenizer_config.json: "str" or {"content": "str", ...}.
std::optional<std::string> token_string(const Json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto c = it->find("content");
    if (c != it->end() && c->is_string()) return c->get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

Result<Vocab> parse_vocab(std::string_view text, const std::string& name, std::string_view cfg_text,
                          const std::string& cfg_name, int64_t n_vocab) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument(name + ": not a well-formed JSON object");
  auto model = j.find("model");
  if (model == j.end() || !model->is_object()) return invalid_argument(name + ": missing 'model' object");
  if (auto t = model->find("type"); t != model->end() && !(t->is_string() && t->get<std::string>() == "BPE"))
    return unsupported(name + ": model.type must be \"BPE\" (byte-level BPE)");
  auto vocab = model->find("vocab");
  if (vocab == model->end() || !vocab->is_object()) return invalid_argument(name + ": missing 'model.vocab' object");

  std::unordered_map<int64_t, std::string> by_id;
  std::unordered_map<int64_t, TokenType> types;
  int64_t max_id = -1;
  auto put = [&](int64_t id, const std::string& s, const std::string& what) -> Status {
    if (id < 0 || id > (int64_t{1} << 24)) return invalid_argument(name + ": " + what + " '" + s + "' has id " + std::to_string(id));
    if (n_vocab > 0 && id >= n_vocab)
      return invalid_argument(name + ": " + what + " '" + s + "' has id " + std::to_string(id) + " >= vocab_size " +
                              std::to_string(n_vocab));
    by_id[id] = s;
    max_id = std::max(max_id, id);
    return ok_status();
  };
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    const auto id = json_int(it.value());
    if (!id) return invalid_argument(name + ": model.vocab['" + it.key() + "'] is not an integer id");
    if (by_id.count(*id)) return invalid_argument(name + ": id " + std::to_string(*id) + " is used twice in model.vocab");
    DSV4_RETURN_IF_ERROR(put(*id, it.key(), "token"));
  }
  if (auto added = j.find("added_tokens"); added != j.end() && !added->is_null()) {
    if (!added->is_array()) return invalid_argument(name + ": added_tokens is not an array");
    for (const Json& a : *added) {
      if (!a.is_object()) return invalid_argument(name + ": added_tokens entry is not an object");
      auto id = a.find("id");
      auto content = a.find("content");
      if (id == a.end() || !json_int(*id) || content == a.end() || !content->is_string())
        return invalid_argument(name + ": added_tokens entry without integer id / string content");
      bool special = false;
      if (auto sp = a.find("special"); sp != a.end() && sp->is_boolean()) special = sp->get<bool>();
      const int64_t i = *json_int(*id);
      DSV4_RETURN_IF_ERROR(put(i, content->get<std::string>(), "added token"));
      types[i] = special ? TokenType::kControl : TokenType::kUserDefined;
    }
  }
  if (max_id < 0) return invalid_argument(name + ": the vocabulary is empty");
  const int64_t n = std::max(max_id + 1, n_vocab);
  Vocab v;
  v.tokens.resize(static_cast<size_t>(n));
  v.token_types.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    auto it = by_id.find(i);
    if (it == by_id.end()) {
      v.tokens[static_cast<size_t>(i)] = "[PAD" + std::to_string(i) + "]";
      v.token_types[static_cast<size_t>(i)] = static_cast<int32_t>(TokenType::kUnused);
      ++v.n_padded;
      continue;
    }
    v.tokens[static_cast<size_t>(i)] = it->second;
    auto t = types.find(i);
    v.token_types[static_cast<size_t>(i)] = static_cast<int32_t>(t == types.end() ? TokenType::kNormal : t->second);
  }
  if (auto merges = model->find("merges"); merges != model->end() && !merges->is_null()) {
    if (!merges->is_array()) return invalid_argument(name + ": model.merges is not an array");
    v.merges.reserve(merges->size());
    for (size_t i = 0; i < merges->size(); ++i) {
      const Json& m = (*merges)[i];
      if (m.is_string()) {
        v.merges.push_back(m.get<std::string>());
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        v.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
      } else {
        return invalid_argument(name + ": model.merges[" + std::to_string(i) + "] is neither \"a b\" nor [\"a\", \"b\"]");
      }
    }
  }

  std::unordered_map<std::string, int64_t> id_of;
  for (int64_t i = 0; i < n; ++i) id_of.emplace(v.tokens[static_cast<size_t>(i)], i);
  auto lookup = [&](const std::string& s) -> std::optional<uint32_t> {
    auto it = id_of.find(s);
    if (it == id_of.end()) return std::nullopt;
    return static_cast<uint32_t>(it->second);
  };
  std::optional<std::string> bos_s, eos_s;
  if (!cfg_text.empty()) {
    Json c = Json::parse(cfg_text.begin(), cfg_text.end(), nullptr, false);
    if (c.is_discarded() || !c.is_object()) return invalid_argument(cfg_name + ": not a well-formed JSON object");
    bos_s = token_string(c, "bos_token");
    eos_s = token_string(c, "eos_token");
    if (auto a = c.find("add_bos_token"); a != c.end() && a->is_boolean()) v.add_bos = a->get<bool>();
    if (auto a = c.find("add_eos_token"); a != c.end() && a->is_boolean()) v.add_eos = a->get<bool>();
    if (auto t = c.find("chat_template"); t != c.end() && t->is_string()) v.chat_template = t->get<std::string>();
  }
  if (bos_s) {
    v.bos_id = lookup(*bos_s);
    if (!v.bos_id) return invalid_argument(cfg_name + ": bos_token '" + *bos_s + "' is not in the vocabulary");
  } else {
    v.bos_id = lookup("<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
  }
  if (eos_s) {
    v.eos_id = lookup(*eos_s);
    if (!v.eos_id) return invalid_argument(cfg_name + ": eos_token '" + *eos_s + "' is not in the vocabulary");
  } else {
    v.eos_id = lookup("<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
  }
  return v;
}

Result<Vocab> load_vocab(const std::string& tokenizer_json_path, const std::string& tokenizer_config_path,
                         int64_t n_vocab) {
  DSV4_ASSIGN_OR_RETURN(std::string text, read_text_file(tokenizer_json_path));
  std::string cfg;
  if (!tokenizer_config_path.empty()) {
    auto c = read_text_file(tokenizer_config_path);
    if (c.ok()) {
      cfg = std::move(c).value();
    } else if (c.status().code() != StatusCode::kNotFound) {
      return c.status();
    }
  }
  return parse_vocab(text, tokenizer_json_path, cfg, tokenizer_config_path, n_vocab);
}

Status write_vocab_metadata(gguf::GgufWriter& w, const Vocab& v) {
  DSV4_RETURN_IF_ERROR(w.add_string("tokenizer.ggml.model", "gpt2"));
  DSV4_RETURN_IF_ERROR(w.add_string("tokenizer.ggml.pre", "joyai-llm"));
  DSV4_RETURN_IF_ERROR(w.add_array_string("tokenizer.ggml.tokens", std::span<const std::string>(v.tokens)));
  DSV4_RETURN_IF_ERROR(w.add_array_i32("tokenizer.ggml.token_type", v.token_types));
  DSV4_RETURN_IF_ERROR(w.add_array_string("tokenizer.ggml.merges", std::span<const std::string>(v.merges)));
  if (v.bos_id) DSV4_RETURN_IF_ERROR(w.add_u32("tokenizer.ggml.bos_token_id", *v.bos_id));
  if (v.eos_id) DSV4_RETURN_IF_ERROR(w.add_u32("tokenizer.ggml.eos_token_id", *v.eos_id));
  DSV4_RETURN_IF_ERROR(w.add_bool("tokenizer.ggml.add_bos_token", v.add_bos));
  if (v.add_eos) DSV4_RETURN_IF_ERROR(w.add_bool("tokenizer.ggml.add_eos_token", *v.add_eos));
  if (!v.chat_template.empty()) DSV4_RETURN_IF_ERROR(w.add_string("tokenizer.chat_template", v.chat_template));
  return ok_status();
}

}  // namespace dsv4::tools
