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
