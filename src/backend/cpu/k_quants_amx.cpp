// backend/cpu/k_quants_amx.cpp — Q2_K matrix × matrix on AMX int8 tiles (Sapphire Rapids and later),
// bit-identical to vec_dot_q2_k_scalar for every (row, column) (order written in k_quants.cpp).
//
// Work unit: 16 weight rows × 16 activation columns (a column group), one super-block b at a time:
//   A = tmm2/3: for K-tile p (elements 64p .. 64p+63) the 16 rows' q·sc bytes (u8 ≤ 45, decoded by
//       q2_k_avx512.h into a small buffer), so the sub-block scales are inside the int8 operand;
//   B = tmm4/5: the group's 16 columns of those 64 activation bytes in the VNNI layout (packed once
//       per matmul by q2_k_amx_pack_group);
//   C = tmm0/1 (by b % 2): four tdpbusd give isum_sc of every (row, column) exactly;
//   isum_m = Σ_k min_k · bsums_k by eight vpdpwssd per row (16 columns per vector, bsums packed in
//       pairs), exact int32;
//   float steps per (row m, column c), the scalar order: v = d_x·((d·(float)isum_sc) − (dmin·(float)isum_m)),
//   partial[b % 32] += v, one zmm per (row, partial) over the columns; then the tree s = 16 .. 1.
// The float work of super-block b − 1 runs after the tiles of b are issued, so they overlap.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/amx_tiles.h"
#include "backend/cpu/k_quants.h"
#include "backend/cpu/q2_k_avx512.h"
#include "backend/cpu/quant.h"

