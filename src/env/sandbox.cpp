// Sandbox (see sandbox.h): bubblewrap, seccomp, rlimits, an optional cgroup and a watchdog around
// one python3 process.
//
// A run: the program, its input and the compiled seccomp filter go into memfds (no host temp files
// to clean up); a child (started vfork-style) moves them to fds 3, 0 and 5 (and the result
// channel's pipe to 6), joins the run's cgroup when there is one, sets the rlimits, drops root,
// and execs bwrap, which copies fd 3 to a read-only /sandbox/main.py, loads the filter from fd 5
// and starts `prlimit --nproc=N python3 -I -B /sandbox/main.py` in fresh namespaces under it. The
// parent polls stdout, stderr, the channel and a pidfd of the child until it exits, the output cap
// is passed or the wall deadline comes; the last two kill the child's process group, and
// --die-with-parent plus the PID namespace (and cgroup.kill) take every process of the sandbox
// with it.
#include "env/sandbox.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <mutex>
#include <sstream>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "common/logging.h"
#include "env/sandbox_cgroup.h"
#include "env/sandbox_seccomp.h"

namespace trellis::env {
namespace {

// The unprivileged identity the sandbox runs as when Trellis runs as root ("nobody").
constexpr uid_t kSandboxUid = 65534;
constexpr gid_t kSandboxGid = 65534;
// Inside the sandbox: where the program lies and its fd while bwrap copies it there.
constexpr const char* kProgramPath = "/sandbox/main.py";
constexpr int kProgramFd = 3;
constexpr int kExecErrorFd = 4;  // close-on-exec: read() sees EOF once bwrap has started
constexpr int kSeccompFd = 5;    // the compiled filter, read by bwrap (--seccomp 5)
constexpr int kChannelFd = Sandbox::kChannelFd;
// bwrap, and its init process in the PID namespace: pids.max leaves room for them.
constexpr int64_t kBwrapProcesses = 2;
constexpr rlim_t kMaxOpenFiles = 256;
constexpr size_t kChildStackBytes = 64 * 1024;

// Everything the child needs, prepared before it starts: until it execs, the child shares our
// memory and may only make async-signal-safe calls (no allocation; other threads may hold locks).
struct ChildPlan {
  const char* bwrap;
  char* const* argv;
  char* const* envp;
  int stdin_fd, stdout_fd, stderr_fd, program_fd, exec_error_fd, seccomp_fd;
  int channel_fd;            // -1: no result channel
  const char* cgroup_procs;  // the run's cgroup.procs to join; nullptr: no cgroup
  rlim_t cpu_seconds, address_space_bytes, file_size_bytes;
  bool drop_root;
  pid_t parent;
};

[[noreturn]] void child_fail(int fd, int error) {
  (void)!write(fd, &error, sizeof error);
  _exit(127);
}

// Closes every fd >= `first`: nothing else leaks into the sandbox, not even fds that other
// threads opened without O_CLOEXEC.
void close_fds_from(int first) {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, first, ~0U, 0) == 0) return;
#endif
  for (int fd = first; fd < 65536; ++fd) close(fd);
}

