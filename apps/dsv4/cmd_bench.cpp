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
#include <chrono>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <random>
#include <algorithm>

#include "sampling/sampler.h"
#include "tokenizer/bench.h"
#include "tokenizer/tokenizer.h"
#include "dsv4/bench_model.h"
#include "dsv4/commands.h"
#include "dsv4/common.h"

namespace dsv4::app {
namespace {

struct BenchArgs {
  std::string types;  // comma-separated type names
  bool json = false;
  bool quick = false;
  double seconds = 0.5;
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
  auto amx = amx_from_flags(*level);
  if (!amx.ok()) {
    std::fprintf(stderr, "dsv4 bench: %s\n", amx.status().to_string().c_str());
    return 2;
  }
  ThreadPool pool(*threads);
  cpu::CpuContext ctx;
  ctx.pool = &pool;
  ctx.max_level = *level;
  ctx.use_amx = *amx;
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
                             {"fraction_of_bandwidth", r.gbps / r.read_gbps},
                             {"cache_gbps_one_thread", r.cache_gbps_one_thread}});
    for (const auto& r : mm)
      j["matmul"].push_back({{"type", tensor_type_name(r.type)}, {"simd", r.amx ? "amx" : simd_level_name(r.level)}, {"rows", r.rows},
                             {"n", r.n}, {"cols", r.cols}, {"gflops", r.gflops},
                             {"fraction_of_fma_peak", m.fma_gflops > 0 ? r.gflops / m.fma_gflops : 0.0}});
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("matrix x vector (weights streamed from DRAM; best of 5 windows. 'read GB/s' = best streaming read\n"
              "of probes interleaved with those windows, since bandwidth drifts on shared machines; the fraction uses it.\n"
              "'L2 1-thr' = one thread on an L2-sized slice of the same matrix: threads x it near or below 'read GB/s'\n"
              "means the kernel's compute, not memory, is the limit)\n");
  std::printf("  %-18s %-10s %11s %9s %9s %8s %9s\n", "type", "simd", "rows x n", "GB/s", "read GB/s", "of BW",
              "L2 1-thr");
  for (const auto& r : mv)
    std::printf("  %-18s %-10s %5lld x %-5lld %9.2f %9.2f %7.1f%% %9.2f\n",
                std::string(tensor_type_name(r.type)).c_str(),
                simd_level_name(r.level), static_cast<long long>(r.rows), static_cast<long long>(r.n), r.gbps,
                r.read_gbps, 100.0 * r.gbps / r.read_gbps, r.cache_gbps_one_thread);
  std::printf("\nmatrix x matrix\n");
  std::printf("  %-18s %-10s %11s %6s %9s %8s\n", "type", "simd", "rows x n", "cols", "GFLOP/s", "of peak");
  for (const auto& r : mm)
    std::printf("  %-18s %-10s %5lld x %-5lld %6lld %9.1f %7.1f%%\n", std::string(tensor_type_name(r.type)).c_str(),
                r.amx ? "amx" : simd_level_name(r.level), static_cast<long long>(r.rows), static_cast<long long>(r.n),
                static_cast<long long>(r.cols), r.gflops, m.fma_gflops > 0 ? 100.0 * r.gflops / m.fma_gflops : 0.0);
  return 0;
}

// `dsv4 bench tokenizer`: one-thread encode MB/s on prose and code (generated, deterministic, or
// --file), and the time to encode a prompt of about one million tokens.
struct BenchTokArgs {
  std::string model;
  std::string file;
  double seconds = 1.0;
};

struct SampleRng {
  uint64_t s = 0x9E3779B97F4A7C15ull;
  uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  size_t pick(size_t n) { return static_cast<size_t>(next() % n); }
};

std::string generated_prose(size_t bytes) {
  static const char* kWords[] = {
      "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not",
      "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they", "you", "were",
      "their", "one", "all", "we", "can", "her", "has", "there", "been", "if", "more", "when", "will", "would",
      "who", "so", "no", "model", "attention", "weather", "river", "mountain", "history", "government", "children",
      "important", "because", "through", "between", "thousand", "experience", "understanding", "development",
      "particularly", "nevertheless", "approximately", "Wednesday", "London", "September", "Einstein", "quickly",
      "beautiful", "electricity", "philosophy", "investment", "university", "restaurant", "unbelievable"};
  constexpr size_t kN = sizeof(kWords) / sizeof(kWords[0]);
  SampleRng r;
  std::string out;
  out.reserve(bytes + 64);
  bool cap = true;
  while (out.size() < bytes) {
    std::string w = kWords[r.pick(kN)];
    if (cap && w[0] >= 'a' && w[0] <= 'z') w[0] = static_cast<char>(w[0] - 'a' + 'A');
    out += w;
    cap = false;
    size_t p = r.pick(40);
    if (p == 0) {
      out += ".\n\n";
      cap = true;
    } else if (p < 4) {
      out += ". ";
      cap = true;
    } else if (p < 7) {
      out += ", ";
    } else if (p == 7) {
      out += " " + std::to_string(r.pick(100000)) + " ";
    } else {
      out += " ";
    }
  }
  return out;
}

