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
#include <random>
#include <string>

namespace trellis::test {

inline constexpr const char* kNginx = "/usr/sbin/nginx";

// A port nothing uses now on 127.0.0.1, chosen below the kernel's ephemeral range
// (ip_local_port_range). A port from bind(0) lies inside that range, where the kernel may hand it
// to any other test's connect() or bind(0) before the caller binds it; a client retrying connect()
// to a port nobody listens on yet can even take it as its own local port (a loopback
// self-connect), which cost a CI run a rendezvous that never happened. Below the range only
// another caller of free_port() can take it, and it picks at random.
inline int free_port() {
  int ephemeral_low = 32768;  // the range's first port: only its start matters here
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(f, "%d", &ephemeral_low) != 1) ephemeral_low = 32768;
    std::fclose(f);
  }
  const auto try_bind = [](int port) {
    const int s = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    int bound = -1;
    if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      socklen_t len = sizeof a;
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
      bound = ntohs(a.sin_port);
    }
    ::close(s);
    return bound;
  };
  constexpr int kLowest = 10000;
  if (ephemeral_low > kLowest + 1000) {
    static std::mt19937 pick(std::random_device{}() ^ static_cast<unsigned>(::getpid()));
    for (int attempt = 0; attempt < 200; ++attempt) {
      const int port = kLowest + static_cast<int>(pick() % (ephemeral_low - kLowest));
      if (try_bind(port) == port) return port;
    }
  }
  return try_bind(0);  // a machine whose ephemeral range leaves nothing below it
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
