// tests/cuda/numerics_device_check.cu — compile-only check that the numerics/ headers are valid CUDA
// device code: one __global__ kernel calls every DSV4_HD function and touches every block struct.
// Built by the `numerics_device_compile` test (tests/CMakeLists.txt) with
// nvcc -std=c++20 -arch=sm_90 -fmad=false (never --use_fast_math), output discarded.
#include <cstdint>

#include "numerics/accumulate.h"
#include "numerics/blocks.h"
#include "numerics/det_math.h"
#include "numerics/half.h"
#include "numerics/hd.h"

__global__ void numerics_device_check(const float* x, float* y, double* yd, uint16_t* h, const void* blocks) {
  const int i = static_cast<int>(threadIdx.x);
  const float v = x[i];
  float out = 0;
  out += dsv4::det::exp(v);
  out += dsv4::det::log1p_pos(v);
  out += dsv4::det::softplus(v);
  out += dsv4::det::sigmoid(v);
  out += dsv4::det::silu(v);
  out += static_cast<float>(dsv4::det::log_pos(static_cast<double>(v)));
  double s = 0, c = 0;
  dsv4::det::sincos(static_cast<double>(v), &s, &c);
  yd[i] = s + c;

  out += dsv4::hd::fma(v, v, v) + dsv4::hd::sqrt(v) + dsv4::hd::div(v, 3.0f);
  yd[i] += dsv4::hd::fma(s, c, s) + dsv4::hd::sqrt(c) + dsv4::hd::div(s, c) + dsv4::hd::round_even(s);
  yd[i] += dsv4::hd::f64_from_bits(dsv4::hd::f64_bits(s));
  out += dsv4::hd::f32_from_bits(dsv4::hd::f32_bits(v));

  h[2 * i] = dsv4::f32_to_f16(v);
  h[2 * i + 1] = dsv4::f32_to_bf16(v);
  out += dsv4::f16_to_f32(h[2 * i]) + dsv4::bf16_to_f32(h[2 * i + 1]);
  out += static_cast<float>(dsv4::f32_bits(dsv4::f32_from_bits(1u)));

  dsv4::Partials32 acc;
  for (int k = 0; k < 64; ++k) acc.add(k, x[k]);
  out += acc.reduce();

  const auto* q80 = static_cast<const dsv4::BlockQ8_0*>(blocks);
  const auto* q80a = static_cast<const dsv4::BlockQ8_0Act*>(blocks);
  const auto* q8k = static_cast<const dsv4::BlockQ8_K*>(blocks);
  const auto* q2k = static_cast<const dsv4::BlockQ2_K*>(blocks);
  const auto* q4k = static_cast<const dsv4::BlockQ4_K*>(blocks);
  const auto* iq2 = static_cast<const dsv4::BlockIq2Xxs*>(blocks);
  const auto* mx = static_cast<const dsv4::BlockMxfp4*>(blocks);
  out += dsv4::f16_to_f32(q80->d) * q80->qs[i & 31] + q80a->d * q80a->qs[i & 31] + q8k->d * q8k->bsums[i & 15];
  out += dsv4::f16_to_f32(q2k->dmin) * q2k->scales[i & 15] + dsv4::f16_to_f32(q4k->d) * q4k->qs[i & 127];
  out += dsv4::f16_to_f32(iq2->d) * iq2->qs[i & 31] + dsv4::e8m0_half(mx->e) * mx->qs[i & 15];
  y[i] = out;
}