std::string generated_code(size_t bytes) {
  static const char* kIds[] = {"count", "buffer", "index", "result", "value", "node", "tensor", "offset", "size",
                               "data", "key", "total", "i", "j", "ptr", "list", "config", "status", "row", "col"};
  static const char* kTypes[] = {"int", "size_t", "float", "auto", "const char*", "std::string", "double"};
  constexpr size_t kNi = sizeof(kIds) / sizeof(kIds[0]);
  constexpr size_t kNt = sizeof(kTypes) / sizeof(kTypes[0]);
  SampleRng r;
  std::string out;
  out.reserve(bytes + 256);
  int fn = 0;
  while (out.size() < bytes) {
    out += "// Computes the " + std::string(kIds[r.pick(kNi)]) + " of each " + kIds[r.pick(kNi)] + ".\n";
    out += std::string(kTypes[r.pick(kNt)]) + " compute_" + kIds[r.pick(kNi)] + "_" + std::to_string(fn++) + "(" +
           kTypes[r.pick(kNt)] + " " + kIds[r.pick(kNi)] + ", int " + kIds[r.pick(kNi)] + ") {\n";
    int lines = 3 + static_cast<int>(r.pick(8));
    for (int l = 0; l < lines; ++l) {
      std::string a = kIds[r.pick(kNi)], b = kIds[r.pick(kNi)];
      switch (r.pick(4)) {
        case 0: out += "  " + a + " += " + b + " * " + std::to_string(r.pick(1000)) + ";\n"; break;
        case 1: out += "  for (int " + a + " = 0; " + a + " < " + b + ".size(); ++" + a + ") {\n    " + b + "[" + a +
                       "] = 0x" + std::to_string(r.pick(65536)) + ";\n  }\n"; break;
        case 2: out += "  if (" + a + " == nullptr) return -EINVAL;  // " + b + " missing\n"; break;
        default: out += "  " + a + " = std::max(" + b + ", " + a + "->" + b + "());\n"; break;
      }
    }
    out += "  return " + std::string(kIds[r.pick(kNi)]) + ";\n}\n\n";
  }
  return out;
}

int run_bench_tokenizer(const BenchTokArgs& a) {
  auto tok = tokenizer::Tokenizer::open(a.model);
  if (!tok.ok()) {
    std::fprintf(stderr, "dsv4 bench tokenizer: %s\n", tok.status().to_string().c_str());
    return 1;
  }
  struct Sample {
    std::string name, text;
  };
  std::vector<Sample> samples;
  if (!a.file.empty()) {
    std::ifstream in(a.file, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "dsv4 bench tokenizer: %s: cannot open\n", a.file.c_str());
      return 1;
    }
    samples.push_back({a.file, std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>())});
  } else {
    samples.push_back({"prose (generated)", generated_prose(1 << 20)});
    samples.push_back({"code (generated)", generated_code(1 << 20)});
  }
  std::printf("tokenizer encode, 1 thread\n");
  std::printf("  %-24s %10s %10s %10s %12s\n", "sample", "MiB", "tokens", "MB/s", "tokens/s");
  double bytes_per_token = 4.0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const auto r = tokenizer::bench_encode(tok.value(), samples[i].text, 3, a.seconds);
    const uint64_t tokens = r.iterations > 0 ? r.tokens / static_cast<uint64_t>(r.iterations) : 0;
    std::printf("  %-24s %10.2f %10llu %10.2f %12.0f\n", samples[i].name.c_str(),
                static_cast<double>(samples[i].text.size()) / (1 << 20), static_cast<unsigned long long>(tokens),
                r.mb_per_s, r.tokens_per_s);
    if (i == 0 && tokens > 0) bytes_per_token = static_cast<double>(samples[i].text.size()) / static_cast<double>(tokens);
  }
  // ~1M-token prompt: the first sample repeated-with-variation up to the estimated byte size.
  const size_t want = static_cast<size_t>(bytes_per_token * 1.0e6);
  std::string big = a.file.empty() ? generated_prose(want) : std::string();
  while (big.size() < want) big += samples[0].text;
  big.resize(want);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tok->encode(big, true);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("  1M-token prompt: %zu tokens, %.2f MiB, %.3f s (%.2f MB/s)\n", ids.size(),
              static_cast<double>(big.size()) / (1 << 20), secs, static_cast<double>(big.size()) / secs / 1e6);
  return 0;
}

