// backend/cpu/amx_tiles.h — AMX tile configuration shared by the *_amx.cpp kernels (compiled with
// -mamx-tile; called only where base/cpu_features.h amx_int8_usable()).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace dsv4::cpu {

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

}  // namespace dsv4::cpu
