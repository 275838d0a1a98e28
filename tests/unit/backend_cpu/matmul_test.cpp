// tests/unit/backend_cpu/matmul_test.cpp — every registered type: matmul == per-element scalar
// vec_dot bit for bit, for any column count, thread count and SIMD level.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "unit/backend_cpu/kernel_test_util.h"

namespace dsv4::cpu {
namespace {

uint32_t bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

TEST(Matmul, BitIdenticalAcrossThreadsColumnsAndSimdLevels) {
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.0f, 1.0f);
  ASSERT_GE(all_type_kernels().size(), 3u);
  for (const TypeKernels* k : all_type_kernels()) {
    const int64_t n = 512, rows = 37;
    const int64_t row_bytes = tensor_row_bytes(k->type, n);
    std::vector<float> wf(static_cast<size_t>(n));
    std::vector<uint8_t> w(static_cast<size_t>(row_bytes * rows));
    for (int64_t r = 0; r < rows; ++r) {
      for (auto& e : wf) e = g(rng);
      k->quantize_row(wf.data(), w.data() + r * row_bytes, n, nullptr);
    }
    const int64_t cols = 19;
    std::vector<float> x(static_cast<size_t>(n * cols));
    for (auto& e : x) e = g(rng);
    // Reference: scalar vec_dot on scalar-quantized activations, element by element.
    std::vector<uint8_t> act(static_cast<size_t>(act_row_bytes(k->act, n) * cols));
    for (int64_t c = 0; c < cols; ++c)
      quantize_act_row(k->act, x.data() + c * n, act.data() + c * act_row_bytes(k->act, n), n);
    std::vector<float> ref(static_cast<size_t>(rows * cols));
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t r = 0; r < rows; ++r)
        ref[static_cast<size_t>(c * rows + r)] =
            k->vec_dot[0](n, w.data() + r * row_bytes, act.data() + c * act_row_bytes(k->act, n));
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      for (int level = 0; level <= static_cast<int>(detected_simd_level()); ++level) {
        CpuContext ctx;
        ctx.pool = &pool;
        ctx.max_level = static_cast<SimdLevel>(level);
        for (int64_t nc : {int64_t{1}, int64_t{2}, cols}) {
          std::vector<float> y(static_cast<size_t>(rows * nc));
          ASSERT_TRUE(matmul(ctx, k->type, w.data(), rows, n, x.data(), nc, y.data()).ok());
          for (int64_t c = 0; c < nc; ++c)
            for (int64_t r = 0; r < rows; ++r)
              ASSERT_EQ(bits(y[static_cast<size_t>(c * rows + r)]), bits(ref[static_cast<size_t>(c * rows + r)]))
                  << tensor_type_name(k->type) << " threads=" << threads << " level=" << level << " cols=" << nc
                  << " r=" << r << " c=" << c;
        }
      }
    }
  }
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

