// backend/cpu/bench_kernels.cpp — bandwidth / FMA-peak probes and per-type kernel timings.
//
// Matrix×vector is timed on matrices that cannot stay in cache: the same random matrix is copied
// until the copies exceed max(min_working_set, 4 × LLC), and successive calls cycle through them,
// so every call streams its weights from DRAM, as decode does.
#include "backend/cpu/bench_kernels.h"

#include <emmintrin.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <random>

namespace dsv4::cpu {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int64_t read_llc_bytes() {
  for (int idx = 3; idx >= 2; --idx) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(idx) + "/size");
    std::string s;
    if (f >> s && !s.empty()) {
      int64_t v = std::atoll(s.c_str());
      if (s.back() == 'K') v <<= 10;
      if (s.back() == 'M') v <<= 20;
      if (v > 0) return v;
    }
  }
  return int64_t{32} << 20;
}

// Streaming read of [p, p+bytes) with 4 independent SSE2 accumulators (baseline ISA: memory, not
// the core, is the limit).
uint64_t read_sum(const uint8_t* p, int64_t bytes) {
  __m128i a0 = _mm_setzero_si128(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i + 64 <= bytes; i += 64) {
    a0 = _mm_add_epi64(a0, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i)));
    a1 = _mm_add_epi64(a1, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 16)));
    a2 = _mm_add_epi64(a2, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 32)));
    a3 = _mm_add_epi64(a3, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 48)));
  }
  const __m128i s = _mm_add_epi64(_mm_add_epi64(a0, a1), _mm_add_epi64(a2, a3));
  uint64_t out[2];
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), s);
  return out[0] + out[1];
}

struct AlignedBuffer {
  explicit AlignedBuffer(int64_t bytes)
      : p(static_cast<uint8_t*>(::operator new(static_cast<size_t>(bytes), std::align_val_t{64}))), n(bytes) {}
  ~AlignedBuffer() { ::operator delete(p, std::align_val_t{64}); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  uint8_t* p;
  int64_t n;
};

std::vector<const TypeKernels*> selected_types(const BenchOptions& opt) {
  std::vector<const TypeKernels*> out;
  for (const TypeKernels* k : all_type_kernels())
    if (opt.types.empty() || std::find(opt.types.begin(), opt.types.end(), k->type) != opt.types.end())
      out.push_back(k);
  return out;
}

// One random matrix of `rows` × n in type k (rows quantized by the reference quantizer).
void fill_random_matrix(const TypeKernels& k, int64_t rows, int64_t n, uint8_t* dst, CpuContext& ctx) {
  const int64_t row_bytes = tensor_row_bytes(k.type, n);
  ctx.pool->parallel_for(rows, [&](int64_t r0, int64_t r1, int) {
    std::mt19937 rng(static_cast<uint32_t>(r0 * 7919 + 1));
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> row(static_cast<size_t>(n));
    for (int64_t r = r0; r < r1; ++r) {
      for (auto& v : row) v = g(rng);
      k.quantize_row(row.data(), dst + r * row_bytes, n, nullptr);
    }
  });
}

// The best rate (units per second) over kWindows consecutive windows of at least
// seconds_per_case / kWindows each; step() runs one call and returns its units. Best-of, like the
// bandwidth probe: on a shared VM a window in which the other vCPU was descheduled (static
// partitioning waits for the slowest thread) measures the neighbours, not the kernel.
// between(), if given, runs after every window (matrix x vector interleaves read probes with its
// windows, so the kernel and the limit it is compared with are measured over the same minutes).
template <typename Step, typename Between = void (*)()>
double best_window_rate(const BenchOptions& opt, Step step, Between between = [] {}) {
  constexpr int kWindows = 5;
  double best = 0;
  for (int w = 0; w < kWindows; ++w) {
    double units = 0, elapsed = 0;
    const auto t0 = Clock::now();
    while (elapsed < opt.seconds_per_case / kWindows || units == 0) {
      units += step();
      elapsed = seconds_since(t0);
    }
    best = std::max(best, units / elapsed);
    between();
  }
  return best;
}

// A first-touched buffer for read probes (first touch by the pool, as the kernels' weights).
struct ProbeBuffer {
  ProbeBuffer(CpuContext& ctx, int64_t bytes) : buf(bytes) {
    ctx.pool->parallel_for(buf.n / 4096, [&](int64_t b, int64_t e, int) {
      std::memset(buf.p + b * 4096, 1, static_cast<size_t>((e - b) * 4096));
    });
  }
  AlignedBuffer buf;
};

// Best streaming read rate (GB/s) over reps passes per load width: SSE2, AVX2 and (where present)
// AVX-512 loads; the limit is the best any width achieves.
double probe_read(CpuContext& ctx, const ProbeBuffer& probe, int reps) {
  const AlignedBuffer& buf = probe.buf;
  std::vector<uint64_t> sink(static_cast<size_t>(ctx.pool->size()));
  double best = 1e30;
  // AVX-512 VBMI adds no load width: the widths stop at kAvx512.
  const int top = std::min(static_cast<int>(ctx.max_level), static_cast<int>(SimdLevel::kAvx512));
  for (int width = 0; width <= top; ++width) {
    for (int rep = 0; rep < reps; ++rep) {
      const auto t0 = Clock::now();
      ctx.pool->parallel_for(buf.n / 4096, [&](int64_t b, int64_t e, int t) {
        const uint8_t* p = buf.p + b * 4096;
        const int64_t len = (e - b) * 4096;
        sink[static_cast<size_t>(t)] += width == 2 ? read_stream_avx512(p, len)
                                        : width == 1 ? read_stream_avx2(p, len)
                                                     : read_sum(p, len);
      });
      best = std::min(best, seconds_since(t0));
    }
  }
  return static_cast<double>(buf.n) / best / 1e9;
}

}  // namespace

