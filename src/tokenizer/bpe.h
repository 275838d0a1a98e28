// tokenizer/bpe.h — byte-level BPE merging for one pre-token.
//
// Owns: the merge table (pair of token ids -> rank and merged id) and the merge loop.
// Must not: know strings, the vocab file, or pre-tokenization.
//
// Semantics are HF tokenizers' BPE (Word::merge_all): repeatedly apply the adjacent pair with the
// lowest rank, the leftmost one on ties, until no adjacent pair has a merge. Two implementations
// give identical results: a linear rescan for short words (the common case; cache-friendly) and a
// heap over a linked list of symbols for long ones (O(n log n), so a 1 MB word cannot stall).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace dsv4::tokenizer {

class MergeTable {
 public:
  static constexpr int32_t kNoRank = INT32_MAX;

  // Reserves room for n merges (the table never rehashes after this).
  void reserve(size_t n);
  // Adds (left, right) -> merged at `rank`. Returns false if the pair is already present (the
  // first, lower-rank entry is kept, as in llama.cpp).
  bool add(int32_t left, int32_t right, int32_t rank, int32_t merged);
  // Rank of the pair, kNoRank if there is no merge; `merged` receives the merged id.
  int32_t find(int32_t left, int32_t right, int32_t* merged) const {
    if (mask_ == 0) return kNoRank;
    const uint64_t key = pack(left, right);
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) {
        *merged = s.merged;
        return s.rank;
      }
      if (s.key == kEmpty) return kNoRank;
    }
  }
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t key;
    int32_t rank;
    int32_t merged;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t pack(int32_t l, int32_t r) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
  }
  static size_t hash(uint64_t k) { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> 29); }

  std::vector<Slot> slots_;  // [capacity], power of two, load <= 1/2
  size_t mask_ = 0;
  size_t size_ = 0;
};

enum class BpeAlgo { kAuto, kScan, kHeap };

// Merges `symbols` (initially one byte token per byte) in place; the result replaces the content.
void bpe_merge(const MergeTable& merges, std::vector<int32_t>& symbols, BpeAlgo algo = BpeAlgo::kAuto);

}  // namespace dsv4::tokenizer
