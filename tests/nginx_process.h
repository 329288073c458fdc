// Debian's nginx for the tests of the configurations Trellis writes (`trellis relay nginx-config`,
// `trellis orchestrator nginx-config`): a free port to put it on, the configuration check, and
// nginx itself in the foreground, stopped gracefully when the test is done.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

namespace trellis::test {

inline constexpr const char* kNginx = "/usr/sbin/nginx";

// A port nothing listens on now (on 127.0.0.1).
inline int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(s);
  return ntohs(a.sin_port);
}

// Runs a shell command to completion; its exit status, and its output (stderr too) in `output`.
inline int run_command(const std::string& command, std::string* output = nullptr) {
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = ::pclose(p);
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// nginx running `conf` with prefix `dir` in the foreground until destroyed (SIGQUIT: graceful).
class NginxProcess {
 public:
  NginxProcess(const std::filesystem::path& dir, const std::filesystem::path& conf) {
    pid_ = ::fork();
    if (pid_ == 0) {
      ::execl(kNginx, kNginx, "-p", dir.c_str(), "-c", conf.c_str(), "-g", "daemon off;", nullptr);
      ::_exit(127);
    }
  }
  ~NginxProcess() {
    ::kill(pid_, SIGQUIT);
    ::waitpid(pid_, nullptr, 0);
  }
  NginxProcess(const NginxProcess&) = delete;
  NginxProcess& operator=(const NginxProcess&) = delete;

 private:
  pid_t pid_ = -1;
};

}  // namespace trellis::test