[[noreturn]] void exec_child(const ChildPlan& p) noexcept {
  // Signals arrive blocked (a handler of ours must not run here, on shared memory). Reset the
  // handlers, then unblock: signal state survives exec, and a caller that blocks or ignores
  // signals (SIGXCPU!) would otherwise weaken the limits.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; ++s) {
    if (s != SIGKILL && s != SIGSTOP) sigaction(s, &dfl, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  // Own process group: the watchdog kills the group.
  setpgid(0, 0);

  // Move the fds to their places (fd i gets sources[i]); first out of the way, as a source may sit
  // on a target number.
  const int sources[] = {p.stdin_fd,      p.stdout_fd,  p.stderr_fd, p.program_fd,
                         p.exec_error_fd, p.seccomp_fd, p.channel_fd};
  constexpr int kCount = 7;
  static_assert(kExecErrorFd == 4 && kSeccompFd == 5 && kChannelFd == 6);
  int moved[kCount];
  for (int i = 0; i < kCount; ++i) {
    moved[i] = sources[i] < 0 ? -1 : fcntl(sources[i], F_DUPFD, 10);
    if (sources[i] >= 0 && moved[i] < 0) child_fail(p.exec_error_fd, errno);
  }
  for (int i = 0; i < kCount; ++i) {
    if (moved[i] < 0 || i == kExecErrorFd) continue;
    if (dup2(moved[i], i) < 0) child_fail(moved[kExecErrorFd], errno);
  }
  if (dup3(moved[kExecErrorFd], kExecErrorFd, O_CLOEXEC) < 0) {
    child_fail(moved[kExecErrorFd], errno);
  }
  close_fds_from(p.channel_fd >= 0 ? kChannelFd + 1 : kChannelFd);

  // Join the run's cgroup while still root (the parent made it): every process of the run, bwrap
  // included, then counts against its memory.max and pids.max.
  if (p.cgroup_procs != nullptr) {
    const int fd = open(p.cgroup_procs, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, "0", 1) != 1) child_fail(kExecErrorFd, errno);
    close(fd);
  }

  auto limit = [](int resource, rlim_t soft, rlim_t hard) {
    const struct rlimit r { soft, hard };
    if (setrlimit(resource, &r) != 0) child_fail(kExecErrorFd, errno);
  };
  // CPU: SIGXCPU at the limit, SIGKILL a second later for a program that catches SIGXCPU.
  limit(RLIMIT_CPU, p.cpu_seconds, p.cpu_seconds + 1);
  limit(RLIMIT_AS, p.address_space_bytes, p.address_space_bytes);
  limit(RLIMIT_FSIZE, p.file_size_bytes, p.file_size_bytes);
  limit(RLIMIT_CORE, 0, 0);
  limit(RLIMIT_NOFILE, kMaxOpenFiles, kMaxOpenFiles);

  if (p.drop_root) {
    // Raw syscalls: glibc's wrappers would signal our other threads to change their ids too.
    if (syscall(SYS_setgroups, 0, nullptr) != 0 ||
        syscall(SYS_setresgid, kSandboxGid, kSandboxGid, kSandboxGid) != 0 ||
        syscall(SYS_setresuid, kSandboxUid, kSandboxUid, kSandboxUid) != 0) {
      child_fail(kExecErrorFd, errno);
    }
  }
  // After the uid change, which clears it: bwrap dies with the thread that started it.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != p.parent) _exit(127);

  execve(p.bwrap, p.argv, p.envp);
  child_fail(kExecErrorFd, errno);
}

// An anonymous in-memory file holding `data`, positioned at its start.
int memory_file(const char* name, std::string_view data) {
  const int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) fail("sandbox", "memfd_create failed: {}", std::strerror(errno));
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      close(fd);
      fail("sandbox", "writing a memfd failed: {}", std::strerror(e));
    }
    done += static_cast<size_t>(n);
  }
  lseek(fd, 0, SEEK_SET);
  return fd;
}

// Closes the fds it holds when it goes out of scope (every exit path of a run).
struct Fds {
  std::vector<int> fds;
  int add(int fd) {
    fds.push_back(fd);
    return fd;
  }
  void close_one(int& fd) {
    if (fd < 0) return;
    for (auto& f : fds) {
      if (f == fd) f = -1;
    }
    close(fd);
    fd = -1;
  }
  ~Fds() {
    for (int fd : fds) {
      if (fd >= 0) close(fd);
    }
  }
};

// One line of printable ASCII from untrusted bytes, at most `max_chars` long.
std::string printable_line(std::string_view text, size_t max_chars) {
  std::string line;
  for (char c : text) {
    if (line.size() >= max_chars) {
      line += "...";
      break;
    }
    const auto u = static_cast<unsigned char>(c);
    line += (u >= 0x20 && u < 0x7f) ? c : '?';
  }
  return line;
}

// The last non-blank line of `text` (a Python traceback ends with the exception).
std::string_view last_line(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  const auto nl = text.find_last_of('\n');
  return nl == std::string_view::npos ? text : text.substr(nl + 1);
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", sig);
}

std::string seconds_text(double s) { return fmt::format("{:g} s", s); }

