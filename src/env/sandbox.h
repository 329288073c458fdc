// Sandbox: runs untrusted, model-written Python under bubblewrap with resource limits.
//
// Inside: no network (own network namespace with only a loopback interface), the host's /usr,
// /lib, /bin read-only, a private empty /tmp (tmpfs, the working directory), the program
// read-only at /sandbox/main.py, no view of /etc, /home, /root, /work or other host paths, own
// PID, IPC, UTS and user namespaces; dies with its parent. The program runs as an unprivileged
// user: when Trellis runs as root, the child drops to uid/gid 65534 before starting bwrap, because
// the kernel does not enforce RLIMIT_NPROC for processes that are root on the host.
//
// Kernel surface: a seccomp filter (libseccomp, handed to bwrap as a compiled BPF program) denies,
// with EPERM, the system calls a test program never needs: ptrace and cross-process memory access,
// mount and friends, unshare/setns and clone with namespace flags, keys, bpf, perf_event_open,
// io_uring, userfaultfd, module and kexec loading, reboot, swap, clock setting, acct, quotactl,
// personality changes, open_by_handle_at, ...; clone3 (whose flags a filter cannot read) answers
// ENOSYS, so libc falls back to clone. Calls of other architectures (32-bit x86) kill the process.
// No nested user namespaces: bwrap's --disable-userns where the installed bwrap has it (0.8+),
// and the seccomp rules in any case.
//
// Limits: setrlimit in the child before exec'ing bwrap (CPU time, address space, file size, open
// files, no core dumps), RLIMIT_NPROC set inside the sandbox's user namespace (via prlimit) so that
// it counts the processes of this run only, and a wall-clock watchdog that kills the whole
// process tree. Where the host has a writable cgroup v2 subtree with the memory and pids
// controllers (detected once per process: this process's own cgroup, when it may enable them for
// its children), each run also gets a cgroup of its own with memory.max = memory_mib (all of the
// run's processes together, swap 0, the group OOM-killed together) and pids.max; elsewhere the
// rlimits alone apply. One log line per process says which. stdout + stderr beyond max_output_kib
// is cut off, the program killed, and the run counts as failed. stdin is a private in-memory file
// holding the input.
//
// Thread-safe: run() may be called from many threads at once; each run is independent.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace trellis {
class Config;
}

namespace trellis::env {

struct SandboxLimits {
  std::string python = "/usr/bin/python3";
  double cpu_seconds = 5;
  double wall_seconds = 10;
  int64_t memory_mib = 512;
  int64_t max_processes = 16;
  int64_t max_output_kib = 1024;

  static SandboxLimits from_config(const Config& config);  // [env.code]; Error on bad values
};

// What one sandboxed run did.
struct SandboxResult {
  int exit_code = -1;  // the program's exit status; -1 when a signal ended it
  int signal = 0;      // the signal that ended it, 0 if none
  std::string out;     // stdout (bytes, not necessarily UTF-8)
  std::string err;     // stderr
  // With RunOptions::channel: what the program wrote to Sandbox::kChannelFd.
  std::string channel;
  bool output_exceeded = false;  // stdout + stderr + channel passed max_output_kib: cut off, killed
  bool memory_exceeded = false;  // the run's cgroup hit memory.max and the kernel killed it
  bool cpu_time_exceeded = false;
  bool wall_time_exceeded = false;
  double wall_seconds = 0;
  // Why the run failed, in one printable ASCII line ("killed: CPU time limit (5 s)",
  // "exit status 1: ZeroDivisionError: division by zero"); "" when it exited 0 within limits.
  std::string failure;

  bool timed_out() const { return cpu_time_exceeded || wall_time_exceeded; }
  bool passed() const { return failure.empty(); }
};

struct RunOptions {
  // Gives the program a write-only pipe at Sandbox::kChannelFd whose bytes come back in
  // SandboxResult::channel, apart from stdout and stderr (a test harness reports results there).
  bool channel = false;
};

// Which of the defences this machine supports; detected once per process (see limits_in_force()).
struct SandboxDefences {
  bool seccomp = false;  // the filter compiled (the probe run checks it is in force)
  bool bwrap_disable_userns = false;
  bool cgroup = false;        // per-run cgroup v2 memory.max and pids.max
  std::string cgroup_parent;  // where the per-run cgroups go, when cgroup
  std::string cgroup_reason;  // why there are none, when !cgroup
};

class Sandbox {
 public:
  // The fd, inside the sandbox, of the result channel (RunOptions::channel).
  static constexpr int kChannelFd = 6;

  explicit Sandbox(SandboxLimits limits, std::string bwrap = "/usr/bin/bwrap");

  // Runs `program` (Python 3 source) with `input` on stdin. Whatever the program does, the result
  // says so; throws Error only when the sandbox itself cannot run on this machine (see check()).
  SandboxResult run(std::string_view program, std::string_view input = {},
                    RunOptions options = {}) const;

  // What this machine supports, and one line saying which limits apply.
  const SandboxDefences& defences() const { return defences_; }
  std::string limits_in_force() const;

  // Error saying what is wrong and how to fix it, unless sandboxed runs work here: bwrap and the
  // interpreter exist, and bwrap can create its namespaces (a probe run). The probe runs once;
  // its verdict is remembered. run() calls this first: code never runs unsandboxed.
  void check() const;

  const SandboxLimits& limits() const { return limits_; }

 private:
  SandboxResult run_sandboxed(std::string_view program, std::string_view input,
                              RunOptions options) const;

  SandboxLimits limits_;
  std::string bwrap_;
  SandboxDefences defences_;
  std::vector<std::string> command_;  // bwrap's argv up to (not including) the program's path
  mutable std::once_flag checked_;
  mutable std::string check_error_;  // "" when the probe succeeded
};

}  // namespace trellis::env
