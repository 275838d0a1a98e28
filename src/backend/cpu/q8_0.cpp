// backend/cpu/q8_0.cpp — PLACEHOLDER: registers no types yet (being written).
#include "backend/cpu/quant.h"

namespace dsv4::cpu {
std::span<const TypeKernels> q8_0_type_kernels() { return {}; }
}  // namespace dsv4::cpu
