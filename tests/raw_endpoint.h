// A TCP server on loopback that writes raw bytes, as an attacker's may: it accepts connections one
// at a time, reads each HTTP request (headers and a Content-Length body) and hands the connection
// to `answer`, which writes whatever it likes (headers a byte at a time, headers without end).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <thread>

#include <gtest/gtest.h>

namespace trellis::test {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

class RawEndpoint {
 public:
  explicit RawEndpoint(std::function<void(int fd)> answer) : answer_(std::move(answer)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ADD_FAILURE() << "cannot listen on loopback";
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~RawEndpoint() {
    stopping_ = true;
    thread_.join();
    ::close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // How long the first answer took, once it ended: -1 when none ended within `wait_s`.
  double first_answer_seconds(double wait_s) const {
    const auto t0 = std::chrono::steady_clock::now();
    while (first_answer_s_ < 0 && seconds_since(t0) < wait_s) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return first_answer_s_;
  }

  // Writes all of `bytes`; false once the client has hung up.
  static bool send_all(int fd, std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Answers with `head`, then one byte every 100 ms (each well within any per-read time-out) for
  // `for_s` seconds, or until the client hangs up.
  static void trickle(int fd, std::string_view head, double for_s) {
    const auto t0 = std::chrono::steady_clock::now();
    bool open = send_all(fd, head);
    while (open && seconds_since(t0) < for_s) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      open = send_all(fd, "a");
    }
  }
  // A status line, then a header a byte at a time.
  static void trickle_headers(int fd, double for_s) {
    trickle(fd, "HTTP/1.1 200 OK\r\nX-Slow: ", for_s);
  }

 private:
  void serve() {
    while (!stopping_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) != 1) continue;
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      read_request(c);
      const auto t0 = std::chrono::steady_clock::now();
      answer_(c);
      if (first_answer_s_ < 0) first_answer_s_ = seconds_since(t0);
      ::close(c);
    }
  }
  // The request's headers and its Content-Length of body (an invite is small).
  static void read_request(int fd) {
    std::string got;
    char buf[4096];
    size_t body_at = std::string::npos, length = 0;
    while (body_at == std::string::npos || got.size() < body_at + length) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return;
      got.append(buf, static_cast<size_t>(n));
      if (body_at == std::string::npos && (body_at = got.find("\r\n\r\n")) != std::string::npos) {
        body_at += 4;
        const size_t h = got.find("Content-Length: ");
        if (h != std::string::npos && h < body_at) length = std::stoul(got.substr(h + 16));
      }
    }
  }

  std::function<void(int)> answer_;
  int fd_ = -1, port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<double> first_answer_s_{-1};
  std::thread thread_;
};

}  // namespace trellis::test
