// backend/cuda/staged_upload.cuh — weight uploads through pinned staging buffers.
//
// A cudaMemcpyAsync from pageable memory (a GGUF file mapping) is staged by the driver one piece at a
// time on the calling thread: ~5-6 GB/s for the full DS4 Flash on an H200 machine. Here host threads
// copy the mapping into one of a few pinned buffers while the DMA engine drains the previous one, so
// page faults, the host copy and the PCIe transfer overlap. Copies stay in stream order (one stream),
// so the first step after loading sees every weight.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "base/thread_pool.h"

namespace dsv4::cuda {

class StagedUpload {
 public:
  StagedUpload() = default;
  ~StagedUpload() { release(); }
  StagedUpload(const StagedUpload&) = delete;
  StagedUpload& operator=(const StagedUpload&) = delete;

  // dst's first `bytes` = src's, enqueued on `stream`; src may be reused when this returns. On a CUDA
  // error: its code, and `what` names the call. cudaErrorMemoryAllocation before anything was
  // enqueued means no pinned memory: the caller copies from pageable memory instead.
  cudaError_t copy(void* dst, const void* src, int64_t bytes, cudaStream_t stream, const char** what);
  // Waits for the copies in flight and frees the pinned buffers and threads (loading is over).
  void release();

 private:
  static constexpr int kSlots = 3;
  static constexpr int64_t kChunk = int64_t{64} << 20;
  static constexpr int64_t kParallelMin = int64_t{4} << 20;  // smaller pieces: one thread copies
  struct Slot {
    void* host = nullptr;
    cudaEvent_t drained = nullptr;  // recorded after the DMA that reads this slot
  };
  cudaError_t ensure_slots();
  Slot slots_[kSlots];
  int next_ = 0;
  bool ready_ = false;
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace dsv4::cuda
