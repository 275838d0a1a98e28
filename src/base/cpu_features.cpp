// base/cpu_features.cpp — uses GCC/clang's __builtin_cpu_supports (cpuid + OS xsave checks).
#include "base/cpu_features.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace dsv4 {

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar: return "scalar";
    case SimdLevel::kAvx2: return "avx2";
    case SimdLevel::kAvx512: return "avx512";
    case SimdLevel::kAvx512Vbmi: return "avx512vbmi";
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
    const bool vbmi = avx512 && __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vbmi2") &&
                      __builtin_cpu_supports("avx512bitalg") && __builtin_cpu_supports("gfni");
    return vbmi     ? SimdLevel::kAvx512Vbmi
           : avx512 ? SimdLevel::kAvx512
           : avx2   ? SimdLevel::kAvx2
                    : SimdLevel::kScalar;
  }();
  return level;
#else
  return SimdLevel::kScalar;
#endif
}

bool amx_int8_usable() {
#if defined(__x86_64__) && defined(__linux__)
  static const bool usable = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
    const bool tile = (d >> 24) & 1, int8 = (d >> 25) & 1;  // CPUID.(7,0):EDX AMX-TILE, AMX-INT8
    if (!tile || !int8) return false;
    if (__get_cpuid(1, &a, &b, &c, &d) == 0 || ((c >> 27) & 1) == 0) return false;  // OSXSAVE
    unsigned xcr0_lo = 0, xcr0_hi = 0;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    (void)xcr0_hi;
    if (((xcr0_lo >> 17) & 3) != 3) return false;  // XTILECFG and XTILEDATA enabled by the OS
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return usable;
#else
  return false;
#endif
}

bool cpu_is_intel() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool intel = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(0, &a, &b, &c, &d) == 0) return false;
    return b == 0x756e6547u && d == 0x49656e69u && c == 0x6c65746eu;  // "Genu" "ineI" "ntel"
  }();
  return intel;
#else
  return false;
#endif
}

}  // namespace dsv4
