// tests/unit/base/status_test.cpp — Status/Result, the type table, the thread pool, flags.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "base/flags.h"
#include "base/status.h"
#include "base/tensor_type.h"
#include "base/thread_pool.h"

namespace dsv4 {
namespace {

Result<int> parse_positive(int x) {
  if (x <= 0) return out_of_range("expected a positive number, got " + std::to_string(x));
  return x;
}
Status use(int x, int* out) {
  DSV4_ASSIGN_OR_RETURN(int v, parse_positive(x));
  *out = v * 2;
  return ok_status();
}

TEST(Status, ResultAndMacros) {
  int out = 0;
  EXPECT_TRUE(use(3, &out).ok());
  EXPECT_EQ(out, 6);
  Status s = use(-1, &out);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(s.with_context("f.gguf").to_string(), "out of range: f.gguf: expected a positive number, got -1");
}

TEST(TensorType, GgmlSizes) {
  EXPECT_EQ(tensor_type_info(TensorType::kQ8_0).block_bytes, 34);
  EXPECT_EQ(tensor_type_info(TensorType::kIQ2_XXS).block_bytes, 66);
  EXPECT_EQ(tensor_type_info(TensorType::kQ2_K).block_bytes, 84);
  EXPECT_EQ(tensor_type_info(TensorType::kQ4_K).block_bytes, 144);
  EXPECT_EQ(tensor_type_info(TensorType::kMXFP4).block_bytes, 17);
  EXPECT_EQ(tensor_type_info(TensorType::kQ2_0_ROCMFP2).block_bytes, 10);
  EXPECT_FALSE(tensor_type_info(42u).has_value());
  EXPECT_EQ(tensor_row_bytes(TensorType::kQ8_0, 4096), 4096 / 32 * 34);
  EXPECT_EQ(tensor_row_bytes(TensorType::kQ4_K, 100), -1);
  EXPECT_EQ(tensor_type_from_name("IQ2_XXS"), TensorType::kIQ2_XXS);
}

TEST(ThreadPool, StaticPartitionCoversEveryItemOnce) {
  for (int threads : {1, 2, 3, 7}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 5, 100, 1001}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      for (int rep = 0; rep < 3; ++rep) {
        pool.parallel_for(n, [&](int64_t b, int64_t e, int t) {
          EXPECT_EQ(b, n * t / threads);
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
        });
      }
      for (auto& h : hits) EXPECT_EQ(h.load(), 3);
    }
  }
}

TEST(Flags, RegistryOverridesDefaults) {
  EXPECT_EQ(flag_value("simd").empty(), false);
  EXPECT_TRUE(set_flag("threads", "3").ok());
  EXPECT_EQ(flag_int("threads").value(), 3);
  EXPECT_FALSE(set_flag("no-such-flag", "1").ok());
  EXPECT_TRUE(set_flag("threads", "x").ok());
  EXPECT_FALSE(flag_int("threads").ok());
  EXPECT_TRUE(set_flag("threads", "0").ok());
}

}  // namespace
}  // namespace dsv4
