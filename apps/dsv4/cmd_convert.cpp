// apps/dsv4/cmd_convert.cpp — `dsv4 convert`: official/HF DeepSeek V4 checkpoint → DS4 GGUF.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "dsv4/commands.h"
#include "dsv4/common.h"
#include "tools/convert.h"

namespace dsv4::app {
namespace {

struct ConvertArgs {
  std::string hf;
  std::string out;
  std::string type = "q8_0";
  std::string tokenizer;
  std::string imatrix;
  bool vocab_only = false;
};

int run_convert(const ConvertArgs& a) {
  auto mix = model::quant_mix_from_name(a.type);
  if (!mix) {
    std::fprintf(stderr, "dsv4 convert: unknown --type '%s' (q2, q4, q8_0, f16, bf16, f32)\n", a.type.c_str());
    return 2;
  }
  if (a.out.empty() || (a.hf.empty() && !(a.vocab_only && !a.tokenizer.empty()))) {
    std::fprintf(stderr, "dsv4 convert: --hf DIR and --out FILE are required (--vocab-only accepts --tokenizer instead of --hf)\n");
    return 2;
  }
  auto threads = threads_from_flags();
  if (!threads.ok()) {
    std::fprintf(stderr, "dsv4 convert: %s\n", threads.status().to_string().c_str());
    return 2;
  }
  ThreadPool pool(*threads);
  tools::ConvertOptions o;
  o.hf_dir = a.hf;
  o.out = a.out;
  o.mix = *mix;
  o.tokenizer = a.tokenizer;
  o.imatrix = a.imatrix;
  o.vocab_only = a.vocab_only;
  const auto t0 = std::chrono::steady_clock::now();
  auto last = t0 - std::chrono::seconds(1);
  bool progress_shown = false;
  tools::ConvertCallbacks cb;
  cb.note = [&](const std::string& s) {
    std::fprintf(stderr, "%sdsv4 convert: %s\n", progress_shown ? "\n" : "", s.c_str());
    progress_shown = false;
  };
  cb.progress = [&](const tools::ConvertProgress& p) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last < std::chrono::milliseconds(500) && p.bytes_done != p.bytes_total) return;
    last = now;
    const double secs = std::chrono::duration<double>(now - t0).count();
    const double rate = static_cast<double>(p.bytes_done) / std::max(secs, 1e-9);
    const double eta = rate > 0 ? static_cast<double>(p.bytes_total - p.bytes_done) / rate : 0;
    std::fprintf(stderr, "\rconvert: %5.1f%%  tensor %zu/%zu %-36s %.1f MB/s  ETA %.0f s   ",
                 100.0 * static_cast<double>(p.bytes_done) / static_cast<double>(std::max<uint64_t>(1, p.bytes_total)),
                 p.tensor_index + 1, p.tensor_count, p.tensor_name->c_str(), rate / 1e6, eta);
    progress_shown = true;
  };
  auto r = tools::convert_checkpoint(o, pool, cb);
  if (progress_shown) std::fprintf(stderr, "\n");
  if (!r.ok()) {
    std::fprintf(stderr, "dsv4 convert: %s\n", r.status().to_string().c_str());
    return 1;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (a.vocab_only) {
    std::fprintf(stderr, "dsv4 convert: wrote %s (vocabulary only) in %.1f s\n", a.out.c_str(), secs);
  } else {
    std::fprintf(stderr, "dsv4 convert: wrote %s (%zu tensors, %.2f GiB, %zu fallbacks, %zu with imatrix) in %.1f s\n",
                 a.out.c_str(), r->tensor_count, static_cast<double>(r->bytes) / (1 << 30), r->fallbacks, r->imatrix_used,
                 secs);
  }
  return 0;
}

}  // namespace

void add_convert_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<ConvertArgs>();
  auto* cmd = app.add_subcommand("convert", "Convert an official or HF DeepSeek V4 checkpoint (single or sharded safetensors; BF16/F16/F32, FP8 E4M3 "
      "with 128x128 scales, FP4 experts) to a DS4 GGUF; streams (< 100 MB RAM), progress on stderr");
  cmd->add_option("--hf", a->hf, "checkpoint directory (config.json, *.safetensors or model.safetensors.index.json)");
  cmd->add_option("--out", a->out, "output .gguf path (written via <out>.tmp)");
  cmd->add_option("--type", a->type, "quant mix: q2 | q4 | q8_0 | f16 | bf16 | f32")->capture_default_str();
  cmd->add_option("--tokenizer", a->tokenizer, "tokenizer.json (default: <hf>/tokenizer.json when present)");
  cmd->add_option("--imatrix", a->imatrix, "llama.cpp legacy .dat importance matrix");
  cmd->add_flag("--vocab-only", a->vocab_only, "write only the tokenizer keys (no tensors, no config.json needed)");
  cmd->callback([a, &exit_code] { exit_code = run_convert(*a); });
}

}  // namespace dsv4::app
