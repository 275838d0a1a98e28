// tests/unit/backend_cpu/kernel_test_util.h — helpers shared by the CPU kernel tests: seeded random
// data, f16 scale bits, bit-exact float comparison, and the SIMD levels this machine can run.
#pragma once

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/quant.h"
#include "base/cpu_features.h"
#include "numerics/half.h"

namespace dsv4::cpu::test {

// Every SimdLevel <= detected_simd_level().
inline std::vector<SimdLevel> runnable_simd_levels() {
  std::vector<SimdLevel> out;
  for (int l = 0; l <= static_cast<int>(detected_simd_level()); ++l) out.push_back(static_cast<SimdLevel>(l));
  return out;
}

// The SimdLevels above detected_simd_level(), comma-separated names ("" when this CPU runs them all).
inline std::string missing_simd_levels() {
  std::string out;
  for (int l = static_cast<int>(detected_simd_level()) + 1; l < kSimdLevelCount; ++l)
    out += (out.empty() ? "" : ", ") + std::string(simd_level_name(static_cast<SimdLevel>(l)));
  return out;
}

// Ends a test that checked every runnable SIMD level (runnable_simd_levels(), or level <=
// detected_simd_level()): when this CPU lacks a level the test shows as SKIPPED, naming it, so a level
// that never ran never counts as passed. A check that failed at a level that did run still fails it.
#define DSV4_SKIP_MISSING_SIMD_LEVELS()                                                                 \
  do {                                                                                                 \
    if (const std::string dsv4_missing = ::dsv4::cpu::test::missing_simd_levels(); !dsv4_missing.empty()) \
      GTEST_SKIP() << "this CPU lacks SIMD level " << dsv4_missing << " (levels up to "                  \
                   << ::dsv4::simd_level_name(::dsv4::detected_simd_level()) << " ran)";                 \
  } while (0)

// Same bits, or both NaN (NaN payload propagation depends on operand order, not on the math).
inline bool same_float(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return f32_bits(a) == f32_bits(b);
}

inline std::vector<float> gaussian_row(std::mt19937& rng, int64_t n, float sigma = 1.0f) {
  std::normal_distribution<float> g(0.0f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = g(rng);
  return v;
}

inline std::vector<uint8_t> random_bytes(std::mt19937& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng() & 0xff);
  return v;
}

// A random finite f16 with |value| in [2^lo_exp, 2^hi_exp), either sign when signed_ok.
inline uint16_t random_f16(std::mt19937& rng, int lo_exp, int hi_exp, bool signed_ok = true) {
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const float e = static_cast<float>(lo_exp) + u(rng) * static_cast<float>(hi_exp - lo_exp);
  float v = std::exp2(e);
  if (signed_ok && (rng() & 1)) v = -v;
  return f32_to_f16(v);
}

inline void put_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
inline void put_f32(uint8_t* p, float v) { std::memcpy(p, &v, 4); }

// Every tile kernel (quant.h VecDotTileFn) of k at a runnable level, called directly on `w_rows` weight
// rows (row i at w + i * w_stride) and `cols` (<= kMaxTileColsAny) quantized activation rows (column c at
// act + c * act_stride, prepared first when the level has prepare_act): for every nr (1..the level's
// tile_rows, at most w_rows) and nc (1..cols, at most the level's tile_cols), out[c][i] must equal the scalar vec_dot of row i and
// column c bit for bit (or both NaN). A level whose tile takes more rows than w_rows fails: give the
// test enough rows. Returns how many levels had a tile kernel.
inline int expect_tiles_match_scalar(const TypeKernels& k, int64_t n, const uint8_t* w, int64_t w_stride,
                                     const uint8_t* act, int64_t act_stride, int cols, const std::string& what,
                                     int w_rows = 4) {
  int levels = 0;
  for (int level = 0; level <= static_cast<int>(detected_simd_level()); ++level) {
    const VecDotTileFn tile = k.vec_dot_tile[level];
    if (tile == nullptr) continue;
    ++levels;
    const uint8_t* a = act;
    int64_t a_stride = act_stride;
    std::vector<uint8_t> prepared;
    if (k.prepare_act[level] != nullptr) {
      a_stride = (k.prepared_act_bytes(n) + 63) / 64 * 64;
      prepared.resize(static_cast<size_t>(a_stride * cols + 64));
      uint8_t* base = prepared.data() + (64 - reinterpret_cast<uintptr_t>(prepared.data()) % 64) % 64;
      for (int c = 0; c < cols; ++c) k.prepare_act[level](act + c * act_stride, n, base + c * a_stride);
      a = base;
    }
    const int max_rows = k.tile_rows[level] > 0 ? k.tile_rows[level] : 4;
    if (max_rows > w_rows) {
      ADD_FAILURE() << what << ": level " << level << " tiles " << max_rows << " rows, the test gave " << w_rows;
      return levels;
    }
    const int max_cols = std::min(cols, k.tile_cols[level] > 0 ? k.tile_cols[level] : kMaxTileCols);
    for (int nr = 1; nr <= max_rows; ++nr) {
      for (int nc = 1; nc <= max_cols; ++nc) {
        std::vector<float> out(static_cast<size_t>(kMaxTileRows * kMaxTileColsAny), -1.0f);
        tile(n, w, w_stride, a, a_stride, nr, nc, out.data(), kMaxTileRows);
        for (int c = 0; c < nc; ++c)
          for (int i = 0; i < nr; ++i) {
            const float ref = k.vec_dot[0](n, w + i * w_stride, act + c * act_stride);
            const float got = out[static_cast<size_t>(kMaxTileRows * c + i)];
            if (!same_float(ref, got)) {  // the first difference only
              ADD_FAILURE() << what << ": level " << level << " nr " << nr << " nc " << nc << " row " << i << " col "
                            << c << " got " << got << " want " << ref;
              return levels;
            }
          }
      }
    }
  }
  return levels;
}

}  // namespace dsv4::cpu::test
