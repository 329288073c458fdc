// A `trellis` child process for integration tests that talk to a running server (`serve`,
// `orchestrator`): started with the given arguments, stdin and stdout on /dev/null, its stderr
// collected on a thread; killed at destruction if still running.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace trellis::test {

class TrellisProcess {
 public:
  explicit TrellisProcess(const std::vector<std::string>& args) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(fds[1], STDERR_FILENO);
      const int null = ::open("/dev/null", O_RDWR);
      ::dup2(null, STDIN_FILENO);
      ::dup2(null, STDOUT_FILENO);
      ::close(fds[0]);
      ::close(fds[1]);
      std::vector<char*> argv{const_cast<char*>(TRELLIS_BIN)};
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(TRELLIS_BIN, argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    fd_ = fds[0];
    reader_ = std::thread([this] {
      char buf[4096];
      for (ssize_t n; (n = ::read(fd_, buf, sizeof buf)) > 0;) {
        std::lock_guard lock(mu_);
        log_.append(buf, static_cast<size_t>(n));
      }
    });
  }
  ~TrellisProcess() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (reader_.joinable()) reader_.join();
    ::close(fd_);
  }
  TrellisProcess(const TrellisProcess&) = delete;
  TrellisProcess& operator=(const TrellisProcess&) = delete;

  // True once the process has ended (reaped).
  bool exited() {
    if (!exited_ && ::waitpid(pid_, &status_, WNOHANG) == pid_) exited_ = true;
    return exited_;
  }

  // Sends `sig` and returns the exit status (-1 if it did not exit in time or died of a signal).
  int stop(int sig, std::chrono::seconds timeout) {
    ::kill(pid_, sig);
    return wait(timeout);
  }

  // Waits for the process to end; its exit status (-1 if it did not end in time or died of a
  // signal).
  int wait(std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (exited()) return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

  pid_t pid() const { return pid_; }

  // Sends `sig` without waiting (SIGSTOP freezes the process, SIGCONT resumes it).
  void signal(int sig) { ::kill(pid_, sig); }

  std::string log() {
    std::lock_guard lock(mu_);
    return log_;
  }

 private:
  pid_t pid_ = -1;
  int fd_ = -1, status_ = 0;
  bool exited_ = false;
  std::thread reader_;
  std::mutex mu_;
  std::string log_;
};

}  // namespace trellis::test
