// backend/cpu/quant.h — the per-type kernel table every CPU kernel and tool goes through.
//
// For each tensor type dsv4 computes with, one TypeKernels entry gives:
//   dequantize_row  blocks -> f32 (bit-identical to ggml's reference / llama.cpp's gguf numpy code)
//   quantize_row    f32 -> blocks, the reference quantizer (error-minimising for the K/IQ/FPx types,
//                   optionally weighted by an importance vector of n floats)
//   quantize_act    f32 activations -> the activation format vec_dot consumes (ActFormat)
//   vec_dot[level]  dot of one weight row with one quantized activation row, per SimdLevel.
//
// Determinism contract (every type, every SIMD level, and later CUDA): vec_dot returns exactly the
// same float bits as the scalar reference. Each type defines ONE accumulation order, written at its
// definition; the common pattern is the "32 interleaved partials" of numerics/accumulate.h: the exact
// integer dot of block b is scaled (fixed float op sequence, no contraction) and added into partial[b % 32],
// blocks in increasing order; then reduce_partials32's fixed pairwise tree. A warp reproduces it
// with lane = b % 32 and shuffle-down offsets 16, 8, 4, 2, 1.
//
// Thread-count independence is by construction: a vec_dot is one output element, computed by one
// thread, and matmul.h never splits a dot across threads.
#pragma once

#include <cstdint>
#include <span>

#include "base/cpu_features.h"
#include "base/tensor_type.h"
#include "numerics/blocks.h"  // BlockQ8_0Act, BlockQ8_K

