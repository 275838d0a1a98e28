// tests/unit/backend/conformance_fixture.h — the op-conformance suite's fixture, shared by its files
// (conformance_test.cpp: targets, instantiation, embed / matmul / matmul_batch, argmax / sample, errors;
// conformance_layer_test.cpp: rms_norm, rope, hc_*; conformance_attention_test.cpp: compressor_update,
// indexer_topk, attention, kv_store; conformance_moe_test.cpp: route, moe). One fixture class in a named
// namespace: gtest's parameterized registry joins the TEST_Ps of every file to the one instantiation.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "conformance_harness.h"
#include "conformance_ref.h"

namespace dsv4::conformance {

using backend::AttentionArgs;
using backend::CompressorTensors;
using backend::CompressorUpdate;
using backend::MatmulJob;
using backend::MoeArgs;
using backend::Op;
using backend::RouteArgs;

inline constexpr TensorType kWeightTypes[] = {TensorType::kF32,  TensorType::kF16,  TensorType::kBF16,    TensorType::kQ8_0,
                                       TensorType::kQ2_K, TensorType::kQ4_K, TensorType::kIQ2_XXS, TensorType::kMXFP4};

inline int64_t block_of(TensorType t) { return tensor_type_info(t).block_elems; }
inline std::string tname(TensorType t) { return std::string(tensor_type_name(t)); }

// One backend target per parameter (conformance_test.cpp lists them): SetUp creates it or skips with
// the reason (a SIMD level the CPU lacks, AMX unusable, a backend not in this build).
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

}  // namespace dsv4::conformance
