#include "engine/engine_loop.h"

#include <future>

#include "common/error.h"
#include "common/exception_message.h"
#include "common/logging.h"

namespace trellis::engine {

EngineLoop::EngineLoop(Engine& engine) : engine_(engine), stats_(engine.stats()) {
  thread_ = std::thread([this] { loop(); });
}

EngineLoop::~EngineLoop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void EngineLoop::submit(Request request, Callbacks callbacks) {
  engine_.validate(request);
  {
    std::lock_guard lock(mu_);
    inbox_.emplace_back(std::move(request), std::move(callbacks));
  }
  cv_.notify_all();
}

void EngineLoop::abort(const std::string& request_id) {
  {
    std::lock_guard lock(mu_);
    aborts_.push_back(request_id);
  }
  cv_.notify_all();
}

void EngineLoop::stop(const std::string& request_id, int64_t index) {
  {
    std::lock_guard lock(mu_);
    stops_.emplace_back(request_id, index);
  }
  cv_.notify_all();
}

void EngineLoop::with_engine(const std::function<void(Engine&)>& fn) {
  std::promise<void> done;
  auto result = done.get_future();
  {
    std::lock_guard lock(mu_);
    tasks_.push_back([&](Engine& e) {
      try {
        fn(e);
        done.set_value();
      } catch (...) {
        done.set_exception(std::current_exception());
      }
    });
  }
  cv_.notify_all();
  result.get();
}

void EngineLoop::pause() {
  std::unique_lock lock(mu_);
  paused_ = true;
  idle_cv_.wait(lock, [&] { return !stepping_; });
}

void EngineLoop::resume() {
  {
    std::lock_guard lock(mu_);
    paused_ = false;
  }
  cv_.notify_all();
}

EngineStats EngineLoop::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void EngineLoop::loop() {
  for (;;) {
    std::vector<std::pair<Request, Callbacks>> inbox;
    std::vector<std::string> aborts;
    std::vector<std::pair<std::string, int64_t>> stops;
    std::vector<std::function<void(Engine&)>> tasks;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] {
        return stop_ || !tasks_.empty() ||
               (!paused_ &&
                (!inbox_.empty() || !aborts_.empty() || !stops_.empty() || engine_.has_work()));
      });
      if (stop_) break;
      tasks.swap(tasks_);
      if (!paused_) {
        inbox.swap(inbox_);
        aborts.swap(aborts_);
        stops.swap(stops_);
        stepping_ = true;
      }
    }
    for (auto& task : tasks) task(engine_);
    for (auto& [request, callbacks] : inbox) {
      const std::string id = request.id;
      try {
        engine_.add(std::move(request), callbacks);
      } catch (const Error& e) {
        // Only a duplicate id gets here (submit validated the rest): end it as aborted.
        log::warn("engine: {}", e.what());
        Completion c;
        c.request_id = id;
        c.finish = Finish::kAbort;
        if (callbacks.on_finish) callbacks.on_finish(std::move(c));
      }
    }
    for (const auto& id : aborts) engine_.abort(id);
    for (const auto& [id, index] : stops) engine_.stop(id, index);
    if (stepping_) {
      try {
        if (engine_.has_work()) engine_.step();
      } catch (const std::exception& e) {
        // Not a bad request (those are refused at submit): end everything rather than retry.
        log::error("engine step failed, aborting all requests: {}", message_of(e));
        engine_.abort_all();
      }
    }
    {
      std::lock_guard lock(mu_);
      stats_ = engine_.stats();
      stepping_ = false;
    }
    idle_cv_.notify_all();
  }
  // Shutting down: whoever waits on a request hears that it ended.
  for (auto& [request, callbacks] : inbox_) {
    Completion c;
    c.request_id = request.id;
    c.finish = Finish::kAbort;
    if (callbacks.on_finish) callbacks.on_finish(std::move(c));
  }
  engine_.abort_all();
}

}  // namespace trellis::engine
