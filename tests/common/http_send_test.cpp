// http_send's deadline against a peer that trickles its answer: httplib's time-outs are per read,
// so a byte every 100 ms (each read well within them) held the caller for as long as the peer
// kept at it. The orchestrator fetches a stranger's logs this way, on one of its server threads.
#include <chrono>

#include <gtest/gtest.h>

#include "common/http_service.h"
#include "raw_endpoint.h"

namespace trellis::test {
namespace {

TEST(HttpSend, ADeadlineCutsOffAPeerThatTricklesItsAnswer) {
  RawEndpoint peer([](int fd) { RawEndpoint::trickle_headers(fd, 30); });
  httplib::Client c = http_client(peer.url(), 2);  // per read: each byte comes well within it
  const auto t0 = std::chrono::steady_clock::now();
  const HttpReply reply = http_send(c, "GET", "/logs", {}, "", nullptr, 1 << 20, 1.0);
  EXPECT_LT(seconds_since(t0), 10) << "the caller waited on the trickling peer";
  EXPECT_EQ(reply.status, 0);
  EXPECT_EQ(reply.error, "no complete answer within 1 s");
  EXPECT_LT(peer.first_answer_seconds(60), 10) << "seconds before the caller hung up";
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