std::string describe_failure(const SandboxResult& r, const SandboxLimits& limits) {
  if (r.output_exceeded) return fmt::format("printed more than {} KiB", limits.max_output_kib);
  if (r.wall_time_exceeded) {
    return fmt::format("killed: wall time limit ({})", seconds_text(limits.wall_seconds));
  }
  if (r.cpu_time_exceeded) {
    return fmt::format("killed: CPU time limit ({})", seconds_text(limits.cpu_seconds));
  }
  if (r.memory_exceeded) return fmt::format("out of memory (limit {} MiB)", limits.memory_mib);
  if (r.signal != 0) return "killed by " + signal_name(r.signal);
  if (r.exit_code == 0) return "";
  if (r.err.find("MemoryError") != std::string::npos) {
    return fmt::format("out of memory (limit {} MiB)", limits.memory_mib);
  }
  const auto last = last_line(r.err);
  if (last.empty()) return fmt::format("exit status {}", r.exit_code);
  return fmt::format("exit status {}: {}", r.exit_code, printable_line(last, 200));
}

// The first of `candidates` that is an executable file, or "".
std::string find_executable(std::initializer_list<const char*> candidates) {
  for (const char* c : candidates) {
    if (access(c, X_OK) == 0) return c;
  }
  return "";
}

// ---------------------------------------------------------------------------------------------
// bwrap's options

// What `argv` prints on stdout (at most 256 KiB), or "" when it cannot start.
std::string command_output(const std::vector<std::string>& args) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return "";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  char* envp[] = {nullptr};
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  std::string text;
  if (rc == 0) {
    char buffer[4096];
    ssize_t n;
    while (text.size() < 256 * 1024 &&
           ((n = read(out[0], buffer, sizeof buffer)) > 0 || (n < 0 && errno == EINTR))) {
      if (n > 0) text.append(buffer, n);
    }
  }
  close(out[0]);
  if (rc == 0) {
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  return text;
}

// Whether the bwrap at `bwrap` has --disable-userns (0.8+); asked once per path.
bool bwrap_has_disable_userns(const std::string& bwrap) {
  static std::mutex mutex;
  static std::map<std::string, bool> known;
  std::lock_guard lock(mutex);
  if (auto it = known.find(bwrap); it != known.end()) return it->second;
  const bool has = access(bwrap.c_str(), X_OK) == 0 &&
                   command_output({bwrap, "--help"}).find("--disable-userns") != std::string::npos;
  known.emplace(bwrap, has);
  return has;
}

SandboxDefences detect_defences(const std::string& bwrap) {
  SandboxDefences d;
  d.seccomp = seccomp_program().error.empty();
  d.bwrap_disable_userns = bwrap_has_disable_userns(bwrap);
  const CgroupSupport& cgroup = cgroup_support();
  d.cgroup = !cgroup.parent.empty();
  d.cgroup_parent = cgroup.parent;
  d.cgroup_reason = cgroup.reason;
  return d;
}

}  // namespace

SandboxLimits SandboxLimits::from_config(const Config& config) {
  SandboxLimits l;
  l.python = config.get<std::string>("env.code.python");
  l.cpu_seconds = config.get<double>("env.code.cpu_seconds");
  l.wall_seconds = config.get<double>("env.code.wall_seconds");
  l.memory_mib = config.get<int64_t>("env.code.memory_mib");
  l.max_processes = config.get<int64_t>("env.code.max_processes");
  l.max_output_kib = config.get<int64_t>("env.code.max_output_kib");
  auto positive = [](double v, const char* key) {
    if (!(v > 0) || !std::isfinite(v)) fail(key, "must be a positive number, got {}", v);
  };
  positive(l.cpu_seconds, "env.code.cpu_seconds");
  positive(l.wall_seconds, "env.code.wall_seconds");
  positive(static_cast<double>(l.memory_mib), "env.code.memory_mib");
  positive(static_cast<double>(l.max_processes), "env.code.max_processes");
  positive(static_cast<double>(l.max_output_kib), "env.code.max_output_kib");
  if (l.python.empty() || l.python.front() != '/') {
    fail("env.code.python", "must be an absolute path to a Python interpreter, got '{}'", l.python);
  }
  return l;
}

