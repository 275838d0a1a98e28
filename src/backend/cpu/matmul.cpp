// backend/cpu/matmul.cpp — tiling and threading around vec_dot.
//
// Rows are split statically over the pool's threads. Inside a thread, rows go in tiles of kRowTile
// and columns in chunks of kColChunk so that a tile of weight rows stays in L1/L2 while it meets
// every column of the chunk, and a chunk of quantized activations stays in L2. The order in which
// output elements are produced changes nothing numerically: each is one independent vec_dot.
#include "backend/cpu/matmul.h"

#include <algorithm>
#include <string>

namespace dsv4::cpu {
namespace {

constexpr int64_t kRowTile = 8;
constexpr int64_t kColChunk = 16;

Status check_shape(const TypeKernels* k, TensorType type, int64_t rows, int64_t n, int64_t cols) {
  if (k == nullptr) return unsupported("matmul: no CPU kernels for type " + std::string(tensor_type_name(type)));
  if (rows < 0 || n <= 0 || cols < 0) return invalid_argument("matmul: bad sizes");
  if (tensor_row_bytes(type, n) < 0)
    return invalid_argument("matmul: row length " + std::to_string(n) + " is not a multiple of the " +
                            std::string(tensor_type_name(type)) + " block size");
  const int64_t act_block = k->act == ActFormat::kQ8_K ? 256 : k->act == ActFormat::kQ8_0 ? 32 : 1;
  if (n % act_block != 0) return invalid_argument("matmul: row length not a multiple of the activation block");
  return ok_status();
}

}  // namespace

void quantize_activations(CpuContext& ctx, const TypeKernels& k, const float* x, int64_t n, int64_t cols,
                          std::vector<uint8_t>& out) {
  const int64_t row_bytes = act_row_bytes(k.act, n);
  out.resize(static_cast<size_t>(row_bytes * cols));
  uint8_t* dst = out.data();
  auto work = [&](int64_t c0, int64_t c1, int) {
    for (int64_t c = c0; c < c1; ++c) quantize_act_row(k.act, x + c * n, dst + c * row_bytes, n);
  };
  if (cols == 1 || k.act == ActFormat::kF32) {
    work(0, cols, 0);
  } else {
    ctx.pool->parallel_for(cols, work);
  }
}

Status matmul_quantized(CpuContext& ctx, const TypeKernels& k, const void* w, int64_t rows, int64_t n,
                        const uint8_t* act, int64_t cols, float* y) {
  DSV4_RETURN_IF_ERROR(check_shape(&k, k.type, rows, n, cols));
  const VecDotFn dot = select_vec_dot(k, ctx.max_level);
  const VecDotRowsFn dot_rows = cols > 1 || k.rows_for_matvec ? select_vec_dot_rows(k, ctx.max_level) : nullptr;
  const int64_t w_row_bytes = tensor_row_bytes(k.type, n);
  const int64_t a_row_bytes = act_row_bytes(k.act, n);
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  ctx.pool->parallel_for(rows, [&](int64_t r0, int64_t r1, int) {
    for (int64_t rt = r0; rt < r1; rt += kRowTile) {
      const int64_t rt_end = std::min(r1, rt + kRowTile);
      for (int64_t c0 = 0; c0 < cols; c0 += kColChunk) {
        const int64_t c_end = std::min(cols, c0 + kColChunk);
        if (dot_rows != nullptr) {
          for (int64_t c = c0; c < c_end; ++c) {
            for (int64_t r = rt; r < rt_end; r += 4) {
              const int nr = static_cast<int>(std::min<int64_t>(4, rt_end - r));
              float out[4];
              dot_rows(n, wb + r * w_row_bytes, w_row_bytes, act + c * a_row_bytes, nr, out);
              for (int i = 0; i < nr; ++i) y[c * rows + r + i] = out[i];
            }
          }
          continue;
        }
        for (int64_t r = rt; r < rt_end; ++r) {
          const uint8_t* wr = wb + r * w_row_bytes;
          for (int64_t c = c0; c < c_end; ++c) y[c * rows + r] = dot(n, wr, act + c * a_row_bytes);
        }
      }
    }
  });
  return ok_status();
}

Status matmul(CpuContext& ctx, TensorType type, const void* w, int64_t rows, int64_t n, const float* x, int64_t cols,
              float* y) {
  const TypeKernels* k = type_kernels(type);
  DSV4_RETURN_IF_ERROR(check_shape(k, type, rows, n, cols));
  if (k->act == ActFormat::kF32) return matmul_quantized(ctx, *k, w, rows, n, reinterpret_cast<const uint8_t*>(x), cols, y);
  quantize_activations(ctx, *k, x, n, cols, ctx.act_scratch);
  return matmul_quantized(ctx, *k, w, rows, n, ctx.act_scratch.data(), cols, y);
}

}  // namespace dsv4::cpu
