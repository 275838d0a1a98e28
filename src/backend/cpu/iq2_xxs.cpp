// backend/cpu/iq2_xxs.cpp — PLACEHOLDER: registers no types yet (being written).
#include "backend/cpu/quant.h"

namespace dsv4::cpu {
std::span<const TypeKernels> iq2_xxs_type_kernels() { return {}; }
}  // namespace dsv4::cpu
