// apps/dsv4/bench_model.cpp — `dsv4 bench -m MODEL.gguf`: prefill and decode speed of the engine
// against this machine's measured limits (read bandwidth, FMA peak). A benchmark: prints numbers.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

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

// How the backend ran one decode run's kernels (a GPU's step graphs), per token; nothing for the CPU.
void print_launches(const backend::LaunchStats& b, const backend::LaunchStats& e, int64_t tokens) {
  const double per = 1.0 / static_cast<double>(tokens > 0 ? tokens : 1);
  const int64_t graphs = e.graph_launches - b.graph_launches, eager = e.eager_launches - b.eager_launches;
  if (graphs == 0 && eager == 0) return;
  std::printf("    kernels per token: %.0f in %.1f graph launches (%.1f nodes patched; %lld graphs built in the run), "
              "%.1f launched one by one\n",
              static_cast<double>(e.nodes_launched - b.nodes_launched) * per, static_cast<double>(graphs) * per,
              static_cast<double>(e.nodes_patched - b.nodes_patched) * per,
              static_cast<long long>(e.graphs_built - b.graphs_built), static_cast<double>(eager) * per);
}

// The variation of one case's repeated measurements (tok/s): median, range, mean and sample standard
// deviation (llama-bench prints mean ± stddev; the median and range resist a noisy neighbour).
struct Spread {
  double median = 0, min = 0, max = 0, mean = 0, stddev = 0;
};
Spread spread(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  Spread s{n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), v.front(), v.back()};
  for (double x : v) s.mean += x / static_cast<double>(n);
  double squares = 0;
  for (double x : v) squares += (x - s.mean) * (x - s.mean);
  s.stddev = n > 1 ? std::sqrt(squares / static_cast<double>(n - 1)) : 0.0;
  return s;
}
std::string spread_text(const Spread& s) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "%8.2f tok/s (min %.2f, max %.2f, stddev %.2f)", s.median, s.min, s.max, s.stddev);
  return buf;
}

// llama-bench's test names: "pp512", "tg16", with " @ d4096" for a case run after a context.
std::string case_name(const char* kind, int64_t tokens, int64_t depth) {
  std::string name = kind + std::to_string(tokens);
  if (depth > 0) name += " @ d" + std::to_string(depth);
  return name;
}

struct CaseResult {
  std::string name;
  Spread tps;
};

int fail(const Status& st) {
  std::fprintf(stderr, "dsv4 bench: %s\n", st.to_string().c_str());
  return 1;
}

// Prefills `toks` in chunks; timed by the caller.
Status prefill(model::Session& sess, const std::vector<int32_t>& toks, int64_t chunk) {
  const int64_t np = static_cast<int64_t>(toks.size());
  for (int64_t i = 0; i < np; i += chunk) {
    const int64_t c = std::min(chunk, np - i);
    const std::span<const int32_t> part(toks.data() + i, static_cast<size_t>(c));
    int32_t next = 0;
    // The last chunk ends with the greedy id: the step's one read-back, so the time includes all of it.
    DSV4_RETURN_IF_ERROR(i + c == np ? sess.forward_greedy(part, &next) : sess.forward(part, nullptr, false));
  }
  return ok_status();
}

// n greedy decode steps from token `tok` (each: one forward, the next id read back).
Status decode(model::Session& sess, int64_t n, int32_t tok) {
  for (int64_t i = 0; i < n; ++i) DSV4_RETURN_IF_ERROR(sess.forward_greedy(std::span<const int32_t>(&tok, 1), &tok));
  return ok_status();
}

}  // namespace

