// A supervised child process: argv executed with stdin from /dev/null and stdout and stderr
// appended to a log file, in its own process group (so a terminal's Ctrl-C reaches only the
// launcher, which then stops the children in order), sent SIGTERM when its supervisor dies.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace trellis::run {

class ChildProcess {
 public:
  ChildProcess(std::string name, std::vector<std::string> argv, std::filesystem::path log);
  ~ChildProcess();  // kills a child still running
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  void start();  // Error naming the program when it cannot start
  // The exit status once the child has ended (128 + signal when killed), else nullopt.
  std::optional<int> poll();
  bool running() { return started() && !poll(); }
  bool started() const { return pid_ > 0; }
  // SIGTERM, then SIGKILL after `grace_s`; returns the exit status.
  int stop(double grace_s);
  void kill_now();  // SIGKILL (tests of crash recovery)

  const std::string& name() const { return name_; }
  const std::filesystem::path& log() const { return log_; }
  std::vector<std::string>& argv() { return argv_; }
  pid_t pid() const { return pid_; }
  double seconds_since_start() const;
  // The last `lines` lines of the log, for error messages.
  std::string log_tail(int lines) const;

 private:
  std::string name_;
  std::vector<std::string> argv_;
  std::filesystem::path log_;
  pid_t pid_ = -1;
  std::optional<int> status_;
  std::chrono::steady_clock::time_point started_at_{};
};

// The last `lines` lines of `file`, from at most its last MiB ("" when it cannot be read).
std::string log_tail(const std::filesystem::path& file, int64_t lines);

}  // namespace trellis::run
