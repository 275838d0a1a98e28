// tokenizer/bpe.cpp — the merge table and the two equivalent merge loops (scan and heap).
#include "tokenizer/bpe.h"

#include <algorithm>
#include <queue>

namespace dsv4::tokenizer {
namespace {

// Words up to this many symbols use the rescan loop: O(n^2) but tiny constants; above it the heap.
constexpr size_t kScanMaxSymbols = 128;

void merge_scan(const MergeTable& merges, std::vector<int32_t>& sym) {
  size_t n = sym.size();
  // ranks[i] / merged[i]: the merge of the pair (sym[i], sym[i+1]).
  int32_t ranks_buf[kScanMaxSymbols];
  int32_t merged_buf[kScanMaxSymbols];
  for (size_t i = 0; i + 1 < n; ++i) ranks_buf[i] = merges.find(sym[i], sym[i + 1], &merged_buf[i]);
  while (n > 1) {
    int32_t best = MergeTable::kNoRank;
    size_t at = 0;
    for (size_t i = 0; i + 1 < n; ++i) {
      if (ranks_buf[i] < best) {
        best = ranks_buf[i];
        at = i;
      }
    }
    if (best == MergeTable::kNoRank) break;
    sym[at] = merged_buf[at];
    // Remove symbol at+1 and pair at+1 (the pair (at+1, at+2) no longer exists).
    for (size_t i = at + 1; i + 1 < n; ++i) sym[i] = sym[i + 1];
    for (size_t i = at + 1; i + 2 < n; ++i) {
      ranks_buf[i] = ranks_buf[i + 1];
      merged_buf[i] = merged_buf[i + 1];
    }
    --n;
    if (at > 0) ranks_buf[at - 1] = merges.find(sym[at - 1], sym[at], &merged_buf[at - 1]);
    if (at + 1 < n) ranks_buf[at] = merges.find(sym[at], sym[at + 1], &merged_buf[at]);
  }
  sym.resize(n);
}

struct Candidate {
  int32_t rank;
  int32_t pos;     // original index of the left symbol (list order == index order)
  int32_t merged;
  int32_t right;   // the right symbol's id when queued (detects stale entries)
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

void merge_heap(const MergeTable& merges, std::vector<int32_t>& sym) {
  const int32_t n = static_cast<int32_t>(sym.size());
  std::vector<int32_t> prev(n), next(n);
  std::vector<char> alive(n, 1);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t i) {
    const int32_t j = next[i];
    if (j < 0) return;
    int32_t merged = 0;
    const int32_t rank = merges.find(sym[i], sym[j], &merged);
    if (rank != MergeTable::kNoRank) heap.push({rank, i, merged, sym[j]});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int32_t i = c.pos;
    if (!alive[i] || next[i] < 0) continue;
    const int32_t j = next[i];
    // Stale if either side changed since it was queued.
    int32_t merged = 0;
    if (sym[j] != c.right || merges.find(sym[i], sym[j], &merged) != c.rank || merged != c.merged) continue;
    sym[i] = c.merged;
    alive[j] = 0;
    next[i] = next[j];
    if (next[j] >= 0) prev[next[j]] = i;
    if (prev[i] >= 0) push(prev[i]);
    push(i);
  }
  size_t w = 0;
  for (int32_t i = 0; i < n; ++i) {
    if (alive[i]) sym[w++] = sym[i];
  }
  sym.resize(w);
}

}  // namespace

void MergeTable::reserve(size_t n) {
  size_t cap = 16;
  while (cap < 2 * n + 2) cap <<= 1;
  slots_.assign(cap, Slot{kEmpty, 0, 0});
  mask_ = cap - 1;
  size_ = 0;
}

bool MergeTable::add(int32_t left, int32_t right, int32_t rank, int32_t merged) {
  if (slots_.empty() || 2 * (size_ + 1) > slots_.size()) {
    // Grow (rare: callers reserve up front).
    std::vector<Slot> old;
    old.swap(slots_);
    reserve(std::max<size_t>(size_ + 1, old.size()));
    for (const Slot& s : old) {
      if (s.key != kEmpty) add(static_cast<int32_t>(s.key >> 32), static_cast<int32_t>(s.key & 0xFFFFFFFFu), s.rank, s.merged);
    }
  }
  const uint64_t key = pack(left, right);
  for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.key == key) return false;
    if (s.key == kEmpty) {
      s = Slot{key, rank, merged};
      ++size_;
      return true;
    }
  }
}

void bpe_merge(const MergeTable& merges, std::vector<int32_t>& symbols, BpeAlgo algo) {
  if (symbols.size() < 2) return;
  if (algo == BpeAlgo::kAuto) algo = symbols.size() <= kScanMaxSymbols ? BpeAlgo::kScan : BpeAlgo::kHeap;
  if (algo == BpeAlgo::kScan && symbols.size() <= kScanMaxSymbols) {
    merge_scan(merges, symbols);
  } else {
    merge_heap(merges, symbols);
  }
}

}  // namespace dsv4::tokenizer
