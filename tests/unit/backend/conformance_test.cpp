// tests/unit/backend/conformance_test.cpp — the DS4 op-conformance suite (like ggml's
// test-backend-ops, with a bound of zero bits).
//
// For every op of backend/backend.h a table of cases (random and odd shapes, the real DS4 Flash
// sizes where cheap, window / ratio / top-k boundaries, ties, NaN and inf inputs, every weight type
// the model uses) is run on every backend this build has — for the CPU at every SIMD level the
// machine supports, with 3 threads, plus AMX and one thread at the best level — through the
// Backend interface only: inputs uploaded, outputs poisoned (kPoison) before each call, the op
// enqueued between begin_step() and end_step(), outputs downloaded and compared with memcmp-exact
// equality (NaN payloads included) against the scalar reference in conformance_ref.h, which is
// written from backend.h's comments. Regions an op must not write (column slices' neighbours,
// entries of windows not yet closed, ring rows not stored) must still hold the poison. Stateful
// ops (compressor_update, attention + kv_store) run over chunk sequences and must equal both the
// reference and a whole-prompt call. The case count per op and target is printed at the end.
//
// A level the machine lacks, AMX where unusable and a backend this build lacks are SKIPPED (never
// passed), each with a visible reason.
//
// The suite's files share conformance_fixture.h; this one lists the targets, instantiates the suite
// over them and prints the summary, and holds embed, load_weight_f32, matmul, matmul_batch, argmax,
// sample and the error cases.
#include "conformance_fixture.h"
#include "numerics/half.h"

#include "sampling/sampler.h"

