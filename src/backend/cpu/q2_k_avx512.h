// backend/cpu/q2_k_avx512.h — the Q2_K super-block decode shared by the AVX-512 dot
// (k_quants_avx512.cpp) and the AMX tiles (k_quants_amx.cpp): only for files compiled with AVX-512.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace dsv4::cpu {

// Q2_K table for vpshufb: 128-bit lane i, entry e holds q·sc[4p + i] with (p, q) = (e / 4, e % 4) in
// lanes 0-1 (even planes: index q | 4p) and (e % 4, e / 4) in lanes 2-3 (odd planes, masked in place
// as 4q: index 4q | p). idx gives the sc byte 4p + i (vpshufb of the broadcast sc); kQ2Odd / kQ2Ge2: bytes with q odd / q ≥ 2.
struct Q2Tables {
  alignas(64) uint8_t idx[64];
  uint64_t odd = 0, ge2 = 0;
  constexpr Q2Tables() : idx{} {
    for (int i = 0; i < 4; ++i)
      for (int e = 0; e < 16; ++e) {
        const int pp = i < 2 ? e / 4 : e % 4, q = i < 2 ? e % 4 : e / 4;
        idx[16 * i + e] = static_cast<uint8_t>(4 * pp + i);
        if (q & 1) odd |= uint64_t{1} << (16 * i + e);
        if (q >= 2) ge2 |= uint64_t{1} << (16 * i + e);
      }
  }
};
inline constexpr Q2Tables kQ2Tables;

// out[p] byte i = q·sc of element 64p + i (u8, ≤ 45), the natural element order: per 64 elements
// (p = 0..3: qs half h = p / 2, plane 2·(p % 2) in 128-bit lanes 0-1 and 2·(p % 2) + 1 in lanes 2-3;
// lane i = sub-block 4p + i), the index (q | 4p, resp. 4q | p) comes from one vpternlog on the (for
// odd p: 4-bit shifted) quants and vpshufb looks up q·sc.
inline void q2_k_scaled_quants(const uint8_t* w, __m512i out[4]) {
  const __m128i scb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
  const __m512i scz = _mm512_broadcast_i32x4(scb);  // a broadcast load
  const __m512i s = _mm512_shuffle_epi8(_mm512_and_si512(scz, _mm512_set1_epi8(0x0f)), _mm512_load_si512(kQ2Tables.idx));
  const __m512i s2 = _mm512_maskz_add_epi8(kQ2Tables.ge2, s, s);
  const __m512i tbl = _mm512_mask_add_epi8(s2, kQ2Tables.odd, s2, s);
  const __m512i mask = _mm512_inserti64x4(_mm512_set1_epi8(0x03), _mm256_set1_epi8(0x0c), 1);
  for (int h = 0; h < 2; ++h) {
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16 + 32 * h)));
    const __m512i qh4 = _mm512_srli_epi16(qh, 4);
    for (int t = 0; t < 2; ++t) {
      const int p = 2 * h + t;
      const __m512i orc = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(4 * p)),
                                             _mm256_set1_epi8(static_cast<char>(p)), 1);
      const __m512i idx = _mm512_ternarylogic_epi32(t == 0 ? qh : qh4, mask, orc, 0xea);  // (a & b) | c
      out[p] = _mm512_shuffle_epi8(tbl, idx);
    }
  }
}

// The sixteen 4-bit mins (scales[k] >> 4) of a Q2_K block as int16.
inline __m256i q2_k_mins16(const uint8_t* w) {
  const __m128i scb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
  return _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(scb, 4), _mm_set1_epi8(0x0f)));
}

}  // namespace dsv4::cpu
