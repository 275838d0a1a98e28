// backend/cpu/rocmfpx.cpp — the ROCmFPx family (types 100-107, gguf.md §5.8): code/level decode,
// dequantize_row, the scalar reference vec_dots against BlockQ8_0Act activations, and the
// TypeKernels registration. Quantizers live in rocmfpx_quant.cpp, SIMD kernels in rocmfpx_avx2.cpp /
// rocmfpx_avx512.cpp.
//
// ACCUMULATION ORDER (every type, every SIMD level — the SIMD kernels reproduce it bit for bit):
//   for block b = 0, 1, ..., n/32 - 1 (increasing):
//     isum0 = exact int32 Σ_{i<16}  level_i · xq_i     (xq = the activation block's int8 values)
//     isum1 = exact int32 Σ_{i>=16} level_i · xq_i
//     single-scale types (101, 103), s = decode(e):
//       v = (s * d_x) * (float)(isum0 + isum1)
//     two-scale types (100, 102, 104, 107), s0 = decode(e[0]), s1 = decode(e[1]):
//       v = d_x * (s0 * (float)isum0 + s1 * (float)isum1)      (left to right, no fma)
//     partial[b % 32] = partial[b % 32] + v
//   result = Partials32::reduce()  (s = 16, 8, 4, 2, 1: p[i] = p[i] + p[i + s])
// The integer sums are exact (|isum| < 2^24), so they convert to float exactly and any integer
// summation order gives the same bits; only the float sequence above is fixed.
#include "backend/cpu/rocmfpx.h"

#include <array>
#include <cstring>

#include "backend/cpu/quant.h"
#include "numerics/accumulate.h"

namespace dsv4::cpu {
namespace rocmfpx {
namespace {

constexpr std::array<float, 256> make_table() {
  std::array<float, 256> t{};
  for (int e = 0; e < 256; ++e) t[static_cast<size_t>(e)] = ue4m3_decode(static_cast<uint8_t>(e));
  return t;
}
constexpr std::array<float, 256> kTable = make_table();

// Reads `bits` bits at bit offset `pos` of an LSB-first bitstream.
inline uint32_t get_bits(const uint8_t* qs, int pos, int bits) {
  const int byte = pos >> 3;
  uint32_t v = qs[byte];
  if ((pos & 7) + bits > 8) v |= static_cast<uint32_t>(qs[byte + 1]) << 8;
  return (v >> (pos & 7)) & ((1u << bits) - 1u);
}

// The 32 signed levels of one block, per type.
void levels_fp4(const uint8_t* blk, int8_t* lv) {
  for (int j = 0; j < 16; ++j) {
    lv[j] = kFp4Level[blk[j] & 15];
    lv[j + 16] = kFp4Level[blk[j] >> 4];
  }
}
void levels_fp6(const uint8_t* blk, int8_t* lv) {
  for (int i = 0; i < 32; ++i) {
    const uint32_t c = get_bits(blk, 6 * i, 6);
    const int mag = static_cast<int>(c & 31u);
    lv[i] = static_cast<int8_t>((c & 32u) ? -mag : mag);
  }
}
void levels_fp8(const uint8_t* blk, int8_t* lv) { std::memcpy(lv, blk, 32); }
void levels_fp3(const uint8_t* blk, int8_t* lv) {
  for (int i = 0; i < 32; ++i) lv[i] = kFp3Level[get_bits(blk, 3 * i, 3)];
}
void levels_fp2(const uint8_t* blk, int8_t* lv) {
  for (int i = 0; i < 32; ++i) lv[i] = kFp2Level[(blk[i >> 2] >> (2 * (i & 3))) & 3];
}

using LevelsFn = void (*)(const uint8_t*, int8_t*);

// Dequantize: x = level * scale (one f32 multiply; exact, levels are small integers).
template <LevelsFn kLevels, int64_t kBytes, bool kTwoScales>
void dequantize(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / kBlock; ++b, p += kBytes, dst += kBlock) {
    int8_t lv[32];
    kLevels(p, lv);
    const float s0 = kTable[kTwoScales ? p[kBytes - 2] : p[kBytes - 1]];
    const float s1 = kTable[p[kBytes - 1]];
    for (int i = 0; i < 32; ++i) dst[i] = static_cast<float>(lv[i]) * (i < 16 ? s0 : s1);
  }
}

// Scalar reference dot (order: see the file comment).
template <LevelsFn kLevels, int64_t kBytes, bool kTwoScales>
float vec_dot(int64_t n, const void* w, const void* act) {
  const auto* p = static_cast<const uint8_t*>(w);
  const auto* a = static_cast<const BlockQ8_0Act*>(act);
  Partials32 acc;
  for (int64_t b = 0; b < n / kBlock; ++b, p += kBytes) {
    int8_t lv[32];
    kLevels(p, lv);
    int32_t isum0 = 0;
    int32_t isum1 = 0;
    for (int i = 0; i < 16; ++i) isum0 += static_cast<int32_t>(lv[i]) * a[b].qs[i];
    for (int i = 16; i < 32; ++i) isum1 += static_cast<int32_t>(lv[i]) * a[b].qs[i];
    const float dx = a[b].d;
    float v;
    if constexpr (kTwoScales) {
      const float s0 = kTable[p[kBytes - 2]];
      const float s1 = kTable[p[kBytes - 1]];
      const float t0 = s0 * static_cast<float>(isum0);
      const float t1 = s1 * static_cast<float>(isum1);
      v = dx * (t0 + t1);
    } else {
      const float s = kTable[p[kBytes - 1]];
      v = (s * dx) * static_cast<float>(isum0 + isum1);
    }
    acc.add(b, v);
  }
  return acc.reduce();
}

}  // namespace

const float* ue4m3_table() { return kTable.data(); }

float vec_dot_100_scalar(int64_t n, const void* w, const void* act) {
  return vec_dot<levels_fp4, kBytes100, true>(n, w, act);
}
float vec_dot_101_scalar(int64_t n, const void* w, const void* act) {
  return vec_dot<levels_fp4, kBytes101, false>(n, w, act);
}
float vec_dot_102_scalar(int64_t n, const void* w, const void* act) {
  return vec_dot<levels_fp6, kBytes102, true>(n, w, act);
}
float vec_dot_103_scalar(int64_t n, const void* w, const void* act) {
  return vec_dot<levels_fp8, kBytes103, false>(n, w, act);
}
float vec_dot_104_scalar(int64_t n, const void* w, const void* act) {
  return vec_dot<levels_fp3, kBytes104, true>(n, w, act);
}
float vec_dot_107_scalar(int64_t n, const void* w, const void* act) {
  return vec_dot<levels_fp2, kBytes107, true>(n, w, act);
}

}  // namespace rocmfpx

