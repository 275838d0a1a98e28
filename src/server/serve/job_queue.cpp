// server/serve/job_queue.cpp — the channel, the bounded queue and the engine worker loop.
#include "server/serve/job_queue.h"

namespace dsv4::server::serve {

void JobChannel::push(JobMessage m) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    q_.push_back(std::move(m));
  }
  cv_.notify_one();
}

std::optional<JobMessage> JobChannel::pop(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !q_.empty(); })) return std::nullopt;
  JobMessage m = std::move(q_.front());
  q_.pop_front();
  return m;
}

namespace {

class ChannelObserver final : public GenerationObserver {
 public:
  explicit ChannelObserver(Job& job) : job_(job) {}
  bool on_prefill(int64_t done, int64_t total) override {
    job_.channel.push(PrefillProgress{done, total});
    return !job_.cancelled.load();
  }
  bool on_delta(const GenerationDelta& delta) override {
    job_.channel.push(delta);
    return !job_.cancelled.load();
  }

 private:
  Job& job_;
};

}  // namespace

EngineWorker::EngineWorker(Engine& engine, int64_t max_queue, JobFinishedHook hook)
    : engine_(engine), max_queue_(max_queue), hook_(std::move(hook)), thread_([this] { run(); }) {}

EngineWorker::~EngineWorker() { stop(); }

void EngineWorker::stop() {
  std::deque<std::shared_ptr<Job>> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    if (running_) running_->cancelled = true;
    dropped.swap(queue_);
  }
  cv_.notify_all();
  for (auto& job : dropped) job->channel.push(JobDone{Status(StatusCode::kCancelled, "the server is shutting down")});
  if (thread_.joinable()) thread_.join();
}

bool EngineWorker::submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // max_queue jobs may wait behind the running one. The job the worker is about to take counts
    // as running, not waiting: with the worker idle, a job is accepted even at --max-queue 0.
    const int64_t held = static_cast<int64_t>(queue_.size()) + (running_ ? 1 : 0);
    if (stopping_ || held >= max_queue_ + 1) return false;
    queue_.push_back(std::move(job));
  }
  cv_.notify_one();
  return true;
}

int64_t EngineWorker::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(queue_.size());
}

void EngineWorker::run() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      job = queue_.front();
      queue_.pop_front();
      running_ = job;
    }
    busy_ = true;
    const double queue_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - job->enqueued).count();
    Result<GenerationResult> result = GenerationResult{};
    if (job->cancelled.load()) {
      GenerationResult r;
      r.finish = FinishReason::kCancelled;
      result = r;
    } else {
      ChannelObserver observer(*job);
      result = engine_.generate(job->request, observer);
    }
    if (hook_) hook_(*job, result, queue_ms);
    job->channel.push(JobDone{std::move(result)});
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_.reset();
    }
    busy_ = false;
  }
}

}  // namespace dsv4::server::serve
