// tests/unit/base/status_test.cpp — Status/Result, the type table, the thread pool, flags.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
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

TEST(ThreadPool, ChunksCoverEveryItemOnceOnGrainBoundaries) {
  for (int threads : {1, 2, 3, 7}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 5, 100, 1001, 4096}) {
      for (int64_t grain : {1, 3, 48, 100, 5000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int> bad_range{0}, bad_thread{0};
        for (int rep = 0; rep < 3; ++rep) {
          pool.parallel_for_chunks(n, grain, [&](int64_t b, int64_t e, int t) {
            // [b, e) is one chunk: it starts on a multiple of grain and ends at the next one or at n.
            if (b % grain != 0 || e != std::min(n, b + grain) || b >= e) bad_range++;
            if (t < 0 || t >= threads) bad_thread++;
            for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
          });
        }
        EXPECT_EQ(bad_range.load(), 0) << "threads " << threads << " n " << n << " grain " << grain;
        EXPECT_EQ(bad_thread.load(), 0);
        for (auto& h : hits) EXPECT_EQ(h.load(), 3);
      }
    }
  }
}

TEST(ThreadPool, ChunksGoToTheFreeThreads) {
  // The first chunk to start holds its thread until the other thread has done the other 63 items (or 10 s
  // pass): only chunks taken by whichever thread is free get there (a static split would leave the held
  // thread's half undone until it returns).
  ThreadPool pool(2);
  std::atomic<int> held{-1}, by_others{0}, items{0};
  pool.parallel_for_chunks(64, 1, [&](int64_t b, int64_t e, int t) {
    int none = -1;
    if (held.compare_exchange_strong(none, t)) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (by_others.load() < 63 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    } else if (t != held.load()) {
      by_others += static_cast<int>(e - b);
    }
    items += static_cast<int>(e - b);
  });
  EXPECT_EQ(items.load(), 64);
  EXPECT_EQ(by_others.load(), 63);
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
