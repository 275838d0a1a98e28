// backend/cuda/sample.cu — CudaBackend::argmax (the greedy choice on the device: one 4-byte id per
// row comes back instead of the vocabulary's logits) and measure_limits (what `dsv4 bench` compares
// the device's speed with: streaming-read bandwidth of device memory and the f32 FMA peak).
//
// argmax: two passes. CTAs of 256 threads each scan a chunk of 8192 logits of a row (a thread's
// strided elements, 8 loads in flight) keeping (value, id) under the rule "larger value wins, equal
// values → lower id, NaN loses to every number" and fold their pairs in a tree; then one warp per row
// folds the chunks' pairs. That rule is a total order on (value, id) pairs, so any fold order gives the
// same pair: the CPU's sequential scan (sampling::argmax) and these trees agree on every input.
#include <algorithm>
#include <chrono>
#include <string>

#include "backend/cuda/cuda_backend.cuh"

namespace dsv4::cuda {

using backend::Tensor;

namespace {

constexpr int kArgmaxThreads = 256;
constexpr int64_t kArgmaxChunk = 8192;  // logits per CTA of the first pass
constexpr int kArgmaxBatch = 8;         // loads in flight per thread

// Whether (v, i) beats (best, best_i): a number beats NaN and any lower number; ties → lower id.
__device__ inline bool beats(float v, int32_t i, float best, int32_t best_i) {
  if (v != v) return false;
  if (best_i < 0 || best != best) return true;
  return v > best || (v == best && i < best_i);
}

// Pass 1: CTA (chunk c, row r) finds the best pair of logits [c·kArgmaxChunk, …) of row r (id −1 when
// the chunk has no number) into part[r·chunks + c].
__global__ void __launch_bounds__(kArgmaxThreads) argmax_chunk_kernel(const float* logits, int64_t n,
                                                                      int64_t row_stride, int64_t chunks,
                                                                      float* part_v, int32_t* part_i) {
  __shared__ float sv[kArgmaxThreads];
  __shared__ int32_t si[kArgmaxThreads];
  const int tid = static_cast<int>(threadIdx.x);
  const float* row = logits + blockIdx.y * row_stride;
  const int64_t begin = blockIdx.x * kArgmaxChunk, end = begin + kArgmaxChunk < n ? begin + kArgmaxChunk : n;
  float best = 0.0f;
  int32_t best_i = -1;
  for (int64_t i0 = begin + tid; i0 < end; i0 += kArgmaxThreads * kArgmaxBatch) {
    float v[kArgmaxBatch];
#pragma unroll
    for (int k = 0; k < kArgmaxBatch; ++k) {
      const int64_t i = i0 + static_cast<int64_t>(k) * kArgmaxThreads;
      v[k] = i < end ? row[i] : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kArgmaxBatch; ++k) {
      const int64_t i = i0 + static_cast<int64_t>(k) * kArgmaxThreads;
      if (i < end && beats(v[k], static_cast<int32_t>(i), best, best_i)) {
        best = v[k];
        best_i = static_cast<int32_t>(i);
      }
    }
  }
  sv[tid] = best;
  si[tid] = best_i;
  __syncthreads();
  for (int s = kArgmaxThreads / 2; s >= 1; s >>= 1) {
    if (tid < s) {
      const float v = sv[tid + s];
      const int32_t i = si[tid + s];
      if (i >= 0 && beats(v, i, sv[tid], si[tid])) {
        sv[tid] = v;
        si[tid] = i;
      }
    }
    __syncthreads();
  }
  if (tid == 0) {
    part_v[blockIdx.y * chunks + blockIdx.x] = sv[0];
    part_i[blockIdx.y * chunks + blockIdx.x] = si[0];
  }
}

// Pass 2: one warp per row folds its chunks' pairs; a row without a number gives id 0.
__global__ void argmax_fold_kernel(const float* part_v, const int32_t* part_i, int64_t chunks, int32_t* ids) {
  const int lane = static_cast<int>(threadIdx.x);
  const float* pv = part_v + blockIdx.x * chunks;
  const int32_t* pi = part_i + blockIdx.x * chunks;
  float best = 0.0f;
  int32_t best_i = -1;
  for (int64_t c = lane; c < chunks; c += 32)
    if (pi[c] >= 0 && beats(pv[c], pi[c], best, best_i)) {
      best = pv[c];
      best_i = pi[c];
    }
  for (int s = 16; s >= 1; s >>= 1) {
    const float v = __shfl_down_sync(0xffffffffu, best, s);
    const int32_t i = __shfl_down_sync(0xffffffffu, best_i, s);
    if (i >= 0 && beats(v, i, best, best_i)) {
      best = v;
      best_i = i;
    }
  }
  if (lane == 0) ids[blockIdx.x] = best_i < 0 ? 0 : best_i;
}

// Streaming read of `words` 16-byte words (evict-first loads); the xor keeps the loads alive.
__global__ void read_kernel(const int4* src, int64_t words, int* sink) {
  int acc = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < words; i += stride) {
    const int4 v = __ldcs(src + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x7fffffff) sink[0] = acc;  // practically never: only defeats dead-code elimination
}

// 8 independent fma chains per thread, `iters` steps each: 16·iters FLOP per thread.
__global__ void fma_kernel(float seed, int iters, float* sink) {
  float a[8];
  for (int k = 0; k < 8; ++k) a[k] = seed + static_cast<float>(threadIdx.x + k);
  const float m = 0.999999f, c = 1e-7f;
  for (int it = 0; it < iters; ++it)
    for (int k = 0; k < 8; ++k) a[k] = __fmaf_rn(a[k], m, c);
  float s = 0;
  for (int k = 0; k < 8; ++k) s += a[k];
  if (s == 12345.678f) sink[0] = s;
}

}  // namespace

void CudaBackend::argmax(const Tensor& logits, const Tensor& ids) {
  if (failed()) return;
  if (logits.type != TensorType::kF32 || ids.type != TensorType::kI32 || logits.rows() != ids.ne[0] ||
      logits.ne[0] <= 0 || logits.ne[0] > INT32_MAX || !logits.valid() || !ids.valid())
    return fail(invalid_argument("cuda argmax: needs logits [n][V] F32 and ids [n] I32 of the same n"));
  const int64_t rows = logits.rows();
  if (rows == 0) return;
  if (rows > 65535) return fail(invalid_argument("cuda argmax: more than 65535 rows in one call"));
  const int64_t chunks = (logits.ne[0] + kArgmaxChunk - 1) / kArgmaxChunk;
  // (value, id) pairs of every (row, chunk); sized for the reserved step so that decode never grows it.
  const int64_t pairs = std::max(rows, bounds().tokens) * chunks;
  auto* part = static_cast<uint8_t*>(grow(misc_scratch, pairs * 8));
  if (part == nullptr) return;
  auto* part_v = reinterpret_cast<float*>(part);
  auto* part_i = reinterpret_cast<int32_t*>(part + pairs * 4);
  launch("argmax_chunk_kernel", argmax_chunk_kernel, dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(rows)),
         kArgmaxThreads, 0, static_cast<const float*>(logits.data), logits.ne[0], logits.nb[1] / 4, chunks, part_v,
         part_i);
  launch("argmax_fold_kernel", argmax_fold_kernel, static_cast<unsigned>(rows), 32, 0, part_v, part_i, chunks,
         static_cast<int32_t*>(ids.data));
}