namespace dsv4::conformance {
namespace {

const ::testing::Environment* const kSummaryEnv = ::testing::AddGlobalTestEnvironment(new SummaryPrinter);

// --- targets ------------------------------------------------------------------------------------------

std::vector<Target> all_targets() {
  return {
      {BackendKind::kCpu, SimdLevel::kScalar, 3, false, "cpu_scalar"},
      {BackendKind::kCpu, SimdLevel::kAvx2, 3, false, "cpu_avx2"},
      {BackendKind::kCpu, SimdLevel::kAvx512, 3, false, "cpu_avx512"},
      {BackendKind::kCpu, SimdLevel::kAvx512Vbmi, 3, false, "cpu_avx512vbmi"},
      {BackendKind::kCpu, SimdLevel::kAvx512, 3, true, "cpu_avx512_amx"},
      {BackendKind::kCpu, SimdLevel::kAvx2, 1, false, "cpu_avx2_1thread"},
      {BackendKind::kCuda, SimdLevel::kScalar, 0, false, "cuda"},
  };
}

std::string target_name(const ::testing::TestParamInfo<Target>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(Backends, Conformance, ::testing::ValuesIn(all_targets()), target_name);

// ================================================================================================
// embed
// ================================================================================================

struct EmbedCase {
  std::string name;
  TensorType type;
  int64_t D, vocab, n, copies;
  WeightGen gen;
};

std::vector<EmbedCase> embed_cases() {
  std::vector<EmbedCase> v;
  for (TensorType t : kWeightTypes) {
    const int64_t b = block_of(t);
    v.push_back({"real_D4096", t, 4096, 7, 5, 1, WeightGen::kRandom});
    v.push_back({"hc4_copies", t, b == 1 ? 33 : 2 * b, 33, 9, 4, WeightGen::kRandom});
    v.push_back({"extreme", t, b == 1 ? 7 : b, 5, 6, 2, WeightGen::kExtreme});
    if (b > 1) v.push_back({"quantized", t, 2 * b, 9, 4, 1, WeightGen::kQuantized});
  }
  return v;
}

TEST_P(Conformance, Embed) {
  uint64_t seed = 100;
  for (const EmbedCase& c : embed_cases()) {
    SCOPED_TRACE("embed case " + c.name + " " + tname(c.type));
    ++seed;
    if (!supported(Op::kEmbed, c.type)) continue;
    Ctx x(be());
    Rng rng(seed);
    const int64_t ne[2] = {c.D, c.vocab};
    const Tensor table = x.weight(c.type, weight_bytes(c.type, c.D, c.vocab, rng, c.gen), 2, ne);
    const uint8_t* host = x.host_bytes_of_last();
    std::vector<int32_t> tokens(static_cast<size_t>(c.n));
    for (auto& t : tokens) t = static_cast<int32_t>(rng.range(0, c.vocab - 1));
    tokens[0] = static_cast<int32_t>(c.vocab - 1);
    if (c.n > 2) tokens[1] = 0, tokens[2] = tokens[0];
    const Tensor tok = x.i32_1d(tokens);
    const Tensor out = x.alloc(TensorType::kF32, c.copies * c.D, c.n);
    if (!x.step([&] { be().embed(table, tok, c.copies, out); })) continue;
    std::vector<float> ref(static_cast<size_t>(c.n * c.copies * c.D));
    embed(c.type, host, c.D, tokens.data(), c.n, c.copies, ref.data());
    EXPECT_TRUE(same_f32("embed out", ref, x.get<float>(out), c.n, c.copies * c.D));
    count("embed");
  }
}

// load_weight_f32: small parameters dequantized once to F32 [rows][ne[0]].
TEST_P(Conformance, LoadWeightF32) {
  uint64_t seed = 200;
  for (TensorType t : kWeightTypes) {
    for (int shape = 0; shape < 2; ++shape) {
      SCOPED_TRACE("load_weight_f32 " + tname(t) + (shape ? " 2-D" : " 1-D"));
      Ctx x(be());
      Rng rng(++seed);
      const int64_t b = block_of(t);
      const int64_t n0 = b == 1 ? (shape ? 13 : 7) : (shape ? b : 2 * b), rows = shape ? 3 : 1;
      const int64_t ne[2] = {n0, rows};
      Tensor host_t = backend::make_nd(t, nullptr, shape ? 2 : 1, ne);
      std::vector<uint8_t> bytes = weight_bytes(t, n0, rows, rng, shape ? WeightGen::kExtreme : WeightGen::kRandom);
      host_t.data = bytes.data();
      std::vector<Buffer> keep;
      Result<Tensor> w = be().load_weight_f32(host_t, keep);
      ASSERT_TRUE(w.ok()) << w.status().message();
      std::vector<float> got(static_cast<size_t>(n0 * rows));
      const Status st = be().download(*w, got.data(), n0 * rows * 4);
      ASSERT_TRUE(st.ok()) << st.message();
      std::vector<float> ref(got.size());
      for (int64_t r = 0; r < rows; ++r)
        kernels(t).dequantize_row(bytes.data() + r * tensor_row_bytes(t, n0), ref.data() + r * n0, n0);
      EXPECT_TRUE(same_f32("load_weight_f32", ref, got, rows, n0));
      count("load_weight_f32");
    }
  }
  {  // every f16 bit pattern (a CUDA backend converts finite halves in hardware: the same floats)
    SCOPED_TRACE("load_weight_f32 every f16 value");
    std::vector<uint8_t> bytes(2 * 65536);
    for (uint32_t i = 0; i < 65536; ++i) {
      bytes[2 * i] = static_cast<uint8_t>(i & 0xffu);
      bytes[2 * i + 1] = static_cast<uint8_t>(i >> 8);
    }
    const int64_t ne[2] = {65536, 1};
    Tensor host_t = backend::make_nd(TensorType::kF16, nullptr, 1, ne);
    host_t.data = bytes.data();
    std::vector<Buffer> keep;
    Result<Tensor> w = be().load_weight_f32(host_t, keep);
    ASSERT_TRUE(w.ok()) << w.status().message();
    std::vector<float> got(65536);
    const Status st = be().download(*w, got.data(), 65536 * 4);
    ASSERT_TRUE(st.ok()) << st.message();
    std::vector<float> ref(65536);
    for (uint32_t i = 0; i < 65536; ++i) ref[i] = f16_to_f32(static_cast<uint16_t>(i));
    EXPECT_TRUE(same_f32("load_weight_f32 every f16", ref, got, 1, 65536));
    count("load_weight_f32");
  }
}

// ================================================================================================
// matmul
// ================================================================================================

struct MatmulCase {
  std::string name;
  TensorType type;
  int64_t in, out, n;
  int64_t x_pad = 0, y_pad = 0;  // x / y as column slices [pad, pad + width) of wider tensors
  WeightGen gen = WeightGen::kRandom;
  int x_specials = 0;
};

std::vector<MatmulCase> matmul_cases() {
  std::vector<MatmulCase> v;
  for (TensorType t : kWeightTypes) {
    const int64_t b = block_of(t), base = b == 1 ? 32 : b;
    v.push_back({"matvec", t, b == 1 ? 7 : b, 7, 1});
    v.push_back({"real_D4096", t, 4096, 33, 3});
    v.push_back({"tile_cols19", t, b == 1 ? 160 : 2 * base, 37, 19});
    v.push_back({"prefill_cols40", t, 256, 48, 40});
    v.push_back({"views", t, b == 1 ? 33 : 3 * base, 5, 4, 3, 2});
    v.push_back({"x_specials", t, 2 * base, 9, 6, 0, 0, WeightGen::kRandom, 12});
    v.push_back({"extreme_weights", t, b == 1 ? 40 : 2 * base, 8, 2, 0, 0, WeightGen::kExtreme});
    if (b > 1) v.push_back({"quantized", t, 2 * b, 16, 5, 0, 0, WeightGen::kQuantized});
    // One activation row over long rows (decode's HC mixes, router, compressor projections: a GPU
    // streams them through a CTA per output row), aligned and not, with specials and extreme weights.
    v.push_back({"long_row_4096", t, 4096, 24, 1});
    v.push_back({"long_row_16384", t, 16384, 24, 1, 0, 0, WeightGen::kRandom, 9});
    v.push_back({"long_row_extreme", t, 8192, 6, 1, 0, 0, WeightGen::kExtreme});
    v.push_back({"long_row_x_view", t, 8192, 5, 1, 4, 2});
    v.push_back({"long_row_unaligned_x", t, 4096, 9, 1, 3, 1});
    // One activation row over many output rows of a 32-weight block type (decode's q_b and W_oa: a GPU
    // streams them with a resident grid, two runs of 32 blocks per chunk): one run (9001 rows: more
    // than any GPU's resident warps, so several rows per warp), three runs (a half chunk at each
    // row's end), and an x view.
    // Many activation rows (prefill chunks; a GPU takes 32-block types to its tensor-core form from 64
    // rows): partial tiles of rows and columns, rows of 3 blocks (fewer than the tree's 32 leaves) and of
    // 512 (chains of 16 blocks), odd row lengths in blocks (rows 2 bytes off 4-byte alignment), x views,
    // specials in x and extreme weights.
    if (b == 32 || b == 1) {
      v.push_back({"prefill_rows64", t, 4096, 70, 64});
      v.push_back({"prefill_4096_x77", t, 4096, 200, 77, 0, 0, WeightGen::kRandom, 9});
      v.push_back({"prefill_blocks3", t, 96, 65, 97});
      v.push_back({"prefill_blocks_odd", t, 32 * 45, 131, 70});
      v.push_back({"prefill_long_chains", t, 16384, 66, 65});
      v.push_back({"prefill_views", t, 1024, 64, 80, 5, 3});
      v.push_back({"prefill_extreme", t, 512, 72, 66, 0, 0, WeightGen::kExtreme});
    }
    if (b == 32) {
      v.push_back({"many_rows_1024", t, 1024, 9001, 1});
      v.push_back({"many_rows_3072", t, 3072, 4400, 1, 0, 0, WeightGen::kRandom, 7});
      v.push_back({"many_rows_x_view", t, 2048, 4300, 1, 5, 3});
    }
  }
  // lucebox's ROCmFPx family (matmul only: the published DS4 files do not use it in other ops).
  for (TensorType t : {TensorType::kQ4_0_ROCMFP4, TensorType::kQ4_0_ROCMFP4_FAST, TensorType::kQ6_0_ROCMFPX,
                       TensorType::kQ8_0_ROCMFPX, TensorType::kQ3_0_ROCMFPX, TensorType::kQ2_0_ROCMFP2}) {
    v.push_back({"rocmfpx_matvec", t, 4096, 33, 1});
    v.push_back({"rocmfpx_prefill_cols40", t, 256, 48, 40});
    v.push_back({"rocmfpx_views", t, 96, 5, 4, 3, 2});
    v.push_back({"rocmfpx_x_specials", t, 64, 9, 6, 0, 0, WeightGen::kRandom, 12});
    v.push_back({"rocmfpx_quantized", t, 64, 16, 5, 0, 0, WeightGen::kQuantized});
    v.push_back({"rocmfpx_many_rows", t, 1024, 4500, 1});
  }
  return v;
}

// x rows [n][in] (with specials when asked).
std::vector<float> activations(Rng& rng, int64_t n, int64_t in, int specials) {
  std::vector<float> x = rng.normals(n * in);
  if (specials > 0) {
    inject_specials(x, rng, specials);
    // One row all huge (act-quant scale at the f32 limit), one row all zero.
    if (n > 2) {
      for (int64_t i = 0; i < in; ++i) x[static_cast<size_t>(in + i)] = (i & 1) ? 3e38f : -1e38f;
      for (int64_t i = 0; i < in; ++i) x[static_cast<size_t>(2 * in + i)] = 0.0f;
    }
  }
  return x;
}

// Uploads x [n][in] as columns [pad, pad + in) of a [n][in + 2·pad] tensor; returns the view.
Tensor upload_view(Ctx& ctx, const std::vector<float>& x, int64_t n, int64_t in, int64_t pad, Rng& rng) {
  if (pad == 0) return ctx.f32(x, in, n);
  const int64_t w = in + 2 * pad;
  std::vector<float> wide = rng.normals(n * w);
  for (int64_t t = 0; t < n; ++t)
    std::copy(x.begin() + t * in, x.begin() + (t + 1) * in, wide.begin() + t * w + pad);
  return ctx.f32(wide, w, n).cols(pad, in);
}

TEST_P(Conformance, Matmul) {
  uint64_t seed = 300;
  for (const MatmulCase& c : matmul_cases()) {
    SCOPED_TRACE("matmul case " + c.name + " " + tname(c.type) + " in=" + std::to_string(c.in) +
                 " out=" + std::to_string(c.out) + " n=" + std::to_string(c.n));
    ++seed;
    if (!supported(Op::kMatmul, c.type)) continue;
    Ctx x(be());
    Rng rng(seed);
    const int64_t ne[2] = {c.in, c.out};
    const Tensor w = x.weight(c.type, weight_bytes(c.type, c.in, c.out, rng, c.gen, 0.5f), 2, ne);
    const uint8_t* host = x.host_bytes_of_last();
    const std::vector<float> xs = activations(rng, c.n, c.in, c.x_specials);
    const Tensor xt = upload_view(x, xs, c.n, c.in, c.x_pad, rng);
    const int64_t yw = c.out + 2 * c.y_pad;
    const Tensor ywide = x.alloc(TensorType::kF32, yw, c.n);
    const Tensor y = c.y_pad > 0 ? ywide.cols(c.y_pad, c.out) : ywide;
    if (!x.step([&] { be().matmul(w, xt, y); })) continue;
    std::vector<float> ref(static_cast<size_t>(c.n * c.out));
    matmul(c.type, host, c.in, c.out, xs.data(), c.in, c.n, ref.data(), c.out);
    const std::vector<float> got = x.get<float>(ywide);
    EXPECT_TRUE(same_f32("matmul y", ref, got, c.n, c.out, yw, c.y_pad));
    EXPECT_TRUE(poison_outside("matmul y neighbours", got, c.n, yw, c.y_pad, c.out));
    count("matmul");
  }
}

// ================================================================================================
// matmul_batch
// ================================================================================================

struct BatchJobSpec {
  TensorType type;
  int64_t in, out;
  int x_slot;           // which input (jobs with the same slot share one x tensor)
  int64_t n;            // rows of that x
  int64_t x_col = 0;    // x = columns [x_col, x_col + in) of the slot's tensor (its width is set by the scenario)
  int64_t w_row = -1;   // ≥ 0: rows [w_row, w_row + out) of a shared 2-D weight of the scenario
  int64_t expert = -1;  // ≥ 0: expert view of a shared 3-D weight of the scenario
  int64_t y_col = -1;   // ≥ 0: y = columns of the one shared output tensor, else its own tensor
};

struct BatchCase {
  std::string name;
  std::vector<int64_t> slot_width, slot_rows;  // the x tensors
  std::vector<BatchJobSpec> jobs;
  // The shared weight (w_row / expert jobs): type, in, rows (all experts' rows), n_expert.
  TensorType shared_type = TensorType::kF32;
  int64_t shared_in = 0, shared_out = 0, shared_experts = 0;
  int64_t y_width = 0;  // width of the shared output tensor (rows = its jobs' n)
};

std::vector<BatchCase> batch_cases() {
  std::vector<BatchCase> v;
  {  // every type on one shared input (projections of one x), separate outputs
    BatchCase c{"shared_x_all_types", {512}, {5}, {}};
    int64_t out = 7;
    for (TensorType t : kWeightTypes) c.jobs.push_back({t, 512, out += 3, 0, 5});
    v.push_back(c);
  }
  {  // shared x as a column slice; outputs as column slices of one tensor with poisoned gaps
    BatchCase c{"views_one_output", {544}, {4}, {}};
    int64_t col = 1;
    for (TensorType t : kWeightTypes) {
      c.jobs.push_back({t, 512, 6, 0, 4, 16, -1, -1, col});
      col += 7;
    }
    c.y_width = col;
    v.push_back(c);
  }
  // W_oa's output groups (the forward pass's): 4 row views of one weight, x and y column slices.
  const auto output_groups = [&v](const std::string& name, TensorType t, int64_t in, int64_t rows_per_group,
                                  int64_t n) {
    BatchCase c{name, {4 * in}, {n}, {}};
    c.shared_type = t;
    c.shared_in = in;
    c.shared_out = 4 * rows_per_group;
    for (int64_t g = 0; g < 4; ++g)
      c.jobs.push_back({t, in, rows_per_group, 0, n, g * in, g * rows_per_group, -1, g * rows_per_group});
    c.y_width = 4 * rows_per_group;
    v.push_back(c);
  };
  for (TensorType t : {TensorType::kQ8_0, TensorType::kIQ2_XXS, TensorType::kF16})
    output_groups("output_groups_" + tname(t), t, 256, 16, 3);
  // The same at decode (one row) with rows long enough that a GPU splits each over several warps.
  for (TensorType t : {TensorType::kQ8_0, TensorType::kQ2_K})
    output_groups("output_groups_decode_" + tname(t), t, 2048, 48, 1);
  // At decode with many rows per group (a GPU streams the grouped product): 4 × 2301 rows, more than any
  // GPU's resident warps, so a warp takes several rows, and an odd group size puts group boundaries
  // inside warps' ranges.
  output_groups("output_groups_stream_q8_0", TensorType::kQ8_0, 1024, 2301, 1);
  // In a prefill chunk (72 rows): 64 rows a group (a GPU's tensor-core form takes it) and 48 (group
  // boundaries inside its 64-row tiles: the general product).
  for (int64_t rows_per_group : {64, 48})
    output_groups("output_groups_prefill_q8_0_" + std::to_string(rows_per_group), TensorType::kQ8_0, 512,
                  rows_per_group, 72);
  {  // expert views of a 3-D weight, each its own token rows
    BatchCase c{"experts_q2_k", {256, 256, 256}, {1, 4, 2}, {}};
    c.shared_type = TensorType::kQ2_K;
    c.shared_in = 256;
    c.shared_out = 24;
    c.shared_experts = 5;
    c.jobs = {{TensorType::kQ2_K, 256, 24, 0, 1, 0, -1, 3}, {TensorType::kQ2_K, 256, 24, 1, 4, 0, -1, 0},
              {TensorType::kQ2_K, 256, 24, 2, 2, 0, -1, 4}};
    v.push_back(c);
  }
  for (TensorType t : kWeightTypes) {  // expert views of every type, n = 2 and n = 17
    BatchCase c{"experts_" + tname(t), {256, 256}, {2, 17}, {}};
    c.shared_type = t;
    c.shared_in = 256;
    c.shared_out = 20;
    c.shared_experts = 3;
    c.jobs = {{t, 256, 20, 0, 2, 0, -1, 1}, {t, 256, 20, 1, 17, 0, -1, 2}, {t, 256, 20, 0, 2, 0, -1, 0}};
    v.push_back(c);
  }
  {  // decode: one row, four types
    BatchCase c{"decode_n1", {4096}, {1}, {}};
    for (TensorType t : {TensorType::kQ8_0, TensorType::kQ2_K, TensorType::kIQ2_XXS, TensorType::kBF16})
      c.jobs.push_back({t, 4096, 9, 0, 1});
    v.push_back(c);
  }
  {  // a decode step's attention projections of x: two Q8_0 and five F16 jobs (the CUDA backend runs the
     // float ones as one launch), and the float jobs' output columns side by side in one tensor
    BatchCase c{"decode_attention_projections", {8192}, {1}, {}};
    c.y_width = 33 + 20 + 7 + 5 + 64;
    c.jobs = {{TensorType::kQ8_0, 8192, 24, 0, 1}, {TensorType::kF16, 8192, 33, 0, 1, 0, -1, -1, 0},
              {TensorType::kQ8_0, 8192, 16, 0, 1}, {TensorType::kF16, 8192, 20, 0, 1, 0, -1, -1, 33},
              {TensorType::kF16, 8192, 7, 0, 1, 0, -1, -1, 53}, {TensorType::kF16, 8192, 5, 0, 1, 0, -1, -1, 60},
              {TensorType::kF16, 8192, 64, 0, 1, 0, -1, -1, 65}};
    v.push_back(c);
  }
  {  // float jobs that cannot share a launch: mixed float types; nine F16 jobs (more than one launch holds)
    BatchCase c{"decode_float_mixed", {4096}, {1}, {}};
    c.jobs = {{TensorType::kF16, 4096, 9, 0, 1}, {TensorType::kF32, 4096, 9, 0, 1}, {TensorType::kBF16, 4096, 9, 0, 1}};
    v.push_back(c);
    BatchCase d{"decode_nine_f16", {4096}, {1}, {}};
    for (int k = 0; k < 9; ++k) d.jobs.push_back({TensorType::kF16, 4096, 3 + k, 0, 1});
    v.push_back(d);
  }
  {  // float jobs of one launch whose rows cross the launch's groups of rows (a GPU holds several rows per
     // CTA: 4 of 4096 F16 columns, 8 of 1024) at odd places, the last group part-filled
    for (int64_t in : {4096, 1024}) {
      BatchCase c{"decode_f16_rows_across_groups_" + std::to_string(in), {in}, {1}, {}};
      c.jobs = {{TensorType::kF16, in, 3, 0, 1}, {TensorType::kF16, in, 6, 0, 1}, {TensorType::kF16, in, 5, 0, 1},
                {TensorType::kF16, in, 11, 0, 1}};
      v.push_back(c);
    }
  }
  return v;
}

TEST_P(Conformance, MatmulBatch) {
  uint64_t seed = 400;
  for (const BatchCase& c : batch_cases()) {
    SCOPED_TRACE("matmul_batch case " + c.name);
    ++seed;
    bool ok = true;
    for (const BatchJobSpec& j : c.jobs) ok = ok && supported(Op::kMatmul, j.type);
    if (!ok) continue;
    Ctx x(be());
    Rng rng(seed);
    std::vector<std::vector<float>> xs;
    std::vector<Tensor> xt;
    for (size_t s = 0; s < c.slot_width.size(); ++s) {
      xs.push_back(rng.normals(c.slot_rows[s] * c.slot_width[s]));
      xt.push_back(x.f32(xs.back(), c.slot_width[s], c.slot_rows[s]));
    }
    Tensor shared_w;
    const uint8_t* shared_host = nullptr;
    if (c.shared_in > 0) {
      const int64_t ne[3] = {c.shared_in, c.shared_out, std::max<int64_t>(c.shared_experts, 1)};
      shared_w = x.weight(c.shared_type,
                          weight_bytes(c.shared_type, c.shared_in, c.shared_out * ne[2], rng, WeightGen::kRandom, 0.5f),
                          c.shared_experts > 0 ? 3 : 2, ne);
      shared_host = x.host_bytes_of_last();
    }
    Tensor shared_y;
    int64_t shared_y_rows = 0;
    if (c.y_width > 0) {
      for (const BatchJobSpec& j : c.jobs)
        if (j.y_col >= 0) shared_y_rows = j.n;
      shared_y = x.alloc(TensorType::kF32, c.y_width, shared_y_rows);
    }
    std::vector<MatmulJob> jobs;
    std::vector<const uint8_t*> hosts;
    std::vector<Tensor> own_y;
    for (const BatchJobSpec& j : c.jobs) {
      MatmulJob job;
      if (j.w_row >= 0) {
        job.w = shared_w.rows(j.w_row, j.out);
        hosts.push_back(shared_host + j.w_row * tensor_row_bytes(j.type, j.in));
      } else if (j.expert >= 0) {
        job.w = shared_w.expert(j.expert);
        hosts.push_back(shared_host + j.expert * c.shared_out * tensor_row_bytes(j.type, j.in));
      } else {
        const int64_t ne[2] = {j.in, j.out};
        job.w = x.weight(j.type, weight_bytes(j.type, j.in, j.out, rng, WeightGen::kRandom, 0.5f), 2, ne);
        hosts.push_back(x.host_bytes_of_last());
      }
      const Tensor& xin = xt[static_cast<size_t>(j.x_slot)];
      job.x = (j.x_col > 0 || j.in != xin.ne[0]) ? xin.cols(j.x_col, j.in) : xin;
      if (j.y_col >= 0) {
        job.y = shared_y.cols(j.y_col, j.out);
      } else {
        own_y.push_back(x.alloc(TensorType::kF32, j.out, j.n));
        job.y = own_y.back();
      }
      jobs.push_back(job);
    }
    if (!x.step([&] { be().matmul_batch(jobs); })) continue;
    std::vector<float> shared_got;
    if (c.y_width > 0) shared_got = x.get<float>(shared_y);
    std::vector<bool> written(static_cast<size_t>(c.y_width), false);
    size_t own = 0;
    for (size_t k = 0; k < c.jobs.size(); ++k) {
      const BatchJobSpec& j = c.jobs[k];
      const std::vector<float>& xv = xs[static_cast<size_t>(j.x_slot)];
      const int64_t xw = c.slot_width[static_cast<size_t>(j.x_slot)];
      std::vector<float> ref(static_cast<size_t>(j.n * j.out));
      matmul(j.type, hosts[k], j.in, j.out, xv.data() + j.x_col, xw, j.n, ref.data(), j.out);
      const std::string what = "matmul_batch job " + std::to_string(k) + " (" + tname(j.type) + ")";
      if (j.y_col >= 0) {
        EXPECT_TRUE(same_f32(what, ref, shared_got, j.n, j.out, c.y_width, j.y_col));
        for (int64_t col = j.y_col; col < j.y_col + j.out; ++col) written[static_cast<size_t>(col)] = true;
      } else {
        EXPECT_TRUE(same_f32(what, ref, x.get<float>(own_y[own++]), j.n, j.out));
      }
    }
    for (int64_t col = 0; col < c.y_width; ++col) {
      if (written[static_cast<size_t>(col)]) continue;
      for (int64_t r = 0; r < shared_y_rows; ++r) {
        EXPECT_EQ(f32_bits(shared_got[static_cast<size_t>(r * c.y_width + col)]), kPoison)
            << "matmul_batch wrote column " << col << " (a gap between job outputs), row " << r;
      }
    }
    count("matmul_batch");
  }
}

// ================================================================================================
// errors: a type without kernels is a sticky error that end_step reports and clears
// ================================================================================================

// ================================================================================================
// argmax (the greedy choice on the backend): sampling::argmax's rule is the reference
// ================================================================================================

struct ArgmaxCase {
  std::string name;
  int64_t n, V;
  int values = 0;  // 0 normal, 1 few values (ties), 2 NaNs sprinkled, 3 all NaN / all -inf / +inf rows, 4 ±0
};

TEST_P(Conformance, Argmax) {
  const std::vector<ArgmaxCase> cases = {
      {"real_vocab", 3, 129280, 0}, {"ties", 4, 5000, 1},   {"nan_sprinkled", 3, 3001, 2},
      {"degenerate_rows", 4, 777, 3}, {"signed_zeros", 2, 64, 4}, {"one_column", 5, 1, 0},
      {"odd_width", 2, 1025, 1},
  };
  uint64_t seed = 1500;
  for (const ArgmaxCase& c : cases) {
    SCOPED_TRACE("argmax case " + c.name);
    Ctx x(be());
    Rng rng(++seed);
    std::vector<float> l = rng.normals(c.n * c.V);
    for (int64_t i = 0; i < c.n * c.V; ++i) {
      if (c.values == 1) l[i] = static_cast<float>(rng.range(0, 3));
      if (c.values == 2 && rng.range(0, 9) == 0) l[i] = std::nanf("");
      if (c.values == 4) l[i] = rng.range(0, 1) ? 0.0f : -0.0f;
    }
    if (c.values == 3) {
      const float inf = std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < c.V; ++i) {
        l[i] = std::nanf("");                                   // row 0: all NaN → 0
        l[c.V + i] = -inf;                                      // row 1: all −inf → 0
        l[2 * c.V + i] = i % 3 == 0 ? std::nanf("") : -inf;     // row 2: NaN and −inf → first −inf
        if (i == c.V / 2 || i == c.V - 1) l[3 * c.V + i] = inf;  // row 3: two +inf → the first
      }
    }
    const Tensor lt = x.f32(l, c.V, c.n);
    const Tensor ids = x.alloc(TensorType::kI32, c.n, 1);
    if (!x.step([&] { be().argmax(lt, ids); })) continue;
    std::vector<int32_t> ref(static_cast<size_t>(c.n));
    for (int64_t t = 0; t < c.n; ++t)
      ref[static_cast<size_t>(t)] = sampling::argmax(std::span<const float>(l.data() + t * c.V, static_cast<size_t>(c.V)));
    EXPECT_TRUE(same_i32("argmax ids", ref, x.get<int32_t>(ids), c.n, 1));
    count("argmax");
  }
}

// ================================================================================================
// sample (the sampler's choice on the backend): sampling::Sampler with the same draw is the reference.
// A backend may answer kSampleOnHost (the caller then samples the logits on the host): the CPU
// backend does for everything but the plain greedy choice; the CUDA backend only where more
// candidates survive the cuts than it sorts (the cases marked `may_defer`). Every other answer must
// be the reference's id, for several draws per case.
// ================================================================================================

struct SampleCase {
  std::string name;
  int64_t V;
  int logits = 0;  // 0 peaked (normals·2 + a few spikes), 1 flat (normals·0.5), 2 few values (ties),
                   // 3 NaNs and −inf sprinkled, 4 all NaN, 5 all −inf, 6 a +inf
  sampling::SamplerConfig cfg;
  int history = 0;        // accepted ids (with repeats) before the draw
  bool may_defer = false; // the CUDA backend may answer kSampleOnHost
};

TEST_P(Conformance, Sample) {
  auto cfg = [](float t, int32_t k, float p, float min_p) {
    sampling::SamplerConfig c;
    c.temperature = t;
    c.top_k = k;
    c.top_p = p;
    c.min_p = min_p;
    return c;
  };
  auto penalised = [](sampling::SamplerConfig c, float rep, float presence, float frequency) {
    c.repetition_penalty = rep;
    c.presence_penalty = presence;
    c.frequency_penalty = frequency;
    c.logit_bias = {{7, 3.5f}, {11, -100.0f}, {7, 0.25f}, {200, 1.0f}, {3, -0.5f}};
    return c;
  };
  const int64_t kVocab = 129280;
  std::vector<SampleCase> cases = {
      {"greedy", kVocab, 0, cfg(0, 0, 1, 0)},
      {"greedy_penalised", kVocab, 0, penalised(cfg(0, 0, 1, 0), 1.3f, 0.4f, 0.2f), 300},
      {"walk", kVocab, 0, cfg(1, 0, 1, 0)},
      {"walk_flat", kVocab, 1, cfg(1, 0, 1, 0)},
      {"walk_small_tail", 1030, 0, cfg(0.9f, 0, 1, 0)},
      {"min_p_default", kVocab, 0, cfg(1, 0, 1, 0.05f)},
      {"min_p_cold", kVocab, 0, cfg(0.3f, 0, 1, 0.05f)},
      {"min_p_flat", kVocab, 1, cfg(1, 0, 1, 0.05f), 0, true},
      {"top_p", kVocab, 0, cfg(1, 0, 0.9f, 0), 0, true},
      {"top_p_min_p", kVocab, 0, cfg(0.8f, 0, 0.95f, 0.02f)},
      {"top_p_flat", kVocab, 1, cfg(1, 0, 0.9f, 0), 0, true},
      {"top_k", kVocab, 0, cfg(0.7f, 40, 1, 0)},
      {"top_k_top_p", kVocab, 0, cfg(1.2f, 50, 0.9f, 0)},
      {"top_k_min_p", kVocab, 0, cfg(1, 20, 1, 0.1f)},
      {"top_k_one", kVocab, 0, cfg(1, 1, 1, 0)},
      {"top_k_5000_flat", kVocab, 1, cfg(1, 5000, 0.97f, 0.01f)},
      {"top_k_over_cap", kVocab, 1, cfg(1, 9000, 1, 0), 0, true},
      {"top_k_ties", 20000, 2, cfg(1, 30, 0.9f, 0)},
      {"ties_min_p", 20000, 2, cfg(1, 0, 1, 0.5f), 0, true},
      {"penalised_min_p", kVocab, 0, penalised(cfg(0.9f, 0, 1, 0.05f), 1.2f, 0.5f, 0.3f), 300},
      {"penalised_top_k", kVocab, 0, penalised(cfg(0.9f, 64, 0.95f, 0), 0.8f, -0.5f, 0.1f), 1000},
      {"penalised_walk", 5000, 0, penalised(cfg(1, 0, 1, 0), 1.5f, 0, 0), 50},
      {"nan_top_k", kVocab, 3, cfg(1, 100, 1, 0)},
      {"nan_min_p", kVocab, 3, cfg(1, 0, 0.9f, 0.05f), 0, true},
      {"nan_walk", 3001, 3, cfg(1, 0, 1, 0)},
      {"all_nan", 777, 4, cfg(1, 0, 1, 0.05f)},
      {"all_neg_inf", 777, 5, cfg(1, 10, 1, 0)},
      {"pos_inf", 777, 6, cfg(1, 0, 0.9f, 0)},
  };
  const bool cpu = be().name() == "cpu";
  uint64_t seed = 2600;
  int64_t deferred = 0, chosen = 0;
  for (const SampleCase& c : cases) {
    SCOPED_TRACE("sample case " + c.name);
    Rng rng(++seed);
    std::vector<float> l = rng.normals(c.V);
    const float inf = std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < c.V; ++i) {
      switch (c.logits) {
        case 0: l[i] *= 2.0f; break;
        case 1: l[i] *= 0.5f; break;
        case 2: l[i] = static_cast<float>(rng.range(0, 3)); break;
        case 3: if (rng.range(0, 9) == 0) l[i] = rng.range(0, 1) ? std::nanf("") : -inf; break;
        case 4: l[i] = std::nanf(""); break;
        case 5: l[i] = -inf; break;
        case 6: if (i == c.V / 3 || i == c.V - 2) l[i] = inf; break;
        default: break;
      }
    }
    if (c.logits == 0)
      for (int s = 0; s < 6; ++s) l[static_cast<size_t>(rng.range(0, c.V - 1))] += 12.0f + 2.0f * static_cast<float>(s);
    for (int draw = 0; draw < 6; ++draw) {
      SCOPED_TRACE("draw " + std::to_string(draw));
      sampling::SamplerConfig conf = c.cfg;
      conf.seed = seed * 100 + static_cast<uint64_t>(draw);
      sampling::Sampler sampler(conf, static_cast<int32_t>(c.V));
      for (int h = 0; h < c.history; ++h) sampler.accept(static_cast<int32_t>(rng.range(0, h % 3 == 0 ? 30 : c.V - 1)));
      const sampling::Sampler::Draw d = sampler.take_draw();
      std::vector<float> scratch = l;
      const int32_t want = sampler.sample_drawn(scratch, d);
      Ctx x(be());
      const Tensor logits = x.f32(l, c.V, 1);
      const Tensor id = x.alloc(TensorType::kI32, 1, 1);
      backend::SampleArgs a;
      a.logits = logits;
      a.id = id;
      a.temperature = conf.temperature;
      a.top_k = conf.top_k;
      a.top_p = conf.top_p;
      a.min_p = conf.min_p;
      a.repetition_penalty = conf.repetition_penalty;
      a.presence_penalty = conf.presence_penalty;
      a.frequency_penalty = conf.frequency_penalty;
      a.u = d.u;
      a.logit_bias = conf.logit_bias;
      a.seen_ids = d.seen_ids;
      a.seen_counts = d.seen_counts;
      if (!x.step([&] { be().sample(a); })) continue;
      const int32_t got = x.get<int32_t>(id)[0];
      const bool plain_greedy = !(conf.temperature > 0) && conf.logit_bias.empty() && d.seen_ids.empty();
      if (got == backend::kSampleOnHost && (cpu ? !plain_greedy : c.may_defer)) {
        ++deferred;
        continue;
      }
      EXPECT_EQ(got, want) << "u = " << d.u;
      ++chosen;
    }
    count("sample");
  }
  std::printf("[ sample   ] %s: %" PRId64 " draws chosen by the backend, %" PRId64 " left to the host\n",
              std::string(be().name()).c_str(), chosen, deferred);
  if (!cpu) {
    EXPECT_GT(chosen, 120);  // the device must make the choice in the common configurations
  }
}

TEST_P(Conformance, UnsupportedTypeIsStickyError) {
  EXPECT_FALSE(be().supports(Op::kMatmul, TensorType::kQ4_0));
  Ctx x(be());
  std::vector<uint8_t> bytes(static_cast<size_t>(tensor_row_bytes(TensorType::kQ4_0, 64) * 4), 0);
  const int64_t ne[2] = {64, 4};
  Tensor host = backend::make_nd(TensorType::kQ4_0, bytes.data(), 2, ne);
  std::vector<Buffer> keep;
  Result<Tensor> w = be().load_weight(host, keep);
  if (!w.ok()) {  // refusing the weight up front is as good
    count("errors");
    return;
  }
  const Tensor xt = x.f32(std::vector<float>(64 * 2, 1.0f), 64, 2), y = x.alloc(TensorType::kF32, 4, 2);
  be().begin_step();
  be().matmul(*w, xt, y);
  EXPECT_FALSE(be().end_step().ok()) << "matmul with q4_0 weights must fail";
  be().begin_step();
  EXPECT_TRUE(be().end_step().ok()) << "end_step must clear the error";
  count("errors");
}

// DSV4_CONFORMANCE_MUTATION names a known mutation (a typo would silently test nothing).
TEST(ConformanceReference, MutationNameIsKnown) {
  if (mutation().empty()) return;
  EXPECT_NE(std::find(std::begin(kMutations), std::end(kMutations), mutation()), std::end(kMutations))
      << "unknown mutation '" << mutation() << "'";
}

// The reference's own shared pieces agree with the CPU type table where they overlap.
TEST(ConformanceReference, Dot32IsTheF32VecDot) {
  Rng rng(7);
  for (int64_t n : {1, 7, 31, 32, 33, 100, 512, 4096}) {
    const std::vector<float> a = rng.normals(n), b = rng.normals(n);
    const float want = kernels(TensorType::kF32).vec_dot[0](n, a.data(), b.data());
    if (mutated("dot_seq")) continue;
    EXPECT_EQ(f32_bits(dot32(a.data(), b.data(), n)), f32_bits(want)) << "n = " << n;
  }
}

}  // namespace
}  // namespace dsv4::conformance
