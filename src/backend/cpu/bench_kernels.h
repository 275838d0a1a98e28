// backend/cpu/bench_kernels.h — measures this machine's limits and the kernels against them.
//
// Library side of `dsv4 bench kernels`: returns numbers, prints nothing. Timings are wall-clock
// best-of-N; nothing here is used by tests except a smoke run with tiny sizes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"

namespace dsv4::cpu {

struct BenchOptions {
  int64_t bandwidth_bytes = int64_t{1} << 30;    // read-bandwidth buffer (>> LLC)
  int64_t min_working_set = int64_t{256} << 20;  // matvec cycles through copies totalling at least this
  double seconds_per_case = 0.5;                 // minimum timed duration per case (best of 5 windows)
  std::vector<TensorType> types;                 // empty: every type with kernels
  // (rows, n) shapes for matrix×vector.
  std::vector<std::pair<int64_t, int64_t>> matvec_shapes = {{4096, 4096}, {2048, 4096}, {4096, 2048}};
  std::vector<int64_t> matmul_cols = {64, 512};
  int64_t matmul_rows = 4096, matmul_n = 4096;
};

struct MachineLimits {
  double read_gbps = 0;        // all threads, streaming reads: best over load widths and repetitions
  double fma_gflops = 0;       // f32 FMA peak, all threads, at the detected SIMD level
  int threads = 0;
  SimdLevel level = SimdLevel::kScalar;
  int64_t llc_bytes = 0;
};

struct MatvecResult {
  TensorType type;
  SimdLevel level;
  int64_t rows, n;
  double gbps;          // weight bytes streamed per second
  double read_gbps;     // streaming-read bandwidth measured just before this case (the VM's
                        // bandwidth drifts over minutes, so each ratio uses its own neighbour)
  double cache_gbps_one_thread;  // one thread on an L2-sized slice of the same matrix (the kernel's
                                 // own speed: threads × this below read_gbps means compute-bound)
};

struct MatmulResult {
  TensorType type;
  SimdLevel level;
  int64_t rows, n, cols;
  double gflops;  // 2·rows·n·cols per second
  bool amx = false;  // ran on AMX tiles (CpuContext::use_amx and the type has an AMX kernel)
};

MachineLimits measure_machine(CpuContext& ctx, const BenchOptions& opt);
// Best streaming-read GB/s over `reps` passes of `bytes` (all threads, widest loads available).
double measure_read_bandwidth(CpuContext& ctx, int64_t bytes, int reps);
std::vector<MatvecResult> bench_matvec(CpuContext& ctx, const BenchOptions& opt);
std::vector<MatmulResult> bench_matmul(CpuContext& ctx, const BenchOptions& opt);

// Internal ISA helpers (bench_kernels_avx2.cpp / _avx512.cpp): run `iters` iterations of
// independent FMA chains; return the number of flops done (the result sink keeps them alive).
double fma_chains_avx2(int64_t iters, float* sink);
double fma_chains_avx512(int64_t iters, float* sink);
// Streaming reads of [p, p + bytes) with wide loads (bytes a multiple of 256, p 64-aligned).
uint64_t read_stream_avx2(const uint8_t* p, int64_t bytes);
uint64_t read_stream_avx512(const uint8_t* p, int64_t bytes);

}  // namespace dsv4::cpu