TEST(Matmul, ClearErrors) {
  ThreadPool pool(1);
  CpuContext ctx;
  ctx.pool = &pool;
  float x[64] = {}, y[4] = {};
  uint8_t w[256] = {};
  Status s = matmul(ctx, TensorType::kQ4_0, w, 1, 32, x, 1, y);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("q4_0"), std::string::npos);
  if (type_kernels(TensorType::kQ8_0) != nullptr) {
    s = matmul(ctx, TensorType::kQ8_0, w, 1, 33, x, 1, y);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace dsv4::cpu

namespace dsv4::cpu {
namespace {

// Every registered multi-row kernel against the scalar single-row reference, bit for bit, over
// block counts that leave partial 16-block chunks, and 1-4 rows at a padded stride.
TEST(Matmul, EveryVecDotRowsEqualsScalarVecDot) {
  std::mt19937 rng(23);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (const TypeKernels* k : all_type_kernels()) {
    const int64_t blk = tensor_type_info(k->type).block_elems;
    const int64_t unit = std::max<int64_t>(blk, k->act == ActFormat::kQ8_K ? 256 : k->act == ActFormat::kQ8_0 ? 32 : 1);
    for (int level = 0; level <= static_cast<int>(detected_simd_level()); ++level) {
      VecDotRowsFn rows_fn = k->vec_dot_rows[level];
      if (rows_fn == nullptr) continue;
      for (int64_t units : {1, 2, 5, 16, 17, 33, 48}) {
        const int64_t n = units * unit;
        const int64_t row_bytes = tensor_row_bytes(k->type, n), stride = row_bytes + 64;
        std::vector<uint8_t> w(static_cast<size_t>(stride * 4));
        std::vector<float> v(static_cast<size_t>(n));
        for (int r = 0; r < 4; ++r) {
          for (auto& e : v) e = g(rng);
          k->quantize_row(v.data(), w.data() + r * stride, n, nullptr);
        }
        for (auto& e : v) e = g(rng);
        std::vector<uint8_t> act(static_cast<size_t>(act_row_bytes(k->act, n)));
        quantize_act_row(k->act, v.data(), act.data(), n);
        for (int nr = 1; nr <= 4; ++nr) {
          float out[4] = {};
          rows_fn(n, w.data(), stride, act.data(), nr, out);
          for (int r = 0; r < nr; ++r)
            ASSERT_EQ(bits(out[r]), bits(k->vec_dot[0](n, w.data() + r * stride, act.data())))
                << tensor_type_name(k->type) << " level " << level << " n " << n << " nr " << nr << " row " << r;
        }
      }
    }
  }
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

}  // namespace
}  // namespace dsv4::cpu

namespace dsv4::cpu {
namespace {

uint32_t fbits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

// matmul_batch == matmul job by job, bit for bit: shared and strided inputs, strided outputs, mixed
// types (so mixed activation formats), row ranges split anywhere by any thread count.
TEST(MatmulBatch, SameBitsAsSeparateMatmuls) {
  std::mt19937 rng(17);
  std::normal_distribution<float> g(0.0f, 1.0f);
  struct Mat { TensorType type; int64_t rows, n; std::vector<uint8_t> w; };
  std::vector<Mat> mats;
  for (const TypeKernels* k : all_type_kernels()) {
    for (int64_t rows : {int64_t{5}, int64_t{13}}) {
      Mat m{k->type, rows, 512, {}};
      const int64_t rb = tensor_row_bytes(k->type, m.n);
      m.w.resize(static_cast<size_t>(rb * rows));
      std::vector<float> wf(static_cast<size_t>(m.n));
      for (int64_t r = 0; r < rows; ++r) {
        for (auto& e : wf) e = g(rng);
        k->quantize_row(wf.data(), m.w.data() + r * rb, m.n, nullptr);
      }
      mats.push_back(std::move(m));
    }
  }
  for (int64_t cols : {int64_t{1}, int64_t{3}}) {
    // x: cols columns of 2·512 floats; job j reads half (j % 2) of each column when strided.
    std::vector<float> x(static_cast<size_t>(cols * 1024));
    for (auto& e : x) e = g(rng);
    std::vector<std::vector<float>> ref(mats.size());
    {
      ThreadPool pool(1);
      CpuContext ctx;
      ctx.pool = &pool;
      for (size_t j = 0; j < mats.size(); ++j) {
        const Mat& m = mats[j];
        std::vector<float> xj(static_cast<size_t>(cols * 512));
        for (int64_t c = 0; c < cols; ++c)
          std::copy_n(x.data() + c * 1024 + (j % 2) * 512, 512, xj.data() + c * 512);
        ref[j].resize(static_cast<size_t>(m.rows * cols));
        ASSERT_TRUE(matmul(ctx, m.type, m.w.data(), m.rows, m.n, xj.data(), cols, ref[j].data()).ok());
      }
    }
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      for (int level = 0; level <= static_cast<int>(detected_simd_level()); ++level) {
        CpuContext ctx;
        ctx.pool = &pool;
        ctx.max_level = static_cast<SimdLevel>(level);
        // Outputs interleaved: job j writes rows at y + off_j with column stride = total rows.
        int64_t total = 0;
        std::vector<int64_t> off;
        for (const Mat& m : mats) { off.push_back(total); total += m.rows; }
        std::vector<float> y(static_cast<size_t>(total * cols), -1.0f);
        std::vector<MatmulJob> jobs;
        for (size_t j = 0; j < mats.size(); ++j) {
          const Mat& m = mats[j];
          jobs.push_back({m.type, m.w.data(), m.rows, m.n, x.data() + (j % 2) * 512, cols, y.data() + off[j], 1024,
                          total});
        }
        ASSERT_TRUE(matmul_batch(ctx, jobs).ok());
        for (size_t j = 0; j < mats.size(); ++j)
          for (int64_t c = 0; c < cols; ++c)
            for (int64_t r = 0; r < mats[j].rows; ++r)
              ASSERT_EQ(fbits(y[static_cast<size_t>(c * total + off[j] + r)]),
                        fbits(ref[j][static_cast<size_t>(c * mats[j].rows + r)]))
                  << tensor_type_name(mats[j].type) << " threads=" << threads << " level=" << level << " cols=" << cols;
      }
    }
  }
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

}  // namespace
}  // namespace dsv4::cpu

namespace dsv4::cpu {
namespace {

// Types with a prepared-activation kernel, on rows spanning more than one 16-block chunk (the last
// one partial): matmul == scalar vec_dot bit for bit at every level and thread count.
// A random rows x n matrix of type k and `cols` activation columns (as floats and quantized), and a
// check that matmul over the first nc columns gives the scalar vec_dot's bits element by element.
struct RandomProblem {
  RandomProblem(const TypeKernels& kernels, int64_t n_, int64_t rows_, int64_t cols_, std::mt19937& rng)
      : k(kernels), n(n_), rows(rows_), cols(cols_), rb(tensor_row_bytes(k.type, n)), ab(act_row_bytes(k.act, n)) {
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> wf(static_cast<size_t>(n));
    w.resize(static_cast<size_t>(rb * rows));
    x.resize(static_cast<size_t>(n * cols));
    act.resize(static_cast<size_t>(ab * cols));
    for (int64_t r = 0; r < rows; ++r) {
      for (auto& e : wf) e = g(rng);
      k.quantize_row(wf.data(), w.data() + r * rb, n, nullptr);
    }
    for (auto& e : x) e = g(rng);
    for (int64_t c = 0; c < cols; ++c) quantize_act_row(k.act, x.data() + c * n, act.data() + c * ab, n);
  }
  void expect_matmul_matches_scalar(CpuContext& ctx, int64_t nc, const std::string& what) const {
    std::vector<float> y(static_cast<size_t>(rows * nc));
    ASSERT_TRUE(matmul(ctx, k.type, w.data(), rows, n, x.data(), nc, y.data()).ok());
    for (int64_t c = 0; c < nc; ++c)
      for (int64_t r = 0; r < rows; ++r)
        ASSERT_EQ(fbits(y[static_cast<size_t>(c * rows + r)]), fbits(k.vec_dot[0](n, w.data() + r * rb, act.data() + c * ab)))
            << tensor_type_name(k.type) << " n=" << n << " cols=" << nc << " r=" << r << " c=" << c << " " << what;
  }
  const TypeKernels& k;
  int64_t n, rows, cols, rb, ab;
  std::vector<uint8_t> w, act;
  std::vector<float> x;
};

// Tile kernels (several rows x several columns per call), at every SIMD level: short last chunks with
// odd and even block counts, and column counts that leave a partial tile.
TEST(Matmul, TileKernelsMatchScalar) {
  std::mt19937 rng(29);
  int tested = 0;
  for (const TypeKernels* k : all_type_kernels()) {
    const auto no_tile = [](VecDotTileFn f) { return f == nullptr; };
    if (std::all_of(std::begin(k->vec_dot_tile), std::end(k->vec_dot_tile), no_tile)) continue;
    // 6, 8, 24 super-blocks: short chunks; 21 and 117: float rows with a masked tail of 5 and 21.
    for (const int64_t n : {int64_t{32 * 37}, int64_t{32 * 50}, int64_t{256 * 17}, int64_t{256 * 18}, int64_t{256 * 6},
                            int64_t{256 * 8}, int64_t{256 * 24}, int64_t{21}, int64_t{117}}) {
      if (tensor_row_bytes(k->type, n) < 0 || act_row_bytes(k->act, n) < 0) continue;
      if (k->act == ActFormat::kQ8_K && n % 256 != 0) continue;
      // 21 rows: a whole 16-row tile (TypeKernels::tile_rows) and a remainder, and 4-row tiles.
      const RandomProblem p(*k, n, 21, 19, rng);
      for (int threads : {1, 2}) {
        ThreadPool pool(threads);
        for (int level = 0; level <= static_cast<int>(detected_simd_level()); ++level) {
          CpuContext ctx;
          ctx.pool = &pool;
          ctx.max_level = static_cast<SimdLevel>(level);
          for (int64_t nc : {int64_t{2}, int64_t{9}, int64_t{16}, p.cols})  // 16, 19: whole tiles and a remainder
            p.expect_matmul_matches_scalar(ctx, nc,
                                           "level=" + std::to_string(level) + " threads=" + std::to_string(threads));
        }
      }
      ++tested;
    }
  }
  EXPECT_GE(tested, 2);
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

TEST(Matmul, PreparedActivationsMatchScalar) {
  std::mt19937 rng(23);
  for (const TypeKernels* k : all_type_kernels()) {
    if (k->prepared_act_bytes == nullptr) continue;
    // 17 and 18 super-blocks: a short last chunk with an odd and an even count; 19 columns: tiles of
    // kMaxTileCols and a remainder.
    for (const int64_t n : {int64_t{256 * 18}, int64_t{256 * 17}}) {
      const RandomProblem p(*k, n, 9, 19, rng);
      for (int threads : {1, 2}) {
        ThreadPool pool(threads);
        for (int level = 0; level <= static_cast<int>(detected_simd_level()); ++level) {
          CpuContext ctx;
          ctx.pool = &pool;
          ctx.max_level = static_cast<SimdLevel>(level);
          for (int64_t nc : {int64_t{1}, p.cols})
            p.expect_matmul_matches_scalar(ctx, nc,
                                           "level=" + std::to_string(level) + " threads=" + std::to_string(threads));
        }
      }
    }
  }
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

}  // namespace
}  // namespace dsv4::cpu