namespace dsv4::cpu {
namespace {

constexpr int kTileRows = kAmxTileRows;
constexpr int64_t kWBytes = sizeof(BlockQ2_K);
constexpr int64_t kABytes = sizeof(BlockQ8_K);
// One packed super-block of a column group: four B tiles (16 rows of 16 columns × 4 bytes), eight
// bsums-pair vectors (column c: bsums[2j] | bsums[2j + 1] << 16), sixteen d_x.
constexpr int64_t kBTileBytes = 16 * 64;
constexpr int64_t kBsumsOffset = 4 * kBTileBytes;
constexpr int64_t kDxOffset = kBsumsOffset + 8 * 64;
constexpr int64_t kPackedSuperBlock = kDxOffset + 64;

// tmm0-1: C (rows × 16 int32), tmm2-3: A (rows × 64 u8), tmm4-5: B (16 × 64 s8).
void configure_tiles(int rows) {
  const auto r = static_cast<uint8_t>(rows);
  load_tile_config({r, r, r, r, 16, 16, 0, 0}, {64, 64, 64, 64, 64, 64, 0, 0});
}

struct alignas(64) Decoded {  // one super-block of a row tile
  uint8_t q[4][kTileRows][64];  // K-tile p, row m: q·sc of elements 64p .. 64p+63
  int16_t mins[kTileRows][16];
  float d[kTileRows], dmin[kTileRows];
};

struct alignas(64) GroupState {
  TilePartials partials;
  int32_t isum_sc[2][kTileRows][16];
  Decoded dec[2];
};

void decode_rows(const uint8_t* w, int64_t w_stride, int nr, int64_t b, Decoded& dec) {
  for (int m = 0; m < nr; ++m) {
    const uint8_t* blk = w + m * w_stride + b * kWBytes;
    __m512i q[4];
    q2_k_scaled_quants(blk, q);
    for (int p = 0; p < 4; ++p) _mm512_store_si512(dec.q[p][m], q[p]);
    _mm256_store_si256(reinterpret_cast<__m256i*>(dec.mins[m]), q2_k_mins16(blk));
    uint16_t dd[2];
    std::memcpy(dd, blk + 80, 4);
    dec.d[m] = _cvtsh_ss(dd[0]);
    dec.dmin[m] = _cvtsh_ss(dd[1]);
  }
}

// Four K-tiles of one super-block into C slot (b % 2), stored to isum.
#define DSV4_Q2K_TILES(C)                                \
  do {                                                   \
    _tile_zero(C);                                       \
    _tile_loadd(2, dec.q[0][0], 64);                     \
    _tile_loadd(4, bt, 64);                              \
    _tile_dpbusd(C, 2, 4);                               \
    _tile_loadd(3, dec.q[1][0], 64);                     \
    _tile_loadd(5, bt + kBTileBytes, 64);                \
    _tile_dpbusd(C, 3, 5);                               \
    _tile_loadd(2, dec.q[2][0], 64);                     \
    _tile_loadd(4, bt + 2 * kBTileBytes, 64);            \
    _tile_dpbusd(C, 2, 4);                               \
    _tile_loadd(3, dec.q[3][0], 64);                     \
    _tile_loadd(5, bt + 3 * kBTileBytes, 64);            \
    _tile_dpbusd(C, 3, 5);                               \
    _tile_stored(C, isum, 64);                           \
  } while (0)

inline void super_block_tiles(int slot, const Decoded& dec, const uint8_t* bt, int32_t* isum) {
  if (slot == 0) {
    DSV4_Q2K_TILES(0);
  } else {
    DSV4_Q2K_TILES(1);
  }
}
#undef DSV4_Q2K_TILES

// Float steps of super-block b for the tile's nr rows.
void scale_super_block(const uint8_t* packed_sb, const Decoded& dec, const int32_t (*isum_sc)[16], int nr, int64_t b,
                       GroupState& st) {
  const auto* bsum_pairs = reinterpret_cast<const __m512i*>(packed_sb + kBsumsOffset);
  const __m512 dx = _mm512_load_ps(reinterpret_cast<const float*>(packed_sb + kDxOffset));
  for (int m = 0; m < nr; ++m) {
    uint32_t min_pairs[8];
    std::memcpy(min_pairs, dec.mins[m], sizeof(min_pairs));
    __m512i ism = _mm512_setzero_si512();
    for (int j = 0; j < 8; ++j)
      ism = _mm512_dpwssd_epi32(ism, _mm512_load_si512(bsum_pairs + j), _mm512_set1_epi32(static_cast<int>(min_pairs[j])));
    const __m512 t_sc = _mm512_mul_ps(_mm512_set1_ps(dec.d[m]), _mm512_cvtepi32_ps(_mm512_load_si512(isum_sc[m])));
    const __m512 t_m = _mm512_mul_ps(_mm512_set1_ps(dec.dmin[m]), _mm512_cvtepi32_ps(ism));
    __m512& part = st.partials.p[m][b & 31];
    part = _mm512_add_ps(part, _mm512_mul_ps(dx, _mm512_sub_ps(t_sc, t_m)));
  }
}

void tile_group(int64_t n, const uint8_t* w, int64_t w_stride, int nr, const uint8_t* group, int nc, float* y,
                int64_t y_stride, GroupState& st) {
  const int64_t nb = n / 256;
  st.partials.zero(nr);
  for (int64_t b = 0; b < nb; ++b) {
    const int slot = static_cast<int>(b & 1);
    decode_rows(w, w_stride, nr, b, st.dec[slot]);
    super_block_tiles(slot, st.dec[slot], group + b * kPackedSuperBlock, &st.isum_sc[slot][0][0]);
    if (b >= 1) scale_super_block(group + (b - 1) * kPackedSuperBlock, st.dec[slot ^ 1], st.isum_sc[slot ^ 1], nr, b - 1, st);
  }
  if (nb >= 1) {
    const int slot = static_cast<int>((nb - 1) & 1);
    scale_super_block(group + (nb - 1) * kPackedSuperBlock, st.dec[slot], st.isum_sc[slot], nr, nb - 1, st);
  }
  st.partials.finish(nr, nc, y, y_stride);
}

}  // namespace

int64_t q2_k_amx_group_bytes(int64_t n) { return n / 256 * kPackedSuperBlock; }

// Columns beyond nc are zero (their dots are computed and dropped).
void q2_k_amx_pack_group(const uint8_t* act, int64_t act_stride, int64_t n, int nc, uint8_t* out) {
  const int64_t nb = n / 256;
  std::memset(out, 0, static_cast<size_t>(q2_k_amx_group_bytes(n)));
  for (int col = 0; col < nc; ++col) {
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* a = act + col * act_stride + b * kABytes;
      uint8_t* sb = out + b * kPackedSuperBlock;
      for (int p = 0; p < 4; ++p)
        for (int kk = 0; kk < 16; ++kk) std::memcpy(sb + p * kBTileBytes + kk * 64 + col * 4, a + 4 + 64 * p + 4 * kk, 4);
      for (int j = 0; j < 8; ++j) std::memcpy(sb + kBsumsOffset + j * 64 + col * 4, a + 260 + 4 * j, 4);
      std::memcpy(sb + kDxOffset + col * 4, a, 4);
    }
  }
}

void q2_k_amx_matmul(int64_t n, const void* w, int64_t w_stride, int64_t rows, const uint8_t* packed, int64_t cols,
                     float* y, int64_t y_stride) {
  GroupState st;  // ~44 KiB on the calling thread's stack
  for_each_amx_tile(w, w_stride, rows, packed, q2_k_amx_group_bytes(n), cols, y, y_stride, configure_tiles,
                    [&](const uint8_t* wr, int nr, const uint8_t* group, int nc, float* yt) {
                      tile_group(n, wr, w_stride, nr, group, nc, yt, y_stride, st);
                    });
}

}  // namespace dsv4::cpu
