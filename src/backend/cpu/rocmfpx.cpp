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

#include "backend/cpu/quant.h"
#include "numerics/quant_ref_rocmfpx.h"

namespace dsv4::cpu {
namespace rocmfpx {
namespace {

constexpr std::array<float, 256> make_table() {
  std::array<float, 256> t{};
  for (int e = 0; e < 256; ++e) t[static_cast<size_t>(e)] = ue4m3_decode(static_cast<uint8_t>(e));
  return t;
}
constexpr std::array<float, 256> kTable = make_table();

// Dequantize (x = level * scale, one exact f32 multiply) and the scalar reference dot (order: see the
// file comment): numerics/quant_ref_rocmfpx.h's, shared with CUDA.
template <int kType>
void dequantize(const void* src, float* dst, int64_t n) {
  constexpr int64_t kBytes = qref::rocmfpx_block_bytes<kType>();
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / kBlock; ++b) qref::dequantize_block_rocmfpx<kType>(p + b * kBytes, dst + b * kBlock);
}

template <int kType>
float vec_dot(int64_t n, const void* w, const void* act) {
  return qref::vec_dot_rocmfpx<kType>(n, w, static_cast<const BlockQ8_0Act*>(act));
}

// The shared block sizes and level formulas equal this room's constants and tables.
static_assert(qref::rocmfpx_block_bytes<100>() == kBytes100 && qref::rocmfpx_block_bytes<101>() == kBytes101 &&
              qref::rocmfpx_block_bytes<102>() == kBytes102 && qref::rocmfpx_block_bytes<103>() == kBytes103 &&
              qref::rocmfpx_block_bytes<104>() == kBytes104 && qref::rocmfpx_block_bytes<107>() == kBytes107);
constexpr bool levels_match() {
  for (uint32_t c = 0; c < 16; ++c)
    if (qref::rocmfpx_fp4_level(c) != kFp4Level[c]) return false;
  for (uint32_t c = 0; c < 8; ++c)
    if (qref::rocmfpx_fp3_level(c) != kFp3Level[c]) return false;
  for (uint32_t c = 0; c < 4; ++c)
    if (qref::rocmfpx_fp2_level(c) != kFp2Level[c]) return false;
  return true;
}
static_assert(levels_match());

}  // namespace

const float* ue4m3_table() { return kTable.data(); }

float vec_dot_100_scalar(int64_t n, const void* w, const void* act) {
  return vec_dot<100>(n, w, act);
}
float vec_dot_101_scalar(int64_t n, const void* w, const void* act) {
  return vec_dot<101>(n, w, act);
}
float vec_dot_102_scalar(int64_t n, const void* w, const void* act) {
  return vec_dot<102>(n, w, act);
}
float vec_dot_103_scalar(int64_t n, const void* w, const void* act) {
  return vec_dot<103>(n, w, act);
}
float vec_dot_104_scalar(int64_t n, const void* w, const void* act) {
  return vec_dot<104>(n, w, act);
}
float vec_dot_107_scalar(int64_t n, const void* w, const void* act) {
  return vec_dot<107>(n, w, act);
}

}  // namespace rocmfpx

namespace {

using namespace rocmfpx;

// The AVX2 prepared-activation forms of one type (rocmfpx.h).
struct Avx2Prepared {
  int64_t (*bytes)(int64_t n);
  VecDotRowsFn rows;
  void (*prepare)(const void* act, int64_t n, void* out);
  VecDotRowsFn rows_prepared;
  VecDotTileFn tile;
};
#define DSV4_AVX2_PREPARED(ID)                                                                       \
  Avx2Prepared {                                                                                     \
    prepared_act_bytes_##ID##_avx2, vec_dot_rows_##ID##_avx2, prepare_act_##ID##_avx2,                 \
        vec_dot_rows_prepared_##ID##_avx2, vec_dot_tile_##ID##_avx2                                    \
  }

constexpr TypeKernels make(TensorType t, DequantizeRowFn dq, QuantizeRowFn q, VecDotFn s, VecDotFn a2,
                           Avx2Prepared p2, VecDotFn a512, VecDotRowsFn rows512 = nullptr, VecDotFn vbmi = nullptr,
                           VecDotRowsFn rows_vbmi = nullptr) {
  TypeKernels k;
  k.type = t;
  k.act = ActFormat::kQ8_0;
  k.dequantize_row = dq;
  k.quantize_row = q;
  k.vec_dot[0] = s;
  k.vec_dot[1] = a2;
  k.vec_dot_rows[1] = p2.rows;
  k.prepared_act_bytes = p2.bytes;
  k.prepare_act[1] = p2.prepare;
  k.vec_dot_rows_prepared[1] = p2.rows_prepared;
  k.vec_dot_tile[1] = p2.tile;
  k.vec_dot[2] = a512;
  k.vec_dot_rows[2] = rows512;
  k.vec_dot[3] = vbmi;
  k.vec_dot_rows[3] = rows_vbmi;
  return k;
}

const TypeKernels kKernels[6] = {
    make(TensorType::kQ4_0_ROCMFP4, dequantize<100>, quantize_row_100,
         vec_dot_100_scalar, vec_dot_100_avx2, DSV4_AVX2_PREPARED(100),
         vec_dot_100_avx512),
    make(TensorType::kQ4_0_ROCMFP4_FAST, dequantize<101>, quantize_row_101,
         vec_dot_101_scalar, vec_dot_101_avx2, DSV4_AVX2_PREPARED(101),
         vec_dot_101_avx512, vec_dot_rows_101_avx512,
         vec_dot_101_avx512vbmi, vec_dot_rows_101_avx512vbmi),
    make(TensorType::kQ6_0_ROCMFPX, dequantize<102>, quantize_row_102,
         vec_dot_102_scalar, vec_dot_102_avx2, DSV4_AVX2_PREPARED(102),
         vec_dot_102_avx512),
    make(TensorType::kQ8_0_ROCMFPX, dequantize<103>, quantize_row_103,
         vec_dot_103_scalar, vec_dot_103_avx2, DSV4_AVX2_PREPARED(103),
         vec_dot_103_avx512),
    make(TensorType::kQ3_0_ROCMFPX, dequantize<104>, quantize_row_104,
         vec_dot_104_scalar, vec_dot_104_avx2, DSV4_AVX2_PREPARED(104),
         vec_dot_104_avx512, vec_dot_rows_104_avx512,
         vec_dot_104_avx512vbmi, vec_dot_rows_104_avx512vbmi),
    make(TensorType::kQ2_0_ROCMFP2, dequantize<107>, quantize_row_107,
         vec_dot_107_scalar, vec_dot_107_avx2, DSV4_AVX2_PREPARED(107),
         vec_dot_107_avx512, vec_dot_rows_107_avx512,
         vec_dot_107_avx512vbmi, vec_dot_rows_107_avx512vbmi),
};
#undef DSV4_AVX2_PREPARED

}  // namespace

std::span<const TypeKernels> rocmfpx_type_kernels() { return kKernels; }

}  // namespace dsv4::cpu
