// backend/cpu/rocmfpx_quant.cpp — the reference quantizers of the ROCmFPx family (types 100-107).
//
// Per scale group (the whole 32-element block for 101/103, each 16-element half for 100/102/104/107):
// every valid scale byte e = 0x00 .. 0x7E is tried; each element takes its nearest level at that
// scale (t = x / s in f64; ties at a midpoint go to the larger magnitude), and the group's error is
// Σ w_i (x_i - level_i * s)^2 in f64 (w_i = importance[i], or 1 without importance). The byte with
// the smallest error wins, ties to the lowest byte (so e = 0, scale 0, wins for an all-zero group).
// Non-finite inputs count as 0; a negative or non-finite importance counts as 0. Deterministic: no
// SIMD, no FP-environment dependence beyond round-to-nearest.
#include <cmath>
#include <cstring>

#include "backend/cpu/rocmfpx.h"

namespace dsv4::cpu::rocmfpx {
namespace {

// Nearest level (signed integer) for t = x / s, per format.
int nearest_fp4(double t) {
  const double a = std::fabs(t);
  int m;
  if (a < 0.5) m = 0;
  else if (a < 1.5) m = 1;
  else if (a < 2.5) m = 2;
  else if (a < 3.5) m = 3;
  else if (a < 5.0) m = 4;
  else if (a < 7.0) m = 6;
  else if (a < 9.0) m = 8;
  else m = 10;
  return t < 0 ? -m : m;
}
int nearest_fp3(double t) {
  const double a = std::fabs(t);
  const int m = a < 0.5 ? 0 : a < 1.5 ? 1 : a < 3.0 ? 2 : 4;
  return t < 0 ? -m : m;
}
int nearest_fp2(double t) { return t < -0.5 ? -1 : t < 0.5 ? 0 : t < 1.5 ? 1 : 2; }
int nearest_int(double t, int max) {
  const double a = std::fmin(std::floor(std::fabs(t) + 0.5), static_cast<double>(max));
  const int m = static_cast<int>(a);
  return t < 0 ? -m : m;
}
int nearest_fp6(double t) { return nearest_int(t, 31); }
int nearest_fp8(double t) { return nearest_int(t, 127); }

using NearestFn = int (*)(double);

// Chooses the scale byte of one group and writes its levels. x, w: g values.
template <NearestFn kNearest>
uint8_t quantize_group(const float* x, const float* w, int g, int* levels) {
  const float* table = ue4m3_table();
  double best_err = INFINITY;
  int best_e = 0;
  for (int e = 0; e < kValidScales; ++e) {
    const double s = table[e];
    double err = 0.0;
    for (int i = 0; i < g; ++i) {
      const int l = s > 0.0 ? kNearest(x[i] / s) : 0;
      const double d = static_cast<double>(x[i]) - l * s;
      err += static_cast<double>(w[i]) * d * d;
    }
    if (err < best_err) {
      best_err = err;
      best_e = e;
    }
  }
  const double s = table[best_e];
  for (int i = 0; i < g; ++i) levels[i] = s > 0.0 ? kNearest(x[i] / s) : 0;
  return static_cast<uint8_t>(best_e);
}

// Cleans one block's inputs and weights (non-finite -> 0).
void clean_block(const float* src, const float* importance, float* x, float* w) {
  for (int i = 0; i < 32; ++i) {
    x[i] = std::isfinite(src[i]) ? src[i] : 0.0f;
    const float wi = importance != nullptr ? importance[i] : 1.0f;
    w[i] = (std::isfinite(wi) && wi > 0.0f) ? wi : 0.0f;
  }
}

uint32_t sign_mag_code(int level, int sign_bit) {
  return level < 0 ? (static_cast<uint32_t>(-level) | (1u << sign_bit)) : static_cast<uint32_t>(level);
}
uint32_t fp4_code(int level) {
  const int m = level < 0 ? -level : level;
  const uint32_t idx = m <= 4 ? static_cast<uint32_t>(m) : static_cast<uint32_t>(4 + (m - 4) / 2);
  return level < 0 ? (idx | 8u) : idx;
}
uint32_t fp3_code(int level) {
  const int m = level < 0 ? -level : level;
  const uint32_t idx = m == 4 ? 3u : static_cast<uint32_t>(m);
  return level < 0 ? (idx | 4u) : idx;
}

void put_bits(uint8_t* qs, int pos, int bits, uint32_t v) {
  for (int k = 0; k < bits; ++k)
    if ((v >> k) & 1u) qs[(pos + k) >> 3] |= static_cast<uint8_t>(1u << ((pos + k) & 7));
}

enum class Kind { kFp4, kFp4Fast, kFp6, kFp8, kFp3, kFp2 };

template <Kind kKind, NearestFn kNearest, int64_t kBytes>
void quantize_row(const float* src, void* dst, int64_t n, const float* importance) {
  auto* out = static_cast<uint8_t*>(dst);
  constexpr bool kTwo = kKind != Kind::kFp4Fast && kKind != Kind::kFp8;
  for (int64_t b = 0; b < n / kBlock; ++b) {
    float x[32];
    float w[32];
    clean_block(src + b * kBlock, importance != nullptr ? importance + b * kBlock : nullptr, x, w);
    int lv[32];
    uint8_t blk[kBytes];
    std::memset(blk, 0, sizeof(blk));
    if constexpr (kTwo) {
      blk[kBytes - 2] = quantize_group<kNearest>(x, w, 16, lv);
      blk[kBytes - 1] = quantize_group<kNearest>(x + 16, w + 16, 16, lv + 16);
    } else {
      blk[kBytes - 1] = quantize_group<kNearest>(x, w, 32, lv);
    }
    for (int i = 0; i < 32; ++i) {
      if constexpr (kKind == Kind::kFp4 || kKind == Kind::kFp4Fast) {
        blk[i & 15] |= static_cast<uint8_t>(fp4_code(lv[i]) << (i < 16 ? 0 : 4));
      } else if constexpr (kKind == Kind::kFp6) {
        put_bits(blk, 6 * i, 6, sign_mag_code(lv[i], 5));
      } else if constexpr (kKind == Kind::kFp8) {
        blk[i] = static_cast<uint8_t>(static_cast<int8_t>(lv[i]));
      } else if constexpr (kKind == Kind::kFp3) {
        put_bits(blk, 3 * i, 3, fp3_code(lv[i]));
      } else {
        put_bits(blk, 2 * i, 2, static_cast<uint32_t>(lv[i] + 1));
      }
    }
    std::memcpy(out + b * kBytes, blk, sizeof(blk));
  }
}

}  // namespace

void quantize_row_100(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_row<Kind::kFp4, nearest_fp4, kBytes100>(src, dst, n, importance);
}
void quantize_row_101(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_row<Kind::kFp4Fast, nearest_fp4, kBytes101>(src, dst, n, importance);
}
void quantize_row_102(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_row<Kind::kFp6, nearest_fp6, kBytes102>(src, dst, n, importance);
}
void quantize_row_103(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_row<Kind::kFp8, nearest_fp8, kBytes103>(src, dst, n, importance);
}
void quantize_row_104(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_row<Kind::kFp3, nearest_fp3, kBytes104>(src, dst, n, importance);
}
void quantize_row_107(const float* src, void* dst, int64_t n, const float* importance) {
  quantize_row<Kind::kFp2, nearest_fp2, kBytes107>(src, dst, n, importance);
}

}  // namespace dsv4::cpu::rocmfpx
