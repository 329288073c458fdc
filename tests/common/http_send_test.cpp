// http_send's deadline against a peer that trickles its answer: httplib's time-outs are per read,
// so a byte every 100 ms (each read well within them) held the caller for as long as the peer
// kept at it. The orchestrator fetches a stranger's logs this way, on one of its server threads.
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "common/http_service.h"
#include "raw_endpoint.h"

namespace trellis::test {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The peer answers with a status line, then one header byte every 100 ms for 30 s.
void trickle(int fd, std::atomic<double>& trickled_s) {
  const auto t0 = Clock::now();
  bool open = RawEndpoint::send_all(fd, "HTTP/1.1 200 OK\r\nX-Slow: ");
  while (open && seconds_since(t0) < 30) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    open = RawEndpoint::send_all(fd, "a");
  }
  trickled_s = seconds_since(t0);
}

TEST(HttpSend, ADeadlineCutsOffAPeerThatTricklesItsAnswer) {
  std::atomic<double> trickled_s{-1};
  RawEndpoint peer([&](int fd) { trickle(fd, trickled_s); });
  httplib::Client c = http_client(peer.url(), 2);  // per read: each byte comes well within it
  const auto t0 = Clock::now();
  const HttpReply reply = http_send(c, "GET", "/logs", {}, "", nullptr, 1 << 20, 1.0);
  EXPECT_LT(seconds_since(t0), 10) << "the caller waited on the trickling peer";
  EXPECT_EQ(reply.status, 0);
  EXPECT_EQ(reply.error, "no complete answer within 1 s");
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (trickled_s < 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_LT(trickled_s, 10) << "seconds before the caller hung up";
}

// An answer within the deadline is read as without one, and the watchdog leaves the client
// usable for the next request.
TEST(HttpSend, AnAnswerWithinTheDeadlineIsRead) {
  RawEndpoint peer([](int fd) {
    RawEndpoint::send_all(fd,
                          "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello");
  });
  httplib::Client c = http_client(peer.url(), 2);
  for (int i = 0; i < 2; ++i) {
    const HttpReply reply = http_send(c, "GET", "/", {}, "", nullptr, 1 << 20, 5.0);
    EXPECT_EQ(reply.status, 200) << reply.error;
    EXPECT_EQ(reply.body, "hello");
  }
}

}  // namespace
}  // namespace trellis::test
