// backend/cpu/act_quant.h — SIMD forms of the activation quantizers (act_quant.cpp is the reference).
// Bit-identical to quantize_act_q8_0 / quantize_act_q8_k for every input (NaN and inf read as 0);
// quantize_act_row picks the highest form its SIMD level allows.
#pragma once

#include <cstdint>

namespace dsv4::cpu {

void quantize_act_q8_0_avx2(const float* src, void* dst, int64_t n);    // n % 32 == 0
void quantize_act_q8_k_avx2(const float* src, void* dst, int64_t n);    // n % 256 == 0
void quantize_act_q8_0_avx512(const float* src, void* dst, int64_t n);  // n % 32 == 0
void quantize_act_q8_k_avx512(const float* src, void* dst, int64_t n);  // n % 256 == 0

}  // namespace dsv4::cpu
