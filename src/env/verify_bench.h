// `trellis bench verify`: verifier throughput. Scores each generated task's reference solution
// (reward 1) and another task's solution (a wrong answer, as a model's mistakes are) and reports
// tasks/s for each, on `threads` threads sharing the work.
//
// For the code environment it also measures, in the same run, the floor a sandboxed test cannot
// beat: sandboxed runs/s of an empty program on the same threads. Scoring throughput in
// sandboxed tests/s against that floor says how much the verifier adds to the sandbox's cost.
#pragma once

#include <cstdint>
#include <optional>

#include "env/environment.h"
#include "env/sandbox.h"

namespace trellis::env {

struct VerifyBenchOptions {
  int64_t tasks = 200;
  int difficulty = 3;
  uint64_t seed = 0;
  int threads = 1;
  std::optional<SandboxLimits> sandbox;  // set for the code environment: measure the floor
};

struct VerifyBenchResult {
  double correct_tasks_per_s = 0;  // scoring the reference solutions
  double wrong_tasks_per_s = 0;    // scoring wrong answers
  int64_t correct_scored_1 = 0;    // sanity: should be every task
  int64_t wrong_scored_1 = 0;      // should be (almost) none
  double generate_tasks_per_s = 0;
  double tests_per_task = 0;            // code: test cases per task (sandboxed runs to pass)
  double empty_sandbox_runs_per_s = 0;  // code: the floor, on the same threads
};

VerifyBenchResult bench_verify(const Environment& env, const VerifyBenchOptions& options);

}  // namespace trellis::env