int run_bench_model(const BenchModelArgs& a) {
  auto options = backend_options_from_flags();
  if (!options.ok()) return fail(options.status());
  auto be = backend::create_backend(*options);
  if (!be.ok()) return fail(be.status());
  backend::Backend& backend = **be;
  const auto t_load = Clock::now();
  auto loaded = model::Model::load(a.model, backend);
  if (!loaded.ok()) return fail(loaded.status());
  const model::Model& m = **loaded;
  {  // a device backend may still be copying: one read-back waits for every copy enqueued
    float probe = 0;
    if (Status st = backend.download(m.weights().out_norm, &probe, 4); !st.ok()) return fail(st);
  }
  const double load_s = secs(t_load);
  const model::Ds4Shape& s = m.shape();
  auto lim = backend.measure_limits();
  if (!lim.ok()) return fail(lim.status());
  double bytes_tok = 0, macs_tok = 0, file_bytes = 0;
  per_token_cost(m, &bytes_tok, &macs_tok);
  for (const auto& t : m.file().tensors()) file_bytes += static_cast<double>(t.n_bytes);
  std::printf("model: %s (%s)\n", m.describe().c_str(), a.model.c_str());
  std::printf("backend: %s\n", backend.describe().c_str());
  std::printf("load: %.2f s for %.2f GB of tensors = %.2f GB/s (file mapping to usable weights)\n", load_s,
              file_bytes / 1e9, file_bytes / 1e9 / load_s);
  std::printf("limits: read bandwidth %.1f GB/s, f32 FMA peak %.1f GFLOP/s (%s)\n", lim->read_gbps, lim->fma_gflops,
              lim->what.c_str());
  std::printf("weights read per decoded token: %.1f MB  (decode roofline %.2f tok/s)\n", bytes_tok / 1e6,
              lim->read_gbps * 1e9 / bytes_tok);
  std::printf("runs: a short untimed warm-up, then per case %lld untimed and %lld timed runs%s; each case starts "
              "from a context of its depth (prefilled untimed); greedy ids chosen on the backend\n",
              static_cast<long long>(a.warmup), static_cast<long long>(a.repeat),
              a.timing ? ", then one split by phase (--timing; not a sample)" : "");
  const int64_t max_depth = *std::max_element(a.depths.begin(), a.depths.end());
  const int64_t max_prompt = *std::max_element(a.prompts.begin(), a.prompts.end());
  // The warm-up (a prefill, then a few decoded tokens) and every case (a depth, then a prompt or the
  // decoded tokens) must fit the session's context.
  const int64_t warm_prompt = std::min<int64_t>(max_prompt, 256), warm_decode = std::min<int64_t>(a.decode_tokens, 8);
  const int64_t ctx_tokens = std::max(max_depth + std::max(max_prompt, a.decode_tokens), warm_prompt + warm_decode) + 1;

  model::Session sess(m, ctx_tokens, a.chunk);
  if (!sess.status().ok()) return fail(sess.status());
  {  // warm-up: clocks, scratch growth, caches
    const auto toks = random_tokens(warm_prompt, s.n_vocab, 7);
    if (Status st = prefill(sess, toks, a.chunk); !st.ok()) return fail(st);
    if (Status st = decode(sess, warm_decode, 1); !st.ok()) return fail(st);
  }

  std::vector<CaseResult> results;
  // --timing adds one run per case after the timed ones (phase boundaries drain the device: that run's
  // speed is not a sample).
  const int64_t extra = a.timing ? 1 : 0;
  for (int64_t depth : a.depths) {
    sess.reset();
    if (depth > 0) {
      if (Status st = prefill(sess, random_tokens(depth, s.n_vocab, 2), a.chunk); !st.ok()) return fail(st);
    }
    const model::SessionCheckpoint at_depth = sess.checkpoint();
    std::printf("\ndepth %lld\n", static_cast<long long>(depth));
    for (int64_t np : a.prompts) {
      const auto toks = random_tokens(np, s.n_vocab, 1);
      std::vector<double> tps;
      sess.clear_times();
      for (int64_t r = 0; r < a.warmup + a.repeat + extra; ++r) {
        if (Status st = sess.rewind(at_depth); !st.ok()) return fail(st);
        const bool timed = r >= a.warmup && r < a.warmup + a.repeat;
        sess.set_timing(a.timing && r == a.warmup + a.repeat);
        const auto t0 = Clock::now();
        if (Status st = prefill(sess, toks, a.chunk); !st.ok()) return fail(st);
        if (timed) tps.push_back(static_cast<double>(np) / secs(t0));
      }
      sess.set_timing(false);
      const Spread sp = spread(tps);
      const double gflops = 2.0 * macs_tok * sp.median / 1e9;
      results.push_back({case_name("pp", np, depth), sp});
      const std::string chunk = "(chunk " + std::to_string(std::min(a.chunk, np)) + ")";
      std::printf("  %-16s %-13s %s  %8.1f GFLOP/s = %5.2f%% of FMA peak\n", results.back().name.c_str(), chunk.c_str(),
                  spread_text(sp).c_str(), gflops, 100.0 * gflops / lim->fma_gflops);
      if (a.timing) print_times(sess.times(), "prefill");
    }
    std::vector<double> tps;
    backend::LaunchStats last_before, last_after;  // over the last timed run
    sess.clear_times();
    for (int64_t r = 0; r < a.warmup + a.repeat + extra; ++r) {
      if (Status st = sess.rewind(at_depth); !st.ok()) return fail(st);
      const bool timed = r >= a.warmup && r < a.warmup + a.repeat;
      sess.set_timing(a.timing && r == a.warmup + a.repeat);
      if (timed) last_before = backend.launch_stats();
      const auto t0 = Clock::now();
      if (Status st = decode(sess, a.decode_tokens, 1); !st.ok()) return fail(st);
      if (timed) tps.push_back(static_cast<double>(a.decode_tokens) / secs(t0));
      if (timed) last_after = backend.launch_stats();
    }
    sess.set_timing(false);
    const Spread sp = spread(tps);
    const double gbps = sp.median * bytes_tok / 1e9;
    results.push_back({case_name("tg", a.decode_tokens, depth), sp});
    std::printf("  %-16s %-13s %s  weights %7.1f GB/s = %5.2f%% of the bandwidth roofline\n",
                results.back().name.c_str(), "", spread_text(sp).c_str(), gbps, 100.0 * gbps / lim->read_gbps);
    print_launches(last_before, last_after, a.decode_tokens);
    if (a.timing) print_times(sess.times(), "decode");
  }

  std::printf("\n| test             | tok/s median |      min |      max |     mean |   stddev |\n"
              "|------------------|-------------:|---------:|---------:|---------:|---------:|\n");
  for (const CaseResult& c : results)
    std::printf("| %-16s | %12.2f | %8.2f | %8.2f | %8.2f | %8.2f |\n", c.name.c_str(), c.tps.median, c.tps.min,
                c.tps.max, c.tps.mean, c.tps.stddev);
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  std::printf("\npeak RSS: %.1f MiB; backend memory peak %.1f MiB (in use now %.1f MiB)\n",
              static_cast<double>(ru.ru_maxrss) / 1024.0, static_cast<double>(backend.memory_peak()) / 1048576.0,
              static_cast<double>(backend.memory_in_use()) / 1048576.0);
  return 0;
}

}  // namespace dsv4::app
