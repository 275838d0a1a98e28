// base/thread_pool.cpp — persistent pool: workers sleep on a condition variable between jobs.
#include "base/thread_pool.h"

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

static void run_share(const RangeFnRef& fn, int64_t n, int t, int n_threads) {
  const int64_t begin = n * t / n_threads;
  const int64_t end = n * (t + 1) / n_threads;
  if (begin < end) fn(begin, end, t);
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

void ThreadPool::parallel_for(int64_t n_items, RangeFnRef fn) {
  if (n_items <= 0) return;
  if (n_threads_ == 1 || n_items == 1) {
    fn(0, n_items, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_items_ = n_items;
    pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  if (sleepers_.load(std::memory_order_acquire) > 0) start_cv_.notify_all();
  run_share(fn, n_items, 0, n_threads_);
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
    const RangeFnRef* job;
    int64_t items;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!got) {
        sleepers_.fetch_add(1, std::memory_order_acq_rel);
        start_cv_.wait(lock, [&] { return stop_ || generation_.load(std::memory_order_acquire) != seen; });
        sleepers_.fetch_sub(1, std::memory_order_acq_rel);
      }
      if (stop_) return;
      seen = generation_.load(std::memory_order_acquire);
      job = job_;
      items = job_items_;
    }
    run_share(*job, items, thread, n_threads_);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      done_cv_.notify_one();
    }
  }
}

}  // namespace dsv4
