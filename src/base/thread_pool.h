// base/thread_pool.h — a persistent worker pool: static partitioning, or chunks taken on demand.
//
// Created once (per engine), used by every CPU kernel. parallel_for splits work of n items into contiguous
// equal ranges: thread i gets [n*i/T, n*(i+1)/T); parallel_for_chunks hands out fixed chunks to whichever
// thread is free. Results never depend on the thread count or on who ran what because every kernel
// computes each output element entirely inside one item, in a fixed order.
//
// The calling thread takes part as thread 0. Not re-entrant: one run() at a time per pool.
// Dispatch latency matters (decode issues hundreds of small kernels per token), so workers spin
// on an atomic job counter for a short while before sleeping on the condition variable, and the
// caller spins for completion the same way.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace dsv4 {

// A non-owning reference to a callable fn(begin, end, thread): unlike std::function it never
// allocates (a lambda with more than two captures does not fit std::function's small buffer), so
// kernels dispatch with no heap traffic. The callable must outlive the call (parallel_for blocks).
class RangeFnRef {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, RangeFnRef>>>
  RangeFnRef(F&& f)  // NOLINT(google-explicit-constructor)
      : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* o, int64_t b, int64_t e, int t) { (*static_cast<std::remove_reference_t<F>*>(o))(b, e, t); }) {}
  void operator()(int64_t begin, int64_t end, int thread) const { call_(obj_, begin, end, thread); }

 private:
  void* obj_;
  void (*call_)(void*, int64_t, int64_t, int);
};

class ThreadPool {
 public:
  // n_threads <= 0: the number of online CPUs.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(begin, end, thread) once per thread with that thread's contiguous share of
  // [0, n_items); shares are empty when n_items < size(). Blocks until all are done.
  // Allocation-free: fn is referenced, not copied.
  void parallel_for(int64_t n_items, RangeFnRef fn);

  // Calls fn(begin, end, thread) once per chunk [k·grain, min((k + 1)·grain, n_items)), chunks taken in
  // increasing k by whichever thread is free (an atomic counter): a thread may run several chunks, or
  // none. For work whose items do not depend on each other or on which thread or call computes them
  // (matrix rows): a thread that the OS or a neighbour on a shared machine holds back no longer makes
  // the others wait at the end with their static shares done. Blocks until all are done.
  void parallel_for_chunks(int64_t n_items, int64_t grain, RangeFnRef fn);
  // A grain for parallel_for_chunks: about chunks_per_thread chunks per thread, rounded up to a multiple of
  // `multiple` items.
  int64_t chunk_grain(int64_t n_items, int64_t chunks_per_thread, int64_t multiple = 1) const {
    const int64_t chunks = chunks_per_thread * n_threads_;
    const int64_t g = (n_items + chunks - 1) / chunks;
    return g <= 0 ? multiple : (g + multiple - 1) / multiple * multiple;
  }

  static int hardware_threads();

 private:
  void worker_loop(int thread);
  void run(int64_t n_items, int64_t grain, RangeFnRef fn);
  void run_part(int thread);  // this thread's static share, or chunks until none is left

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  const RangeFnRef* job_ = nullptr;
  int64_t job_items_ = 0;
  int64_t job_grain_ = 0;  // 0: static shares (parallel_for); else chunks of this many items
  std::atomic<int64_t> next_chunk_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleepers_{0};  // workers blocked on start_cv_
  bool stop_ = false;
};

}  // namespace dsv4
