// backend/cuda/staged_upload.cu — StagedUpload (staged_upload.cuh says why).
#include <algorithm>
#include <cstring>

#include "backend/cuda/staged_upload.cuh"

namespace dsv4::cuda {

cudaError_t StagedUpload::ensure_slots() {
  if (ready_) return cudaSuccess;
  for (Slot& s : slots_) {
    cudaError_t err = cudaHostAlloc(&s.host, static_cast<size_t>(kChunk), cudaHostAllocDefault);
    if (err == cudaSuccess) err = cudaEventCreateWithFlags(&s.drained, cudaEventDisableTiming);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      release();
      return err;
    }
  }
  pool_ = std::make_unique<ThreadPool>(std::min(8, ThreadPool::hardware_threads()));
  ready_ = true;
  next_ = 0;
  return cudaSuccess;
}

void StagedUpload::release() {
  for (Slot& s : slots_) {
    if (s.drained != nullptr) {
      (void)cudaEventSynchronize(s.drained);
      (void)cudaEventDestroy(s.drained);
    }
    if (s.host != nullptr) (void)cudaFreeHost(s.host);
    s = {};
  }
  pool_.reset();
  ready_ = false;
}

cudaError_t StagedUpload::copy(void* dst, const void* src, int64_t bytes, cudaStream_t stream, const char** what) {
  *what = "cudaHostAlloc (pinned staging buffers)";
  if (cudaError_t err = ensure_slots(); err != cudaSuccess) return err;
  const auto* from = static_cast<const uint8_t*>(src);
  auto* to = static_cast<uint8_t*>(dst);
  for (int64_t done = 0; done < bytes;) {
    const int64_t len = std::min(kChunk, bytes - done);
    Slot& s = slots_[next_];
    next_ = (next_ + 1) % kSlots;
    // The slot's previous DMA must have read it before it is overwritten (the first use: never recorded).
    *what = "cudaEventSynchronize (staging buffer)";
    if (cudaError_t err = cudaEventSynchronize(s.drained); err != cudaSuccess) return err;
    auto* host = static_cast<uint8_t*>(s.host);
    if (len >= kParallelMin) {
      pool_->parallel_for(len, [&](int64_t begin, int64_t end, int) {
        if (end > begin) std::memcpy(host + begin, from + done + begin, static_cast<size_t>(end - begin));
      });
    } else {
      std::memcpy(host, from + done, static_cast<size_t>(len));
    }
    *what = "cudaMemcpyAsync (weight upload)";
    if (cudaError_t err = cudaMemcpyAsync(to + done, host, static_cast<size_t>(len), cudaMemcpyHostToDevice, stream);
        err != cudaSuccess)
      return err;
    *what = "cudaEventRecord (staging buffer)";
    if (cudaError_t err = cudaEventRecord(s.drained, stream); err != cudaSuccess) return err;
    done += len;
  }
  return cudaSuccess;
}

}  // namespace dsv4::cuda
