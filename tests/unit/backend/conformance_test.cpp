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
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "conformance_harness.h"
#include "conformance_ref.h"
#include "sampling/sampler.h"

namespace dsv4::conformance {
namespace {

using backend::AttentionArgs;
using backend::CompressorTensors;
using backend::CompressorUpdate;
using backend::MatmulJob;
using backend::MoeArgs;
using backend::Op;
using backend::RouteArgs;

const ::testing::Environment* const kSummaryEnv = ::testing::AddGlobalTestEnvironment(new SummaryPrinter);

constexpr TensorType kWeightTypes[] = {TensorType::kF32,  TensorType::kF16,  TensorType::kBF16,    TensorType::kQ8_0,
                                       TensorType::kQ2_K, TensorType::kQ4_K, TensorType::kIQ2_XXS, TensorType::kMXFP4};

int64_t block_of(TensorType t) { return tensor_type_info(t).block_elems; }
std::string tname(TensorType t) { return std::string(tensor_type_name(t)); }

// --- targets and fixture --------------------------------------------------------------------------

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

class Conformance : public ::testing::TestWithParam<Target> {
 protected:
  void SetUp() override {
    const Target& t = GetParam();
    Summary& sum = Summary::get();
    if (t.kind == BackendKind::kCpu) {
      if (static_cast<int>(t.level) > static_cast<int>(detected_simd_level())) {
        const std::string why = std::string("SKIPPED: this CPU runs up to ") + simd_level_name(detected_simd_level()) +
                                ", not " + simd_level_name(t.level);
        sum.target_status(t.name, why);
        GTEST_SKIP() << why;
      }
      if (t.amx && !amx_int8_usable()) {
        const std::string why = "SKIPPED: AMX int8 tiles not usable on this CPU/OS";
        sum.target_status(t.name, why);
        GTEST_SKIP() << why;
      }
    }
    const std::vector<BackendKind> built = backend::built_backends();
    if (std::find(built.begin(), built.end(), t.kind) == built.end()) {
      const std::string why = std::string("SKIPPED: backend '") + backend::backend_kind_name(t.kind) + "' not in this build";
      sum.target_status(t.name, why);
      GTEST_SKIP() << why;
    }
    backend::BackendOptions o;
    o.kind = t.kind;
    o.threads = t.threads;
    o.simd = t.level;
    o.amx = t.amx;
    Result<std::unique_ptr<Backend>> r = backend::create_backend(o);
    if (!r.ok()) {
      if (t.kind != BackendKind::kCpu) {
        const std::string why = "SKIPPED: create_backend: " + r.status().message();
        sum.target_status(t.name, why);
        GTEST_SKIP() << why;
      }
      FAIL() << "create_backend(" << t.name << "): " << r.status().message();
    }
    be_ = std::move(r).value();
    sum.target_status(t.name, "ran (" + be_->describe() + ")");
  }

  Backend& be() { return *be_; }
  const std::string& target() const { return GetParam().name; }
  void count(const char* op) { Summary::get().count(op, target()); }
  // Whether `op` runs weights of `type` here; the CPU must support every type the model uses.
  bool supported(Op op, TensorType type) {
    const bool s = be_->supports(op, type);
    if (GetParam().kind == BackendKind::kCpu) {
      EXPECT_TRUE(s) << "the CPU backend must support " << backend::op_name(op) << " with " << tname(type);
    }
    if (!s) Summary::get().skipped_case(backend::op_name(op), target(), "no " + tname(type) + " kernel");
    return s;
  }

