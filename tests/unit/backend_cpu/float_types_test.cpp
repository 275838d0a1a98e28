// tests/unit/backend_cpu/float_types_test.cpp — F32/F16/BF16: exact decode, SIMD == scalar bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/quant.h"
#include "numerics/half.h"
#include "unit/backend_cpu/kernel_test_util.h"

namespace dsv4::cpu {
namespace {

uint32_t bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

std::vector<uint8_t> encode(const TypeKernels& k, const std::vector<float>& v) {
  std::vector<uint8_t> out(static_cast<size_t>(tensor_row_bytes(k.type, static_cast<int64_t>(v.size()))));
  k.quantize_row(v.data(), out.data(), static_cast<int64_t>(v.size()), nullptr);
  return out;
}

TEST(FloatTypes, RegisteredWithEveryLevel) {
  for (TensorType t : {TensorType::kF32, TensorType::kF16, TensorType::kBF16}) {
    const TypeKernels* k = type_kernels(t);
    ASSERT_NE(k, nullptr);
    EXPECT_EQ(k->act, ActFormat::kF32);
    for (int level = 0; level <= static_cast<int>(SimdLevel::kAvx512); ++level) EXPECT_NE(k->vec_dot[level], nullptr);
    EXPECT_EQ(effective_simd_level(*k, SimdLevel::kAvx512Vbmi), SimdLevel::kAvx512);  // no VBMI variant
  }
}

TEST(FloatTypes, DequantizeIsExact) {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 3.0f};
  for (TensorType t : {TensorType::kF32, TensorType::kF16}) {
    const TypeKernels& k = *type_kernels(t);
    std::vector<float> back(v.size());
    k.dequantize_row(encode(k, v).data(), back.data(), static_cast<int64_t>(v.size()));
    for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(bits(back[i]), bits(v[i])) << i;  // all representable
  }
  const TypeKernels& bf = *type_kernels(TensorType::kBF16);
  std::vector<float> b = {1.0f, -3.0f, 1.5f, 0.0f};
  std::vector<float> back(b.size());
  bf.dequantize_row(encode(bf, b).data(), back.data(), 4);
  for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(back[i], b[i]);
}

TEST(FloatTypes, DotMatchesDefinitionAndSimdMatchesScalarBitForBit) {
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const SimdLevel top = detected_simd_level();
  for (TensorType t : {TensorType::kF32, TensorType::kF16, TensorType::kBF16}) {
    const TypeKernels& k = *type_kernels(t);
    for (int64_t n : {1, 2, 7, 15, 16, 17, 31, 32, 33, 63, 64, 100, 255, 256, 1000, 4096}) {
      for (int rep = 0; rep < 4; ++rep) {
        std::vector<float> w(static_cast<size_t>(n)), x(static_cast<size_t>(n));
        for (auto& e : w) e = g(rng) * (rep == 3 ? 1e30f : 1.0f);
        for (auto& e : x) e = g(rng) * (rep == 2 ? 1e-30f : 1.0f);
        if (rep == 1) std::fill(w.begin(), w.end(), 0.0f);
        const auto wq = encode(k, w);
        std::vector<float> wd(static_cast<size_t>(n));
        k.dequantize_row(wq.data(), wd.data(), n);
        // Definition: 32 interleaved fma partials + fixed tree.
        float p[32] = {};
        for (int64_t i = 0; i < n; ++i) p[i % 32] = std::fma(wd[static_cast<size_t>(i)], x[static_cast<size_t>(i)], p[i % 32]);
        for (int s = 16; s >= 1; s /= 2)
          for (int i = 0; i < s; ++i) p[i] = p[i] + p[i + s];
        const float ref = k.vec_dot[0](n, wq.data(), x.data());
        EXPECT_EQ(bits(ref), bits(p[0])) << tensor_type_name(t) << " n=" << n;
        for (int level = 1; level <= static_cast<int>(top); ++level) {
          const float got = select_vec_dot(k, static_cast<SimdLevel>(level))(n, wq.data(), x.data());
          EXPECT_EQ(bits(got), bits(ref)) << tensor_type_name(t) << " n=" << n << " level=" << level;
        }
      }
    }
  }
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

// The tile form at every level, called directly with every nr (1..tile_rows) and nc (1..kMaxTileCols):
// the AVX2 tile splits them into blocks of up to 3 rows x 4 columns (3 + 1 rows as 2 + 2, 5 and 6
// columns as 3 + 2 and 3 + 3). n: one short span, several spans of 1024 with a masked tail, and a tail only.
TEST(FloatTypes, TileEveryShapeMatchesScalar) {
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const SimdLevel top = detected_simd_level();
  for (TensorType t : {TensorType::kF32, TensorType::kF16, TensorType::kBF16}) {
    const TypeKernels& k = *type_kernels(t);
    for (int64_t n : {int64_t{21}, int64_t{160}, int64_t{2100}}) {
      const int64_t rb = tensor_row_bytes(t, n) + 64, ab = n * 4 + 32;  // strides not the row sizes
      std::vector<uint8_t> w(static_cast<size_t>(rb * kMaxTileRows));
      std::vector<float> row(static_cast<size_t>(n)), x(static_cast<size_t>(ab / 4 * kMaxTileCols));
      for (int r = 0; r < kMaxTileRows; ++r) {
        for (auto& e : row) e = g(rng);
        k.quantize_row(row.data(), w.data() + r * rb, n, nullptr);
      }
      for (auto& e : x) e = g(rng);
      for (int level = 1; level <= static_cast<int>(top); ++level) {
        const VecDotTileFn tile = k.vec_dot_tile[level];
        if (tile == nullptr) continue;
        const int max_rows = k.tile_rows[level] > 0 ? k.tile_rows[level] : 4;
        for (int nr = 1; nr <= max_rows; ++nr)
          for (int nc = 1; nc <= kMaxTileCols; ++nc) {
            std::vector<float> out(static_cast<size_t>(nc * max_rows), NAN);
            tile(n, w.data(), rb, x.data(), ab, nr, nc, out.data(), max_rows);
            for (int c = 0; c < nc; ++c)
              for (int r = 0; r < nr; ++r) {
                const float ref = k.vec_dot[0](n, w.data() + r * rb, x.data() + c * ab / 4);
                ASSERT_EQ(bits(out[static_cast<size_t>(c * max_rows + r)]), bits(ref))
                    << tensor_type_name(t) << " n=" << n << " level=" << level << " nr=" << nr << " nc=" << nc
                    << " r=" << r << " c=" << c;
              }
          }
      }
    }
  }
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

TEST(FloatTypes, SpecialValuesPropagateIdentically) {
  const SimdLevel top = detected_simd_level();
  const TypeKernels& k = *type_kernels(TensorType::kF32);
  std::vector<float> w(40, 1.0f), x(40, 1.0f);
  w[5] = INFINITY;
  x[37] = -0.0f;
  w[37] = 0.0f;
  for (int level = 0; level <= static_cast<int>(top); ++level)
    EXPECT_TRUE(std::isinf(select_vec_dot(k, static_cast<SimdLevel>(level))(40, w.data(), x.data())));
  w[5] = NAN;
  for (int level = 0; level <= static_cast<int>(top); ++level)
    EXPECT_TRUE(std::isnan(select_vec_dot(k, static_cast<SimdLevel>(level))(40, w.data(), x.data())));
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

}  // namespace
}  // namespace dsv4::cpu