namespace {

using namespace rocmfpx;

constexpr TypeKernels make(TensorType t, DequantizeRowFn dq, QuantizeRowFn q, VecDotFn s, VecDotFn a2,
                           VecDotFn a512, VecDotRowsFn rows512 = nullptr, VecDotFn vbmi = nullptr,
                           VecDotRowsFn rows_vbmi = nullptr) {
  TypeKernels k;
  k.type = t;
  k.act = ActFormat::kQ8_0;
  k.dequantize_row = dq;
  k.quantize_row = q;
  k.vec_dot[0] = s;
  k.vec_dot[1] = a2;
  k.vec_dot[2] = a512;
  k.vec_dot_rows[2] = rows512;
  k.vec_dot[3] = vbmi;
  k.vec_dot_rows[3] = rows_vbmi;
  return k;
}

const TypeKernels kKernels[6] = {
    make(TensorType::kQ4_0_ROCMFP4, dequantize<levels_fp4, kBytes100, true>, quantize_row_100,
         vec_dot_100_scalar, vec_dot_100_avx2, vec_dot_100_avx512),
    make(TensorType::kQ4_0_ROCMFP4_FAST, dequantize<levels_fp4, kBytes101, false>, quantize_row_101,
         vec_dot_101_scalar, vec_dot_101_avx2, vec_dot_101_avx512, vec_dot_rows_101_avx512,
         vec_dot_101_avx512vbmi, vec_dot_rows_101_avx512vbmi),
    make(TensorType::kQ6_0_ROCMFPX, dequantize<levels_fp6, kBytes102, true>, quantize_row_102,
         vec_dot_102_scalar, vec_dot_102_avx2, vec_dot_102_avx512),
    make(TensorType::kQ8_0_ROCMFPX, dequantize<levels_fp8, kBytes103, false>, quantize_row_103,
         vec_dot_103_scalar, vec_dot_103_avx2, vec_dot_103_avx512),
    make(TensorType::kQ3_0_ROCMFPX, dequantize<levels_fp3, kBytes104, true>, quantize_row_104,
         vec_dot_104_scalar, vec_dot_104_avx2, vec_dot_104_avx512, vec_dot_rows_104_avx512,
         vec_dot_104_avx512vbmi, vec_dot_rows_104_avx512vbmi),
    make(TensorType::kQ2_0_ROCMFP2, dequantize<levels_fp2, kBytes107, true>, quantize_row_107,
         vec_dot_107_scalar, vec_dot_107_avx2, vec_dot_107_avx512, vec_dot_rows_107_avx512,
         vec_dot_107_avx512vbmi, vec_dot_rows_107_avx512vbmi),
};

}  // namespace

std::span<const TypeKernels> rocmfpx_type_kernels() { return kKernels; }

}  // namespace dsv4::cpu
