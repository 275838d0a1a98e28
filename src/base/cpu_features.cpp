// base/cpu_features.cpp — uses GCC/clang's __builtin_cpu_supports (cpuid + OS xsave checks).
#include "base/cpu_features.h"

namespace dsv4 {

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar: return "scalar";
    case SimdLevel::kAvx2: return "avx2";
    case SimdLevel::kAvx512: return "avx512";
  }
  return "unknown";
}

SimdLevel detected_simd_level() {
#if defined(__x86_64__) || defined(__i386__)
  static const SimdLevel level = [] {
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("avx512vnni");
    return avx512 ? SimdLevel::kAvx512 : avx2 ? SimdLevel::kAvx2 : SimdLevel::kScalar;
  }();
  return level;
#else
  return SimdLevel::kScalar;
#endif
}

}  // namespace dsv4
