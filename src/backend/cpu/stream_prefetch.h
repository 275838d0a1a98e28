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
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace dsv4::cpu {

constexpr int64_t kStreamPrefetchDistance = 4096;

// Prefetches [p + distance, p + distance + bytes) into L1, one request per 64-byte line.
inline void prefetch_ahead(const void* p, int64_t bytes) {
  const char* q = static_cast<const char*>(p) + kStreamPrefetchDistance;
  for (int64_t l = 0; l < bytes; l += 64) _mm_prefetch(q + l, _MM_HINT_T0);
}

}  // namespace dsv4::cpu
