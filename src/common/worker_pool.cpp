#include "common/worker_pool.h"

#include <algorithm>

namespace trellis {

WorkerPool::WorkerPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard lock(mu_);
    closing_ = true;
  }
  ready_.notify_all();
  for (auto& w : workers_) w.join();
}

void WorkerPool::submit(std::function<void()> job) {
  {
    std::lock_guard lock(mu_);
    jobs_.push_back(std::move(job));
    ++pending_;
  }
  ready_.notify_one();
}

void WorkerPool::wait() {
  std::unique_lock lock(mu_);
  idle_.wait(lock, [this] { return pending_ == 0; });
  if (error_) std::rethrow_exception(error_);
}

int64_t WorkerPool::pending() {
  std::lock_guard lock(mu_);
  if (error_) std::rethrow_exception(error_);
  return pending_;
}

void WorkerPool::work() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(mu_);
      ready_.wait(lock, [this] { return closing_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    std::exception_ptr error;
    try {
      job();
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard lock(mu_);
    if (error && !error_) error_ = error;
    if (--pending_ == 0) idle_.notify_all();
  }
}

}  // namespace trellis