  std::unique_ptr<Backend> be_;
};

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
  }
  // lucebox's ROCmFPx family (matmul only: the published DS4 files do not use it in other ops).
  for (TensorType t : {TensorType::kQ4_0_ROCMFP4, TensorType::kQ4_0_ROCMFP4_FAST, TensorType::kQ6_0_ROCMFPX,
                       TensorType::kQ8_0_ROCMFPX, TensorType::kQ3_0_ROCMFPX, TensorType::kQ2_0_ROCMFP2}) {
    v.push_back({"rocmfpx_matvec", t, 4096, 33, 1});
    v.push_back({"rocmfpx_prefill_cols40", t, 256, 48, 40});
    v.push_back({"rocmfpx_views", t, 96, 5, 4, 3, 2});
    v.push_back({"rocmfpx_x_specials", t, 64, 9, 6, 0, 0, WeightGen::kRandom, 12});
    v.push_back({"rocmfpx_quantized", t, 64, 16, 5, 0, 0, WeightGen::kQuantized});
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
  for (TensorType t : {TensorType::kQ8_0, TensorType::kIQ2_XXS, TensorType::kF16}) {
    // W_oa output groups: row views of one weight, x and y column slices (the forward pass's groups)
    BatchCase c{"output_groups_" + tname(t), {4 * 256}, {3}, {}};
    c.shared_type = t;
    c.shared_in = 256;
    c.shared_out = 4 * 16;
    for (int64_t g = 0; g < 4; ++g) c.jobs.push_back({t, 256, 16, 0, 3, g * 256, g * 16, -1, g * 16});
    c.y_width = 64;
    v.push_back(c);
  }
  for (TensorType t : {TensorType::kQ8_0, TensorType::kQ2_K}) {
    // The same at decode (one row) with rows long enough that a GPU splits each over several warps
    BatchCase c{"output_groups_decode_" + tname(t), {4 * 2048}, {1}, {}};
    c.shared_type = t;
    c.shared_in = 2048;
    c.shared_out = 4 * 48;
    for (int64_t g = 0; g < 4; ++g) c.jobs.push_back({t, 2048, 48, 0, 1, g * 2048, g * 48, -1, g * 48});
    c.y_width = 4 * 48;
    v.push_back(c);
  }
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
// rms_norm
// ================================================================================================

struct RmsCase {
  std::string name;
  int64_t rows, n;
  bool weight;
  bool alias = false;
  int64_t pad = 0;  // x and y as column slices [pad, pad + n) of wider tensors
  float eps = 1e-6f;
  int specials = 0;  // 1: special rows (zero, NaN, inf, overflowing, underflowing), 2: random specials
};

std::vector<RmsCase> rms_cases() {
  return {
      {"real_D4096", 3, 4096, true},
      {"heads_512_no_w", 2 * 64, 512, false},
      {"q_lora_1024", 4, 1024, true},
      {"indexer_128", 5, 128, true, false, 0, 1e-5f},
      {"odd_7", 5, 7, true},
      {"odd_33_no_w", 3, 33, false},
      {"one", 2, 1, true},
      {"odd_100_specials", 6, 100, true, false, 0, 1e-6f, 1},
      {"random_specials", 7, 64, true, false, 0, 1e-6f, 2},
      {"alias_512", 4, 512, true, true},
      {"alias_no_w_odd", 3, 45, false, true},
      {"views", 3, 64, true, false, 5},
      {"alias_view", 3, 96, true, true, 7},
      {"eps0_special_rows", 6, 48, true, false, 0, 0.0f, 1},
  };
}

TEST_P(Conformance, RmsNorm) {
  uint64_t seed = 500;
  for (const RmsCase& c : rms_cases()) {
    SCOPED_TRACE("rms_norm case " + c.name);
    Ctx x(be());
    Rng rng(++seed);
    std::vector<float> xs = rng.normals(c.rows * c.n, 2.0f);
    if (c.specials == 1) {
      for (int64_t i = 0; i < c.n; ++i) {
        xs[static_cast<size_t>(i)] = 0.0f;                  // row 0: zeros (ss = 0)
        xs[static_cast<size_t>(3 * c.n + i)] = 1e20f;       // row 3: ss overflows to inf
        xs[static_cast<size_t>(4 * c.n + i)] = -1e-30f;     // row 4: ss underflows to 0
      }
      xs[static_cast<size_t>(c.n + c.n / 2)] = f_nan();    // row 1: one NaN
      xs[static_cast<size_t>(2 * c.n)] = -f_inf();         // row 2: one inf
    } else if (c.specials == 2) {
      inject_specials(xs, rng, 9);
    }
    std::vector<float> ws = rng.normals(c.n, 0.3f);
    for (auto& w : ws) w += 1.0f;
    const int64_t width = c.n + 2 * c.pad;
    std::vector<float> xwide(static_cast<size_t>(c.rows * width));
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t i = 0; i < width; ++i)
        xwide[static_cast<size_t>(r * width + i)] =
            (i >= c.pad && i < c.pad + c.n) ? xs[static_cast<size_t>(r * c.n + i - c.pad)] : rng.normal();
    const Tensor xw = x.f32(xwide, width, c.rows);
    const Tensor xt = c.pad ? xw.cols(c.pad, c.n) : xw;
    const Tensor wt = c.weight ? x.f32_1d(ws) : Tensor{};
    const Tensor yw = c.alias ? xw : x.alloc(TensorType::kF32, width, c.rows);
    const Tensor yt = c.pad ? yw.cols(c.pad, c.n) : yw;
    if (!x.step([&] { be().rms_norm(xt, wt, c.eps, yt); })) continue;
    std::vector<float> ref(static_cast<size_t>(c.rows * c.n));
    for (int64_t r = 0; r < c.rows; ++r)
      rms_norm_row(xs.data() + r * c.n, c.n, c.weight ? ws.data() : nullptr, c.eps, ref.data() + r * c.n);
    const std::vector<float> got = x.get<float>(yw);
    EXPECT_TRUE(same_f32("rms_norm y", ref, got, c.rows, c.n, width, c.pad));
    if (c.alias) {
      for (int64_t r = 0; r < c.rows; ++r) {
        for (int64_t i = 0; i < width; ++i) {
          if (i >= c.pad && i < c.pad + c.n) continue;
          EXPECT_EQ(f32_bits(got[static_cast<size_t>(r * width + i)]), f32_bits(xwide[static_cast<size_t>(r * width + i)]))
              << "rms_norm changed column " << i << " outside its view";
        }
      }
    } else {
      EXPECT_TRUE(poison_outside("rms_norm y neighbours", got, c.rows, width, c.pad, c.n));
    }
    count("rms_norm");
  }
}

// ================================================================================================
// rope
// ================================================================================================

struct RopeCase {
  std::string name;
  int64_t rows, row_len, n_rot, rows_per_pos, p0;
  bool inverse;
  int64_t pad = 0;    // x as columns [pad, pad + row_len) of a wider tensor
  int freqs = 0;      // 0: 10000^(−2k/n_rot), 1: random in [0, 1.5)
  bool specials = false;
};

std::vector<RopeCase> rope_cases() {
  return {
      {"q_heads_real", 3 * 64, 512, 64, 64, 0, false},
      {"kv_real_p1000", 5, 512, 64, 1, 1000, false},
      {"o_inverse_p70000", 2 * 64, 512, 64, 64, 70000, true},
      {"p_2e24_plus1", 4, 512, 64, 1, 16777217, false, 0, 1},
      {"p_1e8_inverse", 3, 128, 64, 1, 100000000, true, 0, 1},
      {"indexer_q", 2 * 64, 128, 64, 64, 4097, false},
      {"odd_rows_per_pos", 7, 10, 4, 3, 5, false, 0, 1},
      {"full_row", 4, 8, 8, 2, 11, true, 0, 1},
      {"view", 6, 40, 16, 2, 33, false, 3, 1},
      {"specials", 6, 32, 16, 1, 9, false, 0, 1, true},
  };
}

TEST_P(Conformance, Rope) {
  uint64_t seed = 600;
  for (const RopeCase& c : rope_cases()) {
    SCOPED_TRACE("rope case " + c.name);
    Ctx x(be());
    Rng rng(++seed);
    const int64_t width = c.row_len + 2 * c.pad;
    std::vector<float> xs = rng.normals(c.rows * width);
    if (c.specials) inject_specials(xs, rng, 10);
    std::vector<float> fr(static_cast<size_t>(c.n_rot / 2));
    for (int64_t k = 0; k < c.n_rot / 2; ++k)
      fr[static_cast<size_t>(k)] = c.freqs == 0 ? static_cast<float>(std::pow(10000.0, -2.0 * k / c.n_rot))
                                                : rng.uniform(0.0f, 1.5f);
    const Tensor xw = x.f32(xs, width, c.rows);
    const Tensor xt = c.pad ? xw.cols(c.pad, c.row_len) : xw;
    const Tensor ft = x.f32_1d(fr);
    if (!x.step([&] { be().rope(xt, c.rows_per_pos, c.p0, c.n_rot, ft, c.inverse); })) continue;
    std::vector<float> ref = xs;
    for (int64_t r = 0; r < c.rows; ++r)
      rope_row(ref.data() + r * width + c.pad, c.row_len, c.p0 + r / c.rows_per_pos, c.n_rot, fr.data(), c.inverse);
    EXPECT_TRUE(same_f32("rope x (whole tensor: untouched columns included)", ref, x.get<float>(xw), c.rows, width));
    count("rope");
  }
}

// ================================================================================================
// hc_pre / hc_post / hc_head
// ================================================================================================

struct HcCase {
  std::string name;
  int64_t n, hc, D, iters;
  float eps;
  int specials = 0;  // 1: NaN / inf / saturating values in mix, X and base
};

std::vector<HcCase> hc_cases() {
  return {
      {"real_hc4_D4096_20iters", 3, 4, 4096, 20, 1e-6f},
      {"hc4_D64_1iter", 5, 4, 64, 1, 1e-6f},
      {"hc4_D64_3iters", 4, 4, 64, 3, 1e-6f},
      {"hc4_odd_D7", 2, 4, 7, 20, 1e-6f},
      {"hc2_D33", 3, 2, 33, 5, 1e-4f},
      {"hc3_D5", 2, 3, 5, 7, 1e-6f},
      {"specials", 6, 4, 24, 20, 1e-6f, 1},
      {"saturating_mix", 3, 4, 16, 20, 1e-6f, 2},
  };
}

struct HcData {
  std::vector<float> mix, scale, base, X;
};

HcData hc_data(const HcCase& c, Rng& rng, int64_t n_mix) {
  HcData d;
  d.mix = rng.normals(c.n * n_mix, 1.5f);
  d.scale = {rng.uniform(0.3f, 2.0f), rng.uniform(0.3f, 2.0f), rng.uniform(0.3f, 2.0f)};
  d.base = rng.normals(n_mix, 0.5f);
  d.X = rng.normals(c.n * c.hc * c.D);
  if (c.specials == 1) {
    inject_specials(d.mix, rng, 4);
    inject_specials(d.X, rng, 8);
    d.base[static_cast<size_t>(n_mix - 1)] = f_inf();
  } else if (c.specials == 2) {
    for (auto& m : d.mix) m *= 60.0f;  // softmax rows saturate: exp underflows to 0 and subnormals
  }
  return d;
}

TEST_P(Conformance, HcPre) {
  uint64_t seed = 700;
  for (const HcCase& c : hc_cases()) {
    SCOPED_TRACE("hc_pre case " + c.name);
    Ctx x(be());
    Rng rng(++seed);
    const int64_t n_mix = (2 + c.hc) * c.hc;
    const HcData d = hc_data(c, rng, n_mix);
    const Tensor mix = x.f32(d.mix, n_mix, c.n), scale = x.f32_1d(d.scale), base = x.f32_1d(d.base);
    const Tensor X = x.f32(d.X, c.hc * c.D, c.n);
    const Tensor xo = x.alloc(TensorType::kF32, c.D, c.n), post = x.alloc(TensorType::kF32, c.hc, c.n),
                 comb = x.alloc(TensorType::kF32, c.hc * c.hc, c.n);
    if (!x.step([&] { be().hc_pre(mix, scale, base, c.eps, c.iters, X, xo, post, comb); })) continue;
    std::vector<float> rx(static_cast<size_t>(c.n * c.D)), rp(static_cast<size_t>(c.n * c.hc)),
        rc(static_cast<size_t>(c.n * c.hc * c.hc));
    for (int64_t t = 0; t < c.n; ++t)
      hc_pre_token(d.mix.data() + t * n_mix, d.scale.data(), d.base.data(), c.hc, c.D, c.eps, c.iters,
                   d.X.data() + t * c.hc * c.D, rx.data() + t * c.D, rp.data() + t * c.hc, rc.data() + t * c.hc * c.hc);
    EXPECT_TRUE(same_f32("hc_pre comb", rc, x.get<float>(comb), c.n, c.hc * c.hc));
    EXPECT_TRUE(same_f32("hc_pre post", rp, x.get<float>(post), c.n, c.hc));
    EXPECT_TRUE(same_f32("hc_pre x", rx, x.get<float>(xo), c.n, c.D));
    count("hc_pre");
  }
}

TEST_P(Conformance, HcPost) {
  uint64_t seed = 800;
  for (const HcCase& c : hc_cases()) {
    SCOPED_TRACE("hc_post case " + c.name);
    Ctx x(be());
    Rng rng(++seed);
    std::vector<float> X = rng.normals(c.n * c.hc * c.D), y = rng.normals(c.n * c.D),
                       post = rng.normals(c.n * c.hc), comb = rng.normals(c.n * c.hc * c.hc, 0.5f);
    if (c.specials) {
      inject_specials(X, rng, 8);
      inject_specials(y, rng, 3);
      comb[1] = f_nan();
    }
    const Tensor Xt = x.f32(X, c.hc * c.D, c.n), yt = x.f32(y, c.D, c.n), pt = x.f32(post, c.hc, c.n),
                 ct = x.f32(comb, c.hc * c.hc, c.n);
    const Tensor out = x.alloc(TensorType::kF32, c.hc * c.D, c.n);
    if (!x.step([&] { be().hc_post(Xt, yt, pt, ct, out); })) continue;
    std::vector<float> ref(static_cast<size_t>(c.n * c.hc * c.D));
    for (int64_t t = 0; t < c.n; ++t)
      hc_post_token(X.data() + t * c.hc * c.D, y.data() + t * c.D, post.data() + t * c.hc, comb.data() + t * c.hc * c.hc,
                    c.hc, c.D, ref.data() + t * c.hc * c.D);
    EXPECT_TRUE(same_f32("hc_post X_out", ref, x.get<float>(out), c.n, c.hc * c.D));
    count("hc_post");
  }
}

TEST_P(Conformance, HcHead) {
  uint64_t seed = 900;
  for (const HcCase& c : hc_cases()) {
    SCOPED_TRACE("hc_head case " + c.name);
    Ctx x(be());
    Rng rng(++seed);
    std::vector<float> mix = rng.normals(c.n * c.hc, 1.5f), base = rng.normals(c.hc, 0.5f), X = rng.normals(c.n * c.hc * c.D);
    std::vector<float> scale = {rng.uniform(0.3f, 2.0f)};
    if (c.specials) {
      inject_specials(mix, rng, 2);
      inject_specials(X, rng, 8);
    }
    const Tensor mt = x.f32(mix, c.hc, c.n), st = x.f32_1d(scale), bt = x.f32_1d(base), Xt = x.f32(X, c.hc * c.D, c.n);
    const Tensor y = x.alloc(TensorType::kF32, c.D, c.n);
    if (!x.step([&] { be().hc_head(mt, st, bt, c.eps, Xt, y); })) continue;
    std::vector<float> ref(static_cast<size_t>(c.n * c.D));
    for (int64_t t = 0; t < c.n; ++t)
      hc_head_token(mix.data() + t * c.hc, scale[0], base.data(), c.hc, c.D, c.eps, X.data() + t * c.hc * c.D,
                    ref.data() + t * c.D);
    EXPECT_TRUE(same_f32("hc_head y", ref, x.get<float>(y), c.n, c.D));
    count("hc_head");
  }
}

// hc_pre_norm: rms_norm(X) → matmul(fn) → hc_pre → rms_norm(collapsed, norm), as the scalar
// references composed. The CUDA backend fuses it for float fn types whose rows fit in shared memory
// (the F32 D4096 and Q8_0 cases take its unfused path); the CPU runs the four ops.
struct HcPreNormCase {
  std::string name;
  int64_t n, hc, D, iters;
  float eps;
  TensorType fn_type;
  bool norm_weight = true;
  int specials = 0;  // 1: NaN / inf in X
};

TEST_P(Conformance, HcPreNorm) {
  const std::vector<HcPreNormCase> cases = {
      {"real_hc4_D4096_f16", 2, 4, 4096, 20, 1e-6f, TensorType::kF16},
      {"tokens5_D256_f16", 5, 4, 256, 20, 1e-6f, TensorType::kF16},
      {"f32_D64", 3, 4, 64, 3, 1e-6f, TensorType::kF32},
      {"f32_D4096_unfused", 1, 4, 4096, 20, 1e-6f, TensorType::kF32},
      {"bf16_hc2_D33", 3, 2, 33, 5, 1e-4f, TensorType::kBF16},
      {"f16_hc3_D5_no_norm_weight", 2, 3, 5, 7, 1e-6f, TensorType::kF16, false},
      {"q8_0_unfused", 2, 4, 64, 20, 1e-6f, TensorType::kQ8_0},
      {"specials_f16", 3, 4, 96, 20, 1e-6f, TensorType::kF16, true, 1},
  };
  uint64_t seed = 950;
  for (const HcPreNormCase& c : cases) {
    SCOPED_TRACE("hc_pre_norm case " + c.name);
    if (!supported(Op::kMatmul, c.fn_type)) continue;
    Ctx x(be());
    Rng rng(++seed);
    const int64_t n_mix = (2 + c.hc) * c.hc, HD = c.hc * c.D;
    std::vector<float> X = rng.normals(c.n * HD), base = rng.normals(n_mix, 0.5f), normw = rng.normals(c.D, 0.5f);
    std::vector<float> scale = {rng.uniform(0.3f, 2.0f), rng.uniform(0.3f, 2.0f), rng.uniform(0.3f, 2.0f)};
    if (c.specials) inject_specials(X, rng, 6);
    const int64_t ne[2] = {HD, n_mix};
    backend::HcPreNormArgs a;
    const float sigma = 1.5f / std::sqrt(static_cast<float>(HD));  // mix values of order 1
    a.fn = x.weight(c.fn_type, weight_bytes(c.fn_type, HD, n_mix, rng, WeightGen::kRandom, sigma), 2, ne);
    const uint8_t* fn_bytes = x.host_bytes_of_last();
    a.X = x.f32(X, HD, c.n);
    a.scale = x.f32_1d(scale);
    a.base = x.f32_1d(base);
    a.hc_eps = c.eps;
    a.iters = c.iters;
    if (c.norm_weight) a.norm = x.f32_1d(normw);
    a.rms_eps = 1e-6f;
    a.streams = x.alloc(TensorType::kF32, HD, c.n);
    a.mix = x.alloc(TensorType::kF32, n_mix, c.n);
    a.collapsed = x.alloc(TensorType::kF32, c.D, c.n);
    a.x = x.alloc(TensorType::kF32, c.D, c.n);
    a.post = x.alloc(TensorType::kF32, c.hc, c.n);
    a.comb = x.alloc(TensorType::kF32, c.hc * c.hc, c.n);
    if (!x.step([&] { be().hc_pre_norm(a); })) continue;
    std::vector<float> rmix(static_cast<size_t>(c.n * n_mix)), rx(static_cast<size_t>(c.n * c.D)),
        rp(static_cast<size_t>(c.n * c.hc)), rc(static_cast<size_t>(c.n * c.hc * c.hc)), streams(static_cast<size_t>(HD)),
        coll(static_cast<size_t>(c.D));
    for (int64_t t = 0; t < c.n; ++t) {
      const float* Xt = X.data() + t * HD;
      rms_norm_row(Xt, HD, nullptr, a.rms_eps, streams.data());
      matmul(c.fn_type, fn_bytes, HD, n_mix, streams.data(), HD, 1, rmix.data() + t * n_mix, n_mix);
      hc_pre_token(rmix.data() + t * n_mix, scale.data(), base.data(), c.hc, c.D, c.eps, c.iters, Xt, coll.data(),
                   rp.data() + t * c.hc, rc.data() + t * c.hc * c.hc);
      rms_norm_row(coll.data(), c.D, c.norm_weight ? normw.data() : nullptr, a.rms_eps, rx.data() + t * c.D);
    }
    EXPECT_TRUE(same_f32("hc_pre_norm mix", rmix, x.get<float>(a.mix), c.n, n_mix));
    EXPECT_TRUE(same_f32("hc_pre_norm comb", rc, x.get<float>(a.comb), c.n, c.hc * c.hc));
    EXPECT_TRUE(same_f32("hc_pre_norm post", rp, x.get<float>(a.post), c.n, c.hc));
    EXPECT_TRUE(same_f32("hc_pre_norm x", rx, x.get<float>(a.x), c.n, c.D));
    count("hc_pre_norm");
  }
}

// ================================================================================================
// compressor_update (stateful: chunk sequences vs the reference and a whole-prompt call)
// ================================================================================================

struct CompCase {
  std::string name;
  int64_t ratio, coff, d, n_rot;
  std::vector<int64_t> chunks;
  bool views = false;  // a and z as column slices of one [n][2·coff·d] tensor
  int specials = 0;    // 1: NaN / ±inf in z and a, 2: z spread wide (exp underflow)
};

std::vector<CompCase> comp_cases() {
  return {
      {"csa_real_r4_d512", 4, 2, 512, 64, {1, 3, 4, 9, 2, 5, 8}},
      {"csa_indexer_r4_d128", 4, 2, 128, 64, {7, 1, 1, 1, 12, 3}, true},
      {"hca_real_r128_d512", 128, 1, 512, 64, {1, 3, 124, 128, 257, 5}},
      {"csa_r8_d24", 8, 2, 24, 8, {1, 3, 8, 17, 2, 1, 9, 7}},
      {"hca_r4_d20", 4, 1, 20, 4, {1, 3, 4, 9, 2, 13}, true},
      {"hca_r5_odd", 5, 1, 12, 4, {2, 3, 11, 1, 1, 4}},
      {"csa_r3_odd", 3, 2, 10, 2, {1, 3, 7, 2, 6}},
      {"csa_r128_d16", 128, 2, 16, 8, {1, 128, 257, 3}},
      {"csa_specials", 4, 2, 32, 8, {5, 4, 9, 6}, false, 1},
      {"hca_wide_z", 4, 1, 32, 8, {4, 8, 5}, false, 2},
  };
}

struct CompRun {
  Tensor ring_a, ring_z, entries;
  int64_t capacity;
};

TEST_P(Conformance, CompressorUpdate) {
  uint64_t seed = 1000;
  for (const CompCase& c : comp_cases()) {
    SCOPED_TRACE("compressor_update case " + c.name);
    Ctx x(be());
    Rng rng(++seed);
    const int64_t width = c.coff * c.d, rr = c.coff * c.ratio;
    const int64_t P = std::accumulate(c.chunks.begin(), c.chunks.end(), int64_t{0});
    std::vector<float> a_all = rng.normals(P * width), z_all = rng.normals(P * width, 2.0f);
    if (c.specials == 1) {
      inject_specials(a_all, rng, 6);
      z_all[static_cast<size_t>(3 * width + 1)] = f_nan();
      for (int64_t p = 0; p < P; ++p) z_all[static_cast<size_t>(p * width + 2)] = -f_inf();  // every candidate −inf
      z_all[static_cast<size_t>(9 * width + 5)] = f_inf();
      z_all[static_cast<size_t>(10 * width + 6)] = -f_inf();
    } else if (c.specials == 2) {
      for (auto& z : z_all) z *= 40.0f;
    }
    const std::vector<float> ape = rng.normals(c.ratio * width, 0.5f);
    std::vector<float> norm = rng.normals(c.d, 0.2f);
    for (auto& v : norm) v += 1.0f;
    std::vector<float> fr(static_cast<size_t>(c.n_rot / 2));
    for (int64_t k = 0; k < c.n_rot / 2; ++k) fr[static_cast<size_t>(k)] = static_cast<float>(std::pow(160000.0, -2.0 * k / c.n_rot));
    const float eps = 1e-6f;
    const Tensor ape_t = x.f32(ape, width, c.ratio), norm_t = x.f32_1d(norm), fr_t = x.f32_1d(fr);

    CompressorHistory hist{c.ratio, c.coff, c.d, {}, {}};
    const int64_t capacity = P / c.ratio + 2;
    auto make_state = [&] {
      CompressorTensors s;
      s.ring_a = x.alloc(TensorType::kF32, width, rr);
      s.ring_z = x.alloc(TensorType::kF32, width, rr);
      s.entries = x.alloc(TensorType::kF32, c.d, capacity);
      return s;
    };
    auto update = [&](const CompressorTensors& s, int64_t p0, int64_t n) {
      CompressorUpdate u;
      std::vector<float> a(a_all.begin() + p0 * width, a_all.begin() + (p0 + n) * width),
          z(z_all.begin() + p0 * width, z_all.begin() + (p0 + n) * width);
      if (c.views) {
        std::vector<float> az(static_cast<size_t>(n * 2 * width));
        for (int64_t t = 0; t < n; ++t) {
          std::copy(a.begin() + t * width, a.begin() + (t + 1) * width, az.begin() + t * 2 * width);
          std::copy(z.begin() + t * width, z.begin() + (t + 1) * width, az.begin() + t * 2 * width + width);
        }
        const Tensor azt = x.f32(az, 2 * width, n);
        u.a = azt.cols(0, width);
        u.z = azt.cols(width, width);
      } else {
        u.a = x.f32(a, width, n);
        u.z = x.f32(z, width, n);
      }
      u.ape = ape_t;
      u.norm = norm_t;
      u.freqs = fr_t;
      u.p0 = p0;
      u.ratio = c.ratio;
      u.coff = c.coff;
      u.d = c.d;
      u.n_rot = c.n_rot;
      u.eps = eps;
      return x.step([&] { be().compressor_update(u, s); });
    };
    // Reference entries for every closed window.
    for (int64_t p = 0; p < P; ++p)
      hist.push(a_all.data() + p * width, z_all.data() + p * width, ape.data());
    std::vector<float> ref_entries(static_cast<size_t>((P / c.ratio) * c.d));
    for (int64_t w = 0; w < P / c.ratio; ++w)
      compressor_entry(hist, w, norm.data(), fr.data(), c.n_rot, eps, ref_entries.data() + w * c.d);

    auto check = [&](const CompressorTensors& s, int64_t pos, const std::string& when) {
      const int64_t closed = pos / c.ratio;
      const std::vector<float> got = x.get<float>(s.entries);
      const std::vector<float> ref(ref_entries.begin(), ref_entries.begin() + closed * c.d);
      bool ok = same_f32("entries " + when, ref, got, closed, c.d);
      EXPECT_TRUE(ok);
      ok = poison_rows("entries of windows not closed " + when, got, c.d, closed, capacity);
      EXPECT_TRUE(ok);
      // Ring rows: position p at slot p mod (coff·r) for the last coff·r positions; others untouched.
      const std::vector<float> ga = x.get<float>(s.ring_a), gz = x.get<float>(s.ring_z);
      std::vector<float> ra = poison_bytes_f32(rr * width), rz = ra;
      for (int64_t p = std::max<int64_t>(0, pos - rr); p < pos; ++p) {
        std::copy(hist.a_row(p), hist.a_row(p) + width, ra.begin() + (p % rr) * width);
        std::copy(hist.z_row(p), hist.z_row(p) + width, rz.begin() + (p % rr) * width);
      }
      EXPECT_TRUE(same_f32("ring_a " + when, ra, ga, rr, width));
      EXPECT_TRUE(same_f32("ring_z (z + ape) " + when, rz, gz, rr, width));
      return ok;
    };

    const CompressorTensors chunked = make_state();
    int64_t p0 = 0;
    bool ok = true;
    for (int64_t n : c.chunks) {
      const std::string when = "after chunk [" + std::to_string(p0) + ", " + std::to_string(p0 + n) + ")";
      ok = update(chunked, p0, n) && ok;
      count("compressor_update (chunk calls)");
      p0 += n;
      if (!check(chunked, p0, when)) break;
    }
    count("compressor_update");
    // The whole prompt as one call: same entries and ring as the chunks.
    const CompressorTensors whole = make_state();
    if (update(whole, 0, P)) {
      check(whole, P, "after the whole prompt in one call");
      EXPECT_TRUE(same_f32("whole-prompt entries vs chunked", x.get<float>(chunked.entries), x.get<float>(whole.entries),
                           capacity, c.d));
    }
    count("compressor_update");
  }
}

// ================================================================================================
// indexer_topk
// ================================================================================================

struct IdxCase {
  std::string name;
  int64_t nI, dI, top_k, ratio, p0, n, capacity;
  int keys = 0;  // 0 random, 1 all rows identical, 2 four distinct rows repeated, 3 some rows +inf,
                 // 4 unit rows (scores = the scaled g exactly; with g = 4)
  int g = 0;     // 0 random, 1 zero, 2 NaN for query 1, 3 query-dependent signs (inf / NaN scores),
                 // 4 adjacent g0 < g1 whose (g·gscale0)·gscale1 round to one value (a tie) while
                 //   g·(gscale0·gscale1) do not: only the defined association selects entries 0..4
  float gs0 = 0.0883883476f, gs1 = 0.125f;
};

std::vector<IdxCase> idx_cases() {
  return {
      {"real_visible_511_to_513", 64, 128, 512, 4, 2043, 12, 600},
      {"real_visible_far_above", 64, 128, 512, 4, 2399, 3, 610},
      {"p0_zero_visible_0_1", 64, 128, 512, 4, 0, 6, 4},
      {"small_crossing", 3, 16, 5, 2, 7, 9, 20},
      {"topk_ge_visible", 4, 32, 64, 4, 17, 5, 8},
      {"all_keys_equal", 4, 32, 5, 2, 20, 4, 16},
      {"dup_keys_ties", 4, 32, 7, 2, 30, 5, 24, 2},
      {"inf_nan_scores", 3, 16, 6, 2, 28, 4, 20, 3, 3},
      {"g_zero", 2, 16, 4, 3, 30, 3, 16, 0, 1},
      {"g_nan_query", 2, 16, 4, 2, 20, 3, 16, 0, 2},
      {"ratio128_visible_2", 8, 64, 1, 128, 383, 2, 4},
      {"gscale_rounding_ties", 2, 4, 5, 1, 9, 2, 12, 4, 4, 0.0883883476f, 0.57735026f},
  };
}

TEST_P(Conformance, IndexerTopk) {
  uint64_t seed = 1100;
  for (const IdxCase& c : idx_cases()) {
    SCOPED_TRACE("indexer_topk case " + c.name);
    Ctx x(be());
    Rng rng(++seed);
    std::vector<float> qI = rng.normals(c.n * c.nI * c.dI), g = rng.normals(c.n * c.nI);
    std::vector<float> keys = rng.normals(c.capacity * c.dI);
    const int64_t max_visible = (c.p0 + c.n) / c.ratio;
    if (c.keys == 1) {
      for (int64_t w = 1; w < c.capacity; ++w) std::copy(keys.begin(), keys.begin() + c.dI, keys.begin() + w * c.dI);
    } else if (c.keys == 2) {
      for (int64_t w = 4; w < c.capacity; ++w) {
        const int64_t src = rng.range(0, 3);
        std::copy(keys.begin() + src * c.dI, keys.begin() + (src + 1) * c.dI, keys.begin() + w * c.dI);
      }
    } else if (c.keys == 3) {
      for (int64_t w = 0; w < c.capacity; w += 3) keys[static_cast<size_t>(w * c.dI)] = f_inf();
      for (int64_t i = 0; i < c.n * c.nI; ++i) qI[static_cast<size_t>(i * c.dI)] = std::fabs(qI[static_cast<size_t>(i * c.dI)]) + 0.1f;
    }
    if (c.keys == 4) {
      std::fill(qI.begin(), qI.end(), 0.0f);
      std::fill(keys.begin(), keys.end(), 0.0f);
      for (int64_t t = 0; t < c.n; ++t)
        for (int64_t h = 0; h < c.nI; ++h) qI[static_cast<size_t>((t * c.nI + h) * c.dI + h)] = 1.0f;
      for (int64_t w = 0; w < c.capacity; ++w) keys[static_cast<size_t>(w * c.dI + (w < 5 ? 0 : 1))] = 1.0f;
    }
    if (c.g == 4) {
      float g0 = 1.0f, g1 = 1.0f;
      for (int i = 0; i < 1 << 22; ++i, g0 = g1) {
        g1 = std::nextafter(g0, 2.0f);
        if ((g0 * c.gs0) * c.gs1 == (g1 * c.gs0) * c.gs1 && g0 * (c.gs0 * c.gs1) != g1 * (c.gs0 * c.gs1)) break;
      }
      ASSERT_EQ((g0 * c.gs0) * c.gs1, (g1 * c.gs0) * c.gs1) << "no rounding tie found";
      for (int64_t t = 0; t < c.n; ++t) g[static_cast<size_t>(t * c.nI)] = g0, g[static_cast<size_t>(t * c.nI + 1)] = g1;
    }
    if (c.g == 1) std::fill(g.begin(), g.end(), 0.0f);
    if (c.g == 2) std::fill(g.begin() + c.nI, g.begin() + 2 * c.nI, f_nan());
    if (c.g == 3)
      for (int64_t t = 0; t < c.n; ++t)
        for (int64_t h = 0; h < c.nI; ++h) {
          float& v = g[static_cast<size_t>(t * c.nI + h)];
          v = (t % 2 == 0 || h == 0) ? std::fabs(v) : -std::fabs(v);  // even t: +inf scores; odd: NaN
        }
    // Rows beyond what any query sees hold poison (NaN): reading them may not change the result.
    for (int64_t i = max_visible * c.dI; i < c.capacity * c.dI; ++i) keys[static_cast<size_t>(i)] = poison_f32();
    const Tensor qt = x.f32(qI, c.nI * c.dI, c.n), gt = x.f32(g, c.nI, c.n), kt = x.f32(keys, c.dI, c.capacity);
    const Tensor out = x.alloc(TensorType::kI32, c.top_k, c.n);
    if (!x.step([&] { be().indexer_topk(qt, gt, c.gs0, c.gs1, kt, c.p0, c.ratio, out); })) continue;
    std::vector<int32_t> ref(static_cast<size_t>(c.n * c.top_k));
    for (int64_t t = 0; t < c.n; ++t)
      indexer_topk_query(qI.data() + t * c.nI * c.dI, g.data() + t * c.nI, c.nI, c.dI, c.gs0, c.gs1, keys.data(), c.p0 + t,
                         c.ratio, c.top_k, ref.data() + t * c.top_k);
    EXPECT_TRUE(same_i32("indexer_topk out", ref, x.get<int32_t>(out), c.n, c.top_k));
    count("indexer_topk");
  }
}

// ================================================================================================
// attention + kv_store (chunk sequences over the ring)
// ================================================================================================

enum class AttnKind { kSliding, kHca, kCsa };

struct AttnCase {
  std::string name;
  AttnKind kind;
  int64_t H, d, W, ratio, top_k;
  int64_t start;                // first position; a ring of the earlier positions is uploaded when > 0
  std::vector<int64_t> chunks;  // attention + kv_store per chunk
  int specials = 0;             // 1: sinks ±inf / large, a NaN query element, huge logits
  bool unsorted = false;        // CSA: comp_index not ascending, with repeats
};

std::vector<AttnCase> attn_cases() {
  return {
      {"real_csa_topk512_p2200", AttnKind::kCsa, 64, 512, 128, 4, 512, 2200, {3}},
      {"real_hca_r128_p300", AttnKind::kHca, 64, 512, 128, 128, 0, 300, {2}},
      {"real_sliding_p127", AttnKind::kSliding, 64, 512, 128, 0, 0, 127, {2}},
      {"sliding_W128_seq", AttnKind::kSliding, 8, 512, 128, 0, 0, 0, {1, 127, 128, 300, 3}},
      {"hca_W8_r4_seq", AttnKind::kHca, 4, 64, 8, 4, 0, 0, {1, 3, 4, 8, 9, 2, 16}},
      {"csa_W8_r2_seq", AttnKind::kCsa, 3, 40, 8, 2, 3, 0, {1, 7, 8, 17, 2}},
      {"csa_unsorted_index", AttnKind::kCsa, 2, 24, 4, 2, 5, 6, {5, 4}, 0, true},
      {"hca_odd_d7_W5", AttnKind::kHca, 5, 7, 5, 3, 0, 0, {2, 5, 6, 1, 11}},
      {"specials", AttnKind::kHca, 6, 32, 8, 4, 0, 9, {4, 9}, 1},
      {"one_head_W1", AttnKind::kSliding, 1, 16, 1, 0, 0, 0, {1, 2, 3}},
  };
}

// The inputs of an attention case: every position's kv row, the queries of positions ≥ start,
// sinks, compressed entries and (CSA) each query's comp_index row.
struct AttnData {
  int64_t P = 0, capacity = 0;
  std::vector<float> kv_all, q_all, sinks, comp;
  std::vector<int32_t> index_all;
};

AttnData attn_data(const AttnCase& c, Rng& rng) {
  AttnData d;
  d.P = c.start + std::accumulate(c.chunks.begin(), c.chunks.end(), int64_t{0});
  const int64_t Hd = c.H * c.d;
  d.kv_all = rng.normals(d.P * c.d);
  d.sinks = rng.normals(c.H);
  d.q_all = rng.normals((d.P - c.start) * Hd);
  d.capacity = c.kind == AttnKind::kSliding ? 0 : d.P / c.ratio + 1;
  d.comp = rng.normals(d.capacity * c.d);
  if (c.specials == 1) {
    d.sinks[0] = -f_inf();
    d.sinks[1] = 30.0f;
    d.sinks[2] = f_inf();
    d.q_all[static_cast<size_t>(3 * c.d)] = f_nan();  // query 0 head 3
    for (int64_t i = 0; i < c.d; ++i) d.q_all[static_cast<size_t>(Hd + 4 * c.d + i)] *= 300.0f;  // query 1 head 4
    d.kv_all[static_cast<size_t>((c.start + 2) * c.d + 1)] = 1e30f;  // a key whose logits overflow
  }
  if (c.kind == AttnKind::kCsa) {  // a selection of visible entries (ascending unless unsorted), −1 padded
    d.index_all.assign(static_cast<size_t>((d.P - c.start) * c.top_k), -1);
    for (int64_t p = c.start; p < d.P; ++p) {
      const int64_t vis = (p + 1) / c.ratio;
      std::vector<int32_t> sel;
      for (int64_t w = 0; w < vis; ++w) sel.push_back(static_cast<int32_t>(w));
      std::shuffle(sel.begin(), sel.end(), rng.g);
      int64_t m = std::min(vis, c.top_k);
      if (p % 3 == 1) m = std::min<int64_t>(m, rng.range(0, m));  // fewer than top_k
      sel.resize(static_cast<size_t>(m));
      if (c.unsorted) {
        if (m > 0) sel.push_back(sel[0]);  // a repeat
        if (static_cast<int64_t>(sel.size()) > c.top_k) sel.resize(static_cast<size_t>(c.top_k));
      } else {
        std::sort(sel.begin(), sel.end());
      }
      std::copy(sel.begin(), sel.end(), d.index_all.begin() + (p - c.start) * c.top_k);
      if (c.unsorted && m < c.top_k - 1 && p % 2 == 0)  // entries after a −1 are never read
        d.index_all[static_cast<size_t>((p - c.start) * c.top_k + c.top_k - 1)] = 0;
    }
  }
  return d;
}

// Runs attention + kv_store over `chunks` (from c.start, with the ring of the earlier positions
// uploaded), checking each chunk's o and the ring against the reference; returns every chunk's o
// concatenated (empty on an op error).
std::vector<float> run_attention(Backend& be, const AttnCase& c, const AttnData& d, const std::vector<int64_t>& chunks,
                                 const std::function<void()>& counted) {
  Ctx x(be);
  const int64_t Hd = c.H * c.d;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.d)));
  const Tensor ring = x.alloc(TensorType::kF32, c.d, c.W);
  std::vector<float> ring_ref = poison_bytes_f32(c.W * c.d);
  for (int64_t p = std::max<int64_t>(0, c.start - c.W); p < c.start; ++p)
    std::copy(d.kv_all.begin() + p * c.d, d.kv_all.begin() + (p + 1) * c.d, ring_ref.begin() + (p % c.W) * c.d);
  x.put(ring, ring_ref.data(), c.W * c.d * 4);
  const Tensor sinks_t = x.f32_1d(d.sinks);
  const Tensor comp_t = d.capacity > 0 ? x.alloc(TensorType::kF32, c.d, d.capacity) : Tensor{};
  std::vector<float> o_all;
  int64_t p0 = c.start;
  for (int64_t n : chunks) {
    SCOPED_TRACE("chunk [" + std::to_string(p0) + ", " + std::to_string(p0 + n) + ")");
    AttentionArgs a;
    a.q = x.f32(std::vector<float>(d.q_all.begin() + (p0 - c.start) * Hd, d.q_all.begin() + (p0 - c.start + n) * Hd), Hd, n);
    a.kv = x.f32(std::vector<float>(d.kv_all.begin() + p0 * c.d, d.kv_all.begin() + (p0 + n) * c.d), c.d, n);
    a.ring = ring;
    if (d.capacity > 0) {  // entries no query of the chunk may see are poisoned
      const int64_t vis = (p0 + n) / c.ratio;
      std::vector<float> cp = poison_bytes_f32(d.capacity * c.d);
      std::copy(d.comp.begin(), d.comp.begin() + vis * c.d, cp.begin());
      x.put(comp_t, cp.data(), d.capacity * c.d * 4);
      a.comp = comp_t;
    }
    if (c.kind == AttnKind::kCsa)
      a.comp_index = x.i32(std::vector<int32_t>(d.index_all.begin() + (p0 - c.start) * c.top_k,
                                                d.index_all.begin() + (p0 - c.start + n) * c.top_k),
                           c.top_k, n);
    a.sinks = sinks_t;
    a.o = x.alloc(TensorType::kF32, Hd, n);
    a.p0 = p0;
    a.n_head = c.H;
    a.window = c.W;
    a.ratio = c.ratio;
    a.scale = scale;
    const Tensor kv_t = a.kv;
    const int64_t chunk_p0 = p0;
    if (!x.step([&] {
          be.attention(a);
          be.kv_store(kv_t, chunk_p0, ring);
        }))
      return {};
    // Reference: the keys straight from the position history (no ring).
    std::vector<float> ref(static_cast<size_t>(n * Hd));
    for (int64_t t = 0; t < n; ++t) {
      const int64_t p = p0 + t;
      std::vector<const float*> keys;
      for (int64_t k = raw_first(p, c.W); k <= p; ++k) keys.push_back(d.kv_all.data() + k * c.d);
      if (c.kind == AttnKind::kHca)
        for (int64_t w = 0; w < (p + 1) / c.ratio; ++w) keys.push_back(d.comp.data() + w * c.d);
      if (c.kind == AttnKind::kCsa)
        for (int64_t i = 0; i < c.top_k; ++i) {
          const int32_t w = d.index_all[static_cast<size_t>((p - c.start) * c.top_k + i)];
          if (w < 0) break;
          keys.push_back(d.comp.data() + w * c.d);
        }
      attention_query(d.q_all.data() + (p - c.start) * Hd, c.H, c.d, keys, d.sinks.data(), scale, ref.data() + t * Hd);
    }
    const std::vector<float> got = x.get<float>(a.o);
    EXPECT_TRUE(same_f32("attention o", ref, got, n, Hd));
    o_all.insert(o_all.end(), got.begin(), got.end());
    // kv_store: the rows of positions max(p0, p0 + n − W) … p0 + n − 1 at slot p mod W.
    for (int64_t p = std::max(p0, p0 + n - c.W); p < p0 + n; ++p) {
      const int64_t slot = (mutated("kvs_slot_shift") ? p + 1 : p) % c.W;
      std::copy(d.kv_all.begin() + p * c.d, d.kv_all.begin() + (p + 1) * c.d, ring_ref.begin() + slot * c.d);
    }
    EXPECT_TRUE(same_f32("ring after kv_store", ring_ref, x.get<float>(ring), c.W, c.d));
    p0 += n;
    counted();
  }
  return o_all;
}