Sandbox::Sandbox(SandboxLimits limits, std::string bwrap)
    : limits_(std::move(limits)), bwrap_(std::move(bwrap)), defences_(detect_defences(bwrap_)) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // Inside, the interpreter is exec'd by its real path; an interpreter installed outside /usr
  // (e.g. /opt/python/bin/python3) gets its prefix (/opt/python) mounted read-only too.
  fs::path python = fs::weakly_canonical(limits_.python, ec);
  if (ec) python = limits_.python;
  const std::string prlimit = find_executable({"/usr/bin/prlimit", "/bin/prlimit"});

  auto add = [this](std::initializer_list<std::string> args) {
    command_.insert(command_.end(), args);
  };
  add({bwrap_, "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session"});
  // No user namespaces inside (bwrap 0.8+); the seccomp filter denies them in any case.
  if (defences_.bwrap_disable_userns) add({"--disable-userns"});
  add({"--seccomp", std::to_string(kSeccompFd)});
  add({"--ro-bind", "/usr", "/usr"});
  // Merged-/usr systems have /bin, /lib... as symlinks into /usr; others have directories.
  for (const char* top : {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}) {
    const auto status = fs::symlink_status(top, ec);
    if (ec || !fs::exists(status)) continue;
    if (fs::is_symlink(status)) {
      add({"--symlink", fs::read_symlink(top, ec).string(), top});
    } else if (fs::is_directory(status)) {
      add({"--ro-bind", top, top});
    }
  }
  // The dynamic loader's cache: without it each library is searched for (slower, same result).
  if (fs::exists("/etc/ld.so.cache", ec)) {
    add({"--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"});
  }
  const std::string python_text = python.string();
  if (!python_text.starts_with("/usr/") && python.parent_path().has_parent_path() &&
      python.parent_path().parent_path() != "/") {
    const std::string prefix = python.parent_path().parent_path().string();
    add({"--ro-bind", prefix, prefix});
  }
  add({"--proc", "/proc", "--dev", "/dev"});
  add({"--size", std::to_string(limits_.memory_mib * 1024 * 1024), "--tmpfs", "/tmp"});
  add({"--ro-bind-data", std::to_string(kProgramFd), kProgramPath, "--chdir", "/tmp"});
  add({"--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp"});
  add({"--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONDONTWRITEBYTECODE", "1"});
  // RLIMIT_NPROC is set inside the new user namespace: the kernel counts processes per (user
  // namespace, uid), so the limit applies to this run alone, not to every sandbox of this uid.
  add({prlimit.empty() ? "/usr/bin/prlimit" : prlimit,
       fmt::format("--nproc={}", limits_.max_processes), "--", python_text, "-I", "-B"});
}

void Sandbox::check() const {
  std::call_once(checked_, [this] {
    const std::string hint =
        "bubblewrap needs unprivileged user namespaces: `sysctl user.max_user_namespaces` must be "
        "> 0 and `sysctl kernel.unprivileged_userns_clone` (where it exists) 1; on Ubuntu 24.04 "
        "set kernel.apparmor_restrict_unprivileged_userns=0 or install bwrap's AppArmor profile; "
        "in a container allow them (docker run --security-opt seccomp=unconfined "
        "--security-opt apparmor=unconfined)";
    if (access(bwrap_.c_str(), X_OK) != 0) {
      check_error_ = fmt::format(
          "bubblewrap not found at '{}': install it (apt-get install bubblewrap; scripts/setup.sh "
          "does) to run the code environment",
          bwrap_);
    } else if (access(limits_.python.c_str(), X_OK) != 0) {
      check_error_ = fmt::format(
          "Python interpreter '{}' not found (env.code.python): install python3 (apt-get install "
          "python3) or point env.code.python at one",
          limits_.python);
    } else if (find_executable({"/usr/bin/prlimit", "/bin/prlimit"}).empty()) {
      check_error_ = "prlimit not found in /usr/bin or /bin: install util-linux";
    } else if (!defences_.seccomp) {
      check_error_ = fmt::format("the code sandbox's seccomp filter could not be built: {}",
                                 seccomp_program().error);
    } else {
      try {
        // The probe prints its uid and its seccomp mode (2: a filter is in force).
        const SandboxResult probe = run_sandboxed(
            "import os\nmode = [l.split()[1] for l in open('/proc/self/status')\n"
            "        if l.startswith('Seccomp:')]\nprint(os.getuid(), mode[0] if mode else '-')\n",
            "", {});
        std::istringstream fields{std::string(last_line(probe.out))};
        std::string uid, seccomp_mode;
        fields >> uid >> seccomp_mode;
        if (!probe.passed()) {
          const auto err = last_line(probe.err);
          check_error_ = fmt::format(
              "the code sandbox does not work on this machine: a probe run failed ({}{}{}); {}",
              probe.failure, err.empty() ? "" : "; stderr: ", printable_line(err, 300), hint);
        } else if (uid == "0") {
          check_error_ = "the code sandbox runs programs as root: refusing to run code";
        } else if (seccomp_mode != "2") {
          check_error_ = fmt::format(
              "the code sandbox's seccomp filter is not in force (Seccomp: '{}' in "
              "/proc/self/status): the kernel needs CONFIG_SECCOMP_FILTER; refusing to run code",
              printable_line(seccomp_mode, 20));
        }
      } catch (const Error& e) {
        check_error_ = fmt::format("the code sandbox does not work on this machine: {}", e.what());
      }
    }
  });
  if (!check_error_.empty()) throw Error(check_error_, "env.code");
  static std::once_flag logged;
  std::call_once(logged, [this] { log::info("sandbox: {}", limits_in_force()); });
}