// `dsv4 bench sampler`: microseconds per sample() at the full DS4 vocabulary for the sampler settings
// clients use, on two shapes of logits: "peaked" (a few tokens hold nearly all the mass, as usual for
// an LM) and "flat bulk" (the bulk holds most of it: the worst case for top-p). Best of 5 rounds of
// 40 calls, the logits copy included (sample() works in place).
int run_bench_sampler() {
  constexpr size_t kVocab = 129280;
  std::mt19937_64 rng(4242);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> flat(kVocab), peaked;
  for (float& v : flat) v = normal(rng);
  for (int j = 0; j < 12; ++j) flat[rng() % kVocab] = 8.0f + normal(rng);
  peaked = flat;
  for (int j = 0; j < 8; ++j) peaked[rng() % kVocab] = 14.0f + static_cast<float>(j) * 0.5f;
  std::vector<float> scratch(kVocab);
  auto best_us = [&](auto&& body) {
    double best = 1e30;
    for (int round = 0; round < 5; ++round) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 40; ++i) body();
      best = std::min(best, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 40);
    }
    return best;
  };
  std::printf("sampler, 1 thread, n_vocab %zu; logits copy %.1f us (included below)\n", kVocab,
              best_us([&] { scratch = flat; }));
  std::printf("  %-36s %10s %10s\n", "us per sample()", "peaked", "flat bulk");
  struct Variant {
    const char* name;
    sampling::SamplerConfig cfg;
  };
  std::vector<Variant> variants(7);
  variants[0].name = "defaults (T 1, min_p 0.05)";
  variants[1].name = "greedy";
  variants[1].cfg.temperature = 0.0f;
  variants[2].name = "T 1, no cuts (id-order walk)";
  variants[2].cfg.min_p = 0.0f;
  variants[3].name = "top_p 0.95 (+ default min_p)";
  variants[3].cfg.top_p = 0.95f;
  variants[4].name = "top_k 40, top_p 0.95 (+ min_p)";
  variants[4].cfg.top_k = 40;
  variants[4].cfg.top_p = 0.95f;
  variants[5].name = "top_k 40, min_p 0";
  variants[5].cfg.top_k = 40;
  variants[5].cfg.min_p = 0.0f;
  variants[6].name = "top_p 0.95, min_p 0";
  variants[6].cfg.top_p = 0.95f;
  variants[6].cfg.min_p = 0.0f;
  int64_t checksum = 0;  // keeps the calls observable
  for (const Variant& v : variants) {
    double us[2];
    for (int shape = 0; shape < 2; ++shape) {
      const std::vector<float>& l = shape == 0 ? peaked : flat;
      sampling::Sampler s(v.cfg, static_cast<int32_t>(kVocab));
      us[shape] = best_us([&] {
        scratch = l;
        checksum += s.sample(scratch);
      });
    }
    std::printf("  %-36s %10.1f %10.1f\n", v.name, us[0], us[1]);
  }
  std::vector<sampling::TokenLogprob> top;
  std::printf("  %-36s %10.1f   (checksum %lld)\n", "logprob_of, n_top 20 (us per call)",
              best_us([&] { (void)sampling::logprob_of(peaked, 5, 20, top); }), static_cast<long long>(checksum));
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app, int& exit_code) {
  auto* bench = app.add_subcommand(
      "bench", "Benchmarks (speed is measured here, never asserted in tests). With -m MODEL: prefill/decode tok/s "
      "against the measured bandwidth and FMA peak, weights read per token, peak RSS, per-phase times; "
      "or one of the subcommands below");
  bench->require_subcommand(0, 1);
  auto margs = std::make_shared<BenchModelArgs>();
  bench->add_option("-m,--model", margs->model, "model .gguf: prefill and decode speed against the machine's limits");
  bench->add_option("--prompt", margs->prompts, "prefill lengths (pp), each measured at every depth")
      ->delimiter(',')
      ->capture_default_str();
  bench->add_option("--depth", margs->depths, "context depths (tokens prefilled untimed) for the pp and tg cases")
      ->delimiter(',')
      ->capture_default_str();
  bench->add_option("--decode", margs->decode_tokens, "decoded tokens per depth (tg)")->capture_default_str();
  bench->add_option("--chunk", margs->chunk, "prefill chunk size")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  bench->add_option("--repeat", margs->repeat, "timed runs per case (median, min, max, mean and stddev are printed)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  bench->add_option("--warmup", margs->warmup, "untimed runs per case before the timed ones")
      ->capture_default_str()
      ->check(CLI::Range(0, 100));
  bench->add_flag("--timing", margs->timing,
                  "per-phase time per token (HC, attention, compressor+indexer, MoE, head), from one more run per "
                  "case after the timed ones (not a sample)");
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
  auto targs = std::make_shared<BenchTokArgs>();
  auto* tokcmd = bench->add_subcommand(
      "tokenizer", "Tokenizer encode MB/s on prose and code (one thread) and the time to encode a ~1M-token prompt");
  tokcmd->add_option("-m,--model", targs->model, "model or vocab-only .gguf")->required();
  tokcmd->add_option("--file", targs->file, "benchmark this file instead of the generated samples");
  tokcmd->add_option("--seconds", targs->seconds, "minimum timed seconds per sample")->check(CLI::Range(0.01, 600.0));
  tokcmd->callback([targs, &exit_code] { exit_code = run_bench_tokenizer(*targs); });
  auto* samplercmd = bench->add_subcommand(
      "sampler", "Microseconds per sample() at the full DS4 vocabulary for common sampler settings (one thread)");
  samplercmd->callback([&exit_code] { exit_code = run_bench_sampler(); });
}

}  // namespace dsv4::app