TEST_P(Conformance, AttentionAndKvStore) {
  uint64_t seed = 1200;
  for (const AttnCase& c : attn_cases()) {
    SCOPED_TRACE("attention case " + c.name);
    Rng rng(++seed);
    const AttnData d = attn_data(c, rng);
    auto counted = [&] { count("attention+kv_store (chunk calls)"); };
    const std::vector<float> chunked = run_attention(be(), c, d, c.chunks, counted);
    count("attention");
    if (c.chunks.size() > 1 && !chunked.empty()) {  // the same positions as one chunk: the same bits
      SCOPED_TRACE("whole prompt in one chunk");
      const std::vector<float> whole = run_attention(be(), c, d, {d.P - c.start}, counted);
      EXPECT_TRUE(same_f32("attention o: whole prompt vs chunked", chunked, whole, d.P - c.start, c.H * c.d));
      count("attention");
    }
  }
}

struct KvsCase {
  std::string name;
  int64_t W, d, p0, n;
  bool prefilled;  // the ring holds earlier rows (else poison)
};

std::vector<KvsCase> kvs_cases() {
  return {
      {"first_chunk_short", 8, 5, 0, 3, false},
      {"wrap", 8, 5, 6, 5, true},
      {"longer_than_window", 8, 5, 3, 20, true},
      {"exactly_window", 8, 5, 16, 8, true},
      {"ends_at_window_close", 8, 5, 5, 3, true},
      {"real_W128_n300", 128, 512, 100, 300, true},
      {"real_W128_decode", 128, 512, 4095, 1, true},
      {"W1", 1, 3, 7, 4, true},
  };
}

