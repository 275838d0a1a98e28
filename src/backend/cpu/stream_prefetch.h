// backend/cpu/stream_prefetch.h — software prefetch for kernels that stream weight rows from DRAM.
//
// Matrix x vector reads every weight byte once, in address order, per thread. On the development VM
// (Zen 4, 2 cores) the hardware prefetcher alone reached 41-66 % of the streaming read bandwidth for
// F16 and 50-67 % for the K types; asking for the bytes one 4 KiB page ahead of the block being
// computed raised them to 70-98 % (measured by `dsv4 bench kernels`; prefetching into L2 only, T1,
// measured worse). Kernels call prefetch_ahead once per block group, right before computing it. A
// prefetch never faults (addresses past the tensor are allowed) and changes no result.
// Later measurement (a Zen 4 VM, `--threads 1`, the same binary with and without, back to back) found it
// costing the kernels that decode fast: F16 AVX-512 45-49 % -> 77-83 % of the read bandwidth without it,
// Q8_0 AVX-512 56-63 % -> 68-72 %, Q4_K AVX-512 54-57 % -> 68-70 %, Q4_K AVX2 46-47 % -> 52-53 %, and the
// compute-bound ones (Q2_K, IQ2_XXS) unchanged; the float, Q8_0 and K-quant kernels no longer call it
// (IQ2_XXS, the ROCmFPx AVX-512 kernels, AVX2 Q2_K and the AVX2 MXFP4 prepared matrix x vector do: after
// their decode got faster, 2 threads from DRAM gained 4-7 %).
// On Intel the Q8_0 kernels gain from it (an Ice Lake-class Xeon VM, 2 vCPUs, 2026-12-07, the same binary with
// and without, interleaved): `bench kernels` 4096 x 4096 1 thread AVX2 7.1-8.3 -> 9.2-10.4 GB/s, AVX-512
// 7.8-8.3 -> 11.3-11.6; 2 threads 11.8-13.9 -> 14.0-16.3 (AVX2) and 13.4-15.3 -> 19.0; flash-4l q2 decode
// tg32 at 2 threads, three rounds: AVX2 7.72 / 8.75 / 9.48 -> 9.66 / 10.26 / 12.25 tok/s, AVX-512 10.17 /
// 10.29 / 11.61 -> 11.44 / 12.47 / 13.66. So they prefetch where q8_0_stream_prefetch() holds: on Intel
// CPUs, and not elsewhere (the Zen 4 measurement above).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "base/cpu_features.h"

namespace dsv4::cpu {

constexpr int64_t kStreamPrefetchDistance = 4096;

// Prefetches [p + distance, p + distance + bytes) into L1, one request per 64-byte line.
inline void prefetch_ahead(const void* p, int64_t bytes) {
  const char* q = static_cast<const char*>(p) + kStreamPrefetchDistance;
  for (int64_t l = 0; l < bytes; l += 64) _mm_prefetch(q + l, _MM_HINT_T0);
}

// Whether the Q8_0 matrix x vector kernels call prefetch_ahead (above: on Intel CPUs; cpu_is_intel()
// detects once).
inline bool q8_0_stream_prefetch() { return cpu_is_intel(); }

}  // namespace dsv4::cpu
