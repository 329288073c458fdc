// libFuzzer target for the verifiers, which read model output: a worker writes its completions,
// and a validator scores them again. The first byte picks an environment of the registry and one
// of its generated tasks, or the code environment's reading of what its sandboxed program returned
// (canonical_python_value); the rest is the completion. score() must return a reward in [0, 1] with
// a reason and never throw (env/environment.h): an exception, a crash, a sanitizer report, a leak
// or a time-out is a bug. Every task's reference solution must score 1. The code environment's
// score() is left out: it runs the completion in the sandbox, whose attacks are sandbox_test.cpp's.
// scripts/fuzz.sh builds and runs it; fuzz/corpus/verifiers/ holds the seeds (each task's
// solution, and hostile replies).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "env/registry.h"
#include "env/verifiers/python_values.h"

namespace {

using trellis::env::Environment;
using trellis::env::Task;

// Tasks per environment: seeds 0.. at these difficulties.
constexpr int kDifficulties[] = {1, 4, 7, 10};
constexpr size_t kTasksPerEnv = std::size(kDifficulties);

struct Verifiers {
  std::vector<std::unique_ptr<Environment>> envs;
  std::vector<std::vector<Task>> tasks;  // per environment
};

[[noreturn]] void bug(const std::string& where, const char* what) {
  std::fprintf(stderr, "verifiers_fuzz: %s: %s\n", where.c_str(), what);
  std::abort();
}

[[noreturn]] void bug(const Environment& env, const Task& task, const char* what) {
  bug(env.name() + ": task " + task.task_id, what);
}

Verifiers make_verifiers() {
  Verifiers v;
  for (const std::string& name : trellis::env::environment_names()) {
    if (name != "code") v.envs.push_back(trellis::env::make_environment(name));
  }
  for (const auto& env : v.envs) {
    std::vector<Task>& tasks = v.tasks.emplace_back();
    for (size_t i = 0; i < kTasksPerEnv; ++i) {
      const Task& task = tasks.emplace_back(env->generate(i, kDifficulties[i]));
      if (!task.solution || env->score(task, *task.solution).reward != 1)
        bug(*env, task, "its reference solution does not score 1");
    }
  }
  return v;
}

// Built once, before the first input: GiNaC and CLN fill their caches here, which would
// otherwise count as the first input's leak.
const Verifiers* verifiers = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  verifiers = new Verifiers(make_verifiers());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Verifiers& v = *verifiers;
  if (size == 0) return 0;
  const size_t pick = data[0] % (v.envs.size() * kTasksPerEnv + 1);
  const std::string_view completion(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (pick == v.envs.size() * kTasksPerEnv) {
    // What the code environment reads from its sandboxed program: a value it returned, encoded.
    std::string error;
    if (!trellis::env::canonical_python_value(completion, error) && error.empty())
      bug("canonical_python_value", "a malformed value without an error");
    return 0;
  }
  const Environment& env = *v.envs[pick / kTasksPerEnv];
  const Task& task = v.tasks[pick / kTasksPerEnv][pick % kTasksPerEnv];
  const trellis::env::Score s = env.score(task, completion);  // an exception is reported
  if (!(s.reward >= 0 && s.reward <= 1)) bug(env, task, "a reward outside [0, 1]");
  if (s.reason.empty()) bug(env, task, "a score without a reason");
  return 0;
}