TEST_P(Conformance, KvStore) {
  uint64_t seed = 1300;
  for (const KvsCase& c : kvs_cases()) {
    SCOPED_TRACE("kv_store case " + c.name);
    Ctx x(be());
    Rng rng(++seed);
    std::vector<float> ring_ref = c.prefilled ? rng.normals(c.W * c.d) : poison_bytes_f32(c.W * c.d);
    const Tensor ring = x.alloc(TensorType::kF32, c.d, c.W);
    x.put(ring, ring_ref.data(), c.W * c.d * 4);
    const std::vector<float> kv = rng.normals(c.n * c.d);
    const Tensor kv_t = x.f32(kv, c.d, c.n);
    if (!x.step([&] { be().kv_store(kv_t, c.p0, ring); })) continue;
    for (int64_t p = std::max(c.p0, c.p0 + c.n - c.W); p < c.p0 + c.n; ++p) {
      const int64_t slot = (mutated("kvs_slot_shift") ? p + 1 : p) % c.W;
      std::copy(kv.begin() + (p - c.p0) * c.d, kv.begin() + (p - c.p0 + 1) * c.d, ring_ref.begin() + slot * c.d);
    }
    EXPECT_TRUE(same_f32("ring (stored rows, the rest untouched)", ring_ref, x.get<float>(ring), c.W, c.d));
    count("kv_store");
  }
}

