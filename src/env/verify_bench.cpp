// Verifier throughput benchmark (see verify_bench.h).
#include "env/verify_bench.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace trellis::env {
namespace {

// Seconds for `threads` threads to run job(i) for i in [0, n).
template <typename Job>
double time_parallel(int64_t n, int threads, Job job) {
  std::atomic<int64_t> next{0};
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (int w = 0; w < threads; ++w) {
    workers.emplace_back([&] {
      for (int64_t i; (i = next++) < n;) job(i);
    });
  }
  for (auto& w : workers) w.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Seconds to score, for every task i, the solution of task i + offset (mod n) on `threads`
// threads; counts reward 1s. Offset 0 scores the reference solutions, 1 another task's answer.
double time_scoring(const Environment& env, const std::vector<Task>& tasks, int threads,
                    size_t offset, int64_t& scored_1) {
  std::atomic<int64_t> ones{0};
  const size_t n = tasks.size();
  const double seconds = time_parallel(static_cast<int64_t>(n), threads, [&](int64_t i) {
    ones += env.score(tasks[i], *tasks[(i + offset) % n].solution).reward >= 1.0;
  });
  scored_1 = ones;
  return seconds;
}

}  // namespace

VerifyBenchResult bench_verify(const Environment& env, const VerifyBenchOptions& o) {
  VerifyBenchResult r;
  const auto t0 = std::chrono::steady_clock::now();
  const auto tasks = generate_tasks(env, o.tasks, o.seed, o.difficulty);
  r.generate_tasks_per_s =
      o.tasks / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double correct_s = time_scoring(env, tasks, o.threads, 0, r.correct_scored_1);
  const double wrong_s = time_scoring(env, tasks, o.threads, 1, r.wrong_scored_1);
  r.correct_tasks_per_s = o.tasks / correct_s;
  r.wrong_tasks_per_s = o.tasks / wrong_s;
  if (o.sandbox) {
    int64_t tests = 0;
    for (const auto& t : tasks) tests += t.verification_info["test_cases"].size();
    r.tests_per_task = static_cast<double>(tests) / o.tasks;
    const Sandbox sandbox(*o.sandbox);
    const int64_t runs = std::max<int64_t>(o.tasks, 20);
    r.empty_sandbox_runs_per_s =
        runs / time_parallel(runs, o.threads, [&](int64_t) { sandbox.run("pass\n"); });
  }
  return r;
}

}  // namespace trellis::env
