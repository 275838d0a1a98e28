// backend/cuda/preload.cuh — what a kernel may do before wait_for_producer() (step_graph.cuh): touch
// weights. Weights are uploaded before the first step and never written by one, so reading them
// before the producer kernel has finished cannot see a stale value; with programmatic dependent
// launch the loads then overlap the kernel before (its tail, and the launch latency between the two).
// Activations, state and scratch are only touched after the wait.
//
//   prefetch_l2:    a byte range into L2 (cp.async.bulk.prefetch: no registers, no completion to wait
//                   for; the later loads hit L2 instead of HBM).
//   cp_async16 / cp_async4_at: 16 / 4 bytes global → shared, asynchronous; cp_async_wait_all() waits for
//                   the thread's copies (then __syncthreads makes them visible to the CTA);
//                   cp_async_commit / cp_async_wait_group<n> pipeline them in groups.
//   BulkStage:      global → shared by the copy engine (cp.async.bulk, completing on an mbarrier): one
//                   thread issues a whole row, so one SM moves ~100 KB at the engine's rate instead of
//                   as thousands of 16-byte requests (hc_pre_norm's 8 SMs: 24 µs with those).
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

// 4 bytes global → shared (cp.async.ca: sizes below 16 bytes go through L1); both addresses 4-byte aligned.
// The destination is a shared-window address (__cvta_generic_to_shared of a shared pointer, computed once
// outside the copy loops: the conversion is several instructions per copy, ~150 of the ~350 per block of
// the Q8_0 tensor-core loop when each copy converted its own).
__device__ __forceinline__ void cp_async4_at(unsigned smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem), "l"(gmem) : "memory");
}

__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// The thread's cp.async copies issued since the last commit as one group (possibly empty), and the wait
// until at most `pending` of its groups are still in flight (older groups complete first).
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int pending>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;" ::"n"(pending) : "memory");
}

// Rows global → shared through the copy engine, completing on one mbarrier (a __shared__ uint64_t of
// the kernel; one use per kernel: phase 0). Every thread of the CTA calls init() (then a
// __syncthreads() before the first add()), add() for each row (thread 0 issues it) and wait(). A row
// whose address or length is not a multiple of 16 bytes is copied by the CTA's threads synchronously
// instead (the odd shapes of the tests), so wait() then __syncthreads() cover both paths. Thread 0's
// expect() (the sum of the bulk rows' bytes) comes before their add()s.
class BulkStage {
 public:
  __device__ explicit BulkStage(uint64_t* bar) : bar_(static_cast<unsigned>(__cvta_generic_to_shared(bar))) {}

  __device__ __forceinline__ void init(int t) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (t == 0) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar_) : "memory");
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
#else
    (void)t;
#endif
  }

  // Whether a row goes through the engine (both ends and the length 16-byte multiples).
  __device__ static bool bulk(const void* dst, const void* src, int64_t bytes) {
    return ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | static_cast<uintptr_t>(bytes)) % 16) == 0 &&
           bytes > 0;
  }

  // Thread 0: arrive on the barrier expecting `bytes` (the sum of the bulk rows about to be added).
  __device__ __forceinline__ void expect(int t, int64_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (t == 0)
      asm volatile("{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1; }" ::"r"(bar_),
                   "r"(static_cast<unsigned>(bytes))
                   : "memory");
#else
    (void)t, (void)bytes;
#endif
  }

  __device__ __forceinline__ void add(uint8_t* dst, const uint8_t* src, int64_t bytes, int t, int nthreads) {
    if (!bulk(dst, src, bytes)) {
      for (int64_t q = t; q < bytes; q += nthreads) dst[q] = src[q];
      return;
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (t == 0) {
      const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
      for (int64_t off = 0; off < bytes; off += kBulkPiece) {
        const unsigned len = static_cast<unsigned>(bytes - off < kBulkPiece ? bytes - off : kBulkPiece);
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                         d + static_cast<unsigned>(off)),
                     "l"(src + off), "r"(len), "r"(bar_)
                     : "memory");
      }
    }
#endif
  }

  // Every thread: until the barrier's phase 0 has completed (all expected bytes landed).
  __device__ __forceinline__ void wait() const {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    unsigned done = 0;
    while (!done)
      asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
                   : "=r"(done)
                   : "r"(bar_)
                   : "memory");
#endif
  }

 private:
  static constexpr int64_t kBulkPiece = 32768;
  unsigned bar_;
};

}  // namespace dsv4::cuda::preload
