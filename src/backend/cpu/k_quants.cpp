// backend/cpu/k_quants.cpp — PLACEHOLDER: registers no types yet (being written).
#include "backend/cpu/quant.h"

namespace dsv4::cpu {
std::span<const TypeKernels> k_quant_type_kernels() { return {}; }
}  // namespace dsv4::cpu