double measure_read_bandwidth(CpuContext& ctx, int64_t bytes, int reps) {
  const ProbeBuffer probe(ctx, bytes);
  return probe_read(ctx, probe, reps);
}

MachineLimits measure_machine(CpuContext& ctx, const BenchOptions& opt) {
  MachineLimits m;
  m.threads = ctx.pool->size();
  m.level = ctx.max_level;
  m.llc_bytes = read_llc_bytes();
  m.read_gbps = measure_read_bandwidth(ctx, opt.bandwidth_bytes, 6);
  {
    const int64_t iters = 20'000'000;
    std::vector<double> flops(static_cast<size_t>(m.threads));
    std::vector<float> sink(16 * static_cast<size_t>(m.threads));
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = Clock::now();
      ctx.pool->parallel_for(m.threads, [&](int64_t b, int64_t e, int t) {
        for (int64_t i = b; i < e; ++i) {
          float* s = sink.data() + 16 * t;
          flops[static_cast<size_t>(t)] = has_avx512(m.level) ? fma_chains_avx512(iters, s)
                                          : m.level == SimdLevel::kAvx2 ? fma_chains_avx2(iters, s)
                                                                        : 0.0;
        }
      });
      best = std::min(best, seconds_since(t0));
    }
    double total = 0;
    for (double f : flops) total += f;
    m.fma_gflops = total / best / 1e9;
  }
  return m;
}

