#include "run/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "common/error.h"
#include "common/files.h"

namespace trellis::run {

ChildProcess::ChildProcess(std::string name, std::vector<std::string> argv,
                           std::filesystem::path log)
    : name_(std::move(name)), argv_(std::move(argv)), log_(std::move(log)) {}

ChildProcess::~ChildProcess() {
  if (running()) stop(0);
}

void ChildProcess::start() {
  std::filesystem::create_directories(log_.parent_path());
  const int log_fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) fail(log_.string(), "cannot open the log: {}", std::strerror(errno));
  std::vector<char*> args;
  for (auto& a : argv_) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log_fd);
    fail(name_, "fork failed: {}", std::strerror(errno));
  }
  if (pid == 0) {  // the child: only async-signal-safe calls until exec
    ::setpgid(0, 0);
    // It ends with its supervisor, even one killed outright (a node agent's task must not go
    // on without the agent that answers for it, nor a run's roles without their launcher).
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);  // the supervisor died before prctl
    const int null_fd = ::open("/dev/null", O_RDONLY);
    ::dup2(null_fd, 0);
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    ::execv(args[0], args.data());
    const char msg[] = "exec failed\n";
    (void)!::write(2, msg, sizeof msg - 1);
    ::_exit(127);
  }
  ::close(log_fd);
  pid_ = pid;
  status_.reset();
  started_at_ = std::chrono::steady_clock::now();
}

double ChildProcess::seconds_since_start() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - started_at_).count();
}

std::optional<int> ChildProcess::poll() {
  if (status_ || pid_ <= 0) return status_;
  int st = 0;
  const pid_t r = ::waitpid(pid_, &st, WNOHANG);
  if (r == pid_) status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return status_;
}

int ChildProcess::stop(double grace_s) {
  if (!started()) return 0;
  if (!poll()) {
    ::kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
    while (!poll() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!poll()) {
      ::kill(pid_, SIGKILL);
      while (!poll()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  return *status_;
}

void ChildProcess::kill_now() {
  if (running()) ::kill(pid_, SIGKILL);
}

std::string ChildProcess::log_tail(int lines) const { return run::log_tail(log_, lines); }

std::string log_tail(const std::filesystem::path& file, int64_t lines) {
  constexpr int64_t kMaxBytes = 1 << 20;
  std::ifstream in(file, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const int64_t size = in.tellg();
  const int64_t start = std::max<int64_t>(0, size - kMaxBytes);
  in.seekg(start);
  std::string text(static_cast<size_t>(std::max<int64_t>(0, size - start)), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(std::max<std::streamsize>(0, in.gcount())));
  size_t pos = text.size();
  if (pos > 0 && text[pos - 1] == '\n') --pos;
  for (int64_t n = 0; n < lines; ++n) {
    if (pos == 0) return text;
    const size_t newline = text.rfind('\n', pos - 1);
    if (newline == std::string::npos) return text;
    pos = newline;
  }
  return text.substr(pos + 1);
}

}  // namespace trellis::run
