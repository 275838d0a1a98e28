// base/cpu_features.h — which SIMD level this CPU runs, detected once.
#pragma once

namespace dsv4 {

// Ordered: a CPU that runs a level runs every lower one. kAvx512Vbmi is AVX-512 plus the Ice Lake /
// Zen 4 byte-permute set (VBMI, VBMI2, BITALG, GFNI): kernels with a VBMI variant (IQ2_XXS, MXFP4,
// ROCmFPx 2/3/4-bit) use it only at that level and their plain AVX-512 kernel at kAvx512; every other
// kernel runs its AVX-512 kernel at both.
enum class SimdLevel : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Vbmi = 3 };
inline constexpr int kSimdLevelCount = 4;

// Whether `level` may run AVX-512 (F/BW/VL/DQ/VNNI) code: kAvx512 and above.
constexpr bool has_avx512(SimdLevel level) { return static_cast<int>(level) >= static_cast<int>(SimdLevel::kAvx512); }

// "scalar", "avx2", "avx512", "avx512vbmi" (the --simd values).
const char* simd_level_name(SimdLevel level);
// Highest level this CPU supports (AVX2 needs AVX2+FMA+F16C; AVX-512 needs F, BW, VL, DQ and VNNI;
// AVX-512 VBMI needs AVX-512 plus VBMI, VBMI2, BITALG and GFNI).
SimdLevel detected_simd_level();

// Whether AMX int8 tiles can be used: the CPU has AMX-TILE and AMX-INT8, the OS enables their state
// (XCR0 bits 17-18) and granted this process the tile data permission (Linux arch_prctl
// ARCH_REQ_XCOMP_PERM, requested here once). Sapphire Rapids and later Xeons; false elsewhere.
bool amx_int8_usable();

// Whether the CPU is an Intel one (CPUID vendor "GenuineIntel"): kernels whose tuning was measured to
// differ between Intel and AMD cores (backend/cpu/stream_prefetch.h) ask it. False off x86.
bool cpu_is_intel();

}  // namespace dsv4
