// numerics/half.h — IEEE binary16 and bfloat16 <-> binary32, bit exact, no hardware needed; host C++
// and CUDA device code alike (numerics/hd.h).
//
// f32 -> f16 and f32 -> bf16 round to nearest, ties to even; f16 subnormals, infinities and NaN are
// handled; bf16 NaN is kept quiet. f16/bf16 -> f32 is exact (device code converts finite halves with
// the hardware's exact cvt; the conformance suite checks all 65536 through a CUDA backend). The SIMD paths (F16C vcvtph2ps,
// AVX512-BF16) agree with these bit for bit; tests check every one of the 65536 f16 values.
#pragma once

#include <cstdint>

#include "numerics/hd.h"

namespace dsv4 {

using hd::f32_bits;
using hd::f32_from_bits;

DSV4_HD float f16_to_f32(uint16_t h) {
#if defined(__CUDA_ARCH__)
  // Device code: every finite half is exactly a float, so the hardware conversion gives the bits of the
  // path below (subnormals included) in one instruction; infinities and NaN (payloads) take that path.
  if ((h & 0x7c00u) != 0x7c00u) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
  }
#endif
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (mant << 13));  // inf / nan
  if (exp == 0) {
    if (mant == 0) return f32_from_bits(sign);
    // subnormal: normalise
    int e = -1;
    do { mant <<= 1; ++e; } while ((mant & 0x400u) == 0);
    mant &= 0x3ffu;
    return f32_from_bits(sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant << 13));
  }
  return f32_from_bits(sign | (exp + (127 - 15)) << 23 | (mant << 13));
}

DSV4_HD uint16_t f32_to_f16(float f) {
  const uint32_t x = f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));  // nan, quiet
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520 -> inf
  if (abs < 0x38800000u) {  // result is subnormal or zero (|f| < 2^-14)
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25: rounds to 0
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24 -> produce 10-bit mantissa
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = ((abs >> 13) - ((127 - 15) << 10));
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return static_cast<uint16_t>(sign | r);
}

DSV4_HD float bf16_to_f32(uint16_t b) { return f32_from_bits(static_cast<uint32_t>(b) << 16); }

DSV4_HD uint16_t f32_to_bf16(float f) {
  const uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet nan
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

}  // namespace dsv4
