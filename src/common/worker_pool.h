// WorkerPool: a fixed set of threads draining a queue of jobs. wait() returns when every job
// submitted so far has run and rethrows the first exception a job threw (the code sandbox throws
// when it cannot run at all), so one broken job stops its caller instead of vanishing.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace trellis {

class WorkerPool {
 public:
  explicit WorkerPool(int threads);  // threads <= 0: one per core
  ~WorkerPool();                     // runs the queued jobs, then joins
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void submit(std::function<void()> job);
  void wait();
  // The jobs not yet finished; rethrows a job's exception.
  int64_t pending();

 private:
  void work();

  std::mutex mu_;
  std::condition_variable ready_, idle_;
  std::deque<std::function<void()>> jobs_;
  int64_t pending_ = 0;
  bool closing_ = false;
  std::exception_ptr error_;
  std::vector<std::thread> workers_;
};

}  // namespace trellis
