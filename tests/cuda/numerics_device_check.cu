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
#include "numerics/quant_ref.h"

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

// Every ROCmFPx template of numerics/quant_ref_rocmfpx.h for one type id.
template <int kType>
__device__ float rocmfpx_check(const uint8_t* w, const dsv4::BlockQ8_0Act& a, float* deq, int i) {
  namespace q = dsv4::qref;
  int8_t lv[32];
  q::rocmfpx_block_levels<kType>(w, lv);
  q::dequantize_block_rocmfpx<kType>(w, deq);
  return deq[i & 31] + lv[i & 31] + q::dot_block_rocmfpx<kType>(w, a) + q::vec_dot_rocmfpx<kType>(64, w, &a) +
         static_cast<float>(q::rocmfpx_block_bytes<kType>()) + (q::rocmfpx_two_scales<kType>() ? 1.0f : 0.0f);
}

// numerics/quant_ref.h: every qref:: function, called from device code.
__global__ void quant_ref_device_check(const float* x, const void* w, void* act, float* y, const uint64_t* grid,
                                       const uint8_t* signs) {
  namespace q = dsv4::qref;
  const int i = static_cast<int>(threadIdx.x);
  float out = q::f32_abs(x[i]) + q::finite_or_zero(x[i]) + q::fmax_c(x[i], 1.0f) + q::fmin_c(x[i], 1.0f);
  out += q::round_half_away(x[i]) + (q::is_finite(x[i]) ? 1.0f : 0.0f);

  auto* a80 = static_cast<dsv4::BlockQ8_0Act*>(act);
  auto* a8k = reinterpret_cast<dsv4::BlockQ8_K*>(static_cast<char*>(act) + 1024);
  q::quantize_act_q8_0_block(x, a80);
  q::quantize_act_q8_k_block(x, a8k);

  out += q::load_f32(w, i) + q::load_f16(w, i) + q::load_bf16(w, i);
  out += q::vec_dot_f32(64, w, x) + q::vec_dot_f16(64, w, x) + q::vec_dot_bf16(64, w, x);

  float deq[256];
  const auto* q80 = static_cast<const dsv4::BlockQ8_0*>(w);
  q::dequantize_block_q8_0(q80, deq);
  out += deq[i & 31] + q::dot_block_q8_0(*q80, *a80) + q::vec_dot_q8_0(64, q80, a80);

  const auto* q2k = static_cast<const dsv4::BlockQ2_K*>(w);
  const auto* q4k = static_cast<const dsv4::BlockQ4_K*>(w);
  q::dequantize_block_q2_k(q2k, deq);
  out += deq[i & 255] + q::dot_block_q2_k(*q2k, *a8k) + q::vec_dot_q2_k(512, q2k, a8k);
  q::dequantize_block_q4_k(q4k, deq);
  int sc = 0, m = 0;
  q::q4_k_scale_min(q4k->scales, i & 7, &sc, &m);
  out += deq[i & 255] + q::dot_block_q4_k(*q4k, *a8k) + q::vec_dot_q4_k(512, q4k, a8k) + static_cast<float>(sc + m);

  const dsv4::qref::Iq2xxsTables tables = {grid, signs};
  const auto* iq2 = static_cast<const dsv4::BlockIq2Xxs*>(w);
  q::dequantize_block_iq2_xxs(iq2, deq, tables);
  uint32_t words[2];
  q::iq2_xxs_group_words(*iq2, i & 7, words);
  out += deq[i & 255] + q::dot_block_iq2_xxs(*iq2, *a8k, tables) + q::vec_dot_iq2_xxs(512, iq2, a8k, tables);
  out += static_cast<float>(words[0] ^ words[1]);

  const auto* mx = static_cast<const dsv4::BlockMxfp4*>(w);
  q::dequantize_block_mxfp4(mx, deq);
  out += deq[i & 31] + q::dot_block_mxfp4(*mx, *a80) + q::vec_dot_mxfp4(64, mx, a80) +
         static_cast<float>(q::mxfp4_value(static_cast<uint32_t>(i) & 15));

  const auto* rb = static_cast<const uint8_t*>(w);
  out += q::ue4m3_decode(rb[i]) + static_cast<float>(q::rocmfpx_get_bits(rb, i, 3));
  out += static_cast<float>(q::rocmfpx_fp4_level(i) + q::rocmfpx_fp3_level(i) + q::rocmfpx_fp2_level(i) +
                            q::rocmfpx_fp6_level(i));
  out += rocmfpx_check<100>(rb, *a80, deq, i) + rocmfpx_check<101>(rb, *a80, deq, i) +
         rocmfpx_check<102>(rb, *a80, deq, i) + rocmfpx_check<103>(rb, *a80, deq, i) +
         rocmfpx_check<104>(rb, *a80, deq, i) + rocmfpx_check<107>(rb, *a80, deq, i);
  y[i] = out;
}

// The IQ2_XXS tables as CUDA code holds them: device copies of numerics/iq2_xxs_grid.h's arrays.
__constant__ uint64_t d_iq2xxs_grid[256];
__constant__ uint8_t d_iq2xxs_signs[128];
void quant_ref_device_check_launch(const float* x, const void* w, void* act, float* y) {
  cudaMemcpyToSymbol(d_iq2xxs_grid, dsv4::qref::kIq2xxsGrid, sizeof(dsv4::qref::kIq2xxsGrid));
  cudaMemcpyToSymbol(d_iq2xxs_signs, dsv4::qref::kIq2xxsSigns, sizeof(dsv4::qref::kIq2xxsSigns));
  const uint64_t* grid = nullptr;
  const uint8_t* signs = nullptr;
  cudaGetSymbolAddress(reinterpret_cast<void**>(const_cast<uint64_t**>(&grid)), d_iq2xxs_grid);
  cudaGetSymbolAddress(reinterpret_cast<void**>(const_cast<uint8_t**>(&signs)), d_iq2xxs_signs);
  quant_ref_device_check<<<1, 32>>>(x, w, act, y, grid, signs);
}