// ================================================================================================
// route
// ================================================================================================

struct RouteCase {
  std::string name;
  int64_t n, E, K;
  bool bias, hash;
  bool norm = true;
  float scale = 1.5f;
  int logits = 0;  // 0 normal, 1 few values (ties), 2 NaN logits / bias, 3 ±inf, 4 tiny (sum near 1e-20), 5 all −200, 6 huge bias
  int64_t vocab = 1000;
};

std::vector<RouteCase> route_cases() {
  return {
      {"real_E256_K6_bias", 5, 256, 6, true, false},
      {"real_no_bias", 4, 256, 6, false, false},
      {"real_hash", 7, 256, 6, false, true},
      {"hash_with_bias_ignored", 3, 256, 6, true, true},
      {"no_norm", 4, 64, 6, true, false, false, 2.5f},
      {"ties", 6, 32, 5, true, false, true, 1.0f, 1},
      {"ties_no_bias", 6, 32, 5, false, false, true, 1.0f, 1},
      {"nan_logits_and_bias", 4, 16, 6, true, false, true, 1.5f, 2},
      {"inf_logits", 4, 16, 4, false, false, true, 1.5f, 3},
      {"tiny_sum_eps", 4, 16, 6, false, false, true, 1.0f, 4},
      {"all_zero_scores", 2, 16, 6, true, false, true, 1.0f, 5},
      {"bias_dominates", 3, 64, 6, true, false, true, 1.5f, 6},
      {"k_equals_e", 3, 7, 7, true, false},
      {"k1", 3, 9, 1, true, false},
      {"hash_no_norm", 3, 16, 3, false, true, false, 0.5f},
  };
}

