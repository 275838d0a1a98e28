// tests/unit/common/counting_new.h — replaces the global operator new / delete of the test binary
// that includes it, so a test can count heap allocations (on any thread) made while it is counting.
// Include it from exactly ONE .cpp per test binary (it defines the replacement operators). Counting
// is off except inside allocations_during(), so the rest of the binary is unaffected.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace dsv4::testing_alloc {
inline std::atomic<bool> g_counting{false};
inline std::atomic<int64_t> g_allocations{0};

inline void* counted_alloc(std::size_t n, std::size_t align) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = 1;
  void* p = align > alignof(std::max_align_t) ? std::aligned_alloc(align, (n + align - 1) / align * align) : std::malloc(n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

// Runs fn and returns how many operator new calls (any thread) it made.
template <typename F>
int64_t allocations_during(F&& fn) {
  g_allocations.store(0);
  g_counting.store(true);
  fn();
  g_counting.store(false);
  return g_allocations.load();
}
}  // namespace dsv4::testing_alloc

void* operator new(std::size_t n) { return dsv4::testing_alloc::counted_alloc(n, 0); }
void* operator new[](std::size_t n) { return dsv4::testing_alloc::counted_alloc(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) {
  return dsv4::testing_alloc::counted_alloc(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return dsv4::testing_alloc::counted_alloc(n, static_cast<std::size_t>(a));
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return dsv4::testing_alloc::counted_alloc(n, 0);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return dsv4::testing_alloc::counted_alloc(n, 0);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