std::string Sandbox::limits_in_force() const {
  const std::string userns = defences_.bwrap_disable_userns
                                 ? "no nested user namespaces (bwrap --disable-userns, seccomp)"
                                 : "no nested user namespaces (seccomp; this bwrap lacks "
                                   "--disable-userns)";
  const std::string limits =
      defences_.cgroup
          ? fmt::format(
                "cgroup v2 limits per run under {} (memory.max {} MiB, pids.max {}) and "
                "rlimits",
                defences_.cgroup_parent, limits_.memory_mib,
                limits_.max_processes + kBwrapProcesses)
          : fmt::format("rlimits only (RLIMIT_AS {} MiB per process, RLIMIT_NPROC {}): {}",
                        limits_.memory_mib, limits_.max_processes, defences_.cgroup_reason);
  return fmt::format("seccomp filter{}; {}; {}", defences_.seccomp ? "" : " MISSING", userns,
                     limits);
}

SandboxResult Sandbox::run(std::string_view program, std::string_view input,
                           RunOptions options) const {
  check();
  return run_sandboxed(program, input, options);
}

SandboxResult Sandbox::run_sandboxed(std::string_view program, std::string_view input,
                                     RunOptions options) const {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(limits_.wall_seconds));
  const size_t output_cap = static_cast<size_t>(limits_.max_output_kib) * 1024;

  std::vector<std::string> args = command_;
  args.emplace_back(kProgramPath);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string env_path = "PATH=/usr/bin:/bin", env_lang = "LANG=C.UTF-8";
  char* envp[] = {env_path.data(), env_lang.data(), nullptr};

  Fds fds;
  const int program_fd = fds.add(memory_file("trellis-program", program));
  const int stdin_fd = fds.add(memory_file("trellis-stdin", input));
  const int seccomp_fd = fds.add(memory_file("trellis-seccomp", seccomp_program().bpf));
  int out_pipe[2], err_pipe[2], exec_pipe[2], channel_pipe[2] = {-1, -1};
  for (int* p : {out_pipe, err_pipe, exec_pipe, channel_pipe}) {
    if (p == channel_pipe && !options.channel) continue;
    if (pipe2(p, O_CLOEXEC) != 0) fail("sandbox", "pipe2 failed: {}", std::strerror(errno));
    fds.add(p[0]);
    fds.add(p[1]);
  }
  const RunCgroup cgroup(defences_.cgroup_parent, limits_.memory_mib * 1024 * 1024,
                         limits_.max_processes + kBwrapProcesses);

  const ChildPlan plan{bwrap_.c_str(),
                       argv.data(),
                       envp,
                       stdin_fd,
                       out_pipe[1],
                       err_pipe[1],
                       program_fd,
                       exec_pipe[1],
                       seccomp_fd,
                       channel_pipe[1],
                       cgroup.procs(),
                       static_cast<rlim_t>(std::ceil(limits_.cpu_seconds)),
                       static_cast<rlim_t>(limits_.memory_mib) * 1024 * 1024,
                       static_cast<rlim_t>(limits_.memory_mib) * 1024 * 1024,
                       geteuid() == 0,
                       getpid()};
  // vfork-style (like posix_spawn): the child borrows our memory until it execs, so starting it
  // costs the same in a process of many gigabytes, and our pages are not made copy-on-write.
  std::vector<char> child_stack(kChildStackBytes);
  sigset_t all, before;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &before);
  const pid_t pid = clone([](void* p) -> int { exec_child(*static_cast<const ChildPlan*>(p)); },
                          child_stack.data() + child_stack.size(), CLONE_VM | CLONE_VFORK | SIGCHLD,
                          const_cast<ChildPlan*>(&plan));
  const int clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  if (pid < 0) fail("sandbox", "starting a process failed: {}", std::strerror(clone_errno));

  // The child's ends belong to the child now; EOF on our ends means every writer is gone.
  fds.close_one(out_pipe[1]);
  fds.close_one(err_pipe[1]);
  fds.close_one(exec_pipe[1]);
  fds.close_one(channel_pipe[1]);
  int exec_errno = 0;
  ssize_t got;
  while ((got = read(exec_pipe[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
  }
  if (got > 0) {
    waitpid(pid, nullptr, 0);
    fail("sandbox", "could not start the sandbox ({}): {}", bwrap_, std::strerror(exec_errno));
  }
  fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
  fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
  if (options.channel) fcntl(channel_pipe[0], F_SETFL, O_NONBLOCK);
  // A pidfd makes the child's exit pollable along with its output; without one (Linux < 5.3),
  // poll in short slices and ask waitpid.
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) fds.add(pidfd);

  SandboxResult r;
  int status = 0;
  bool exited = false, kill_it = false;
  std::array<int, 3> streams = {out_pipe[0], err_pipe[0], channel_pipe[0]};
  std::array<std::string*, 3> sinks = {&r.out, &r.err, &r.channel};
  char buffer[65536];

  // Reads what a stream has now; false once the output cap is passed.
  auto drain = [&](size_t i) {
    for (;;) {
      const ssize_t n = read(streams[i], buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return true;  // EAGAIN: nothing more for now
      if (n == 0) {
        fds.close_one(streams[i]);
        return true;
      }
      const size_t room = output_cap - r.out.size() - r.err.size() - r.channel.size();
      sinks[i]->append(buffer, std::min(room, static_cast<size_t>(n)));
      if (static_cast<size_t>(n) > room) return false;
    }
  };

  for (;;) {
    const auto now = Clock::now();
    if (now >= deadline) {
      r.wall_time_exceeded = true;
      kill_it = !exited;
      break;
    }
    std::array<pollfd, 4> polled;
    nfds_t n = 0;
    for (int s : streams) {
      if (s >= 0) polled[n++] = {s, POLLIN, 0};
    }
    if (!exited && pidfd >= 0) polled[n++] = {pidfd, POLLIN, 0};
    auto wait_ms = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
    if (!exited && pidfd < 0) wait_ms = std::min<decltype(wait_ms)>(wait_ms, 10);
    if (poll(polled.data(), n, static_cast<int>(std::min<decltype(wait_ms)>(wait_ms, INT_MAX))) <
            0 &&
        errno != EINTR) {
      fail("sandbox", "poll failed: {}", std::strerror(errno));
    }
    bool over = false;
    for (size_t i = 0; i < streams.size() && !over; ++i) {
      if (streams[i] >= 0) over = !drain(i);
    }
    if (over) {
      r.output_exceeded = true;
      kill_it = !exited;
      break;
    }
    if (!exited && waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      // bwrap exits when the program does. Processes the program left behind are being killed
      // (the sandbox's init dies with bwrap, and its PID namespace with it) but may hold the
      // pipes open a moment longer: take what is there now, without waiting for them.
      for (size_t i = 0; i < streams.size(); ++i) {
        if (streams[i] >= 0 && !drain(i)) r.output_exceeded = true;
      }
      break;
    }
  }
  if (kill_it) {
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
  }
  if (!exited) {
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  r.wall_seconds = std::chrono::duration<double>(Clock::now() - start).count();

  if (WIFSIGNALED(status)) {
    r.signal = WTERMSIG(status);
  } else if (WIFEXITED(status)) {
    // bwrap exits with its child's status, and with 128 + N when signal N ended the child.
    const int code = WEXITSTATUS(status);
    if (code > 128 && code - 128 < NSIG) {
      r.signal = code - 128;
    } else {
      r.exit_code = code;
    }
  }
  r.memory_exceeded = cgroup.oom_killed();
  const bool ours = r.output_exceeded || r.wall_time_exceeded || r.memory_exceeded;
  // SIGXCPU at the soft CPU limit; SIGKILL that we did not send, after at least the CPU limit
  // in wall time, is the hard limit (bwrap reports no CPU time of the processes inside).
  r.cpu_time_exceeded = !ours && (r.signal == SIGXCPU ||
                                  (r.signal == SIGKILL && r.wall_seconds >= limits_.cpu_seconds));
  r.failure = describe_failure(r, limits_);
  return r;
}

}  // namespace trellis::env
