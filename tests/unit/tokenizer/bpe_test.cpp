// tests/unit/tokenizer/bpe_test.cpp — the scan and heap merge loops agree on random merge tables
// and words (ties, chains, long words), and the merge table behaves like a map.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "tokenizer/bpe.h"

namespace dsv4::tokenizer {
namespace {

TEST(MergeTable, FindAndDuplicates) {
  MergeTable m;
  m.reserve(2);
  EXPECT_TRUE(m.add(1, 2, 0, 10));
  EXPECT_FALSE(m.add(1, 2, 5, 11));  // first (lowest rank) kept
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(m.add(100 + i, 7, 1 + i, 5000 + i));  // grows past reserve
  int32_t merged = 0;
  EXPECT_EQ(m.find(1, 2, &merged), 0);
  EXPECT_EQ(merged, 10);
  EXPECT_EQ(m.find(2, 1, &merged), MergeTable::kNoRank);
  EXPECT_EQ(m.find(599, 7, &merged), 500);
  EXPECT_EQ(merged, 5499);
  EXPECT_EQ(m.size(), 1001u);
}

TEST(BpeMerge, ScanAndHeapAgree) {
  std::mt19937 rng(42);
  for (int table = 0; table < 20; ++table) {
    // Alphabet 0..3, merged ids from 4 up; merges between random existing ids.
    MergeTable m;
    m.reserve(64);
    int32_t next_id = 4;
    for (int r = 0; r < 40; ++r) {
      const auto l = static_cast<int32_t>(rng() % next_id), rr = static_cast<int32_t>(rng() % next_id);
      if (m.add(l, rr, r, next_id)) ++next_id;
    }
    for (int w = 0; w < 200; ++w) {
      const size_t n = 1 + rng() % (w < 150 ? 40 : 400);
      std::vector<int32_t> word(n);
      for (auto& x : word) x = static_cast<int32_t>(rng() % 4);
      std::vector<int32_t> a = word, b = word;
      bpe_merge(m, a, BpeAlgo::kScan);
      bpe_merge(m, b, BpeAlgo::kHeap);
      ASSERT_EQ(a, b) << "table " << table << " word " << w;
    }
  }
}

TEST(BpeMerge, ChainsAndTies) {
  MergeTable m;
  m.reserve(4);
  m.add(0, 0, 0, 10);    // a a -> A
  m.add(10, 10, 1, 11);  // A A -> B
  m.add(10, 0, 2, 12);   // A a -> C
  for (BpeAlgo algo : {BpeAlgo::kScan, BpeAlgo::kHeap}) {
    std::vector<int32_t> w = {0, 0, 0, 0, 0};  // a a a a a -> A A a -> B a
    bpe_merge(m, w, algo);
    EXPECT_EQ(w, (std::vector<int32_t>{11, 0}));
    std::vector<int32_t> w3 = {0, 0, 0};  // A a -> C
    bpe_merge(m, w3, algo);
    EXPECT_EQ(w3, (std::vector<int32_t>{12}));
  }
}

}  // namespace
}  // namespace dsv4::tokenizer
