// EngineLoop: runs an Engine on a thread of its own so that many clients (HTTP handlers, a worker's
// scheduler) can submit requests concurrently; whatever is in flight is batched together.
// Callbacks run on the loop thread and must not block.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"

namespace trellis::engine {

class EngineLoop {
 public:
  explicit EngineLoop(Engine& engine);
  ~EngineLoop();  // stops the thread; unfinished requests are aborted
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Validates at once (Error naming the problem, as Engine::add) and queues the request for the
  // next step.
  void submit(Request request, Callbacks callbacks);
  void abort(const std::string& request_id);
  // Ends one completion of a request with Finish::kStop before the next step (Engine::stop). Safe
  // to call from a callback.
  void stop(const std::string& request_id, int64_t index);

  // Runs fn(engine) on the loop thread between steps and waits for it (weight updates, reads).
  void with_engine(const std::function<void(Engine&)>& fn);
  // pause() returns once no step is running and none will start until resume().
  void pause();
  void resume();

  EngineStats stats() const;  // as of the last step

 private:
  void loop();

  Engine& engine_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<Request, Callbacks>> inbox_;
  std::vector<std::string> aborts_;
  std::vector<std::pair<std::string, int64_t>> stops_;
  std::vector<std::function<void(Engine&)>> tasks_;
  EngineStats stats_;
  bool stop_ = false, paused_ = false, stepping_ = false;
  std::condition_variable idle_cv_;
  std::thread thread_;
};

}  // namespace trellis::engine