TEST_P(Conformance, Route) {
  uint64_t seed = 1400;
  for (const RouteCase& c : route_cases()) {
    SCOPED_TRACE("route case " + c.name);
    Ctx x(be());
    Rng rng(++seed);
    std::vector<float> logits = rng.normals(c.n * c.E, 2.0f), bias = rng.normals(c.E, 0.3f);
    switch (c.logits) {
      case 1: {
        const float vals[] = {-1.0f, 0.5f, 2.0f};
        for (auto& l : logits) l = vals[rng.range(0, 2)];
        const float bvals[] = {0.0f, 0.25f};
        for (auto& b : bias) b = bvals[rng.range(0, 1)];
        break;
      }
      case 2:
        logits[3] = f_nan();
        logits[static_cast<size_t>(c.E + 5)] = f_nan();
        bias[1] = f_nan();
        bias[7] = f_nan();
        bias[8] = f_nan();
        break;
      case 3:
        logits[2] = f_inf();
        logits[static_cast<size_t>(c.E + 1)] = -f_inf();
        logits[static_cast<size_t>(2 * c.E + 3)] = f_inf();
        logits[static_cast<size_t>(2 * c.E + 4)] = f_inf();
        break;
      case 4:
        for (auto& l : logits) l = rng.uniform(-100.0f, -88.0f);
        break;
      case 5:
        std::fill(logits.begin(), logits.end(), -200.0f);
        break;
      case 6:
        for (auto& b : bias) b *= 1000.0f;
        break;
      default: break;
    }
    std::vector<int32_t> table, tokens(static_cast<size_t>(c.n));
    if (c.hash) {
      table.resize(static_cast<size_t>(c.vocab * c.K));
      std::vector<int32_t> perm(static_cast<size_t>(c.E));
      std::iota(perm.begin(), perm.end(), 0);
      for (int64_t v = 0; v < c.vocab; ++v) {
        std::shuffle(perm.begin(), perm.end(), rng.g);
        std::copy(perm.begin(), perm.begin() + c.K, table.begin() + v * c.K);
      }
      for (auto& t : tokens) t = static_cast<int32_t>(rng.range(0, c.vocab - 1));
      tokens[0] = static_cast<int32_t>(c.vocab - 1);
    }
    RouteArgs r;
    r.logits = x.f32(logits, c.E, c.n);
    if (c.bias) r.bias = x.f32_1d(bias);
    if (c.hash) {
      r.tid2eid = x.i32(table, c.K, c.vocab);
      r.tokens = x.i32_1d(tokens);
    }
    r.ids = x.alloc(TensorType::kI32, c.K, c.n);
    r.weights = x.alloc(TensorType::kF32, c.K, c.n);
    r.k = c.K;
    r.norm = c.norm;
    r.scale = c.scale;
    if (!x.step([&] { be().route(r); })) continue;
    std::vector<int32_t> rid(static_cast<size_t>(c.n * c.K));
    std::vector<float> rw(rid.size());
    for (int64_t t = 0; t < c.n; ++t)
      route_token(logits.data() + t * c.E, c.E, c.bias ? bias.data() : nullptr,
                  c.hash ? table.data() + tokens[static_cast<size_t>(t)] * c.K : nullptr, c.K, c.norm, c.scale,
                  rid.data() + t * c.K, rw.data() + t * c.K);
    EXPECT_TRUE(same_i32("route ids", rid, x.get<int32_t>(r.ids), c.n, c.K));
    EXPECT_TRUE(same_f32("route weights", rw, x.get<float>(r.weights), c.n, c.K));
    count("route");
  }
}

