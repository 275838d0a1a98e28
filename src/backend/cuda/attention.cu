// backend/cuda/attention.cu — CudaBackend's attention-side ops: compressor_update,
// attention (ring of raw keys + compressed entries, with sinks) and kv_store (indexer_topk: indexer.cu). Arithmetic orders are
// backend.h's (the CPU backend's bits); here only the layout:
//   compressor_update: the CPU walks the chunk's tokens in order (ring write, then pool when a window
//     closes). A closing window's candidates are positions ≥ p0 − coff·r + 1, so each reads its
//     (a, z + ape) from the chunk (p ≥ p0, the one add recomputed: the same bits) or from the ring as
//     the chunk found it (p < p0); every window is pooled independently: one block per closing
//     window, one thread per channel (max, then one pass: e_c into the 32 partials and the fma chain),
//     then warp 0 rms-norms and ropes the entry. The ring store (the chunk's last coff·r positions)
//     runs after, as a separate kernel.
//   attention (a pass of ≤ 65535 queries with d ≤ 512: attention_decode.cu's two kernels, the same
//     arithmetic): per query t, the number of compressed keys (CSA: the comp_index prefix before −1);
//     one warp per (query, key) computes the H logits; one warp per (query, head) the max, the
//     probabilities (in place) and the denominator (lane = partial: sum32's order); one thread per
//     (query, head, column) the fma chain over keys in order and the division.
//   kv_store: one thread per stored element.
#include <algorithm>
#include <cstdint>
#include <string>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/cuda_backend.cuh"
#include "backend/cuda/row_ops.cuh"
#include "numerics/det_math.h"
#include "numerics/hd.h"

namespace dsv4::cuda {

using backend::Tensor;
using rowops::grid_for;
using rowops::kFullMask;
using rowops::row_ptr;
using rowops::std_max;
using detail::AttnArgs;
using detail::attn_key;
using detail::neg_inf;
using detail::quiet_nan;
using detail::raw_first;

namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;
constexpr int kCompThreads = 128;
using detail::score_group_rows;

int64_t align256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// --- compressor -----------------------------------------------------------------------------------

struct CompArgs {
  const void* a;
  int64_t a_nb;
  const void* z;
  int64_t z_nb;
  const void* ape;
  int64_t ape_nb;
  void* ring_a;
  int64_t ring_a_nb;
  void* ring_z;
  int64_t ring_z_nb;
  void* entries;
  int64_t entries_nb;
  const float* norm;
  const float* freqs;
  int64_t p0, n, r, coff, d, n_rot, span;
  float eps;
  int64_t w_lo;  // the first window that closes in this chunk
};

// Candidate c of window w: its position and column offset; false when absent (CSA, w = 0).
__device__ __forceinline__ bool comp_candidate(const CompArgs& u, int64_t w, int64_t c, int64_t* q, int64_t* col) {
  if (u.coff == 2) {
    if (c < u.r) {  // the A-half of the previous window's positions
      *q = (w - 1) * u.r + c;
      *col = 0;
      return w >= 1;
    }
    *q = w * u.r + (c - u.r);  // the window's own positions, B-half
    *col = u.d;
    return true;
  }
  *q = w * u.r + c;
  *col = 0;
  return true;
}

// z + ape of position q (the ring row the CPU reads): from the chunk when q ≥ p0, else the ring.
__device__ __forceinline__ float comp_z(const CompArgs& u, int64_t q, int64_t col) {
  if (q >= u.p0) return row_ptr<float>(u.z, u.z_nb, q - u.p0)[col] + row_ptr<float>(u.ape, u.ape_nb, q % u.r)[col];
  return row_ptr<float>(u.ring_z, u.ring_z_nb, q % u.span)[col];
}
__device__ __forceinline__ float comp_a(const CompArgs& u, int64_t q, int64_t col) {
  if (q >= u.p0) return row_ptr<float>(u.a, u.a_nb, q - u.p0)[col];
  return row_ptr<float>(u.ring_a, u.ring_a_nb, q % u.span)[col];
}

// One block per closing window w = w_lo + b: pooled channels, then rms_norm and rope (warp 0).
__global__ void compressor_entry_kernel(CompArgs u, int64_t n_closed) {
  wait_for_producer();
  const int64_t n_cand = u.coff * u.r;
  for (int64_t b = blockIdx.x; b < n_closed; b += gridDim.x) {
    const int64_t w = u.w_lo + b;
    float* e = row_ptr<float>(u.entries, u.entries_nb, w);
    for (int64_t j = threadIdx.x; j < u.d; j += blockDim.x) {
      float m = neg_inf();
      for (int64_t c = 0; c < n_cand; ++c) {
        int64_t q, col;
        if (comp_candidate(u, w, c, &q, &col)) m = std_max(m, comp_z(u, q, col + j));
      }
      // den = Σ_c e_c (partial c mod 32, absent as 0, then the tree); acc = fma chain over present c.
      float part[32];
#pragma unroll
      for (int l = 0; l < 32; ++l) part[l] = 0.0f;
      float acc = 0.0f;
      for (int64_t c0 = 0; c0 < n_cand; c0 += 32) {
#pragma unroll
        for (int l = 0; l < 32; ++l) {
          const int64_t c = c0 + l;
          if (c < n_cand) {
            int64_t q, col;
            float ec = 0.0f;
            if (comp_candidate(u, w, c, &q, &col)) {
              ec = det::exp(comp_z(u, q, col + j) - m);
              acc = hd::fma(ec, comp_a(u, q, col + j), acc);
            }
            part[l] = part[l] + ec;
          }
        }
      }
#pragma unroll
      for (int s = 16; s >= 1; s >>= 1) {
#pragma unroll
        for (int i = 0; i < s; ++i) part[i] = part[i] + part[i + s];
      }
      e[j] = hd::div(acc, part[0]);
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      const int lane = static_cast<int>(threadIdx.x);
      rowops::warp_rms_norm_row(e, u.d, u.norm, u.eps, e, lane);
      __syncwarp();
      float* t = e + (u.d - u.n_rot);
      for (int64_t k = lane; k < u.n_rot / 2; k += 32) rowops::rope_pair(t, k, w * u.r, u.freqs[k], false);
    }
    __syncthreads();
  }
}

// Ring rows of positions first … p0 + n − 1: (a, z + ape) at slot p mod span.
__global__ void compressor_ring_kernel(CompArgs u, int64_t first) {
  wait_for_producer();
  const int64_t width = u.coff * u.d, total = (u.p0 + u.n - first) * width;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t q = first + e / width, c = e % width, slot = q % u.span;
    row_ptr<float>(u.ring_a, u.ring_a_nb, slot)[c] = row_ptr<float>(u.a, u.a_nb, q - u.p0)[c];
    row_ptr<float>(u.ring_z, u.ring_z_nb, slot)[c] =
        row_ptr<float>(u.z, u.z_nb, q - u.p0)[c] + row_ptr<float>(u.ape, u.ape_nb, q % u.r)[c];
  }
}

