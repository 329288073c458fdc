// Debian's redis-server for the tests of what Trellis keeps in Redis (the discovery backend): on a
// free port, in the foreground, without persistence, answering before the constructor returns, and
// stopped when the test is done. `extra` adds redis-server options (e.g. {"--requirepass", "..."});
// `port` restarts one where another ran (0 = a free port).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "nginx_process.h"  // free_port

namespace trellis::test {

inline constexpr const char* kRedisServer = "/usr/bin/redis-server";

class RedisProcess {
 public:
  explicit RedisProcess(const std::filesystem::path& dir, std::vector<std::string> extra = {},
                        int port = 0)
      : port_(port ? port : free_port()) {
    std::filesystem::create_directories(dir);
    std::vector<std::string> args = {kRedisServer, "--port",       std::to_string(port_),
                                     "--bind",     "127.0.0.1",    "--save",
                                     "",           "--appendonly", "no",
                                     "--dir",      dir.string(),   "--loglevel",
                                     "warning"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::execv(kRedisServer, argv.data());
      ::_exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!accepts() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!accepts()) throw std::runtime_error("redis-server did not start on port " + address());
  }
  ~RedisProcess() {
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
  }
  RedisProcess(const RedisProcess&) = delete;
  RedisProcess& operator=(const RedisProcess&) = delete;

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }

 private:
  bool accepts() const {
    const int s = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port_));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool ok = ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(s);
    return ok;
  }
  int port_;
  pid_t pid_ = -1;
};

}  // namespace trellis::test