std::vector<MatvecResult> bench_matvec(CpuContext& ctx, const BenchOptions& opt) {
  std::vector<MatvecResult> out;
  const int64_t working_set = std::max(opt.min_working_set, 4 * read_llc_bytes());
  const ProbeBuffer probe(ctx, std::min<int64_t>(opt.bandwidth_bytes, int64_t{256} << 20));
  for (const TypeKernels* k : selected_types(opt)) {
    for (auto [rows, n] : opt.matvec_shapes) {
      const int64_t bytes = tensor_row_bytes(k->type, n) * rows;
      if (bytes <= 0) continue;
      const int64_t copies = std::max<int64_t>(2, (working_set + bytes - 1) / bytes);
      AlignedBuffer buf(bytes * copies);
      fill_random_matrix(*k, rows, n, buf.p, ctx);
      for (int64_t c = 1; c < copies; ++c) std::memcpy(buf.p + c * bytes, buf.p, static_cast<size_t>(bytes));
      std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(rows));
      std::mt19937 rng(3);
      std::normal_distribution<float> g(0.0f, 1.0f);
      for (auto& v : x) v = g(rng);
      std::vector<uint8_t> act;
      quantize_activations(ctx, *k, x.data(), n, 1, act);
      // Warm-up pass over all copies, then timed passes (activation quantization excluded: it is
      // done once per token and shared by many matrices).
      for (int64_t c = 0; c < copies; ++c) (void)matmul_quantized(ctx, *k, buf.p + c * bytes, rows, n, act.data(), 1, y.data());
      int64_t calls = 0;
      double read_gbps = 0;
      const double gbps = best_window_rate(
          opt,
          [&] {
            (void)matmul_quantized(ctx, *k, buf.p + (calls % copies) * bytes, rows, n, act.data(), 1, y.data());
            ++calls;
            return static_cast<double>(bytes) / 1e9;
          },
          [&] { read_gbps = std::max(read_gbps, probe_read(ctx, probe, 1)); });
      // The same kernel on one thread over an L2-sized slice (256 KiB, at least 8 rows), called again
      // and again: its compute speed without DRAM.
      const int64_t slice_rows = std::clamp<int64_t>((int64_t{256} << 10) / tensor_row_bytes(k->type, n), 8, rows);
      ThreadPool one(1);
      CpuContext ctx1;
      ctx1.pool = &one;
      ctx1.max_level = ctx.max_level;
      (void)matmul_quantized(ctx1, *k, buf.p, slice_rows, n, act.data(), 1, y.data());
      const double cache_gbps = best_window_rate(opt, [&] {
        (void)matmul_quantized(ctx1, *k, buf.p, slice_rows, n, act.data(), 1, y.data());
        return static_cast<double>(slice_rows * tensor_row_bytes(k->type, n)) / 1e9;
      });
      out.push_back({k->type, effective_simd_level(*k, ctx.max_level), rows, n, gbps, read_gbps, cache_gbps});
    }
  }
  return out;
}

std::vector<MatmulResult> bench_matmul(CpuContext& ctx, const BenchOptions& opt) {
  std::vector<MatmulResult> out;
  const int64_t rows = opt.matmul_rows, n = opt.matmul_n;
  for (const TypeKernels* k : selected_types(opt)) {
    const int64_t bytes = tensor_row_bytes(k->type, n) * rows;
    if (bytes <= 0) continue;
    AlignedBuffer w(bytes);
    fill_random_matrix(*k, rows, n, w.p, ctx);
    for (int64_t cols : opt.matmul_cols) {
      std::vector<float> x(static_cast<size_t>(n * cols)), y(static_cast<size_t>(rows * cols));
      std::mt19937 rng(5);
      std::normal_distribution<float> g(0.0f, 1.0f);
      for (auto& v : x) v = g(rng);
      (void)matmul(ctx, k->type, w.p, rows, n, x.data(), cols, y.data());  // warm-up
      const double gflops = best_window_rate(opt, [&] {
        (void)matmul(ctx, k->type, w.p, rows, n, x.data(), cols, y.data());  // includes act quantization
        return 2.0 * static_cast<double>(rows * n * cols) / 1e9;
      });
      out.push_back({k->type, effective_simd_level(*k, ctx.max_level), rows, n, cols, gflops, uses_amx(ctx, *k, cols)});
    }
  }
  return out;
}

}  // namespace dsv4::cpu
