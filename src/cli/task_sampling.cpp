// Task sampling (see task_sampling.h).
#include "cli/task_sampling.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "cli/progress.h"
#include "common/json.h"
#include "common/logging.h"

namespace trellis::cli {
namespace {

// A fixed set of threads draining a queue of jobs; wait() returns when every job has run and
// rethrows the first exception a job threw (the code sandbox throws when it cannot run at all).
class WorkerPool {
 public:
  explicit WorkerPool(int threads) {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }
  ~WorkerPool() {
    {
      std::lock_guard lock(mu_);
      closing_ = true;
    }
    ready_.notify_all();
    for (auto& w : workers_) w.join();
  }
  void submit(std::function<void()> job) {
    {
      std::lock_guard lock(mu_);
      jobs_.push_back(std::move(job));
      ++pending_;
    }
    ready_.notify_one();
  }
  void wait() {
    std::unique_lock lock(mu_);
    idle_.wait(lock, [this] { return pending_ == 0; });
    if (error_) std::rethrow_exception(error_);
  }
  // The jobs not yet run; rethrows a job's exception so that a broken scorer stops the run early.
  int64_t pending() {
    std::lock_guard lock(mu_);
    if (error_) std::rethrow_exception(error_);
    return pending_;
  }

 private:
  void work() {
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

  std::mutex mu_;
  std::condition_variable ready_, idle_;
  std::deque<std::function<void()>> jobs_;
  int64_t pending_ = 0;
  bool closing_ = false;
  std::exception_ptr error_;
  std::vector<std::thread> workers_;
};

std::vector<int32_t> encode_prompt(const model::Prompting& p,
                                   const std::vector<env::Message>& messages) {
  if (p.chat) {
    std::vector<model::ChatMessage> chat;
    for (const auto& m : messages) chat.push_back({m.role, m.content});
    return p.encode_chat(chat);
  }
  std::string text;
  for (const auto& m : messages) text += (text.empty() ? "" : "\n\n") + m.content;
  return p.encode(text + "\n\n");
}

}  // namespace

int64_t SampledTask::passed() const {
  int64_t c = 0;
  for (const auto& s : samples) c += s.task_reward >= 1.0;
  return c;
}

std::vector<SampledTask> sample_tasks(engine::Engine& engine, const model::Prompting& prompting,
                                      const env::Environment& environment,
                                      const std::vector<env::Task>& tasks,
                                      const TaskSamplingOptions& options) {
  if (!prompting.chat) {
    log::warn("the model has no chat template ({}); prompts are plain text", prompting.chat_error);
  }
  const auto stop_ids = prompting.chat ? prompting.chat_stop_ids() : prompting.stop_ids;
  const int64_t k = options.k;
  std::vector<SampledTask> results(tasks.size());
  WorkerPool scorers(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  for (size_t t = 0; t < tasks.size(); ++t) {
    auto& result = results[t];
    result.samples.resize(k);
    const uint64_t seed = options.seed + t * k;
    result.length_target = options.length.draw_target(seed);
    const auto messages = environment.build_prompt(
        tasks[t], {.system_prompt = options.system_prompt, .length_target = result.length_target});
    engine::Request r;
    r.id = std::to_string(t);
    r.prompt = encode_prompt(prompting, messages);
    r.n = k;
    r.max_tokens = options.max_tokens;
    r.stop_ids = stop_ids;
    r.sampling = options.sampling;
    r.seed = seed;
    // on_finish runs on this thread inside engine.step(); the scorer writes only its own slot.
    engine.add(std::move(r), {.on_finish = [&, t](engine::Completion c) {
                 Sample& s = results[t].samples[c.index];
                 s.tokens = static_cast<int64_t>(c.tokens.size());
                 s.finish_reason = engine::finish_name(c.finish);
                 s.text = json_safe_text(prompting.tok.decode(c.tokens, /*skip_special=*/true));
                 scorers.submit([&, t, &s = s] {
                   const auto score = environment.score(tasks[t], s.text);
                   s.task_reward = score.reward;
                   s.reason = score.reason;
                   s.reward =
                       options.length.apply(score.reward, results[t].length_target, s.tokens);
                 });
               }});
  }
  Progress progress("completions");
  const int64_t total = static_cast<int64_t>(tasks.size()) * k;
  while (engine.has_work()) {
    engine.step();
    const auto stats = engine.stats();
    progress.draw(stats.completions_finished - scorers.pending(), total, stats.tokens_generated);
  }
  scorers.wait();
  progress.draw(total, total, engine.stats().tokens_generated);
  progress.finish();
  return results;
}

}  // namespace trellis::cli
