// tokenizer/unicode_classes.cpp — the generated range table, expanded into a flat lookup.
#include "tokenizer/unicode_classes.h"

#include <iterator>
#include <vector>

namespace dsv4::tokenizer {
namespace {

struct ClassRange {
  uint32_t first, last;
  uint8_t bits;
};

constexpr ClassRange kRanges[] = {
#include "tokenizer/unicode_classes.inc"
};

constexpr uint32_t kCodePoints = kUnicodeCodePoints;

constexpr bool ranges_sorted() {
  for (size_t i = 0; i < std::size(kRanges); ++i) {
    if (kRanges[i].first > kRanges[i].last || kRanges[i].last >= kCodePoints) return false;
    if (i > 0 && kRanges[i - 1].last >= kRanges[i].first) return false;
  }
  return true;
}
static_assert(ranges_sorted(), "unicode_classes.inc must hold disjoint ranges sorted by code point");

const std::vector<uint8_t>& flat_table() {
  static const std::vector<uint8_t> table = [] {
    std::vector<uint8_t> t(kCodePoints, 0);
    for (const ClassRange& r : kRanges)
      for (uint32_t cp = r.first; cp <= r.last; ++cp) t[cp] = r.bits;
    return t;
  }();
  return table;
}

}  // namespace

const uint8_t* unicode_class_table() { return flat_table().data(); }

const char* unicode_classes_version() { return DSV4_UNICODE_CLASSES_VERSION; }

}  // namespace dsv4::tokenizer