Status CudaBackend::finish() {
  flush_launches();
  const cudaError_t err = cudaStreamSynchronize(stream_);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return internal_error(std::string("cuda backend: stream synchronize: ") + cudaGetErrorString(err));
  }
  return ok_status();
}

Result<backend::BackendLimits> CudaBackend::measure_limits() {
  if (Status s = end_step(); !s.ok()) return s;
  constexpr int64_t kBytes = int64_t{2} << 30;  // well past the 60 MB L2
  DSV4_ASSIGN_OR_RETURN(void* buf, device_alloc(kBytes, "the bandwidth probe"));
  DSV4_ASSIGN_OR_RETURN(void* sink, device_alloc(256, "the probe sink"));
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  check(cudaEventCreate(&e0), "cudaEventCreate");
  check(cudaEventCreate(&e1), "cudaEventCreate");
  check(cudaMemsetAsync(buf, 1, static_cast<size_t>(kBytes), stream_), "probe fill");
  auto timed = [&](auto&& launch) {
    float best = 1e30f;
    for (int rep = 0; rep < 8; ++rep) {  // the first passes ramp the clocks up
      check(cudaEventRecord(e0, stream_), "cudaEventRecord");
      launch();
      check(cudaEventRecord(e1, stream_), "cudaEventRecord");
      check(cudaEventSynchronize(e1), "cudaEventSynchronize");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
      if (rep >= 2) best = std::min(best, ms);
    }
    return static_cast<double>(best) * 1e-3;
  };
  const unsigned blocks = static_cast<unsigned>(sm_count_) * 8;
  const double read_s = timed([&] {
    launch("read_kernel", read_kernel, blocks, 256, 0, static_cast<const int4*>(buf), kBytes / 16,
           static_cast<int*>(sink));
    flush_launches();  // timed between events: run now, not at the next flush
  });
  constexpr int kIters = 4096;
  const double fma_s = timed([&] {
    launch("fma_kernel", fma_kernel, blocks * 4, 256, 0, 1.0f, kIters, static_cast<float*>(sink));
    flush_launches();  // timed between events: run now, not at the next flush
  });
  (void)cudaEventDestroy(e0);
  (void)cudaEventDestroy(e1);
  release(sink, 256);
  release(buf, kBytes);
  if (Status s = end_step(); !s.ok()) return s;
  backend::BackendLimits lim;
  lim.read_gbps = static_cast<double>(kBytes) / read_s / 1e9;
  lim.fma_gflops = static_cast<double>(blocks) * 4 * 256 * 16.0 * kIters / fma_s / 1e9;
  lim.what = device_name_ + ", " + std::to_string(sm_count_) + " SMs: read " + std::to_string(kBytes >> 20) +
             " MiB with 16-byte evict-first loads; fma chains (best of 6 after 2 warm-up passes)";
  return lim;
}

}  // namespace dsv4::cuda