namespace dsv4::cpu {

// Activation formats that vec_dot kernels consume.
enum class ActFormat {
  kF32,   // plain float (F32/F16/BF16 weights)
  kQ8_0,  // BlockQ8_0Act (numerics/blocks.h) per 32 values
  kQ8_K,  // BlockQ8_K (numerics/blocks.h) per 256 values
};

using DequantizeRowFn = void (*)(const void* src, float* dst, int64_t n);
// importance: nullptr or n non-negative weights for the squared error of each element.
using QuantizeRowFn = void (*)(const float* src, void* dst, int64_t n, const float* importance);
using QuantizeActFn = void (*)(const float* src, void* dst, int64_t n);
// n elements (a multiple of the type's block size); w: one weight row; act: one activation row in
// the type's ActFormat. Returns the dot product.
using VecDotFn = float (*)(int64_t n, const void* w, const void* act);
// Dots of nr (1..4) consecutive weight rows (row i at w + i * w_stride bytes) with one activation
// row: out[i] must equal vec_dot(n, w + i * w_stride, act) bit for bit. Lets a kernel load and
// expand each activation block once for several rows.
using VecDotRowsFn = void (*)(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out);
// nr (1..4, or the type's tile_rows) rows x nc (1..kMaxTileCols) activation columns (column c at
// act + c * act_stride bytes; the prepared form when the type has prepare_act): out[c * out_stride + i] must equal the dot of row
// i and column c bit for bit. Lets a kernel expand each weight block once for several columns (matmul).
// The activations are as quantize_act writes them: Q8_0 quants in [-127, 127] (the AVX2 Q8_0 and MXFP4
// tiles negate them with vpsignb; vec_dot and vec_dot_rows also take -128).
using VecDotTileFn = void (*)(int64_t n, const void* w, int64_t w_stride, const void* act, int64_t act_stride,
                              int nr, int nc, float* out, int64_t out_stride);
// 8: 16 (one decode per ~12-token MoE expert of a 512-token prefill chunk) measured no faster in the
// model and slower for IQ2_XXS at 64/512 columns (its prepared activations for 16 columns outgrow L1).
constexpr int kMaxTileCols = 8;
// A type's tile may take more columns per call (TypeKernels::tile_cols), at most this many: the AVX2
// IQ2_XXS tile, whose weight decode costs about as much as 8 columns' dots, takes 16.
constexpr int kMaxTileColsAny = 16;
constexpr int kMaxTileRows = 16;  // TypeKernels::tile_rows

// Optional matrix x matrix on AMX int8 tiles (CpuContext::use_amx, set only where
// base/cpu_features.h amx_int8_usable()): out[c * y_stride + r] equals vec_dot of row r and column c
// bit for bit. Activation columns are packed in groups of kAmxGroupCols (group_bytes(n) each, 64-byte
// aligned; the last group zero-padded) by pack_group; matmul does `rows` weight rows against every group.
constexpr int kAmxGroupCols = 16;
// Fewer columns stay on the vector kernels: a 16-column tile costs the same for 1 or 16 columns
// (measured on Sapphire Rapids, one thread: AMX equals the vector kernels at 4 columns for Q8_0
// 4096x4096 and Q2_K 4096x2048, and is 2.6x / 2.9x faster at 16).
constexpr int64_t kAmxMinCols = 4;
struct AmxKernels {
  int64_t (*group_bytes)(int64_t n) = nullptr;
  void (*pack_group)(const uint8_t* act, int64_t act_stride, int64_t n, int nc, uint8_t* out) = nullptr;
  void (*matmul)(int64_t n, const void* w, int64_t w_stride, int64_t rows, const uint8_t* packed, int64_t cols,
                 float* y, int64_t y_stride) = nullptr;
};

struct TypeKernels {
  TensorType type = TensorType::kF32;
  ActFormat act = ActFormat::kF32;
  DequantizeRowFn dequantize_row = nullptr;
  QuantizeRowFn quantize_row = nullptr;
  // Indexed by SimdLevel (scalar, avx2, avx512, avx512vbmi). vec_dot[0] (scalar) is always set and
  // is the reference; a null entry at a higher level means "use the next lower level" (for every
  // per-level array below: the level is effective_simd_level's).
  VecDotFn vec_dot[kSimdLevelCount] = {};
  // Optional multi-row form, per SimdLevel; null = matmul calls vec_dot row by row.
  VecDotRowsFn vec_dot_rows[kSimdLevelCount] = {};
  // Whether matrix×vector (one column) should use vec_dot_rows too. Some multi-row kernels only
  // pay off when activations are reused across columns and stream DRAM slower than the
  // single-row kernel (measured: Q8_0 AVX-512 86% → 43% of bandwidth). Never changes bits.
  bool rows_for_matvec = true;
  // Optional, per SimdLevel (null = none): prepare_act rewrites one quantized activation row of n
  // elements into prepared_act_bytes(n) bytes (64-byte aligned destination) that
  // vec_dot_rows_prepared reads instead of the activation, so a matmul does the activation-side
  // work of the multi-row kernel once per column rather than once per group of rows. The results
  // equal vec_dot_rows' bit for bit.
  int64_t (*prepared_act_bytes)(int64_t n) = nullptr;
  void (*prepare_act[kSimdLevelCount])(const void* act, int64_t n, void* out) = {};
  VecDotRowsFn vec_dot_rows_prepared[kSimdLevelCount] = {};
  // Optional, per SimdLevel: the tile form (on prepared activations when prepare_act is set), used by
  // matmul when cols > 1.
  VecDotTileFn vec_dot_tile[kSimdLevelCount] = {};
  // Rows one vec_dot_tile call takes at that level (nr 1..tile_rows); 0 means 4. At most kMaxTileRows.
  int tile_rows[kSimdLevelCount] = {};
  // Columns one vec_dot_tile call takes at that level (nc 1..tile_cols); 0 means kMaxTileCols. At most
  // kMaxTileColsAny.
  int tile_cols[kSimdLevelCount] = {};
  AmxKernels amx = {};  // optional (AVX-512 levels only)
};

// nullptr for types without kernels (sizes-only types such as Q4_0, and I32 which has no dot).
const TypeKernels* type_kernels(TensorType type);
// Every registered entry (for tests and bench).
std::span<const TypeKernels* const> all_type_kernels();

// The vec_dot to use at `max_level` (falls back to lower levels), never null.
VecDotFn select_vec_dot(const TypeKernels& k, SimdLevel max_level);
// The multi-row kernel exactly at the level select_vec_dot picks, or null.
VecDotRowsFn select_vec_dot_rows(const TypeKernels& k, SimdLevel max_level);
// The highest level that actually has its own kernel for this type, at most max_level.
SimdLevel effective_simd_level(const TypeKernels& k, SimdLevel max_level);

// Bytes of one activation row of n elements in `format` (n a multiple of its block size).
int64_t act_row_bytes(ActFormat format, int64_t n);
// Quantizes one f32 activation row into `format` (for kF32 a plain copy), with the highest SIMD form
// (act_quant.h) that both max_level and the CPU allow — every form writes the scalar reference's bytes;
// the result is what every SIMD vec_dot consumes. Without max_level: the CPU's level.
void quantize_act_row(ActFormat format, const float* src, void* dst, int64_t n, SimdLevel max_level);
void quantize_act_row(ActFormat format, const float* src, void* dst, int64_t n);

// Family registration hooks (each family's .cpp defines its function; type_kernels.cpp collects).
std::span<const TypeKernels> float_type_kernels();  // F32, F16, BF16
std::span<const TypeKernels> q8_0_type_kernels();   // Q8_0
std::span<const TypeKernels> k_quant_type_kernels();  // Q2_K, Q4_K
std::span<const TypeKernels> iq2_xxs_type_kernels();  // IQ2_XXS
std::span<const TypeKernels> mxfp4_type_kernels();    // MXFP4
std::span<const TypeKernels> rocmfpx_type_kernels();  // ids 100-107

// Activation quantizers (act_quant.cpp).
void quantize_act_q8_0(const float* src, void* dst, int64_t n);  // n % 32 == 0
void quantize_act_q8_k(const float* src, void* dst, int64_t n);  // n % 256 == 0

}  // namespace dsv4::cpu