// --- attention ------------------------------------------------------------------------------------

__global__ void attn_count_kernel(AttnArgs a) {
  wait_for_producer();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < a.n; t += stride) {
    const int64_t p = a.p0 + a.t0 + t;
    int64_t c = 0;
    if (a.mode == 1) {
      c = (p + 1) / a.ratio;
    } else if (a.mode == 2) {
      const int32_t* ci = row_ptr<int32_t>(a.ci, a.ci_nb, a.t0 + t);
      for (; c < a.ci_len && ci[c] >= 0; ++c)
        if (ci[c] >= a.cap) {
          c = -1;
          break;
        }
    }
    a.ncomp[t] = static_cast<int32_t>(c);
  }
}

// S[t][h][j] = dot(q_h, key_j)·scale: one warp per (t, j, h), heads fastest (a CTA's warps share
// the key row through L1).
__global__ void attn_score_kernel(AttnArgs a) {
  wait_for_producer();
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int64_t total = a.n * a.maxk * a.H, warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t gw = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); gw < total; gw += warps) {
    const int64_t h = gw % a.H, tj = gw / a.H, t = tj / a.maxk, j = tj % a.maxk;
    const int64_t nc = a.ncomp[t], p = a.p0 + a.t0 + t, lo = raw_first(a, p), nraw = p - lo + 1;
    if (nc < 0 || j >= nraw + nc) continue;  // warp-uniform
    const float* key = attn_key(a, a.t0 + t, p, lo, nraw, j);
    const float* qt = row_ptr<float>(a.q, a.q_nb, a.t0 + t);
    const float l = rowops::warp_dot32(qt + h * a.d, key, a.d, lane) * a.scale;
    if (lane == 0) a.S[(t * a.H + h) * a.maxk + j] = l;
  }
}

