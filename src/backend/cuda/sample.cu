// backend/cuda/sample.cu — CudaBackend::argmax and CudaBackend::sample: the next token chosen on the
// device, so that one 4-byte id per step comes back instead of the vocabulary's logits.
//
// argmax: two passes. CTAs of 256 threads each scan a chunk of 8192 logits of a row (a thread's
// strided elements, 8 loads in flight) keeping (value, id) under the rule "larger value wins, equal
// values → lower id, NaN loses to every number" and fold their pairs in a tree; then one warp per row
// folds the chunks' pairs. That rule is a total order on (value, id) pairs, so any fold order gives the
// same pair: the CPU's sequential scan (sampling::argmax) and these trees agree on every input.
//
// sample: sampling::Sampler::sample's exact rule (sampler.cpp's banner), with the caller's draw u.
//   1. bias and penalties (only when there are any): a copy of the row, then the bias list added in list
//      order by one thread (repeated ids add up in order), then each penalised id by its own thread.
//   2. the best (value, id): argmax's first pass over the (adjusted) row; the later kernels fold it.
//   3. weight sums in numerics/token_weight.h's order, when the rule needs them (the draw over the
//      whole vocabulary, or top-p's Z without top-k): one CTA per block of 1024 ids computes its
//      weights into shared memory, 8 threads sum the 8 interleaved lanes in id order, one thread adds
//      the lanes and the tail; the choice kernel adds the blocks' sums in block order.
//   4. the choice, one CTA of 1024 threads: greedy / degenerate rows → the best id; no cut → the draw
//      walks the blocks' sums, then the landing block's weights (computed in parallel, summed by one
//      thread in id order); otherwise the candidates — the top-k set (a radix select of the k-th
//      largest float key, then every id at or above it) or every logit at or above the filter bound
//      (min-p's ln(min_p) − 1, top-p's ln(½(1 − p)·Z / n), as on the CPU) — are sorted in shared memory
//      by (value desc, id asc), their weights computed in parallel, and one thread does the keep walk
//      (min-p, top-p) and the draw with the CPU's double running sums in sorted order.
//   The sorted candidates are exactly the CPU's: the CPU's lazy sorts, heaps and quickselects are ways
//   to compute this one rule, and every sum here is in the rule's order. More than kSampleCap
//   candidates (a flat distribution with top-p alone, or a huge top-k) → kSampleOnHost: the caller
//   downloads the logits and samples them on the host with the same draw.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.cuh"
#include "numerics/token_weight.h"

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
  wait_for_producer();
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
  wait_for_producer();
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


// ---- sample ----------------------------------------------------------------------------------------

constexpr int kSampleThreads = 1024;
constexpr int kSampleCap = 8192;  // candidates sorted on the device: 8-byte keys + 4-byte weights each
constexpr size_t kSampleSmem = static_cast<size_t>(kSampleCap) * 12;  // 96 KiB of dynamic shared memory
constexpr int kWeightBlock = static_cast<int>(sampling::kWeightBlock);
constexpr int kWeightLanes = static_cast<int>(sampling::kWeightLanes);
constexpr int kBlockSumThreads = 128;

// Which of the rule's paths a call takes (decided on the host from the configuration; the device
// still returns the best id first for rows without a finite maximum).
enum SamplePath : int32_t {
  kPathGreedy = 0,  // temperature not > 0
  kPathWalk = 1,    // nothing cut: the draw over the whole vocabulary in id order
  kPathTopK = 2,    // top-k on with top-p on or min-p off: the exact top-k set
  kPathFilter = 3,  // min-p or top-p on: every logit at or above the filter bound (then top-k)
};

struct SampleKernelArgs {
  const float* logits;  // [n] the row the rule reads (the adjusted copy when there are adjustments)
  int32_t n;
  int32_t path;
  float t, top_p, min_p, c_min_p;  // c_min_p: ln(min_p) − 1 computed on the host (−inf when min-p is off)
  int32_t k;                       // top-k in effect (0 = off; 0 < k < n)
  double u;
  const float* part_v;  // [chunks] argmax's first pass over `logits`
  const int32_t* part_i;
  int32_t chunks;
  const double* block_sums;  // [⌈n / 1024⌉] when the path needs them
  int32_t* out;
};

