// backend/cpu/matmul.h — matrix × vector and matrix × matrix for every type, on the thread pool.
//
//   W: `rows` rows of n elements of `type` (row r starts at w + r * tensor_row_bytes(type, n)).
//   X: `cols` activation columns of n floats (column c at x + c * n).
//   Y: `cols` output columns of `rows` floats (Y[c * rows + r] = dot(W row r, X column c)).
//
// Each output element is exactly one vec_dot of the type at the chosen SIMD level, so matmul with
// any number of columns gives the same bits as matvec per column, at any thread count and any SIMD
// level (the vec_dot contract, quant.h). Activations are quantized once per column (in parallel,
// each column by one thread) into the type's ActFormat.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/quant.h"
#include "base/status.h"
#include "base/thread_pool.h"

namespace dsv4::cpu {

namespace detail {
// How matmul runs one product (matmul.cpp): the kernels chosen for its type, level and column count.
struct RowKernel {
  VecDotFn dot;
  VecDotRowsFn dot_rows;  // null: vec_dot row by row
  // Non-null: dot_rows reads activations rewritten by `prepare` (prep_bytes per column, 64-aligned).
  void (*prepare)(const void* act, int64_t n, void* out);
  int64_t prep_bytes;
  VecDotTileFn tile = nullptr;  // non-null (cols > 1): rows x columns per call
  int tile_rows = 4;            // rows per tile call
  int tile_cols = kMaxTileCols;  // columns per tile call (at most kMaxTileColsAny)
  const AmxKernels* amx = nullptr;  // non-null: AMX tiles over packed column groups instead of all the above
};

// matmul_batch's plan of one job (kept in CpuContext so that a batch allocates nothing once warm).
struct BatchPrepared {
  const TypeKernels* k = nullptr;
  RowKernel rk{};
  int64_t w_row_bytes = 0, a_row_bytes = 0, act_offset = -1, row_begin = 0, y_stride = 0;
  bool quantize = false;     // owns its activation (false: shares an earlier job's, or F32 reads x directly)
  int64_t prep_offset = -1;  // rk.prepare: its prepared columns in prep_scratch
  bool prepare = false;      // owns them (false: shares an earlier job's)
  int64_t amx_offset = -1;   // rk.amx: its packed column groups in prep_scratch
  bool amx_pack = false;     // owns them
};
}  // namespace detail

// Scratch buffers only grow: once a call of the largest shape has run, matmul and matmul_batch
// allocate nothing (the backend's steady state is heap-free).
struct CpuContext {
  ThreadPool* pool = nullptr;                   // required
  SimdLevel max_level = detected_simd_level();  // kernels above this level are not used
  bool use_amx = false;  // AMX tile kernels for matrix x matrix (set only when amx_int8_usable())
  std::vector<uint8_t> act_scratch;             // reused quantized-activation buffer
  std::vector<uint8_t> prep_scratch;            // reused prepared-activation buffer (quant.h prepare_act)
  std::vector<detail::BatchPrepared> batch_prep;  // reused matmul_batch plan
};

// Whether matmul runs `cols` columns of type k on AMX tiles (ctx.use_amx, AVX-512, a type with an AMX
// kernel, at least kAmxMinCols columns, and the CPU/OS allow it).
bool uses_amx(const CpuContext& ctx, const TypeKernels& k, int64_t cols);

// Errors: a type without kernels, n not a multiple of its block size, negative sizes.
Status matmul(CpuContext& ctx, TensorType type, const void* w, int64_t rows, int64_t n, const float* x, int64_t cols,
              float* y);

// Same as matmul on already-quantized activations (`act` holds `cols` rows of act_row_bytes each);
// used by callers that reuse one quantized activation for several matrices (e.g. gate and up).
Status matmul_quantized(CpuContext& ctx, const TypeKernels& k, const void* w, int64_t rows, int64_t n,
                        const uint8_t* act, int64_t cols, float* y);

// One product of a batch: y[c * y_stride + r] = dot(W row r, x column c), column c at x + c * x_stride.
struct MatmulJob {
  TensorType type = TensorType::kF32;
  const void* w = nullptr;  // rows rows of n elements of `type`
  int64_t rows = 0, n = 0;
  const float* x = nullptr;
  int64_t cols = 0;
  float* y = nullptr;
  int64_t x_stride = 0;  // floats between columns of x; 0 = n
  int64_t y_stride = 0;  // floats between columns of y; 0 = rows
};

// Every job as matmul would compute it (same bits), in one pass over the pool: the jobs' rows are
// concatenated and handed to the threads in chunks (matmul.cpp), so many small matrices (experts, output
// groups, projections sharing an input) cost one dispatch instead of one each. Jobs whose x, n,
// x_stride, cols and activation format agree share one quantized activation. No job's y may
// overlap any job's x.
Status matmul_batch(CpuContext& ctx, std::span<const MatmulJob> jobs);

// Quantizes `cols` columns of n floats into the front of `out` (grown when too small, never shrunk) in
// the type's activation format.
void quantize_activations(CpuContext& ctx, const TypeKernels& k, const float* x, int64_t n, int64_t cols,
                          std::vector<uint8_t>& out);

}  // namespace dsv4::cpu