// Per (t, h), one warp: M = max(sink, max_j l_j) (NaN l never counts; a NaN sink stays), p_j =
// exp(l_j − M) in place, den = exp(sink − M) + Σ p_j (lane l = partial l of sum32, then the tree).
__global__ void attn_softmax_kernel(AttnArgs a) {
  wait_for_producer();
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int64_t total = a.n * a.H, warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t gw = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); gw < total; gw += warps) {
    const int64_t t = gw / a.H, h = gw % a.H;
    const int64_t nc = a.ncomp[t], p = a.p0 + a.t0 + t, lo = raw_first(a, p), nraw = p - lo + 1;
    if (nc < 0) continue;  // warp-uniform
    const int64_t nk = nraw + nc;
    float* P = a.S + gw * a.maxk;
    // The running max from the sink in key order equals max(sink, the max of the non-NaN logits).
    const float m = detail::logits_max(P, nk, lane);
    const float sink = a.sinks[h];
    const float M = std_max(sink, m);
    float part = 0.0f;
    for (int64_t j = lane; j < nk; j += 32) {
      const float pj = det::exp(P[j] - M);
      P[j] = pj;
      part = part + pj;
    }
    const float sum = rowops::warp_tree(part);
    if (lane == 0) a.den[gw] = det::exp(sink - M) + sum;
  }
}

// o[t][h·d + c] = (fma chain over keys j from 0 of p_j·key_j[c]) / den: one thread each.
__global__ void attn_out_kernel(AttnArgs a) {
  wait_for_producer();
  const int64_t total = a.n * a.H * a.d, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t c = e % a.d, th = e / a.d, t = th / a.H, h = th % a.H;
    float* out = row_ptr<float>(a.o, a.o_nb, a.t0 + t) + h * a.d + c;
    const int64_t nc = a.ncomp[t];
    if (nc < 0) {  // a comp_index entry beyond capacity (the CPU fails the step): NaN, never a bad read
      *out = quiet_nan();
      continue;
    }
    const int64_t p = a.p0 + a.t0 + t, lo = raw_first(a, p), nraw = p - lo + 1, nk = nraw + nc;
    const float* P = a.S + th * a.maxk;
    // The fma chain over keys j ascending; 32 keys' loads are issued before their fmas (the chain is
    // otherwise one memory latency per 8 keys: 20 µs for 640 keys).
    constexpr int kUnroll = 32;
    float acc = 0.0f;
    int64_t j = 0;
    for (; j + kUnroll <= nk; j += kUnroll) {
      float pv[kUnroll], kv[kUnroll];
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        pv[k] = P[j + k];
        kv[k] = attn_key(a, a.t0 + t, p, lo, nraw, j + k)[c];
      }
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) acc = hd::fma(pv[k], kv[k], acc);
    }
    for (; j < nk; ++j) acc = hd::fma(P[j], attn_key(a, a.t0 + t, p, lo, nraw, j)[c], acc);
    *out = hd::div(acc, a.den[th]);
  }
}

// --- kv_store -------------------------------------------------------------------------------------

__global__ void kv_store_kernel(const void* kv, int64_t kv_nb, int64_t p0, int64_t first, int64_t count, int64_t d,
                                void* ring, int64_t ring_nb, int64_t W) {
  wait_for_producer();
  const int64_t total = count * d, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t q = first + e / d, c = e % d;
    row_ptr<float>(ring, ring_nb, q % W)[c] = row_ptr<float>(kv, kv_nb, q - p0)[c];
  }
}

}  // namespace

// --- compressor -----------------------------------------------------------------------------------

void CudaBackend::compressor_update(const backend::CompressorUpdate& u, const backend::CompressorTensors& st) {
  const int64_t r = u.ratio, coff = u.coff, d = u.d, width = coff * d, span = coff * r, n = u.a.ne[1];
  if (Status check = backend::check_compressor_shapes(u, st); !check.ok()) {
    fail(std::move(check));
    return;
  }
  if (n <= 0) return;
  CompArgs a;
  a.a = u.a.data;
  a.a_nb = u.a.nb[1];
  a.z = u.z.data;
  a.z_nb = u.z.nb[1];
  a.ape = u.ape.data;
  a.ape_nb = u.ape.nb[1];
  a.ring_a = st.ring_a.data;
  a.ring_a_nb = st.ring_a.nb[1];
  a.ring_z = st.ring_z.data;
  a.ring_z_nb = st.ring_z.nb[1];
  a.entries = st.entries.data;
  a.entries_nb = st.entries.nb[1];
  a.norm = static_cast<const float*>(u.norm.data);
  a.freqs = static_cast<const float*>(u.freqs.data);
  a.p0 = u.p0;
  a.n = n;
  a.r = r;
  a.coff = coff;
  a.d = d;
  a.n_rot = u.n_rot;
  a.span = span;
  a.eps = u.eps;
  // Window w closes at position w·r + r − 1: those in [p0, p0 + n) are w_lo … w_hi − 1.
  a.w_lo = u.p0 / r;
  const int64_t n_closed = (u.p0 + n) / r - a.w_lo;
  if (n_closed > 0 && d > 0) {
    launch("compressor_entry_kernel", compressor_entry_kernel, grid_for(n_closed, 1), kCompThreads, 0, a, n_closed);
  }
  // After the pooling (which reads the ring as the chunk found it): the chunk's last span positions.
  const int64_t first = std::max(u.p0, u.p0 + n - span);
  if (width > 0) {
    launch("compressor_ring_kernel", compressor_ring_kernel, grid_for((u.p0 + n - first) * width, kThreads), kThreads,
           0, a, first);
  }
}