inline __device__ float nan_to_neg_inf(float v) { return v != v ? __uint_as_float(0xff800000u) : v; }
// Candidates sort ascending by this key: value descending, then id ascending.
inline __device__ uint64_t cand_key(float v, int32_t id) {
  return (static_cast<uint64_t>(~sampling::order_key(v)) << 32) | static_cast<uint32_t>(id);
}
inline __device__ float cand_value(uint64_t key) { return sampling::from_order_key(~static_cast<uint32_t>(key >> 32)); }
inline __device__ int32_t cand_id(uint64_t key) { return static_cast<int32_t>(static_cast<uint32_t>(key)); }

// The best (value, id) of argmax's first-pass pairs, folded in order (any order gives the same pair).
inline __device__ void fold_pairs(const float* part_v, const int32_t* part_i, int32_t chunks, float& best,
                                  int32_t& best_i) {
  best = 0.0f;
  best_i = -1;
  for (int32_t c = 0; c < chunks; ++c)
    if (part_i[c] >= 0 && beats(part_v[c], part_i[c], best, best_i)) {
      best = part_v[c];
      best_i = part_i[c];
    }
}

// Copies the row; the caller's adjust kernel then edits the copy.
__global__ void copy_row_kernel(const float* src, int32_t n, float* dst) {
  wait_for_producer();
  for (int32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) dst[i] = src[i];
}

// Bias (one thread, list order) then penalties (one thread per accepted id; each id appears once),
// exactly Sampler::sample_drawn's steps 1–2.
__global__ void __launch_bounds__(kSampleThreads) sample_adjust_kernel(float* l, int32_t n, const int32_t* bias_ids,
                                                                      const float* bias_values, int32_t n_bias,
                                                                      const int32_t* seen_ids,
                                                                      const int32_t* seen_counts, int32_t n_seen,
                                                                      float rep, float presence, float frequency) {
  wait_for_producer();
  if (threadIdx.x == 0)
    for (int32_t j = 0; j < n_bias; ++j) {
      const int32_t id = bias_ids[j];
      if (id >= 0 && id < n) l[id] += bias_values[j];
    }
  __syncthreads();
  const bool rep_on = rep > 0.0f && rep != 1.0f;
  const bool pf_on = presence != 0.0f || frequency != 0.0f;
  if (!rep_on && !pf_on) return;
  for (int32_t j = static_cast<int32_t>(threadIdx.x); j < n_seen; j += blockDim.x) {
    const int32_t id = seen_ids[j];
    if (id < 0 || id >= n) continue;
    float v = l[id];
    if (rep_on) v = v > 0.0f ? hd::div(v, rep) : v * rep;
    if (pf_on) {
      const float count = static_cast<float>(seen_counts[j]);
      v -= frequency * count + presence;
    }
    l[id] = v;
  }
}

// CTA b: the weight sum of ids [b·1024, …) in the lanes-then-tail order (a row without a finite
// maximum sums nothing; the choice kernel never reads it then).
__global__ void __launch_bounds__(kBlockSumThreads) sample_block_sums_kernel(const float* l, int32_t n, float t,
                                                                            const float* part_v,
                                                                            const int32_t* part_i, int32_t chunks,
                                                                            double* sums) {
  wait_for_producer();
  __shared__ float w[kWeightBlock];
  __shared__ double lane_sum[kWeightLanes];
  float mx;
  int32_t top;
  fold_pairs(part_v, part_i, chunks, mx, top);
  const int32_t begin = static_cast<int32_t>(blockIdx.x) * kWeightBlock;
  const int32_t len = min(kWeightBlock, n - begin);
  if (top < 0 || !isfinite(mx)) {
    if (threadIdx.x == 0) sums[blockIdx.x] = 0.0;
    return;
  }
  for (int32_t i = static_cast<int32_t>(threadIdx.x); i < len; i += kBlockSumThreads)
    w[i] = sampling::token_weight(l[begin + i], mx, t);
  __syncthreads();
  const int32_t len8 = len - len % kWeightLanes;
  if (threadIdx.x < kWeightLanes) {
    double s = 0.0;
    for (int32_t i = static_cast<int32_t>(threadIdx.x); i < len8; i += kWeightLanes) s += static_cast<double>(w[i]);
    lane_sum[threadIdx.x] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = 0.0;
    for (int j = 0; j < kWeightLanes; ++j) s += lane_sum[j];
    for (int32_t i = len8; i < len; ++i) s += static_cast<double>(w[i]);
    sums[blockIdx.x] = s;
  }
}

