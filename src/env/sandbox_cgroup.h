// Per-run cgroup v2 groups for the code sandbox (sandbox.h): where the host lets this process
// create groups with the memory and pids controllers, each run gets one, so that memory.max and
// pids.max count all of the run's processes together and an OOM kill takes the whole run.
#pragma once

#include <cstdint>
#include <string>

namespace trellis::env {

// Where per-run cgroups can go on this host: a directory whose children get the memory and pids
// controllers and that this process may create groups in and move processes into; "" with
// `reason` when there is none.
struct CgroupSupport {
  std::string parent;
  std::string reason;
};

// Detected once per process (a probe group is made, limited, joined and removed).
const CgroupSupport& cgroup_support();

// The cgroup of one run: made with its limits before the run, killed and removed after it.
class RunCgroup {
 public:
  // A group under `parent` with memory.max = memory_bytes (no swap) and pids.max = max_pids. None
  // when `parent` is "", or when it cannot be made (a warning says so: rlimits alone then apply).
  RunCgroup(const std::string& parent, int64_t memory_bytes, int64_t max_pids);
  ~RunCgroup();  // kills what is left in the group and removes it
  RunCgroup(const RunCgroup&) = delete;
  RunCgroup& operator=(const RunCgroup&) = delete;

  // cgroup.procs of the run's group, for the child to join; nullptr without one.
  const char* procs() const { return procs_.empty() ? nullptr : procs_.c_str(); }

  // Whether the kernel OOM-killed a process of the run (memory.max reached).
  bool oom_killed() const;

 private:
  std::string dir_, procs_;
};

}  // namespace trellis::env