// --- attention ------------------------------------------------------------------------------------

void CudaBackend::attention(const backend::AttentionArgs& a) { attend(a, 0, nullptr, false); }

void CudaBackend::attention_unrope(const backend::AttentionArgs& a, int64_t n_rot, const Tensor& freqs) {
  attend(a, n_rot, &freqs, a.store_kv);
}

// Attention, then (freqs set) rope(o as [n·H][d], H, p0, n_rot, freqs, inverse): fused into the decode
// form's output (attention_decode.cu) when every pass takes it and the rotated pairs are lane pairs (d
// and n_rot even), else the rope op after the passes; then (store) kv_store(kv, p0, ring): by the decode
// form's scores kernel for one query, else the kv_store op.
void CudaBackend::attend(const backend::AttentionArgs& a, int64_t n_rot, const Tensor* freqs, bool store) {
  const int64_t n = a.q.ne[1], H = a.n_head, d = a.kv.ne[0], W = a.window, p0 = a.p0;
  const bool has_comp = a.comp.valid(), csa = has_comp && a.comp_index.valid();
  if (H <= 0 || W <= 0 || p0 < 0 || a.q.ne[0] != H * d || a.o.ne[0] != H * d || a.o.ne[1] != n || a.kv.ne[1] != n ||
      a.sinks.ne[0] < H || (p0 > 0 && (!a.ring.valid() || a.ring.ne[1] != W || a.ring.ne[0] != d)) ||
      (has_comp && (a.comp.ne[0] != d || (!csa && a.ratio <= 0))) ||
      (csa && (a.comp_index.ne[1] != n || a.comp_index.type != TensorType::kI32))) {
    fail(invalid_argument("attention: shapes do not fit (q [" + std::to_string(a.q.ne[1]) + "][" +
                          std::to_string(a.q.ne[0]) + "], kv [" + std::to_string(a.kv.ne[1]) + "][" +
                          std::to_string(d) + "], " + std::to_string(H) + " heads, window " + std::to_string(W) + ")"));
    return;
  }
  const int64_t cap = has_comp ? a.comp.ne[1] : 0;
  // CSA entries beyond capacity are found on the device (no host read): that query's o is NaN.
  if (has_comp && !csa && n > 0 && (p0 + n) / a.ratio > cap) {
    fail(out_of_range("attention: " + std::to_string((p0 + n) / a.ratio) + " compressed entries beyond capacity " +
                      std::to_string(cap)));
    return;
  }
  if (store && (!a.ring.valid() || a.ring.ne[1] != W || a.ring.ne[0] != d || a.ring.type != TensorType::kF32)) {
    fail(invalid_argument("attention: kv_store into a ring [" + std::to_string(a.ring.ne[1]) + "][" +
                          std::to_string(a.ring.ne[0]) + "] for window " + std::to_string(W) + " and rows of " +
                          std::to_string(d)));
    return;
  }
  if (n <= 0 || d <= 0) return;
  AttnArgs k;
  k.q = a.q.data;
  k.q_nb = a.q.nb[1];
  k.kv = a.kv.data;
  k.kv_nb = a.kv.nb[1];
  k.ring = a.ring.data;
  k.ring_nb = a.ring.nb[1];
  k.comp = a.comp.data;
  k.comp_nb = a.comp.nb[1];
  k.ci = csa ? a.comp_index.data : nullptr;
  k.ci_nb = csa ? a.comp_index.nb[1] : 0;
  k.ci_len = csa ? a.comp_index.ne[0] : 0;
  k.sinks = static_cast<const float*>(a.sinks.data);
  k.o = a.o.data;
  k.o_nb = a.o.nb[1];
  k.p0 = p0;
  k.H = H;
  k.d = d;
  k.W = W;
  k.ratio = a.ratio;
  k.cap = cap;
  k.scale = a.scale;
  k.mode = csa ? 2 : has_comp ? 1 : 0;
  const int64_t max_comp = csa ? k.ci_len : has_comp ? (p0 + n) / a.ratio : 0;
  k.maxk = std::min(W, p0 + n) + max_comp;
  // Scratch per pass of G queries: S [G][H][maxk], den [G][H], ncomp [G] (S within kScoreBudget);
  // sized for the session's bounds on first use.
  auto bytes_for = [](int64_t rows, int64_t heads, int64_t keys) {
    return align256(rows * heads * keys * 4) + align256(rows * heads * 4) + align256(rows * 4);
  };
  const backend::StepBounds& b = bounds();
  const int64_t G = score_group_rows(n, H * k.maxk * 4);
  const int64_t hb = std::max(H, b.heads), kb = std::max(k.maxk, b.keys);
  const int64_t bound = bytes_for(score_group_rows(std::max(n, b.tokens), hb * kb * 4), hb, kb);
  char* base = static_cast<char*>(grow(attn_scratch, std::max(bytes_for(G, H, k.maxk), bound)));
  if (base == nullptr) return;
  k.S = reinterpret_cast<float*>(base);
  k.den = reinterpret_cast<float*>(base + align256(G * H * k.maxk * 4));
  k.ncomp = reinterpret_cast<int32_t*>(base + align256(G * H * k.maxk * 4) + align256(G * H * 4));
  // The decode form takes a pass when it fits (monotone in the pass's queries: the first pass decides).
  k.n = std::min(G, n);
  const bool decode_form = forms().attn_decode && detail::decode_attention_fits(k);
  const bool fused_unrope = freqs != nullptr && decode_form && d % 2 == 0 && n_rot > 0 && n_rot % 2 == 0 &&
                            n_rot <= d && freqs->type == TensorType::kF32 && freqs->ne[0] * 2 >= n_rot;
  if (fused_unrope) {
    k.unrope_n_rot = n_rot;
    k.unrope_freqs = static_cast<const float*>(freqs->data);
  }
  const bool fused_store = store && decode_form && n == 1;
  if (fused_store) k.store_to = reinterpret_cast<float*>(static_cast<char*>(a.ring.data) + (p0 % W) * a.ring.nb[1]);
  for (int64_t t0 = 0; t0 < n; t0 += G) {
    k.t0 = t0;
    k.n = std::min(G, n - t0);
    if (decode_form && detail::wide_attention_fits(*this, k)) {  // many queries: each exp once
      detail::enqueue_wide_attention_scores(*this, k);
      launch("attn_softmax_kernel", attn_softmax_kernel, grid_for(k.n * H, kWarpsPerBlock), kThreads, 0, k);
      detail::enqueue_wide_attention_out(*this, k);
      continue;
    }
    if (decode_form) {  // attention_decode.cu: keys staged once for a group of heads
      detail::enqueue_decode_attention_scores(*this, k);
      detail::enqueue_decode_attention_out(*this, k);
      continue;
    }
    launch("attn_count_kernel", attn_count_kernel, grid_for(k.n, 128), 128, 0, k);
    launch("attn_score_kernel", attn_score_kernel, grid_for(k.n * k.maxk * k.H, kWarpsPerBlock), kThreads, 0, k);
    launch("attn_softmax_kernel", attn_softmax_kernel, grid_for(k.n * H, kWarpsPerBlock), kThreads, 0, k);
    launch("attn_out_kernel", attn_out_kernel, grid_for(k.n * H * d, kThreads), kThreads, 0, k);
  }
  if (freqs != nullptr && !fused_unrope) rope(a.o.as_rows(d), H, p0, n_rot, *freqs, true);
  if (store && !fused_store) kv_store(a.kv, p0, a.ring);
}

void CudaBackend::kv_store(const Tensor& kv, int64_t p0, const Tensor& ring) {
  const int64_t n = kv.ne[1], W = ring.ne[1], d = kv.ne[0];
  if (ring.ne[0] != d || W <= 0 || p0 < 0) {
    fail(invalid_argument("kv_store: kv [" + std::to_string(n) + "][" + std::to_string(d) + "], ring [" +
                          std::to_string(W) + "][" + std::to_string(ring.ne[0]) + "] do not fit"));
    return;
  }
  const int64_t first = std::max(p0, p0 + n - W), count = p0 + n - first;
  if (count <= 0 || d <= 0) return;
  launch("kv_store_kernel", kv_store_kernel, grid_for(count * d, kThreads), kThreads, 0, kv.data, kv.nb[1], p0, first,
         count, d, ring.data, ring.nb[1], W);
}

}  // namespace dsv4::cuda