// Sorts keys[0..count) ascending (count ≤ kSampleCap), padding to a power of two with ~0.
__device__ void sort_candidates(uint64_t* keys, int32_t count) {
  int32_t size = 2;
  while (size < count) size <<= 1;
  for (int32_t i = count + static_cast<int32_t>(threadIdx.x); i < size; i += kSampleThreads) keys[i] = ~uint64_t{0};
  __syncthreads();
  for (int32_t span = 2; span <= size; span <<= 1)
    for (int32_t stride = span >> 1; stride > 0; stride >>= 1) {
      for (int32_t i = static_cast<int32_t>(threadIdx.x); i < size / 2; i += kSampleThreads) {
        const int32_t lo = (i / stride) * stride * 2 + i % stride, hi = lo + stride;
        const bool up = (lo & span) == 0;
        const uint64_t a = keys[lo], b = keys[hi];
        if ((a > b) == up) {
          keys[lo] = b;
          keys[hi] = a;
        }
      }
      __syncthreads();
    }
}

__global__ void __launch_bounds__(kSampleThreads) sample_choose_kernel(SampleKernelArgs a) {
  wait_for_producer();
  extern __shared__ uint64_t keys[];                             // [kSampleCap] candidates
  float* weights = reinterpret_cast<float*>(keys + kSampleCap);  // [kSampleCap] their weights, sorted order
  __shared__ uint32_t hist[256];
  __shared__ int32_t s_count, s_block;
  __shared__ uint32_t s_prefix, s_need;
  __shared__ double s_target;
  const int tid = static_cast<int>(threadIdx.x);
  float mx;
  int32_t top;
  fold_pairs(a.part_v, a.part_i, a.chunks, mx, top);
  // Greedy, and rows with nothing to draw from: every logit NaN → 0; all −inf or a +inf → the best.
  if (a.path == kPathGreedy || top < 0 || !isfinite(mx) || a.k == 1) {
    if (tid == 0) a.out[0] = top < 0 ? 0 : top;
    return;
  }
  const float t = a.t;
  const bool top_p_on = a.top_p < 1.0f, min_p_on = a.min_p > 0.0f;
  const int32_t blocks = (a.n + kWeightBlock - 1) / kWeightBlock;

  if (a.path == kPathWalk) {  // the draw lands in the block where the running sum of blocks passes u·Z
    if (tid == 0) {
      double z = 0.0;
      for (int32_t b = 0; b < blocks; ++b) z += a.block_sums[b];
      const double target = a.u * z;
      double acc = 0.0;
      int32_t hit = -1;
      for (int32_t b = 0; b < blocks; ++b) {
        if (acc + a.block_sums[b] > target) {
          hit = b;
          break;
        }
        acc += a.block_sums[b];
      }
      s_block = hit;
      s_target = target;
    }
    __syncthreads();
    const int32_t hit = s_block;
    if (hit < 0) {  // u·Z rounded up to Z: the last id with a weight (the max has weight 1)
      if (tid == 0) {
        int32_t i = a.n;
        while (i > 0 && !(sampling::token_weight(a.logits[i - 1], mx, t) > 0.0f)) --i;
        a.out[0] = i > 0 ? i - 1 : 0;
      }
      return;
    }
    const int32_t begin = hit * kWeightBlock, len = min(kWeightBlock, a.n - begin);
    for (int32_t i = tid; i < len; i += kSampleThreads) weights[i] = sampling::token_weight(a.logits[begin + i], mx, t);
    __syncthreads();
    if (tid == 0) {
      double inner = 0.0;
      for (int32_t b = 0; b < hit; ++b) inner += a.block_sums[b];
      const double target = s_target;
      int32_t last = -1;
      for (int32_t i = 0; i < len; ++i) {
        if (weights[i] <= 0.0f) continue;
        inner += static_cast<double>(weights[i]);
        last = begin + i;
        if (inner > target) break;
      }
      a.out[0] = last;  // the running sum falls short only by rounding: the block's last weighted id
    }
    return;
  }

  // ---- the candidates -------------------------------------------------------------------------------
  double top_p_mass = 0.0;
  uint32_t threshold_key = 0;  // candidates: order key ≥ this (top-k), or logit ≥ lo (filter)
  float lo = 0.0f;
  if (a.path == kPathTopK) {
    if (a.k > kSampleCap) {
      if (tid == 0) a.out[0] = backend::kSampleOnHost;
      return;
    }
    // The k-th largest key of nan_to_neg_inf(l), one byte at a time from the top.
    if (tid == 0) {
      s_prefix = 0;
      s_need = static_cast<uint32_t>(a.k);
    }
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int i = tid; i < 256; i += kSampleThreads) hist[i] = 0;
      __syncthreads();
      const uint32_t prefix = s_prefix;
      const uint32_t mask = shift == 24 ? 0u : ~0u << (shift + 8);
      for (int32_t i = tid; i < a.n; i += kSampleThreads) {
        const uint32_t key = sampling::order_key(nan_to_neg_inf(a.logits[i]));
        if ((key & mask) == (prefix & mask)) atomicAdd(&hist[(key >> shift) & 255u], 1u);
      }
      __syncthreads();
      if (tid == 0) {
        uint32_t need = s_need;
        int d = 255;
        for (; d > 0; --d) {
          if (hist[d] >= need) break;
          need -= hist[d];
        }
        s_prefix = prefix | (static_cast<uint32_t>(d) << shift);
        s_need = need;
      }
      __syncthreads();
    }
    threshold_key = s_prefix;
  } else {
    float c = a.c_min_p;
    if (top_p_on) {  // Z over the whole vocabulary, in id order
      if (tid == 0) {
        double z = 0.0;
        for (int32_t b = 0; b < blocks; ++b) z += a.block_sums[b];
        s_target = z;
      }
      __syncthreads();
      const double z = s_target;
      top_p_mass = static_cast<double>(a.top_p) * z;
      // The CPU's bound with the device's log: it only needs to be conservative, and its margin (a
      // factor of 2 in mass) dwarfs the last bits of a logarithm.
      c = fmaxf(c, static_cast<float>(log(0.5 * (1.0 - static_cast<double>(a.top_p)) * z / static_cast<double>(a.n))));
    }
    lo = sampling::lowest_logit_reaching(mx, t, fminf(c, -1.0f));
  }
  if (tid == 0) s_count = 0;
  __syncthreads();
  for (int32_t i = tid; i < a.n; i += kSampleThreads) {
    const float v = a.path == kPathTopK ? nan_to_neg_inf(a.logits[i]) : a.logits[i];
    const bool in = a.path == kPathTopK ? sampling::order_key(v) >= threshold_key : v >= lo;
    if (!in) continue;
    const int32_t slot = atomicAdd(&s_count, 1);
    if (slot < kSampleCap) keys[slot] = cand_key(v, i);
  }
  __syncthreads();
  const int32_t count = s_count;
  if (count > kSampleCap) {
    if (tid == 0) a.out[0] = backend::kSampleOnHost;
    return;
  }
  sort_candidates(keys, count);
  const int32_t used = a.k > 0 && count > a.k ? a.k : count;  // everything at or above a bound: the top-k set is the prefix
  for (int32_t i = tid; i < used; i += kSampleThreads) weights[i] = sampling::token_weight(cand_value(keys[i]), mx, t);
  __syncthreads();
  if (tid != 0) return;
  if (a.path == kPathTopK && top_p_on) {  // Z over the top-k set, in sorted order
    double z = 0.0;
    for (int32_t i = 0; i < used; ++i) z += static_cast<double>(weights[i]);
    top_p_mass = static_cast<double>(a.top_p) * z;
  }
  // The keep walk: min-p stops before the first weight below min_p, top-p after the prefix reaching p·Z.
  double kept_mass = 0.0;
  int32_t n_kept = 0;
  for (int32_t i = 0; i < used; ++i) {
    const float w = weights[i];
    if (min_p_on && i > 0 && w < a.min_p) break;
    kept_mass += static_cast<double>(w);
    n_kept = i + 1;
    if (top_p_on && kept_mass >= top_p_mass) break;
  }
  // The draw over the kept prefix.
  const double target = a.u * kept_mass;
  double acc = 0.0;
  int32_t last = cand_id(keys[0]);
  for (int32_t i = 0; i < n_kept; ++i) {
    if (weights[i] <= 0.0f) continue;
    acc += static_cast<double>(weights[i]);
    last = cand_id(keys[i]);
    if (acc > target) break;
  }
  a.out[0] = last;
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