// ================================================================================================
// moe
// ================================================================================================

struct MoeCase {
  std::string name;
  int64_t n, D, I, E, K;
  TensorType gt, ut, dt;
  bool shared;
  TensorType st = TensorType::kQ8_0;
  float limit_exp = 10.0f, limit_sh = 10.0f;
  int special = 0;  // 1: weights 1 / 0 / negative, 2: NaN g, NaN u, inf u (F32 experts), 3: x specials
};

std::vector<MoeCase> moe_cases() {
  std::vector<MoeCase> v;
  for (TensorType t : kWeightTypes)
    v.push_back({"uniform_" + tname(t), 3, 256, 256, 4, 2, t, t, t, true, t, 3.0f, 2.5f});
  v.push_back({"real_D4096_iq2xxs_q2k_sh_q8_0", 2, 4096, 256, 8, 6, TensorType::kIQ2_XXS, TensorType::kIQ2_XXS,
               TensorType::kQ2_K, true, TensorType::kQ8_0});
  v.push_back({"many_tokens_n17", 17, 256, 256, 6, 4, TensorType::kQ8_0, TensorType::kQ8_0, TensorType::kQ4_K, true,
               TensorType::kBF16, 3.0f, 4.0f});
  v.push_back({"decode_n1_no_shared", 1, 256, 256, 5, 3, TensorType::kMXFP4, TensorType::kMXFP4, TensorType::kQ8_0,
               false});
  v.push_back({"weights_one_zero_negative", 4, 256, 256, 4, 3, TensorType::kF16, TensorType::kF16, TensorType::kF32,
               false, TensorType::kF32, 3.0f, 3.0f, 1});
  v.push_back({"swiglu_nan_inf", 3, 64, 32, 3, 2, TensorType::kF32, TensorType::kF32, TensorType::kF32, true,
               TensorType::kF32, 2.0f, 1.5f, 2});
  v.push_back({"swiglu_nan_q8_0_down", 3, 64, 32, 3, 2, TensorType::kF32, TensorType::kF32, TensorType::kQ8_0, false,
               TensorType::kF32, 2.0f, 1.5f, 2});
  v.push_back({"x_specials", 3, 256, 256, 4, 2, TensorType::kBF16, TensorType::kQ4_K, TensorType::kF32, true,
               TensorType::kF32, 3.0f, 3.0f, 3});
  return v;
}

