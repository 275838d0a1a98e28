// apps/dsv4/cmd_synth.cpp — `dsv4 synth`: random-weight DS4 GGUFs of any shape.
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "base/log.h"
#include "dsv4/commands.h"
#include "dsv4/common.h"
#include "tools/synth.h"

namespace dsv4::app {
namespace {

struct SynthArgs {
  std::string preset = "tiny";
  int64_t layers = 0;
  std::string type = "q2";
  uint64_t seed = 1;
  std::string out;
  bool dry_run = false;
  int64_t expert_row_pool = -1;  // -1: preset default
  std::string tokenizer;
  bool json = false;
};

void print_plan(const tools::SynthPlan& p, bool json) {
  if (json) {
    nlohmann::json j;
    j["shape"] = {{"n_layer", p.shape.n_layer}, {"n_embd", p.shape.n_embd}, {"n_vocab", p.shape.n_vocab},
                  {"n_expert", p.shape.n_expert}, {"is_ds4_flash_shape", model::is_ds4_flash(p.shape)}};
    j["type"] = model::quant_mix_name(p.mix);
    j["tensor_count"] = p.tensors.size();
    j["parameters"] = p.total_params;
    j["bytes"] = p.total_bytes;
    j["gib"] = static_cast<double>(p.total_bytes) / (1 << 30);
    for (const auto& t : p.tensors) {
      nlohmann::json ne = nlohmann::json::array();
      for (int d = 0; d < t.n_dims; ++d) ne.push_back(t.ne[d]);
      j["tensors"].push_back({{"name", t.name}, {"type", tensor_type_name(t.type)}, {"ne", ne}, {"bytes", t.bytes},
                              {"fallback", t.fell_back}});
    }
    std::printf("%s\n", j.dump(1).c_str());
    return;
  }
  for (const auto& t : p.tensors) {
    std::string ne;
    for (int d = 0; d < t.n_dims; ++d) ne += (d ? " x " : "") + std::to_string(t.ne[d]);
    std::printf("%-40s %-10s %-24s %14lld%s\n", t.name.c_str(), std::string(tensor_type_name(t.type)).c_str(),
                ne.c_str(), static_cast<long long>(t.bytes), t.fell_back ? "  (fallback)" : "");
  }
  std::printf("%zu tensors, %lld parameters (%.2f B), %lld bytes (%.2f GiB)\n", p.tensors.size(),
              static_cast<long long>(p.total_params), static_cast<double>(p.total_params) / 1e9,
              static_cast<long long>(p.total_bytes), static_cast<double>(p.total_bytes) / (1 << 30));
}

// One info line (silent under --log-level warn, as in the build) naming the tensors stored in a wider
// type than the mix asks for because their rows are not a whole number of the type's blocks (e.g.
// rows of 24 in the tiny shape under q8_0's 32-value blocks). Expected in small test shapes; the real
// DS4 shapes have none. `--dry-run` marks each such tensor "(fallback)".
void log_fallbacks(const tools::SynthPlan& plan) {
  std::map<std::string, std::set<std::string>> names_by_type;  // "f16" -> {"attn_q_b.weight", ...}
  size_t n = 0;
  for (const auto& t : plan.tensors) {
    if (!t.fell_back) continue;
    ++n;
    std::string name = t.name;
    if (name.rfind("blk.", 0) == 0) name = name.substr(name.find('.', 4) + 1);  // blk.3.attn_q_b.weight
    names_by_type[std::string(tensor_type_name(t.type))].insert(name);
  }
  if (n == 0) return;
  std::string list;
  for (const auto& [type, names] : names_by_type) {
    if (!list.empty()) list += "; ";
    for (const auto& name : names) list += name + (&name == &*names.rbegin() ? "" : ", ");
    list += " as " + type;
  }
  log_info("synth: %zu tensors' rows are not a whole number of the %s mix's blocks, so they are stored wider "
           "(normal for small shapes; the real DS4 shapes have none): %s",
           n, model::quant_mix_name(plan.mix), list.c_str());
}

int run_synth(const SynthArgs& a) {
  auto shape = tools::synth_preset(a.preset);
  if (!shape) {
    std::fprintf(stderr, "dsv4 synth: unknown preset '%s' (tiny, flash, flash-4l)\n", a.preset.c_str());
    return 2;
  }
  if (a.layers > 0) *shape = tools::with_layers(*shape, a.layers);
  auto mix = model::quant_mix_from_name(a.type);
  if (!mix) {
    std::fprintf(stderr, "dsv4 synth: unknown --type '%s' (q2, q4, q8_0, f16, bf16, f32)\n", a.type.c_str());
    return 2;
  }
  if (Status st = model::validate_shape(*shape); !st.ok()) {
    std::fprintf(stderr, "dsv4 synth: %s\n", st.to_string().c_str());
    return 2;
  }
  tools::SynthPlan plan = tools::plan_synth(*shape, *mix);
  plan.expert_row_pool = a.expert_row_pool >= 0 ? a.expert_row_pool : (a.preset == "tiny" ? 0 : 4096);
  if (!a.tokenizer.empty()) {
    if (Status st = tools::with_tokenizer(plan, a.tokenizer); !st.ok()) {
      std::fprintf(stderr, "dsv4 synth: %s\n", st.to_string().c_str());
      return 2;
    }
  }
  if (a.dry_run) {
    print_plan(plan, a.json);
    return 0;
  }
  if (a.out.empty()) {
    std::fprintf(stderr, "dsv4 synth: --out is required (or use --dry-run)\n");
    return 2;
  }
  log_fallbacks(plan);
  auto threads = threads_from_flags();
  if (!threads.ok()) {
    std::fprintf(stderr, "dsv4 synth: %s\n", threads.status().to_string().c_str());
    return 2;
  }
  ThreadPool pool(*threads);
  const auto t0 = std::chrono::steady_clock::now();
  auto last = t0;
  Status st = tools::write_synth(plan, a.seed, a.out, pool, [&](const tools::SynthProgress& p) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last < std::chrono::milliseconds(500) && p.bytes_done != p.bytes_total) return;
    last = now;
    const double secs = std::chrono::duration<double>(now - t0).count();
    const double rate = static_cast<double>(p.bytes_done) / std::max(secs, 1e-9);
    const double eta = rate > 0 ? static_cast<double>(p.bytes_total - p.bytes_done) / rate : 0;
    std::fprintf(stderr, "\rsynth: %5.1f%%  tensor %zu/%zu  %.1f MB/s  ETA %.0f s   ",
                 100.0 * static_cast<double>(p.bytes_done) / static_cast<double>(std::max<int64_t>(1, p.bytes_total)),
                 p.tensor_index + 1, p.tensor_count, rate / 1e6, eta);
  });
  std::fprintf(stderr, "\n");
  if (!st.ok()) {
    std::fprintf(stderr, "dsv4 synth: %s\n", st.to_string().c_str());
    return 1;
  }
  std::fprintf(stderr, "dsv4 synth: wrote %s (%zu tensors, %.2f GiB)\n", a.out.c_str(), plan.tensors.size(),
               static_cast<double>(plan.total_bytes) / (1 << 30));
  return 0;
}

}  // namespace

