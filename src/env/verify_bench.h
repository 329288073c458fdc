// `trellis bench verify`: verifier throughput. Scores each generated task's reference solution
// (reward 1) and another task's solution (a wrong answer, as a model's mistakes are) and reports
// tasks/s for each, on `threads` threads sharing the work.
#pragma once

#include <cstdint>

#include "env/environment.h"

namespace trellis::env {

struct VerifyBenchOptions {
  int64_t tasks = 200;
  int difficulty = 3;
  uint64_t seed = 0;
  int threads = 1;
};

struct VerifyBenchResult {
  double correct_tasks_per_s = 0;  // scoring the reference solutions
  double wrong_tasks_per_s = 0;    // scoring wrong answers
  int64_t correct_scored_1 = 0;    // sanity: should be every task
  int64_t wrong_scored_1 = 0;      // should be (almost) none
  double generate_tasks_per_s = 0;
};

VerifyBenchResult bench_verify(const Environment& env, const VerifyBenchOptions& options);

}  // namespace trellis::env
