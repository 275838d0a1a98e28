// apps/dsv4/cmd_bench.cpp — `dsv4 bench kernels`: machine limits, then every type's matrix×vector
// (GB/s of weights, fraction of measured read bandwidth) and matrix×matrix (GFLOP/s, fraction of
// the f32 FMA peak). A benchmark, never a test: numbers are printed, nothing is asserted.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/bench_kernels.h"
#include "dsv4/bench_model.h"
#include "dsv4/commands.h"
#include "dsv4/common.h"

namespace dsv4::app {
namespace {

struct BenchArgs {
  std::string types;  // comma-separated type names
  bool json = false;
  bool quick = false;
  double seconds = 0.25;
};

int run_bench_kernels(const BenchArgs& a) {
  auto threads = threads_from_flags();
  auto level = simd_level_from_flags();
  if (!threads.ok() || !level.ok()) {
    std::fprintf(stderr, "dsv4 bench: %s\n", (!threads.ok() ? threads.status() : level.status()).to_string().c_str());
    return 2;
  }
  cpu::BenchOptions opt;
  opt.seconds_per_case = a.seconds;
  std::stringstream ss(a.types);
  for (std::string name; std::getline(ss, name, ',');) {
    if (name.empty()) continue;
    auto t = tensor_type_from_name(name);
    if (!t || cpu::type_kernels(*t) == nullptr) {
      std::fprintf(stderr, "dsv4 bench: unknown or unsupported type '%s'\n", name.c_str());
      return 2;
    }
    opt.types.push_back(*t);
  }
  if (a.quick) {  // smoke-test sizes: seconds, not minutes
    opt.bandwidth_bytes = 64 << 20;
    opt.min_working_set = 8 << 20;
    opt.seconds_per_case = 0.01;
    opt.matvec_shapes = {{256, 512}};
    opt.matmul_cols = {8};
    opt.matmul_rows = 128;
    opt.matmul_n = 512;
  }
  ThreadPool pool(*threads);
  cpu::CpuContext ctx;
  ctx.pool = &pool;
  ctx.max_level = *level;
  const cpu::MachineLimits m = cpu::measure_machine(ctx, opt);
  if (!a.json) {
    std::printf("machine: %d threads, SIMD %s, LLC %.0f MiB\n", m.threads, simd_level_name(m.level),
                static_cast<double>(m.llc_bytes) / (1 << 20));
    std::printf("  read bandwidth  %8.2f GB/s\n  f32 FMA peak    %8.1f GFLOP/s\n\n", m.read_gbps, m.fma_gflops);
    std::fflush(stdout);
  }
  const auto mv = cpu::bench_matvec(ctx, opt);
  const auto mm = cpu::bench_matmul(ctx, opt);
  if (a.json) {
    nlohmann::json j;
    j["machine"] = {{"threads", m.threads}, {"simd", simd_level_name(m.level)}, {"llc_bytes", m.llc_bytes},
                    {"read_gbps", m.read_gbps}, {"fma_gflops", m.fma_gflops}};
    for (const auto& r : mv)
      j["matvec"].push_back({{"type", tensor_type_name(r.type)}, {"simd", simd_level_name(r.level)}, {"rows", r.rows},
                             {"n", r.n}, {"gbps", r.gbps}, {"read_gbps_nearby", r.read_gbps},
                             {"fraction_of_bandwidth", r.gbps / r.read_gbps}});
    for (const auto& r : mm)
      j["matmul"].push_back({{"type", tensor_type_name(r.type)}, {"simd", simd_level_name(r.level)}, {"rows", r.rows},
                             {"n", r.n}, {"cols", r.cols}, {"gflops", r.gflops},
                             {"fraction_of_fma_peak", m.fma_gflops > 0 ? r.gflops / m.fma_gflops : 0.0}});
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("matrix x vector (weights streamed from DRAM; 'read GB/s' = streaming read measured right after\n"
              "each case, because this machine's bandwidth drifts; the fraction uses it)\n");
  std::printf("  %-18s %-7s %11s %9s %9s %8s\n", "type", "simd", "rows x n", "GB/s", "read GB/s", "of BW");
  for (const auto& r : mv)
    std::printf("  %-18s %-7s %5lld x %-5lld %9.2f %9.2f %7.1f%%\n", std::string(tensor_type_name(r.type)).c_str(),
                simd_level_name(r.level), static_cast<long long>(r.rows), static_cast<long long>(r.n), r.gbps,
                r.read_gbps, 100.0 * r.gbps / r.read_gbps);
  std::printf("\nmatrix x matrix\n");
  std::printf("  %-18s %-7s %11s %6s %9s %8s\n", "type", "simd", "rows x n", "cols", "GFLOP/s", "of peak");
  for (const auto& r : mm)
    std::printf("  %-18s %-7s %5lld x %-5lld %6lld %9.1f %7.1f%%\n", std::string(tensor_type_name(r.type)).c_str(),
                simd_level_name(r.level), static_cast<long long>(r.rows), static_cast<long long>(r.n),
                static_cast<long long>(r.cols), r.gflops, m.fma_gflops > 0 ? 100.0 * r.gflops / m.fma_gflops : 0.0);
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app, int& exit_code) {
  auto* bench = app.add_subcommand(
      "bench", "Benchmarks (speed is measured here, never asserted in tests): -m MODEL for the engine, or `kernels`");
  bench->require_subcommand(0, 1);
  auto margs = std::make_shared<BenchModelArgs>();
  bench->add_option("-m,--model", margs->model, "model .gguf: prefill and decode speed against the machine's limits");
  bench->add_option("--prompt", margs->prompts, "prefill lengths")->delimiter(',')->capture_default_str();
  bench->add_option("--depth", margs->depths, "decode context depths")->delimiter(',')->capture_default_str();
  bench->add_option("--decode", margs->decode_tokens, "decoded tokens per depth")->capture_default_str();
  bench->add_option("--chunk", margs->chunk, "prefill chunk size")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  bench->add_flag("--timing", margs->timing, "per-phase time per token (HC, attention, compressor+indexer, MoE, head)");
  bench->callback([bench, margs, &exit_code] {
    if (!bench->get_subcommands().empty()) return;
    if (margs->model.empty()) {
      std::fprintf(stderr, "dsv4 bench: give -m MODEL.gguf, or use `dsv4 bench kernels`\n");
      exit_code = 2;
      return;
    }
    exit_code = run_bench_model(*margs);
  });
  auto args = std::make_shared<BenchArgs>();
  auto* kernels = bench->add_subcommand(
      "kernels",
      "Measure read bandwidth and FMA peak, then matrix x vector GB/s and matrix x matrix GFLOP/s per tensor type");
  kernels->add_option("--types", args->types, "comma-separated types (default: all with kernels), e.g. q8_0,iq2_xxs");
  kernels->add_option("--seconds", args->seconds, "minimum timed seconds per case")->check(CLI::Range(0.001, 60.0));
  kernels->add_flag("--json", args->json, "print one JSON document");
  kernels->add_flag("--quick", args->quick, "tiny sizes (smoke test; numbers meaningless)");
  kernels->callback([args, &exit_code] { exit_code = run_bench_kernels(*args); });
}

}  // namespace dsv4::app
