// apps/dsv4/bench_model.cpp — `dsv4 bench -m MODEL.gguf`: prefill and decode speed of the engine
// against this machine's measured limits (read bandwidth, FMA peak). A benchmark: prints numbers.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/bench_kernels.h"
#include "dsv4/bench_model.h"
#include "dsv4/common.h"
#include "model/model.h"

namespace dsv4::app {
namespace {

using Clock = std::chrono::steady_clock;

double secs(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Weight bytes and multiply-adds one decoded token touches: every tensor fully, except routed
// experts (n_expert_used of n_expert slices) and the embedding (one row).
void per_token_cost(const model::Model& m, double* bytes, double* macs) {
  const model::Ds4Shape& s = m.shape();
  *bytes = 0;
  *macs = 0;
  for (const auto& t : m.file().tensors()) {
    double b = static_cast<double>(t.n_bytes), e = static_cast<double>(t.n_elements);
    const std::string name(t.name);
    if (name == "token_embd.weight") {
      b /= static_cast<double>(t.ne[1]);
      e = 0;
    } else if (t.n_dims == 3) {
      b *= static_cast<double>(s.n_expert_used) / static_cast<double>(s.n_expert);
      e *= static_cast<double>(s.n_expert_used) / static_cast<double>(s.n_expert);
    } else if (t.n_dims == 1 || name.find("tid2eid") != std::string::npos) {
      e = 0;
    }
    *bytes += b;
    *macs += e;
  }
}

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& v : t) v = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

void print_times(const model::PhaseTimes& t, const char* what) {
  const double total = t.hc + t.attention + t.compressor + t.moe + t.head + t.embed;
  if (t.tokens == 0 || total <= 0) return;
  const double per = 1e3 / static_cast<double>(t.tokens);
  std::printf("    %s per token (ms): hc %.3f  attention %.3f  compressor+indexer %.3f  moe %.3f  head %.3f  embed %.3f"
              "  (total %.3f)\n",
              what, t.hc * per, t.attention * per, t.compressor * per, t.moe * per, t.head * per, t.embed * per,
              total * per);
}

}  // namespace

int run_bench_model(const BenchModelArgs& a) {
  auto options = backend_options_from_flags();
  if (!options.ok()) {
    std::fprintf(stderr, "dsv4 bench: %s\n", options.status().to_string().c_str());
    return 2;
  }
  auto be = backend::create_backend(*options);
  if (!be.ok()) {
    std::fprintf(stderr, "dsv4 bench: %s\n", be.status().to_string().c_str());
    return 1;
  }
  auto loaded = model::Model::load(a.model, **be);
  if (!loaded.ok()) {
    std::fprintf(stderr, "dsv4 bench: %s\n", loaded.status().to_string().c_str());
    return 1;
  }
  ThreadPool pool(options->threads);
  const model::Model& m = **loaded;
  const model::Ds4Shape& s = m.shape();
  cpu::CpuContext ctx;
  ctx.pool = &pool;
  ctx.max_level = options->simd;
  cpu::BenchOptions bo;
  bo.bandwidth_bytes = int64_t{512} << 20;
  const cpu::MachineLimits lim = cpu::measure_machine(ctx, bo);
  double bytes_tok = 0, macs_tok = 0;
  per_token_cost(m, &bytes_tok, &macs_tok);
  std::printf("model: %s (%s)\n", m.describe().c_str(), a.model.c_str());
  std::printf("backend: %s\n", (*be)->describe().c_str());
  std::printf("machine: %d threads, SIMD %s, read bandwidth %.2f GB/s, f32 FMA peak %.1f GFLOP/s\n", lim.threads,
              simd_level_name(lim.level), lim.read_gbps, lim.fma_gflops);
  std::printf("weights read per decoded token: %.1f MB  (decode roofline %.2f tok/s)\n", bytes_tok / 1e6,
              lim.read_gbps * 1e9 / bytes_tok);
  const int64_t max_depth = *std::max_element(a.depths.begin(), a.depths.end());
  const int64_t max_prompt = *std::max_element(a.prompts.begin(), a.prompts.end());
  const int64_t ctx_tokens = std::max(max_prompt, max_depth) + a.decode_tokens + 1;

  std::printf("\nprefill\n");
  for (int64_t np : a.prompts) {
    model::Session sess(m, ctx_tokens, a.chunk);
    if (!sess.status().ok()) {
      std::fprintf(stderr, "dsv4 bench: %s\n", sess.status().to_string().c_str());
      return 1;
    }
    sess.set_timing(a.timing);
    const auto toks = random_tokens(np, s.n_vocab, 1);
    std::vector<float> last(static_cast<size_t>(s.n_vocab));
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < np; i += a.chunk) {
      const int64_t c = std::min(a.chunk, np - i);
      Status st = sess.forward(std::span<const int32_t>(toks.data() + i, static_cast<size_t>(c)), last.data(), false);
      if (!st.ok()) {
        std::fprintf(stderr, "dsv4 bench: %s\n", st.to_string().c_str());
        return 1;
      }
    }
    const double dt = secs(t0), tps = static_cast<double>(np) / dt;
    const double gflops = 2.0 * macs_tok * tps / 1e9;
    std::printf("  %6lld tokens (chunk %lld): %8.1f tok/s  %7.1f GFLOP/s  = %5.1f%% of FMA peak\n",
                static_cast<long long>(np), static_cast<long long>(std::min(a.chunk, np)), tps, gflops,
                100.0 * gflops / lim.fma_gflops);
    if (a.timing) print_times(sess.times(), "prefill");
  }

  std::printf("\ndecode (%lld tokens after a prompt of the given depth)\n", static_cast<long long>(a.decode_tokens));
  for (int64_t depth : a.depths) {
    model::Session sess(m, ctx_tokens, a.chunk);
    if (!sess.status().ok()) {
      std::fprintf(stderr, "dsv4 bench: %s\n", sess.status().to_string().c_str());
      return 1;
    }
    std::vector<float> last(static_cast<size_t>(s.n_vocab));
    if (depth > 0) {
      const auto toks = random_tokens(depth, s.n_vocab, 2);
      for (int64_t i = 0; i < depth; i += a.chunk) {
        const int64_t c = std::min(a.chunk, depth - i);
        Status st = sess.forward(std::span<const int32_t>(toks.data() + i, static_cast<size_t>(c)), nullptr, false);
        if (!st.ok()) {
          std::fprintf(stderr, "dsv4 bench: %s\n", st.to_string().c_str());
          return 1;
        }
      }
    }
    sess.set_timing(a.timing);
    sess.clear_times();
    int32_t tok = 1;
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < a.decode_tokens; ++i) {
      Status st = sess.forward(std::span<const int32_t>(&tok, 1), last.data(), false);
      if (!st.ok()) {
        std::fprintf(stderr, "dsv4 bench: %s\n", st.to_string().c_str());
        return 1;
      }
      tok = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    }
    const double tps = static_cast<double>(a.decode_tokens) / secs(t0);
    const double gbps = tps * bytes_tok / 1e9;
    std::printf("  depth %7lld: %8.2f tok/s  weights %6.2f GB/s  = %5.1f%% of the bandwidth roofline\n",
                static_cast<long long>(depth), tps, gbps, 100.0 * gbps / lim.read_gbps);
    if (a.timing) print_times(sess.times(), "decode");
  }
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  std::printf("\npeak RSS: %.1f MiB\n", static_cast<double>(ru.ru_maxrss) / 1024.0);
  return 0;
}

}  // namespace dsv4::app
