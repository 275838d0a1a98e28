// base/thread_pool.cpp — persistent pool: workers sleep on a condition variable between jobs.
#include "base/thread_pool.h"

#include <algorithm>

namespace dsv4 {

int ThreadPool::hardware_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads > 0 ? n_threads : hardware_threads()) {
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { worker_loop(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

namespace {
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
// ~5-20 µs of pause before sleeping; every 256 iterations the spinner yields, so an
// oversubscribed machine (other processes on the cores) does not starve the thread being waited on.
constexpr int kSpinIterations = 4096;
}  // namespace

void ThreadPool::parallel_for(int64_t n_items, RangeFnRef fn) { run(n_items, 0, fn); }

void ThreadPool::parallel_for_chunks(int64_t n_items, int64_t grain, RangeFnRef fn) {
  run(n_items, grain > 0 ? grain : 1, fn);
}

void ThreadPool::run_part(int thread) {
  const RangeFnRef& fn = *job_;
  const int64_t n = job_items_, grain = job_grain_;
  if (grain == 0) {
    const int64_t begin = n * thread / n_threads_, end = n * (thread + 1) / n_threads_;
    if (begin < end) fn(begin, end, thread);
    return;
  }
  for (;;) {
    const int64_t k = next_chunk_.fetch_add(1, std::memory_order_relaxed);
    if (k >= (n + grain - 1) / grain) return;
    fn(k * grain, std::min(n, (k + 1) * grain), thread);
  }
}

void ThreadPool::run(int64_t n_items, int64_t grain, RangeFnRef fn) {
  if (n_items <= 0) return;
  if (n_threads_ == 1 || n_items == 1 || (grain > 0 && grain >= n_items)) {  // all on this thread
    const int64_t step = grain > 0 ? grain : n_items;
    for (int64_t b = 0; b < n_items; b += step) fn(b, std::min(n_items, b + step), 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_items_ = n_items;
    job_grain_ = grain;
    next_chunk_.store(0, std::memory_order_relaxed);
    pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  if (sleepers_.load(std::memory_order_acquire) > 0) start_cv_.notify_all();
  run_part(0);
  for (int spin = 0; spin < kSpinIterations; ++spin) {
    if (pending_.load(std::memory_order_acquire) == 0) break;
    if ((spin & 255) == 255) std::this_thread::yield();
    cpu_relax();
  }
  if (pending_.load(std::memory_order_acquire) != 0) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
  }
  std::lock_guard<std::mutex> lock(mu_);
  job_ = nullptr;
}

void ThreadPool::worker_loop(int thread) {
  uint64_t seen = 0;
  for (;;) {
    // Spin for a new job, then sleep.
    bool got = false;
    for (int spin = 0; spin < kSpinIterations; ++spin) {
      if (generation_.load(std::memory_order_acquire) != seen) {
        got = true;
        break;
      }
      if ((spin & 255) == 255) std::this_thread::yield();
      cpu_relax();
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!got) {
        sleepers_.fetch_add(1, std::memory_order_acq_rel);
        start_cv_.wait(lock, [&] { return stop_ || generation_.load(std::memory_order_acquire) != seen; });
        sleepers_.fetch_sub(1, std::memory_order_acq_rel);
      }
      if (stop_) return;
      seen = generation_.load(std::memory_order_acquire);
    }
    run_part(thread);  // job_, job_items_, job_grain_ are stable until every worker has finished
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      done_cv_.notify_one();
    }
  }
}

}  // namespace dsv4