TEST_P(Conformance, Moe) {
  uint64_t seed = 1500;
  for (const MoeCase& c : moe_cases()) {
    SCOPED_TRACE("moe case " + c.name);
    ++seed;
    if (!supported(Op::kMoe, c.gt) || !supported(Op::kMoe, c.ut) || !supported(Op::kMoe, c.dt) ||
        (c.shared && !supported(Op::kMoe, c.st)))
      continue;
    Ctx x(be());
    Rng rng(seed);
    // F32/F16/BF16 weights ~ N(0, σ) with σ·sqrt(in) ≈ 4: the clamps are active for some elements.
    auto sig = [](int64_t in) { return 4.0f / std::sqrt(static_cast<float>(in)); };
    std::vector<uint8_t> gb = weight_bytes(c.gt, c.D, c.I * c.E, rng, WeightGen::kRandom, sig(c.D));
    std::vector<uint8_t> ub = weight_bytes(c.ut, c.D, c.I * c.E, rng, WeightGen::kRandom, sig(c.D));
    std::vector<uint8_t> db = weight_bytes(c.dt, c.I, c.D * c.E, rng, WeightGen::kRandom, sig(c.I));
    if (c.special == 2) {  // expert 0: gate row 1 NaN; expert 1: up row 2 NaN, up row 3 +inf; row 4 of both huge
      auto setf = [](std::vector<uint8_t>& b, int64_t idx, float v) { std::memcpy(b.data() + 4 * idx, &v, 4); };
      setf(gb, 1 * c.D + 5, f_nan());
      setf(ub, (c.I + 2) * c.D + 7, f_nan());
      setf(ub, (c.I + 3) * c.D + 0, f_inf());
      for (int64_t e = 0; e < c.E; ++e) setf(gb, (e * c.I + 4) * c.D + 1, 1e6f), setf(ub, (e * c.I + 4) * c.D + 1, -1e6f);
    }
    const int64_t neg[3] = {c.D, c.I, c.E}, ned[3] = {c.I, c.D, c.E};
    MoeArgs m;
    MoeWeights mw{c.gt, c.ut, c.dt, nullptr, nullptr, nullptr};
    m.gate_exps = x.weight(c.gt, gb, 3, neg);
    mw.gate = x.host_bytes_of_last();
    m.up_exps = x.weight(c.ut, ub, 3, neg);
    mw.up = x.host_bytes_of_last();
    m.down_exps = x.weight(c.dt, db, 3, ned);
    mw.down = x.host_bytes_of_last();
    if (c.shared) {
      const int64_t nsg[2] = {c.D, c.I}, nsd[2] = {c.I, c.D};
      mw.has_shared = true;
      mw.gsh_t = mw.ush_t = mw.dsh_t = c.st;
      m.gate_sh = x.weight(c.st, weight_bytes(c.st, c.D, c.I, rng, WeightGen::kRandom, sig(c.D)), 2, nsg);
      mw.gsh = x.host_bytes_of_last();
      m.up_sh = x.weight(c.st, weight_bytes(c.st, c.D, c.I, rng, WeightGen::kRandom, sig(c.D)), 2, nsg);
      mw.ush = x.host_bytes_of_last();
      m.down_sh = x.weight(c.st, weight_bytes(c.st, c.I, c.D, rng, WeightGen::kRandom, sig(c.I)), 2, nsd);
      mw.dsh = x.host_bytes_of_last();
    }
    std::vector<float> xs = rng.normals(c.n * c.D);
    if (c.special == 3) inject_specials(xs, rng, 6);
    // ids: distinct per token; token 0 uses expert 0 and 1 first (the special rows), experts shared across tokens.
    std::vector<int32_t> ids(static_cast<size_t>(c.n * c.K));
    std::vector<float> wts(ids.size());
    std::vector<int32_t> perm(static_cast<size_t>(c.E));
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t t = 0; t < c.n; ++t) {
      if (t > 0) std::shuffle(perm.begin(), perm.end(), rng.g);
      for (int64_t k = 0; k < c.K; ++k) {
        ids[static_cast<size_t>(t * c.K + k)] = perm[static_cast<size_t>(k)];
        wts[static_cast<size_t>(t * c.K + k)] = rng.uniform(0.05f, 0.6f);
      }
    }
    if (c.special == 1) {
      std::fill(wts.begin(), wts.begin() + c.K, 0.0f);  // token 0: all weights 0 (out = +0, never −0)
      wts[static_cast<size_t>(c.K)] = 1.0f;              // token 1: a weight of exactly 1 (plain add)
      wts[static_cast<size_t>(c.K + 2)] = 1.0f;
      wts[static_cast<size_t>(2 * c.K + 1)] = -0.75f;    // token 2: a negative weight
      wts[static_cast<size_t>(3 * c.K)] = 0.0f;          // token 3: a zero weight first
    }
    m.x = x.f32(xs, c.D, c.n);
    m.ids = x.i32(ids, c.K, c.n);
    m.weights = x.f32(wts, c.K, c.n);
    m.out = x.alloc(TensorType::kF32, c.D, c.n);
    m.limit_exp = c.limit_exp;
    m.limit_sh = c.limit_sh;
    if (!x.step([&] { be().moe(m); })) continue;
    std::vector<float> ref(static_cast<size_t>(c.n * c.D));
    for (int64_t t = 0; t < c.n; ++t)
      moe_token(mw, c.D, c.I, xs.data() + t * c.D, ids.data() + t * c.K, wts.data() + t * c.K, c.K, c.limit_exp,
                c.limit_sh, ref.data() + t * c.D);
    EXPECT_TRUE(same_f32("moe out", ref, x.get<float>(m.out), c.n, c.D));
    count("moe");
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
