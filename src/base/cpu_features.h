// base/cpu_features.h — which SIMD level this CPU runs, detected once.
#pragma once

namespace dsv4 {

// Ordered: a CPU that runs a level runs every lower one.
enum class SimdLevel : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

const char* simd_level_name(SimdLevel level);
// Highest level this CPU supports (AVX2 needs AVX2+FMA+F16C; AVX-512 needs F, BW, VL, DQ and VNNI).
SimdLevel detected_simd_level();

// Whether AMX int8 tiles can be used: the CPU has AMX-TILE and AMX-INT8, the OS enables their state
// (XCR0 bits 17-18) and granted this process the tile data permission (Linux arch_prctl
// ARCH_REQ_XCOMP_PERM, requested here once). Sapphire Rapids and later Xeons; false elsewhere.
bool amx_int8_usable();

}  // namespace dsv4
