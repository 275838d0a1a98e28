// apps/dsv4/cmd_tokenize.cpp — `dsv4 tokenize` and `dsv4 detokenize`: the tokenizer on the CLI.
//
//   dsv4 tokenize -m MODEL.gguf (--text S | --file F | --jsonl F) [--bos] [--pieces] [--no-special]
//     --text/--file: prints one JSON array of ids ([id, "piece"] pairs with --pieces, where the
//     piece is the GGUF vocab string, e.g. "Ġthe"). --jsonl: F holds one JSON string per line;
//     prints one JSON array per line, in order (blank lines are skipped). Invalid UTF-8 in the input (also raw bytes inside
//     a --jsonl string) is replaced by U+FFFD first, exactly like Python's
//     bytes.decode("utf-8", "replace"). No BOS unless --bos. --no-special: special-token strings
//     are ordinary text.
//   dsv4 detokenize -m MODEL.gguf (--ids "[1,2]" | --file F.json) [--skip-special]
//     prints the decoded text (valid UTF-8, no trailing newline added).
// Works on vocab-only GGUFs. Errors go to stderr, exit code 1.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "dsv4/commands.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace dsv4::app {
namespace {

struct TokenizeOptions {
  std::string model;
  std::string text;
  std::string file;
  std::string jsonl;
  bool bos = false;
  bool pieces = false;
  bool no_special = false;
  bool has_text = false;  // --text given (possibly empty)
};

struct DetokenizeOptions {
  std::string model;
  std::string ids;
  std::string file;
  bool skip_special = false;
};

int fail(const std::string& what) {
  std::fprintf(stderr, "error: %s\n", what.c_str());
  return 1;
}

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error(path + ": cannot open");
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return io_error(path + ": read failed");
  return s;
}

std::string ids_json(const tokenizer::Tokenizer& tok, const std::vector<int32_t>& ids, bool pieces) {
  nlohmann::json arr = nlohmann::json::array();
  for (const int32_t id : ids) {
    if (pieces) {
      arr.push_back(nlohmann::json::array({id, std::string(tok.token_text(id))}));
    } else {
      arr.push_back(id);
    }
  }
  return arr.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

int run_tokenize(const TokenizeOptions& o) {
  const int n_inputs = o.has_text + !o.file.empty() + !o.jsonl.empty();
  if (n_inputs != 1) return fail("tokenize: give exactly one of --text, --file, --jsonl");
  auto tok = tokenizer::Tokenizer::open(o.model);
  if (!tok.ok()) return fail(tok.status().to_string());
  tokenizer::EncodeOptions eo;
  eo.add_bos = o.bos;
  eo.parse_special = !o.no_special;
  if (o.jsonl.empty()) {
    std::string text = o.text;
    if (!o.file.empty()) {
      auto r = read_file(o.file);
      if (!r.ok()) return fail(r.status().to_string());
      text = std::move(r).value();
    }
    auto ids = tok->encode(text, eo);
    if (!ids.ok()) return fail(ids.status().to_string());
    std::printf("%s\n", ids_json(*tok, *ids, o.pieces).c_str());
    return 0;
  }
  std::ifstream in(o.jsonl, std::ios::binary);
  if (!in) return fail(o.jsonl + ": cannot open");
  std::string line;
  std::string out;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    // Raw invalid bytes inside the JSON string are repaired before parsing (nlohmann rejects them).
    const std::string clean = tokenizer::is_valid_utf8(line) ? line : tokenizer::sanitize_utf8(line);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(clean);
    } catch (const nlohmann::json::exception& e) {
      // e.g. a lone surrogate escape ("\ud800"): not a Unicode string (HF tokenizers refuses it too).
      return fail(o.jsonl + ":" + std::to_string(line_no) + ": expected one JSON string per line: " + e.what());
    }
    if (!j.is_string()) return fail(o.jsonl + ":" + std::to_string(line_no) + ": expected one JSON string per line");
    auto ids = tok->encode(j.get_ref<const std::string&>(), eo);
    if (!ids.ok()) return fail(ids.status().to_string());
    out += ids_json(*tok, *ids, o.pieces);
    out += '\n';
    if (out.size() > (1u << 20)) {
      std::fwrite(out.data(), 1, out.size(), stdout);
      out.clear();
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

int run_detokenize(const DetokenizeOptions& o) {
  if (o.ids.empty() == o.file.empty()) return fail("detokenize: give exactly one of --ids, --file");
  std::string src = o.ids;
  if (!o.file.empty()) {
    auto r = read_file(o.file);
    if (!r.ok()) return fail(r.status().to_string());
    src = std::move(r).value();
  }
  const nlohmann::json j = nlohmann::json::parse(src, nullptr, false);
  if (j.is_discarded() || !j.is_array()) return fail("detokenize: expected a JSON array of token ids");
  std::vector<int32_t> ids;
  for (const auto& v : j) {
    if (!v.is_number_integer()) return fail("detokenize: expected a JSON array of integer token ids");
    const auto x = v.get<int64_t>();
    if (x < INT32_MIN || x > INT32_MAX) return fail("detokenize: token id " + std::to_string(x) + " out of range");
    ids.push_back(static_cast<int32_t>(x));
  }
  auto tok = tokenizer::Tokenizer::open(o.model);
  if (!tok.ok()) return fail(tok.status().to_string());
  auto text = tok->decode(ids, o.skip_special);
  if (!text.ok()) return fail(text.status().to_string());
  std::fwrite(text->data(), 1, text->size(), stdout);
  return 0;
}

}  // namespace

void add_tokenize_commands(CLI::App& app, int& exit_code) {
  auto to = std::make_shared<TokenizeOptions>();
  auto* t = app.add_subcommand("tokenize", "Text to token ids (JSON): DeepSeek V3/V4 byte-level BPE; works on vocab-only GGUFs (convert --vocab-only)");
  t->add_option("-m,--model", to->model, "GGUF file with tokenizer.ggml.* (vocab-only is fine)")->required();
  auto* text_opt = t->add_option("--text", to->text, "Text to tokenize");
  t->add_option("--file", to->file, "File whose bytes are tokenized");
  t->add_option("--jsonl", to->jsonl, "File with one JSON string per line; one JSON array per line out");
  t->add_flag("--bos", to->bos, "Prepend the BOS token");
  t->add_flag("--pieces", to->pieces, "Print [id, \"piece\"] pairs");
  t->add_flag("--no-special", to->no_special, "Treat special-token strings as plain text");
  t->callback([to, text_opt, &exit_code] {
    to->has_text = text_opt->count() > 0;
    exit_code = run_tokenize(*to);
  });

  auto dopt = std::make_shared<DetokenizeOptions>();
  auto* d = app.add_subcommand("detokenize", "Token ids (JSON array) to text");
  d->add_option("-m,--model", dopt->model, "GGUF file with tokenizer.ggml.*")->required();
  d->add_option("--ids", dopt->ids, "JSON array of ids, e.g. \"[1,2]\"");
  d->add_option("--file", dopt->file, "File holding a JSON array of ids");
  d->add_flag("--skip-special", dopt->skip_special, "Leave out control tokens");
  d->callback([dopt, &exit_code] { exit_code = run_detokenize(*dopt); });
}

}  // namespace dsv4::app
