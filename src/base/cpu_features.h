// base/cpu_features.h — which SIMD level this CPU runs, detected once.
#pragma once

namespace dsv4 {

// Ordered: a CPU that runs a level runs every lower one.
enum class SimdLevel : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

const char* simd_level_name(SimdLevel level);
// Highest level this CPU supports (AVX2 needs AVX2+FMA+F16C; AVX-512 needs F, BW, VL, DQ and VNNI).
SimdLevel detected_simd_level();

}  // namespace dsv4
