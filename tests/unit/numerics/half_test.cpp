// tests/unit/numerics/half_test.cpp — f16/bf16 conversions against exact arithmetic.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "numerics/half.h"

namespace dsv4 {
namespace {

// Exact value of an f16 bit pattern computed with ldexp (independent of the bit tricks).
double f16_value(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return s ? -v : v;
}

TEST(Half, EveryF16DecodesExactly) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    const int e = (h >> 10) & 31;
    if (e == 31) {
      if (h & 1023) EXPECT_TRUE(std::isnan(f)) << h;
      else EXPECT_TRUE(std::isinf(f)) << h;
      continue;
    }
    EXPECT_EQ(static_cast<double>(f), f16_value(static_cast<uint16_t>(h))) << h;
  }
}

TEST(Half, EveryFiniteF16RoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    if (((h >> 10) & 31) == 31) continue;
    EXPECT_EQ(f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))), h) << h;
  }
}

TEST(Half, F32ToF16RoundsToNearestEven) {
  // Midpoints between consecutive f16 values round to the even one; just above rounds up.
  for (uint32_t h = 0; h < 0x7bff; h += 7) {
    const double a = f16_value(static_cast<uint16_t>(h)), b = f16_value(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((a + b) / 2);  // exact in f32
    const uint16_t even = (h & 1) ? static_cast<uint16_t>(h + 1) : static_cast<uint16_t>(h);
    EXPECT_EQ(f32_to_f16(mid), even) << h;
    EXPECT_EQ(f32_to_f16(std::nextafter(mid, 1e9f)), h + 1) << h;
    EXPECT_EQ(f32_to_f16(std::nextafter(mid, -1e9f)), h) << h;
  }
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // overflow → inf
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0);                      // tie → even (0)
  EXPECT_EQ(f32_to_f16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 1);  // just above → smallest subnormal
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Half, Bf16) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f808000u)), 0x3f80);  // tie → even
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f818000u)), 0x3f82);  // tie → even (up)
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f808001u)), 0x3f81);
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x7f800001u)) & 0x7fc0, 0x7fc0);  // nan stays nan (quiet)
  for (uint32_t b = 0; b < 65536; ++b) {
    if ((b & 0x7f80) == 0x7f80 && (b & 0x7f)) continue;
    EXPECT_EQ(f32_to_bf16(bf16_to_f32(static_cast<uint16_t>(b))), b);
  }
}

}  // namespace
}  // namespace dsv4
