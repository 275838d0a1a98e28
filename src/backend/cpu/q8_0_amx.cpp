// backend/cpu/q8_0_amx.cpp — Q8_0 matrix × matrix on AMX int8 tiles (Sapphire Rapids and later),
// bit-identical to vec_dot_q8_0_scalar for every (row, column) (order written in q8_0.cpp).
//
// Work unit: 16 weight rows × 16 activation columns (a column group). For each 32-weight block b:
//   A = tmm4/5: the 16 rows' 32 int8 qs of block b, loaded straight from the weight rows (stride =
//       the row's byte length; no copy, no decode);
//   B = tmm6/7: the group's 16 columns of block b in the VNNI layout (8 rows of 16 × 4 bytes; packed
//       once per matmul by q8_0_amx_pack_group);
//   C = tmm0-3 (a ring of four): tdpbssd gives the 16 × 16 exact int32 block dots (signed × signed),
//       stored to memory and scaled two blocks later (so the float work overlaps the next tiles).
// Float steps per (row m, column c), exactly the scalar order: v = (d_w[m] · d_x[c]) · (float)isum,
// partial[b % 32] += v; partials vectorised over the 16 columns (one zmm per (row, partial)), then the
// fixed tree s = 16, 8, 4, 2, 1 per row. Integer sums are exact, so only those float steps matter,
// and they are the reference's operations on the same values.
//
// Measured on a 2-vCPU Sapphire Rapids VM, one thread, n = 4096: 120-160 GFLOP/s against 32-44 for the
// AVX-512 VNNI tile kernel (same minutes).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/amx_tiles.h"
#include "backend/cpu/q8_0.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/simd_reduce.h"

namespace dsv4::cpu {
namespace {

constexpr int kTileRows = kAmxTileRows;
constexpr int kGroupCols = kAmxTileCols;
constexpr int64_t kWBytes = sizeof(BlockQ8_0);
constexpr int64_t kBTileBytes = 8 * 64;  // 32 k / 4 rows × 16 columns × 4 bytes
constexpr int64_t kDxBytes = kGroupCols * sizeof(float);

// tmm0-3: C (rows × 16 int32), tmm4-5: A (rows × 32 int8), tmm6-7: B (8 × 64 int8).
void configure_tiles(int rows) {
  const auto r = static_cast<uint8_t>(rows);
  load_tile_config({r, r, r, r, r, r, 8, 8}, {64, 64, 64, 64, 32, 32, 64, 64});
}

// Block dots of one block into c (rows × 16 int32, 64-byte rows): C = tmm S, A = tmm 4 + S % 2,
// B = tmm 6 + S % 2. GCC's tile intrinsics paste the register number into the instruction text, so
// the numbers are literals.
#define DSV4_AMX_BLOCK_DOTS(S, A, B)   \
  do {                                 \
    _tile_loadd(A, a, a_stride);       \
    _tile_loadd(B, b_tile, 64);        \
    _tile_zero(S);                     \
    _tile_dpbssd(S, A, B);             \
    _tile_stored(S, c, 64);            \
  } while (0)

inline void block_dots(int slot, const uint8_t* a, int64_t a_stride, const uint8_t* b_tile, int32_t* c) {
  switch (slot) {
    case 0: DSV4_AMX_BLOCK_DOTS(0, 4, 6); break;
    case 1: DSV4_AMX_BLOCK_DOTS(1, 5, 7); break;
    case 2: DSV4_AMX_BLOCK_DOTS(2, 4, 6); break;
    default: DSV4_AMX_BLOCK_DOTS(3, 5, 7); break;
  }
}
#undef DSV4_AMX_BLOCK_DOTS

struct alignas(64) GroupState {
  TilePartials partials;              // row m, partial p: columns 0-15
  int32_t dots[4][kTileRows][16];     // the C ring in memory
};

// One row tile (nr <= 16 rows starting at w) × one column group (nc <= 16 columns).
void tile_group(int64_t n, const uint8_t* w, int64_t w_stride, int nr, const uint8_t* group, int nc, float* y,
                int64_t y_stride, GroupState& st) {
  const int64_t nb = n / 32;
  const auto* dx_all = reinterpret_cast<const float*>(group + nb * kBTileBytes);
  st.partials.zero(nr);
  const __m512i row_offsets = lane_offsets(w_stride);  // row m at m · w_stride
  const __mmask16 row_mask = static_cast<__mmask16>((1u << nr) - 1u);
  auto scale_block = [&](int64_t b) {
    // d_w of the nr rows (a 4-byte gather at each block start stays inside the block).
    const __m512i dbits = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), row_mask, row_offsets, w + b * kWBytes, 1);
    alignas(64) float dw[kTileRows];
    _mm512_store_ps(dw, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dbits)));
    const __m512 dx = _mm512_load_ps(dx_all + b * kGroupCols);
    const int32_t(*dots)[16] = st.dots[b & 3];
    __m512* part = &st.partials.p[0][b & 31];
    for (int m = 0; m < nr; ++m) {
      const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(dw[m]), dx);
      const __m512 v = _mm512_mul_ps(scale, _mm512_cvtepi32_ps(_mm512_load_si512(dots[m])));
      part[m * 32] = _mm512_add_ps(part[m * 32], v);
    }
  };
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* a = w + b * kWBytes + 2;
    const uint8_t* bt = group + b * kBTileBytes;
    block_dots(static_cast<int>(b & 3), a, w_stride, bt, &st.dots[b & 3][0][0]);
    if (b >= 2) scale_block(b - 2);
  }
  for (int64_t b = std::max<int64_t>(0, nb - 2); b < nb; ++b) scale_block(b);
  st.partials.finish(nr, nc, y, y_stride);
}

}  // namespace

int64_t q8_0_amx_group_bytes(int64_t n) { return n / 32 * (kBTileBytes + kDxBytes); }

// Columns beyond nc are zero (their dots are computed and dropped).
void q8_0_amx_pack_group(const uint8_t* act, int64_t act_stride, int64_t n, int nc, uint8_t* out) {
  const int64_t nb = n / 32;
  auto* dx = reinterpret_cast<float*>(out + nb * kBTileBytes);
  std::memset(out, 0, static_cast<size_t>(q8_0_amx_group_bytes(n)));
  for (int col = 0; col < nc; ++col) {
    const auto* blocks = reinterpret_cast<const BlockQ8_0Act*>(act + col * act_stride);
    for (int64_t b = 0; b < nb; ++b) {
      BlockQ8_0Act blk;
      std::memcpy(&blk, blocks + b, sizeof(blk));
      for (int kk = 0; kk < 8; ++kk) std::memcpy(out + b * kBTileBytes + kk * 64 + col * 4, blk.qs + 4 * kk, 4);
      dx[b * kGroupCols + col] = blk.d;
    }
  }
}

void q8_0_amx_matmul(int64_t n, const void* w, int64_t w_stride, int64_t rows, const uint8_t* packed, int64_t cols,
                     float* y, int64_t y_stride) {
  GroupState st;  // 36 KiB of partials and dots, on the calling thread's stack
  for_each_amx_tile(w, w_stride, rows, packed, q8_0_amx_group_bytes(n), cols, y, y_stride, configure_tiles,
                    [&](const uint8_t* wr, int nr, const uint8_t* group, int nc, float* yt) {
                      tile_group(n, wr, w_stride, nr, group, nc, yt, y_stride, st);
                    });
}

}  // namespace dsv4::cpu
