// backend/cpu/iq2_xxs_tables.h — IQ2_XXS data tables: the 256-entry E8 lattice grid and the sign tables.
// The grid and ksigns data live in numerics/iq2_xxs_grid.h (shared with CUDA); these names refer to it.
//
// iq2xxs_grid[k]: 8 magnitudes, byte j = bits 8j..8j+7, each one of 8, 25, 43 (gguf.md §5.5; SHA-256 of
// the 2048 little-endian bytes is checked by a unit test). ksigns_iq2xs[s] = s | (popcount(s)&1) << 7:
// bit j set means element j is negative (always an even number of negatives). ksigns_mask64[s]: the
// same signs as eight bytes, 0xff where negative, 0x00 where positive (for SIMD blends).
#pragma once

#include <array>
#include <cstdint>

#include "numerics/iq2_xxs_grid.h"

namespace dsv4::cpu {

inline constexpr const uint64_t (&iq2xxs_grid)[256] = qref::kIq2xxsGrid;

inline constexpr const uint8_t (&ksigns_iq2xs)[128] = qref::kIq2xxsSigns;

constexpr std::array<uint64_t, 128> make_ksigns_mask64() {
  std::array<uint64_t, 128> t{};
  for (int s = 0; s < 128; ++s) {
    const uint8_t bits = ksigns_iq2xs[s];
    uint64_t m = 0;
    for (int j = 0; j < 8; ++j)
      if ((bits >> j) & 1) m |= uint64_t{0xff} << (8 * j);
    t[s] = m;
  }
  return t;
}
inline constexpr std::array<uint64_t, 128> ksigns_mask64 = make_ksigns_mask64();

}  // namespace dsv4::cpu
