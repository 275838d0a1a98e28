// server/serve/job_queue.h — one generation job, the channel its results travel back on, the
// bounded FIFO queue, and the single engine worker that owns the Engine's timeline.
//
// Threads: HTTP threads build a Job (native request, already validated and tokenized), submit it,
// then read the job's channel (blocking with a timeout, for keep-alives). The worker thread pops
// jobs in order and runs Engine::generate; its observer copies each delta into the channel and
// reports cancel() back to the engine, so a client that disconnects stops its generation within
// one token. Nothing here formats JSON.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <variant>

#include "dsv4/engine.h"

namespace dsv4::server::serve {

struct PrefillProgress {
  int64_t done = 0, total = 0;
};
struct JobDone {
  Result<GenerationResult> result = GenerationResult{};
};
using JobMessage = std::variant<PrefillProgress, GenerationDelta, JobDone>;

// Single-producer (worker) / single-consumer (HTTP thread) message channel.
class JobChannel {
 public:
  void push(JobMessage m);
  // Waits up to `timeout` for the next message; nullopt on timeout.
  std::optional<JobMessage> pop(std::chrono::milliseconds timeout);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<JobMessage> q_;
};

struct Job {
  GenerateRequest request;
  std::string route;                 // for logs and metrics
  std::atomic<bool> cancelled{false};
  JobChannel channel;
  std::chrono::steady_clock::time_point enqueued = std::chrono::steady_clock::now();
};

// Called by the worker after each job (metrics, logs); never null in practice.
using JobFinishedHook = std::function<void(const Job&, const Result<GenerationResult>&, double queue_ms)>;

class EngineWorker {
 public:
  EngineWorker(Engine& engine, int64_t max_queue, JobFinishedHook hook);
  ~EngineWorker();  // stops: cancels the running job, fails the queued ones, joins

  // False when max_queue jobs already wait behind a running one (the caller answers 429).
  bool submit(std::shared_ptr<Job> job);
  int64_t queued() const;
  bool busy() const { return busy_.load(); }
  void stop();

 private:
  void run();

  Engine& engine_;
  int64_t max_queue_;
  JobFinishedHook hook_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::shared_ptr<Job> running_;
  bool stopping_ = false;
  std::atomic<bool> busy_{false};
  std::thread thread_;
};

}  // namespace dsv4::server::serve
