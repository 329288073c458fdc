// nginx in front of the orchestrator (orchestrator/nginx_front.h), with Debian's nginx and the
// configuration `trellis orchestrator nginx-config` writes: clients that trickle their headers
// stall cpp-httplib's threads when they reach it directly, but not through nginx, which drops
// them after its header timeout; nodes keep their own address behind it (X-Real-IP from a
// trusted proxy only); bodies over a route's limit stop at nginx.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <ctime>
#include <thread>

#include <fmt/format.h>

#include "api_fixture.h"
#include "cli/run_cli.h"
#include "common/request_signing.h"
#include "nginx_process.h"
#include "orchestrator/nginx_front.h"

namespace trellis::orchestrator {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using test::free_port;
using test::kNginx;
using test::NginxProcess;
using test::run_command;

// A TCP connection to 127.0.0.1:port from `source_ip`; -1 on failure.
int connect_to(int port, const std::string& source_ip = "127.0.0.1") {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  ::inet_pton(AF_INET, source_ip.c_str(), &from.sin_addr);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Sends `request` and reads the answer until the server closes or `timeout_s` passes ("" if
// nothing came).
std::string exchange(int port, const std::string& request, double timeout_s = 5,
                     const std::string& source_ip = "127.0.0.1") {
  const int fd = connect_to(port, source_ip);
  if (fd < 0) return "";
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string reply;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  char buf[4096];
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    reply.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return reply;
}

int status_of(const std::string& reply) {
  return reply.starts_with("HTTP/1.") && reply.size() >= 12 ? std::stoi(reply.substr(9, 3)) : 0;
}

// Connections that send a request's headers one byte every half second and never finish them.
class SlowClients {
 public:
  SlowClients(int port, int n) {
    for (int i = 0; i < n; ++i) {
      const int fd = connect_to(port);
      if (fd < 0) continue;
      const std::string start = "GET /status HTTP/1.1\r\nHost: x\r\nX-Slow: ";
      ::send(fd, start.data(), start.size(), MSG_NOSIGNAL);
      fds_.push_back(fd);
    }
    trickle_ = std::thread([this] {
      while (!stop_) {
        for (const int fd : fds_) ::send(fd, "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
      }
    });
  }
  ~SlowClients() {
    stop_ = true;
    trickle_.join();
    for (const int fd : fds_) ::close(fd);
  }
  size_t size() const { return fds_.size(); }
  // How many the server has closed (end of stream or reset).
  size_t closed() const {
    size_t n = 0;
    for (const int fd : fds_) {
      char c;
      const ssize_t r = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
      n += r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
    }
    return n;
  }

 private:
  std::vector<int> fds_;
  std::atomic<bool> stop_{false};
  std::thread trickle_;
};

// A signed registration of `node` (POST /nodes) with extra header lines.
std::string registration(const Identity& node, const std::string& extra = "") {
  const std::string body = R"({"address": ")" + node.address() + R"("})";
  std::string head = "POST /nodes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
                     extra + "Content-Length: " + std::to_string(body.size()) +
                     "\r\nConnection: close\r\n";
  for (const auto& [k, v] : sign_request(node, "run-test", "POST", "/nodes", sha256_hex(body),
                                         static_cast<int64_t>(std::time(nullptr))))
    head += k + ": " + v + "\r\n";
  return head + "\r\n" + body;
}

class NginxFrontTest : public ApiFixture {};

TEST_F(NginxFrontTest, SlowClientsStallTheOrchestratorOnlyWithoutNginx) {
  if (!fs::exists(kNginx)) GTEST_SKIP() << "nginx is not installed (scripts/setup.sh installs it)";
  ApiOptions o = options();
  o.http_threads = 2;
  o.trusted_proxies = {"127.0.0.1"};
  const int port = start_server(o);
  const int front = free_port();
  const fs::path conf_dir = dir_ / "nginx";
  const test::CliResult written = test::run_trellis(fmt::format(
      "orchestrator nginx-config --out {} --listen 127.0.0.1:{} --header-timeout-s 2 --set "
      "orchestrator.port={} --set orchestrator.max_upload_mib=1",
      conf_dir.string(), front, port));
  ASSERT_EQ(written.status, 0) << written.output;
  const fs::path conf = conf_dir / "nginx.conf";
  std::string checked;
  ASSERT_EQ(run_command(fmt::format("{} -t -p {} -c {}", kNginx, conf_dir.string(), conf.string()),
                        &checked),
            0)
      << "nginx rejects the generated configuration:\n"
      << checked;
  const NginxProcess nginx(conf_dir, conf);
  const std::string status = "GET /status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  for (int i = 0; i < 200 && status_of(exchange(front, status, 1)) != 200; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  ASSERT_EQ(status_of(exchange(front, status)), 200) << read_file(conf_dir / "error.log");

  {  // Straight at cpp-httplib: its two threads wait on the slow headers, nobody else is served.
    SlowClients slow(port, 8);
    ASSERT_EQ(slow.size(), 8u);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(status_of(exchange(port, status, 3)), 0)
        << "cpp-httplib answered while slow clients held its threads: the weakness nginx covers "
           "is gone (docs/security.md)";
  }
  {  // Through nginx: answered at once, and the slow clients are dropped after 2 s.
    SlowClients slow(front, 8);
    ASSERT_EQ(slow.size(), 8u);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(status_of(exchange(front, status, 3)), 200);
    const auto t0 = Clock::now();
    while (slow.closed() < slow.size() && Clock::now() - t0 < std::chrono::seconds(10))
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(slow.closed(), slow.size()) << "nginx kept clients past client_header_timeout";
  }

  // A node keeps its own address behind nginx; a header from anyone but the proxy counts for
  // nothing.
  const Identity a = Identity::generate(), b = Identity::generate();
  std::string reply = exchange(front, registration(a, "X-Real-IP: 10.9.8.7\r\n"), 5, "127.0.0.2");
  ASSERT_EQ(status_of(reply), 200) << reply;
  EXPECT_NE(reply.find(R"("ip":"127.0.0.2")"), std::string::npos) << reply;
  reply = exchange(port, registration(b, "X-Real-IP: 10.9.8.7\r\n"), 5, "127.0.0.3");
  ASSERT_EQ(status_of(reply), 200) << reply;
  EXPECT_NE(reply.find(R"("ip":"127.0.0.3")"), std::string::npos) << reply;

  // Bodies over a route's limit stop at nginx: 64 KiB for JSON, 1 MiB for uploads.
  reply = exchange(front,
                   "POST /nodes HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n"
                   "Connection: close\r\n\r\n");
  EXPECT_EQ(status_of(reply), 413) << reply;
  reply = exchange(front,
                   "PUT /upload/step_0/x.parquet HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n"
                   "Connection: close\r\n\r\n");
  EXPECT_EQ(status_of(reply), 413) << reply;
}

TEST(NginxFrontConfig, RefusesAddressesThatAreNotHostAndPort) {
  const fs::path dir =
      fs::temp_directory_path() / ("trellis_nginx_front_" + std::to_string(::getpid()));
  NginxFront front;
  front.upstream = "127.0.0.1:8400";
  for (const std::string bad :
       {"8080", "0.0.0.0:0", "0.0.0.0:99999", "host;evil:80", "a b:80", ":80", "0.0.0.0:80;"}) {
    front.listen = bad;
    EXPECT_THROW(write_nginx_front_config(front, dir), Error) << bad;
  }
  front.listen = "[::]:8080";
  EXPECT_NO_THROW(write_nginx_front_config(front, dir));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace trellis::orchestrator
