// tests/unit/backend_cpu/iq_test_util.h — helpers shared by the IQ2_XXS and MXFP4 tests: a tiny
// SHA-256, local reference activation quantizers (Q8_0Act, Q8_K), random rows, f64 dots.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/quant.h"

namespace dsv4::cpu::iqtest {

inline std::string sha256_hex(const uint8_t* data, size_t len) {
  static constexpr uint32_t k[64] = {
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
      0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
      0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
      0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
      0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
      0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
      0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
      0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::vector<uint8_t> m(data, data + len);
  m.push_back(0x80);
  while (m.size() % 64 != 56) m.push_back(0);
  const uint64_t bits = static_cast<uint64_t>(len) * 8;
  for (int i = 7; i >= 0; --i) m.push_back(static_cast<uint8_t>(bits >> (8 * i)));
  auto rotr = [](uint32_t x, int r) { return (x >> r) | (x << (32 - r)); };
  for (size_t off = 0; off < m.size(); off += 64) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i)
      w[i] = uint32_t{m[off + 4 * i]} << 24 | uint32_t{m[off + 4 * i + 1]} << 16 | uint32_t{m[off + 4 * i + 2]} << 8 |
             m[off + 4 * i + 3];
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; ++i) {
      const uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
      const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
  }
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (uint32_t v : h)
    for (int i = 7; i >= 0; --i) out.push_back(hex[(v >> (4 * i)) & 15]);
  return out;
}

inline uint32_t bits_of(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

// Local reference activation quantizers (ggml behaviour: d = max / -127 of the signed extreme).
inline void quantize_q8_k_local(const float* x, BlockQ8_K* y, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b) {
    const float* xb = x + 256 * b;
    float amax = 0.0f, mx = 0.0f;
    for (int i = 0; i < 256; ++i)
      if (std::fabs(xb[i]) > amax) { amax = std::fabs(xb[i]); mx = xb[i]; }
    BlockQ8_K& o = y[b];
    std::memset(&o, 0, sizeof(o));
    if (amax == 0.0f) continue;
    const float iscale = -127.0f / mx;
    for (int i = 0; i < 256; ++i) {
      const long v = std::lround(iscale * xb[i]);
      o.qs[i] = static_cast<int8_t>(v > 127 ? 127 : v < -128 ? -128 : v);
    }
    for (int k = 0; k < 16; ++k) {
      int s = 0;
      for (int i = 0; i < 16; ++i) s += o.qs[16 * k + i];
      o.bsums[k] = static_cast<int16_t>(s);
    }
    o.d = 1.0f / iscale;
  }
}

inline void quantize_q8_0_local(const float* x, BlockQ8_0Act* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(x[32 * b + i]));
    const float d = amax / 127.0f;
    y[b].d = d;
    for (int i = 0; i < 32; ++i) y[b].qs[i] = static_cast<int8_t>(d == 0.0f ? 0 : std::lround(x[32 * b + i] / d));
  }
}

inline std::vector<float> gaussian_row(std::mt19937& rng, int64_t n, float sigma = 1.0f) {
  std::normal_distribution<float> nd(0.0f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = nd(rng);
  return v;
}

inline double dot_f64(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

}  // namespace dsv4::cpu::iqtest