void CudaBackend::sample(const backend::SampleArgs& a) {
  if (failed()) return;
  if (a.logits.type != TensorType::kF32 || a.logits.rows() != 1 || a.logits.ne[0] <= 0 || a.logits.ne[0] > INT32_MAX ||
      a.id.type != TensorType::kI32 || a.id.ne[0] != 1 || !a.logits.valid() || !a.id.valid() ||
      a.seen_ids.size() != a.seen_counts.size() || a.logit_bias.size() > INT32_MAX / 4 || a.seen_ids.size() > INT32_MAX / 4)
    return fail(invalid_argument("cuda sample: needs one row of F32 logits, an I32 id and as many seen counts as ids"));
  const int32_t n = static_cast<int32_t>(a.logits.ne[0]);
  const int32_t chunks = static_cast<int32_t>((n + kArgmaxChunk - 1) / kArgmaxChunk);
  const int32_t blocks = (n + kWeightBlock - 1) / kWeightBlock;
  const float t = a.temperature;
  const int32_t k = a.top_k > 0 && a.top_k < n ? a.top_k : 0;
  const bool top_p_on = a.top_p < 1.0f, min_p_on = a.min_p > 0.0f;
  const SamplePath path = !(t > 0.0f)                        ? kPathGreedy
                          : k == 0 && !top_p_on && !min_p_on ? kPathWalk
                          : k > 0 && (top_p_on || !min_p_on) ? kPathTopK
                                                             : kPathFilter;
  const bool rep_on = a.repetition_penalty > 0.0f && a.repetition_penalty != 1.0f;
  const bool pf_on = a.presence_penalty != 0.0f || a.frequency_penalty != 0.0f;
  const bool adjust = !a.logit_bias.empty() || (!a.seen_ids.empty() && (rep_on || pf_on));

  // Scratch: [the adjusted row: n floats][block sums: blocks doubles][argmax pairs: chunks (float, int)].
  const int64_t row_bytes = (static_cast<int64_t>(n) * 4 + 255) / 256 * 256;
  const int64_t sums_bytes = (static_cast<int64_t>(blocks) * 8 + 255) / 256 * 256;
  auto* base = static_cast<uint8_t*>(grow(sample_scratch, row_bytes + sums_bytes + static_cast<int64_t>(chunks) * 8));
  if (base == nullptr) return;
  float* adjusted = reinterpret_cast<float*>(base);
  auto* sums = reinterpret_cast<double*>(base + row_bytes);
  auto* part_v = reinterpret_cast<float*>(base + row_bytes + sums_bytes);
  auto* part_i = reinterpret_cast<int32_t*>(part_v + chunks);
  const float* row = static_cast<const float*>(a.logits.data);

  if (adjust) {
    // The lists travel as one upload: [bias ids][bias values][seen ids][seen counts], 4 bytes each.
    const size_t nb = a.logit_bias.size(), ns = a.seen_ids.size();
    std::vector<uint32_t> lists(2 * nb + 2 * ns);
    for (size_t j = 0; j < nb; ++j) {
      lists[j] = static_cast<uint32_t>(a.logit_bias[j].first);
      std::memcpy(&lists[nb + j], &a.logit_bias[j].second, 4);
    }
    for (size_t j = 0; j < ns; ++j) {
      lists[2 * nb + j] = static_cast<uint32_t>(a.seen_ids[j]);
      lists[2 * nb + ns + j] = static_cast<uint32_t>(a.seen_counts[j]);
    }
    // Grown to powers of two (at least 64 KiB) so that a lengthening history rarely regrows it.
    int64_t want = 64 << 10;
    while (want < static_cast<int64_t>(lists.size() * 4)) want <<= 1;
    auto* dev_lists = static_cast<uint32_t*>(grow(sample_lists, want));
    if (dev_lists == nullptr) return;
    flush_launches();
    // From pageable memory the driver stages the bytes before returning: `lists` may go at once.
    check(cudaMemcpyAsync(dev_lists, lists.data(), lists.size() * 4, cudaMemcpyHostToDevice, stream_),
          "sample lists upload (cudaMemcpyAsync)");
    const unsigned copy_blocks = std::min<unsigned>(static_cast<unsigned>((n + 1023) / 1024), 4u * static_cast<unsigned>(sm_count()));
    launch("copy_row_kernel", copy_row_kernel, copy_blocks, 1024, 0, row, n, adjusted);
    launch("sample_adjust_kernel", sample_adjust_kernel, 1, kSampleThreads, 0, adjusted, n,
           reinterpret_cast<const int32_t*>(dev_lists), reinterpret_cast<const float*>(dev_lists + nb),
           static_cast<int32_t>(nb), reinterpret_cast<const int32_t*>(dev_lists + 2 * nb),
           reinterpret_cast<const int32_t*>(dev_lists + 2 * nb + ns), static_cast<int32_t>(ns), a.repetition_penalty,
           a.presence_penalty, a.frequency_penalty);
    row = adjusted;
  }
  launch("argmax_chunk_kernel", argmax_chunk_kernel, dim3(static_cast<unsigned>(chunks), 1u), kArgmaxThreads, 0, row,
         static_cast<int64_t>(n), static_cast<int64_t>(n), static_cast<int64_t>(chunks), part_v, part_i);
  if (path == kPathWalk || (path == kPathFilter && top_p_on))
    launch("sample_block_sums_kernel", sample_block_sums_kernel, static_cast<unsigned>(blocks), kBlockSumThreads, 0,
           row, n, t, part_v, part_i, chunks, sums);
  static const bool smem_ok = cudaFuncSetAttribute(sample_choose_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   static_cast<int>(kSampleSmem)) == cudaSuccess;
  if (!smem_ok) return fail(internal_error("cuda sample: 96 KiB of shared memory per block is not available"));
  SampleKernelArgs args;
  args.logits = row;
  args.n = n;
  args.path = path;
  args.t = t;
  args.top_p = a.top_p;
  args.min_p = a.min_p;
  // The CPU's bound, with the host's float log.
  args.c_min_p = min_p_on ? std::log(a.min_p) - 1.0f : -std::numeric_limits<float>::infinity();
  args.k = k;
  args.u = a.u;
  args.part_v = part_v;
  args.part_i = part_i;
  args.chunks = chunks;
  args.block_sums = sums;
  args.out = static_cast<int32_t*>(a.id.data);
  launch("sample_choose_kernel", sample_choose_kernel, 1, kSampleThreads, kSampleSmem, args);
}

}  // namespace dsv4::cuda
