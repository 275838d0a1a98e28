// backend/cpu/act_quant.cpp — PLACEHOLDER (being written).
#include "backend/cpu/quant.h"

namespace dsv4::cpu {
void quantize_act_q8_0(const float*, void*, int64_t) {}
void quantize_act_q8_k(const float*, void*, int64_t) {}
}  // namespace dsv4::cpu
