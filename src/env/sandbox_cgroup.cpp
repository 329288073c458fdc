#include "env/sandbox_cgroup.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/logging.h"

namespace trellis::env {
namespace {

constexpr size_t kProbeStackBytes = 64 * 1024;  // the join probe's, until it exits

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// 0 on success, else errno.
int write_text(const std::string& path, std::string_view text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  const ssize_t n = write(fd, text.data(), text.size());
  const int error = n == static_cast<ssize_t>(text.size()) ? 0 : (n < 0 ? errno : EIO);
  close(fd);
  return error;
}

bool has_word(std::string_view text, std::string_view word) {
  std::istringstream words{std::string(text)};
  std::string w;
  while (words >> w) {
    if (w == word) return true;
  }
  return false;
}

// This process's cgroup v2 directory, or "" with `reason` saying why there is none.
std::string own_cgroup_dir(std::string& reason) {
  std::ifstream mountinfo("/proc/self/mountinfo");
  std::string line, root, mount_point;
  while (std::getline(mountinfo, line)) {
    const auto dash = line.find(" - ");
    if (dash == std::string::npos || line.compare(dash + 3, 8, "cgroup2 ") != 0) continue;
    std::istringstream fields(line.substr(0, dash));
    std::string id, parent, device;
    fields >> id >> parent >> device >> root >> mount_point;
    break;
  }
  if (mount_point.empty()) {
    reason = "no cgroup v2 hierarchy is mounted";
    return "";
  }
  std::ifstream groups("/proc/self/cgroup");
  std::string path;
  while (std::getline(groups, line)) {
    if (line.starts_with("0::")) path = line.substr(3);
  }
  if (path.empty()) {
    reason = "this process is in no cgroup v2 group";
    return "";
  }
  if (root != "/") {
    if (!path.starts_with(root)) {
      reason = fmt::format("the cgroup v2 mount at {} does not show this process's group {}",
                           mount_point, path);
      return "";
    }
    path = path.substr(root.size());
  }
  std::string dir = mount_point + (path == "/" ? "" : path);
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

// Starts a process (vfork-style) that joins the cgroup whose cgroup.procs is `procs` and exits:
// 0 when it could, else errno.
int join_probe(const std::string& procs) {
  struct Probe {
    const char* procs;
  } probe{procs.c_str()};
  std::vector<char> stack(kProbeStackBytes);
  sigset_t all, before;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &before);
  const pid_t pid = clone(
      [](void* p) -> int {
        const int fd = open(static_cast<Probe*>(p)->procs, O_WRONLY | O_CLOEXEC);
        if (fd < 0) _exit(errno & 0xff);
        const ssize_t n = write(fd, "0", 1);
        _exit(n == 1 ? 0 : (errno & 0xff));
      },
      stack.data() + stack.size(), CLONE_VM | CLONE_VFORK | SIGCHLD, &probe);
  const int clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  if (pid < 0) return clone_errno;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : EIO;
}

// Kills what is left in a run's cgroup and removes it; false when it would not go.
bool remove_cgroup(const std::string& dir) {
  const bool can_kill = write_text(dir + "/cgroup.kill", "1") == 0;
  for (int attempt = 0; attempt < 400; ++attempt) {
    if (rmdir(dir.c_str()) == 0 || errno == ENOENT) return true;
    if (errno != EBUSY) return false;
    if (!can_kill) {  // Linux < 5.14: kill its processes one by one
      std::istringstream pids(read_text(dir + "/cgroup.procs"));
      pid_t p;
      while (pids >> p) kill(p, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

CgroupSupport detect_cgroup() {
  CgroupSupport support;
  std::string& reason = support.reason;
  const std::string dir = own_cgroup_dir(reason);
  if (dir.empty()) return support;
  const std::string controllers = read_text(dir + "/cgroup.controllers");
  for (const char* c : {"memory", "pids"}) {
    if (!has_word(controllers, c)) {
      reason = fmt::format("cgroup v2 group {} has no {} controller (it has '{}')", dir, c,
                           controllers.substr(0, controllers.find('\n')));
      return support;
    }
  }
  const std::string subtree = read_text(dir + "/cgroup.subtree_control");
  if (!has_word(subtree, "memory") || !has_word(subtree, "pids")) {
    if (const int e = write_text(dir + "/cgroup.subtree_control", "+memory +pids"); e != 0) {
      reason = fmt::format(
          "cannot enable the memory and pids controllers for groups under {}: {}{}", dir,
          std::strerror(e), e == EBUSY ? " (the group holds processes itself)" : "");
      return support;
    }
  }
  static std::atomic<int> probes{0};
  const std::string probe = fmt::format("{}/trellis-sandbox-probe-{}-{}", dir, getpid(), probes++);
  if (mkdir(probe.c_str(), 0755) != 0) {
    reason = fmt::format("cannot create a cgroup under {}: {}", dir, std::strerror(errno));
    return support;
  }
  int e = write_text(probe + "/memory.max", "67108864");
  if (e == 0) e = write_text(probe + "/pids.max", "8");
  if (e == 0) e = join_probe(probe + "/cgroup.procs");
  remove_cgroup(probe);
  if (e != 0) {
    reason = fmt::format("cannot limit a cgroup under {} or move a process into it: {}", dir,
                         std::strerror(e));
    return support;
  }
  support.parent = dir;
  return support;
}

}  // namespace

const CgroupSupport& cgroup_support() {
  static const CgroupSupport support = detect_cgroup();
  return support;
}

RunCgroup::RunCgroup(const std::string& parent, int64_t memory_bytes, int64_t max_pids) {
  if (parent.empty()) return;
  static std::atomic<uint64_t> runs{0};
  const std::string dir = fmt::format("{}/trellis-sandbox-{}-{}", parent, getpid(), runs++);
  if (mkdir(dir.c_str(), 0755) != 0) {
    log::warn("sandbox: cannot create the run's cgroup {}: {}; rlimits only for this run", dir,
              std::strerror(errno));
    return;
  }
  dir_ = dir;
  int e = write_text(dir + "/memory.max", std::to_string(memory_bytes));
  if (e == 0) e = write_text(dir + "/pids.max", std::to_string(max_pids));
  if (e != 0) {
    log::warn("sandbox: cannot set the limits of cgroup {}: {}; rlimits only for this run", dir,
              std::strerror(e));
    remove_cgroup(dir_);
    dir_.clear();
    return;
  }
  write_text(dir + "/memory.swap.max", "0");   // absent without swap accounting: fine
  write_text(dir + "/memory.oom.group", "1");  // an OOM kill takes the whole run
  procs_ = dir + "/cgroup.procs";
}

RunCgroup::~RunCgroup() {
  if (!dir_.empty() && !remove_cgroup(dir_)) log::warn("sandbox: could not remove cgroup {}", dir_);
}

bool RunCgroup::oom_killed() const {
  if (dir_.empty()) return false;
  std::istringstream events(read_text(dir_ + "/memory.events"));
  std::string key;
  int64_t count = 0;
  while (events >> key >> count) {
    if ((key == "oom_kill" || key == "oom_group_kill") && count > 0) return true;
  }
  return false;
}

}  // namespace trellis::env
