// backend/cuda/preload.cuh — what a kernel may do before wait_for_producer() (step_graph.cuh): touch
// weights. Weights are uploaded before the first step and never written by one, so reading them
// before the producer kernel has finished cannot see a stale value; with programmatic dependent
// launch the loads then overlap the kernel before (its tail, and the launch latency between the two).
// Activations, state and scratch are only touched after the wait.
//
//   prefetch_l2:    a byte range into L2 (cp.async.bulk.prefetch: no registers, no completion to wait
//                   for; the later loads hit L2 instead of HBM).
//   cp_async16:     16 bytes global → shared, asynchronous (cp.async.cg); cp_async_wait_all() waits for
//                   the thread's copies (then __syncthreads makes them visible to the CTA).
// Included by .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda::preload {

// Bytes [p, p + bytes) into L2, spread over threads t of nthreads in pieces of kPiece (every thread of
// the group calls it). The range is widened to 16-byte bounds: device allocations are 256-byte
// multiples, so the widened range stays inside the allocation.
constexpr int64_t kPiece = 16384;

__device__ __forceinline__ void prefetch_l2(const void* p, int64_t bytes, int t, int nthreads) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) & ~static_cast<uintptr_t>(15);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(bytes) + 15) & ~static_cast<uintptr_t>(15);
  for (uintptr_t a = begin + static_cast<uintptr_t>(t) * kPiece; a < end; a += static_cast<uintptr_t>(nthreads) * kPiece) {
    const uint32_t len = static_cast<uint32_t>(end - a < static_cast<uintptr_t>(kPiece) ? end - a : kPiece);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a), "r"(len) : "memory");
  }
#else
  (void)p, (void)bytes, (void)t, (void)nthreads;
#endif
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}

__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// dst[0, bytes) = src[0, bytes) (shared ← global) by threads t of nthreads: 16-byte asynchronous copies
// when both ends are 16-byte aligned and bytes is a multiple of 16 (wait with cp_async_wait_all), else
// byte copies (synchronous; the odd shapes of the tests).
__device__ __forceinline__ void stage_bytes(uint8_t* dst, const uint8_t* src, int64_t bytes, int t, int nthreads) {
  if ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | static_cast<uintptr_t>(bytes)) % 16 == 0) {
    for (int64_t q = t; q < bytes / 16; q += nthreads) cp_async16(dst + 16 * q, src + 16 * q);
  } else {
    for (int64_t q = t; q < bytes; q += nthreads) dst[q] = src[q];
  }
}

}  // namespace dsv4::cuda::preload
