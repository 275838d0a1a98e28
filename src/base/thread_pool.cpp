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

static void run_share(const std::function<void(int64_t, int64_t, int)>& fn, int64_t n, int t, int n_threads) {
  const int64_t begin = n * t / n_threads;
  const int64_t end = n * (t + 1) / n_threads;
  if (begin < end) fn(begin, end, t);
}

void ThreadPool::parallel_for(int64_t n_items, const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n_items <= 0) return;
  if (n_threads_ == 1 || n_items == 1) {
    fn(0, n_items, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_items_ = n_items;
    pending_ = n_threads_ - 1;
    ++generation_;
  }
  start_cv_.notify_all();
  run_share(fn, n_items, 0, n_threads_);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::worker_loop(int thread) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t, int)>* job;
    int64_t items;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      items = job_items_;
    }
    run_share(*job, items, thread, n_threads_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }
}

}  // namespace dsv4