void add_synth_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<SynthArgs>();
  auto* cmd = app.add_subcommand("synth", "Write a random-weight DS4 GGUF of any shape, deterministic for a seed; --dry-run prints the plan "
      "(--preset flash --type q2: 1328 tensors, 284.33 B parameters, 80.76 GiB, as the published file)");
  cmd->add_option("--preset", a->preset, "tiny | flash | flash-4l")->capture_default_str();
  cmd->add_option("--layers", a->layers, "number of layers (default: the preset's)");
  cmd->add_option("--type", a->type, "quant mix: q2 | q4 | q8_0 | f16 | bf16 | f32")->capture_default_str();
  cmd->add_option("--seed", a->seed, "random seed")->capture_default_str();
  cmd->add_option("--out", a->out, "output .gguf path");
  cmd->add_option("--tokenizer", a->tokenizer, "tokenizer.json: write its vocabulary; embedding/output rows follow it");
  cmd->add_flag("--dry-run", a->dry_run, "write nothing; print the tensor table and totals");
  cmd->add_option("--expert-row-pool", a->expert_row_pool,
                  "routed-expert rows repeat N distinct quantized rows (0 = all distinct; default 0 for tiny, 4096 "
                  "otherwise, since the IQ2/K quantizers are too slow for billions of distinct rows)");
  cmd->add_flag("--json", a->json, "with --dry-run: print JSON");
  cmd->callback([a, &exit_code] { exit_code = run_synth(*a); });
}

}  // namespace dsv4::app
