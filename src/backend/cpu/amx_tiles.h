// backend/cpu/amx_tiles.h — AMX tile configuration shared by the *_amx.cpp kernels (compiled with
// -mamx-tile; called only where base/cpu_features.h amx_int8_usable()).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "backend/cpu/quant.h"

namespace dsv4::cpu {

constexpr int kAmxTileRows = 16;  // weight rows per tile (the tile's row limit)
constexpr int kAmxTileCols = kAmxGroupCols;  // activation columns per packed group (quant.h)

// ldtilecfg's 64-byte operand, palette 1: tile t has rows[t] rows of colsb[t] bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles 0..7 as {rows, bytes per row}.
inline void load_tile_config(const uint8_t (&rows)[8], const uint16_t (&colsb)[8]) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.rows[t] = rows[t], cfg.colsb[t] = colsb[t];
  _tile_loadconfig(&cfg);
}

// The 32 float partials of every (row, column) of a tile, one zmm per (row, partial) over the group's
// columns: zero them, and finish with the fixed tree (s = 16, 8, 4, 2, 1: Partials32's order per
// element), writing y[col · y_stride + m] for the nr rows and nc valid columns.
struct alignas(64) TilePartials {
  __m512 p[kAmxTileRows][32];
  void zero(int nr) {
    for (int m = 0; m < nr; ++m)
      for (auto& v : p[m]) v = _mm512_setzero_ps();
  }
  void finish(int nr, int nc, float* y, int64_t y_stride) {
    for (int m = 0; m < nr; ++m) {
      __m512* q = p[m];
      for (int s = 16; s >= 1; s >>= 1)
        for (int i = 0; i < s; ++i) q[i] = _mm512_add_ps(q[i], q[i + s]);
      alignas(64) float out[kAmxTileCols];
      _mm512_store_ps(out, q[0]);
      for (int col = 0; col < nc; ++col) y[col * y_stride + m] = out[col];
    }
  }
};

// rows × cols in tiles of 16 rows × 16 columns: configure(nr) whenever a tile's row count differs from
// the last one (only the last tile can), tile_group(weight rows, nr, packed group, nc, y of the tile)
// per tile; the tiles are released at the end.
template <typename Configure, typename TileGroup>
void for_each_amx_tile(const void* w, int64_t w_stride, int64_t rows, const uint8_t* packed, int64_t group_bytes,
                       int64_t cols, float* y, int64_t y_stride, Configure configure, TileGroup tile_group) {
  if (rows <= 0 || cols <= 0) return;
  int configured = 0;
  for (int64_t r = 0; r < rows; r += kAmxTileRows) {
    const int nr = static_cast<int>(std::min<int64_t>(kAmxTileRows, rows - r));
    if (nr != configured) configure(configured = nr);
    const uint8_t* wr = static_cast<const uint8_t*>(w) + r * w_stride;
    for (int64_t c = 0; c < cols; c += kAmxTileCols) {
      const int nc = static_cast<int>(std::min<int64_t>(kAmxTileCols, cols - c));
      tile_group(wr, nr, packed + c / kAmxTileCols * group_bytes, nc, y + c * y_stride + r);
    }
  }
  _tile_release();
}

}  // namespace dsv4::cpu
