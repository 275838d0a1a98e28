// apps/dsv4/cmd_logits.cpp — `dsv4 logits` (every position's logits to .npy) and `dsv4 generate`
// (greedy token ids), the engine's command-line checks against HF goldens.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dsv4/commands.h"
#include "dsv4/common.h"
#include "model/model.h"

namespace dsv4::app {
namespace {

struct EngineArgs {
  std::string model;
  std::string tokens_file;
  int64_t chunk = 0;  // 0 = whole prompt
  int64_t ctx = 0;    // 0 = prompt + generated tokens
  std::string out;
  int64_t n_predict = 16;
  bool greedy = true;
  bool json = false;
  int64_t repeat = 1;  // run the prompt this many times in one session, resetting in between
};

Result<std::vector<int32_t>> read_tokens(const std::string& path) {
  std::ifstream f(path);
  if (!f) return not_found(path + ": cannot open");
  nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  if (j.is_discarded() || !j.is_array()) return invalid_argument(path + ": expected a JSON array of token ids");
  std::vector<int32_t> ids;
  for (const auto& v : j) {
    if (!v.is_number_integer()) return invalid_argument(path + ": every element must be an integer token id");
    const int64_t x = v.get<int64_t>();
    if (x < 0 || x > 0x7fffffff) return out_of_range(path + ": token id " + std::to_string(x) + " out of range");
    ids.push_back(static_cast<int32_t>(x));
  }
  if (ids.empty()) return invalid_argument(path + ": no tokens");
  return ids;
}

Status write_npy(const std::string& path, const std::vector<float>& data, int64_t rows, int64_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  if (!f) return io_error(path + ": cannot open for writing");
  const char magic[] = "\x93NUMPY\x01\x00";
  f.write(magic, 8);
  const uint16_t hl = static_cast<uint16_t>(header.size());
  f.write(reinterpret_cast<const char*>(&hl), 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * sizeof(float)));
  if (!f) return io_error(path + ": write failed");
  return ok_status();
}

int fail(const char* cmd, const Status& s) {
  std::fprintf(stderr, "dsv4 %s: %s\n", cmd, s.to_string().c_str());
  return 1;
}

int run_engine(const EngineArgs& a, bool generate) {
  const char* cmd = generate ? "generate" : "logits";
  auto options = backend_options_from_flags();
  if (!options.ok()) return fail(cmd, options.status());
  auto tokens = read_tokens(a.tokens_file);
  if (!tokens.ok()) return fail(cmd, tokens.status());
  auto be = backend::create_backend(*options);
  if (!be.ok()) return fail(cmd, be.status());
  auto model = model::Model::load(a.model, **be);
  if (!model.ok()) return fail(cmd, model.status());
  const model::Ds4Shape& s = (*model)->shape();
  std::fprintf(stderr, "dsv4 %s: %s\n", cmd, (*model)->describe().c_str());
  const int64_t n = static_cast<int64_t>(tokens->size());
  const int64_t ctx = a.ctx > 0 ? a.ctx : n + (generate ? a.n_predict : 0);
  const int64_t chunk = a.chunk > 0 ? a.chunk : n;
  model::Session session(**model, ctx, std::min(chunk, ctx));
  if (!session.status().ok()) return fail(cmd, session.status());
  const int64_t V = s.n_vocab;
  std::fprintf(stderr, "dsv4 %s: session for %lld tokens: %.1f MiB reserved, %.0f bytes per token of context\n", cmd,
               static_cast<long long>(ctx), static_cast<double>(session.reserved_bytes()) / (1 << 20),
               session.bytes_per_token());
  if (!generate) {
    std::vector<float> logits(static_cast<size_t>(n * V));
    for (int64_t rep = 0; rep < std::max<int64_t>(1, a.repeat); ++rep) {
      session.reset();
      for (int64_t i = 0; i < n; i += chunk) {
        const int64_t m = std::min(chunk, n - i);
        Status st = session.forward(std::span<const int32_t>(tokens->data() + i, static_cast<size_t>(m)),
                                    logits.data() + i * V, true);
        if (!st.ok()) return fail(cmd, st);
      }
    }
    Status st = write_npy(a.out, logits, n, V);
    if (!st.ok()) return fail(cmd, st);
    return 0;
  }
  // Greedy: the highest logit, ties to the lowest id (sampling::argmax's rule), chosen by the backend
  // where the logits are (a device backend sends back 4 bytes per token, not the vocabulary).
  int32_t next = -1;
  for (int64_t i = 0; i < n; i += chunk) {
    const int64_t m = std::min(chunk, n - i);
    const std::span<const int32_t> part(tokens->data() + i, static_cast<size_t>(m));
    Status st = i + m == n ? session.forward_greedy(part, &next) : session.forward(part, nullptr, false);
    if (!st.ok()) return fail(cmd, st);
  }
  std::vector<int32_t> out;
  for (int64_t k = 0; k < a.n_predict; ++k) {
    out.push_back(next);
    if (k + 1 == a.n_predict) break;
    Status st = session.forward_greedy(std::span<const int32_t>(&out.back(), 1), &next);
    if (!st.ok()) return fail(cmd, st);
  }
  if (a.json) {
    std::printf("%s\n", nlohmann::json(out).dump().c_str());
  } else {
    for (size_t i = 0; i < out.size(); ++i) std::printf("%s%d", i ? " " : "", out[i]);
    std::printf("\n");
  }
  return 0;
}

void add_common(CLI::App* cmd, EngineArgs& a) {
  cmd->add_option("-m,--model", a.model, "model .gguf")->required();
  cmd->add_option("--tokens-file", a.tokens_file, "JSON array of prompt token ids")->required();
  cmd->add_option("--chunk", a.chunk, "prefill chunk size (default: the whole prompt; 1 = token by token)");
  cmd->add_option("--ctx", a.ctx, "context size to reserve (default: what the run needs)");
}

}  // namespace

void add_logits_commands(CLI::App& app, int& exit_code) {
  auto la = std::make_shared<EngineArgs>();
  auto* logits = app.add_subcommand("logits", "Write the logits of every prompt position as float32 .npy [n_tokens, n_vocab] (--chunk 1, token by "
      "token, gives the same bits)");
  add_common(logits, *la);
  logits->add_option("--out", la->out, "output .npy")->required();
  logits->add_option("--repeat", la->repeat, "run the prompt N times in one session with a reset between (checks reset)");
  logits->callback([la, &exit_code] { exit_code = run_engine(*la, false); });

  auto ga = std::make_shared<EngineArgs>();
  auto* gen = app.add_subcommand("generate", "Generate tokens after a prompt and print their ids");
  add_common(gen, *ga);
  gen->add_option("-n,--n-predict", ga->n_predict, "tokens to generate")->capture_default_str();
  gen->add_flag("--greedy", ga->greedy, "greedy decoding (the only mode of this command)");
  gen->add_flag("--json", ga->json, "print a JSON array");
  gen->callback([ga, &exit_code] { exit_code = run_engine(*ga, true); });
}

}  // namespace dsv4::app
