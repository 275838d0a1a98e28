// backend/cpu/matmul.cpp — tiling and threading around vec_dot.
//
// Rows go to the pool's threads in chunks of row_grain() rows, each taken by whichever thread is free
// (ThreadPool::parallel_for_chunks): on a shared machine a thread held back by a neighbour no longer
// leaves the other waiting with a static half done, and jobs of a batch whose rows cost differently
// (IQ2_XXS experts beside a Q8_0 shared expert) balance. Inside a chunk, rows go in tiles of kRowTile
// (or the tile kernel's rows, if more) and columns in chunks of kColChunk so that a tile of weight
// rows stays in L1/L2 while it meets every column of the chunk, and a chunk of quantized activations
// stays in L2. The order in which output elements are produced changes nothing numerically: each is
// one independent vec_dot.
#include "backend/cpu/matmul.h"

#include <algorithm>
#include <string>

namespace dsv4::cpu {
namespace {

constexpr int64_t kRowTile = 8;
constexpr int64_t kColChunk = 16;
// Chunks of the row loop: about kChunksPerThread per thread, a multiple of kRowGrain rows (whole row
// tiles of every kernel: 4, 8, 12 and 16 rows).
constexpr int64_t kChunksPerThread = 16;
constexpr int64_t kRowGrain = 48;

int64_t row_grain(const CpuContext& ctx, int64_t rows) { return ctx.pool->chunk_grain(rows, kChunksPerThread, kRowGrain); }

// Grows buf to at least n bytes (never shrinks: no re-zeroing, no reallocation once warm).
void grow(std::vector<uint8_t>& buf, int64_t n) {
  if (buf.size() < static_cast<size_t>(n)) buf.resize(static_cast<size_t>(n));
}

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
  grow(out, row_bytes * cols);
  uint8_t* dst = out.data();
  auto work = [&](int64_t c0, int64_t c1, int) {
    for (int64_t c = c0; c < c1; ++c) quantize_act_row(k.act, x + c * n, dst + c * row_bytes, n, ctx.max_level);
  };
  if (cols == 1 || k.act == ActFormat::kF32) {
    work(0, cols, 0);
  } else {
    ctx.pool->parallel_for(cols, work);
  }
}

bool uses_amx(const CpuContext& ctx, const TypeKernels& k, int64_t cols) {
  // amx_int8_usable() also holds the OS permission: without it the first tile instruction faults.
  return ctx.use_amx && has_avx512(ctx.max_level) && k.amx.matmul != nullptr && cols >= kAmxMinCols &&
         amx_int8_usable();
}

namespace {

using detail::RowKernel;

RowKernel row_kernel(const CpuContext& ctx, const TypeKernels& k, int64_t n, int64_t cols) {
  RowKernel rk{select_vec_dot(k, ctx.max_level),
               cols > 1 || k.rows_for_matvec ? select_vec_dot_rows(k, ctx.max_level) : nullptr, nullptr, 0};
  const int level = static_cast<int>(effective_simd_level(k, ctx.max_level));
  if (rk.dot_rows != nullptr && k.prepare_act[level] != nullptr && k.vec_dot_rows_prepared[level] != nullptr) {
    rk.dot_rows = k.vec_dot_rows_prepared[level];
    rk.prepare = k.prepare_act[level];
    rk.prep_bytes = (k.prepared_act_bytes(n) + 63) / 64 * 64;
  }
  if (cols > 1 && (rk.prepare != nullptr || k.prepare_act[level] == nullptr)) {
    rk.tile = k.vec_dot_tile[level];
    if (k.tile_rows[level] > 0) rk.tile_rows = k.tile_rows[level];
    if (k.tile_cols[level] > 0) rk.tile_cols = k.tile_cols[level];
  }
  if (uses_amx(ctx, k, cols)) rk.amx = &k.amx;
  return rk;
}

int64_t amx_groups(int64_t cols) { return (cols + kAmxGroupCols - 1) / kAmxGroupCols; }

// Column group g of `cols` activation rows (a_row_bytes each) packed into out + g * group_bytes(n).
void pack_amx_group(const AmxKernels& amx, int64_t n, const uint8_t* act, int64_t a_row_bytes, int64_t cols, int64_t g,
                    uint8_t* out) {
  const int nc = static_cast<int>(std::min<int64_t>(kAmxGroupCols, cols - g * kAmxGroupCols));
  amx.pack_group(act + g * kAmxGroupCols * a_row_bytes, a_row_bytes, n, nc, out + g * amx.group_bytes(n));
}

// A 64-byte aligned region of `bytes` in `buf` (grown when too small).
uint8_t* aligned_scratch(std::vector<uint8_t>& buf, int64_t bytes) {
  grow(buf, bytes + 64);
  const auto addr = reinterpret_cast<uintptr_t>(buf.data());
  return buf.data() + ((64 - addr % 64) % 64);
}

// Rows [r0, r1) of one product against every column: rows in tiles of kRowTile, columns in chunks
// of kColChunk (the order changes no bits: each element is one independent vec_dot).
void run_rows(const RowKernel& rk, const uint8_t* wb, int64_t w_row_bytes, int64_t n, const uint8_t* act,
              int64_t a_row_bytes, int64_t cols, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  const int64_t row_tile = std::max<int64_t>(kRowTile, rk.tile_rows);
  for (int64_t rt = r0; rt < r1; rt += row_tile) {
    const int64_t rt_end = std::min(r1, rt + row_tile);
    for (int64_t c0 = 0; c0 < cols; c0 += kColChunk) {
      const int64_t c_end = std::min(cols, c0 + kColChunk);
      if (rk.tile != nullptr) {
        for (int64_t c = c0; c < c_end; c += rk.tile_cols) {
          const int nc = static_cast<int>(std::min<int64_t>(rk.tile_cols, c_end - c));
          for (int64_t r = rt; r < rt_end; r += rk.tile_rows) {
            const int nr = static_cast<int>(std::min<int64_t>(rk.tile_rows, rt_end - r));
            rk.tile(n, wb + r * w_row_bytes, w_row_bytes, act + c * a_row_bytes, a_row_bytes, nr, nc, y + c * y_stride + r,
                    y_stride);
          }
        }
        continue;
      }
      if (rk.dot_rows != nullptr) {
        for (int64_t c = c0; c < c_end; ++c) {
          for (int64_t r = rt; r < rt_end; r += 4) {
            const int nr = static_cast<int>(std::min<int64_t>(4, rt_end - r));
            float out[4];
            rk.dot_rows(n, wb + r * w_row_bytes, w_row_bytes, act + c * a_row_bytes, nr, out);
            for (int i = 0; i < nr; ++i) y[c * y_stride + r + i] = out[i];
          }
        }
        continue;
      }
      for (int64_t r = rt; r < rt_end; ++r) {
        const uint8_t* wr = wb + r * w_row_bytes;
        for (int64_t c = c0; c < c_end; ++c) y[c * y_stride + r] = rk.dot(n, wr, act + c * a_row_bytes);
      }
    }
  }
}

}  // namespace

Status matmul_quantized(CpuContext& ctx, const TypeKernels& k, const void* w, int64_t rows, int64_t n,
                        const uint8_t* act, int64_t cols, float* y) {
  DSV4_RETURN_IF_ERROR(check_shape(&k, k.type, rows, n, cols));
  const RowKernel rk = row_kernel(ctx, k, n, cols);
  const int64_t w_row_bytes = tensor_row_bytes(k.type, n);
  int64_t a_row_bytes = act_row_bytes(k.act, n);
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  if (rk.amx != nullptr) {
    const AmxKernels& amx = *rk.amx;
    uint8_t* packed = aligned_scratch(ctx.prep_scratch, amx.group_bytes(n) * amx_groups(cols));
    ctx.pool->parallel_for(amx_groups(cols), [&](int64_t g0, int64_t g1, int) {
      for (int64_t g = g0; g < g1; ++g) pack_amx_group(amx, n, act, a_row_bytes, cols, g, packed);
    });
    ctx.pool->parallel_for(rows, [&](int64_t r0, int64_t r1, int) {
      amx.matmul(n, wb + r0 * w_row_bytes, w_row_bytes, r1 - r0, packed, cols, y + r0, rows);
    });
    return ok_status();
  }
  if (rk.prepare != nullptr) {
    uint8_t* prep = aligned_scratch(ctx.prep_scratch, rk.prep_bytes * cols);
    auto work = [&](int64_t c0, int64_t c1, int) {
      for (int64_t c = c0; c < c1; ++c) rk.prepare(act + c * a_row_bytes, n, prep + c * rk.prep_bytes);
    };
    if (cols == 1) {
      work(0, 1, 0);
    } else {
      ctx.pool->parallel_for(cols, work);
    }
    act = prep;
    a_row_bytes = rk.prep_bytes;
  }
  ctx.pool->parallel_for_chunks(rows, row_grain(ctx, rows), [&](int64_t r0, int64_t r1, int) {
    run_rows(rk, wb, w_row_bytes, n, act, a_row_bytes, cols, y, rows, r0, r1);
  });
  return ok_status();
}

Status matmul_batch(CpuContext& ctx, std::span<const MatmulJob> jobs) {
  using Prepared = detail::BatchPrepared;
  if (ctx.batch_prep.size() < jobs.size()) ctx.batch_prep.resize(jobs.size());
  Prepared* prep = ctx.batch_prep.data();
  int64_t act_bytes = 0, total_rows = 0, total_cols = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const MatmulJob& job = jobs[j];
    const TypeKernels* k = type_kernels(job.type);
    DSV4_RETURN_IF_ERROR(check_shape(k, job.type, job.rows, job.n, job.cols));
    const int64_t xs = job.x_stride != 0 ? job.x_stride : job.n;
    Prepared& p = prep[j];
    p = {k, row_kernel(ctx, *k, job.n, job.cols), tensor_row_bytes(job.type, job.n), act_row_bytes(k->act, job.n), -1,
         total_rows, job.y_stride != 0 ? job.y_stride : job.rows, false};
    total_rows += job.rows;
    if (k->act == ActFormat::kF32) {  // vec_dot reads the f32 columns in place
      p.a_row_bytes = xs * static_cast<int64_t>(sizeof(float));
      continue;
    }
    for (size_t i = 0; i < j && p.act_offset < 0; ++i) {
      const MatmulJob& o = jobs[i];
      if (prep[i].k->act == k->act && o.x == job.x && o.n == job.n && o.cols == job.cols &&
          (o.x_stride != 0 ? o.x_stride : o.n) == xs)
        p.act_offset = prep[i].act_offset;
    }
    if (p.act_offset >= 0) continue;
    p.act_offset = act_bytes;
    p.quantize = true;
    act_bytes += p.a_row_bytes * job.cols;
    total_cols += job.cols;
  }
  if (total_rows == 0) return ok_status();
  grow(ctx.act_scratch, act_bytes);
  uint8_t* act = ctx.act_scratch.data();
  // Quantize every distinct activation column (column i of the concatenation), one thread each.
  auto quantize = [&](int64_t c0, int64_t c1, int) {
    int64_t base = 0;
    for (size_t j = 0; j < jobs.size() && c0 < c1; ++j) {
      if (!prep[j].quantize) continue;
      const MatmulJob& job = jobs[j];
      const int64_t xs = job.x_stride != 0 ? job.x_stride : job.n;
      for (int64_t c = std::max<int64_t>(c0, base) - base; c < std::min(c1 - base, job.cols); ++c)
        quantize_act_row(prep[j].k->act, job.x + c * xs, act + prep[j].act_offset + c * prep[j].a_row_bytes, job.n,
                         ctx.max_level);
      base += job.cols;
    }
  };
  if (total_cols <= 1) {
    quantize(0, total_cols, 0);
  } else if (total_cols > 0) {
    ctx.pool->parallel_for(total_cols, quantize);
  }
  // Prepared activations (quant.h prepare_act), shared by jobs of one kernel on one activation.
  int64_t prep_bytes = 0, prep_cols = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    Prepared& p = prep[j];
    if (p.rk.prepare == nullptr) continue;
    for (size_t i = 0; i < j && p.prep_offset < 0; ++i)
      if (prep[i].rk.prepare == p.rk.prepare && prep[i].act_offset == p.act_offset && prep[i].k->act == p.k->act &&
          jobs[i].n == jobs[j].n)
        p.prep_offset = prep[i].prep_offset;
    if (p.prep_offset >= 0) continue;
    p.prep_offset = prep_bytes;
    p.prepare = true;
    prep_bytes += p.rk.prep_bytes * jobs[j].cols;
    prep_cols += jobs[j].cols;
  }
  // AMX column groups (quant.h AmxKernels), after the prepared columns, shared like them.
  int64_t amx_bytes = 0, amx_tasks = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    Prepared& p = prep[j];
    if (p.rk.amx == nullptr) continue;
    for (size_t i = 0; i < j && p.amx_offset < 0; ++i)
      if (prep[i].rk.amx == p.rk.amx && prep[i].act_offset == p.act_offset && jobs[i].n == jobs[j].n &&
          jobs[i].cols == jobs[j].cols)
        p.amx_offset = prep[i].amx_offset;
    if (p.amx_offset >= 0) continue;
    p.amx_offset = prep_bytes + amx_bytes;
    p.amx_pack = true;
    amx_bytes += p.rk.amx->group_bytes(jobs[j].n) * amx_groups(jobs[j].cols);
    amx_tasks += amx_groups(jobs[j].cols);
  }
  uint8_t* prepared =
      prep_cols > 0 || amx_tasks > 0 ? aligned_scratch(ctx.prep_scratch, prep_bytes + amx_bytes) : nullptr;
  if (amx_tasks > 0) {
    ctx.pool->parallel_for(amx_tasks, [&](int64_t t0, int64_t t1, int) {
      int64_t base = 0;
      for (size_t j = 0; j < jobs.size() && t0 < t1; ++j) {
        const Prepared& p = prep[j];
        if (!p.amx_pack) continue;
        const int64_t groups = amx_groups(jobs[j].cols);
        for (int64_t g = std::max<int64_t>(t0, base) - base; g < std::min(t1 - base, groups); ++g)
          pack_amx_group(*p.rk.amx, jobs[j].n, act + p.act_offset, p.a_row_bytes, jobs[j].cols, g,
                         prepared + p.amx_offset);
        base += groups;
      }
    });
  }
  auto prepare = [&](int64_t c0, int64_t c1, int) {
    int64_t base = 0;
    for (size_t j = 0; j < jobs.size() && c0 < c1; ++j) {
      const Prepared& p = prep[j];
      if (!p.prepare) continue;
      for (int64_t c = std::max<int64_t>(c0, base) - base; c < std::min(c1 - base, jobs[j].cols); ++c)
        p.rk.prepare(act + p.act_offset + c * p.a_row_bytes, jobs[j].n, prepared + p.prep_offset + c * p.rk.prep_bytes);
      base += jobs[j].cols;
    }
  };
  if (prep_cols == 1) {
    prepare(0, 1, 0);
  } else if (prep_cols > 1) {
    ctx.pool->parallel_for(prep_cols, prepare);
  }
  ctx.pool->parallel_for_chunks(total_rows, row_grain(ctx, total_rows), [&](int64_t r0, int64_t r1, int) {
    for (size_t j = 0; j < jobs.size(); ++j) {
      const Prepared& p = prep[j];
      const MatmulJob& job = jobs[j];
      const int64_t b = std::max(r0, p.row_begin) - p.row_begin, e = std::min(r1, p.row_begin + job.rows) - p.row_begin;
      if (b >= e) continue;
      if (p.rk.amx != nullptr) {
        p.rk.amx->matmul(job.n, static_cast<const uint8_t*>(job.w) + b * p.w_row_bytes, p.w_row_bytes, e - b,
                         prepared + p.amx_offset, job.cols, job.y + b, p.y_stride);
        continue;
      }
      const uint8_t* a = p.k->act == ActFormat::kF32 ? reinterpret_cast<const uint8_t*>(job.x)
                         : p.rk.prepare != nullptr  ? prepared + p.prep_offset
                                                    : act + p.act_offset;
      run_rows(p.rk, static_cast<const uint8_t*>(job.w), p.w_row_bytes, job.n, a,
               p.rk.prepare != nullptr ? p.rk.prep_bytes : p.a_row_bytes, job.cols, job.y, p.y_stride, b, e);
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
