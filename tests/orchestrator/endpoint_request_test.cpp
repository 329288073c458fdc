// Requests to strangers' endpoints (endpoint_request.h): each reaches only its own target, reads
// its answer to a bound, and ends by its deadline, whatever the endpoint sends or how slowly; the
// public-address rule is tested with the sweep (invite_sweep_test.cpp).
#include "orchestrator/endpoint_request.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "nginx_process.h"  // free_port
#include "raw_endpoint.h"

namespace trellis::test {
namespace {

using orchestrator::EndpointReach;
using orchestrator::EndpointRequest;
using orchestrator::send_to_endpoints;

// Headers without end, as fast as loopback takes them: the exchange stops at the bound, well
// before its deadline, having read 64 KiB of them.
TEST(EndpointRequest, EndlessHeadersAreCutOffAtTheirBound) {
  std::atomic<int64_t> sent{0};
  RawEndpoint flood([&](int fd) {
    const std::string line = "X-Flood: " + std::string(1000, 'a') + "\r\n";
    bool open = RawEndpoint::send_all(fd, "HTTP/1.1 200 OK\r\n");
    while (open && sent < (int64_t{4} << 30)) {
      open = RawEndpoint::send_all(fd, line);
      sent += static_cast<int64_t>(line.size());
    }
  });
  const auto answers =
      send_to_endpoints({{.endpoint = flood.url(), .target = "/invite"}}, 60, EndpointReach::kAny);
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_FALSE(answers[0].ok());
  EXPECT_NE(answers[0].error.find("more than 65536 bytes of headers"), std::string::npos)
      << answers[0].error;
  EXPECT_LT(sent.load(), int64_t{64} << 20) << "bytes of headers the endpoint got to send";
}

// Each request reaches its target at its own endpoint's host and port whole (whatever path, query
// or credentials a stranger's URL holds), and each answer is its endpoint's status, or why none
// came; libcurl holds to http(s) whatever URL it is given.
TEST(EndpointRequest, EachEndpointGetsItsRequestAndAnswersWithItsStatus) {
  std::string got_body, got_type;
  bool got_query = true, got_credentials = true;
  httplib::Server taker, refuser;
  taker.Post("/invite", [&](const httplib::Request& req, httplib::Response& res) {
    got_body = req.body;
    got_type = req.get_header_value("Content-Type");
    got_query = !req.params.empty();
    got_credentials = req.has_header("Authorization");
    res.set_content("{}", "application/json");
  });
  refuser.Post("/invite", [](const httplib::Request&, httplib::Response& res) {
    res.status = 403;
    res.set_content(R"({"error":"not my pool"})", "application/json");
  });
  const int taker_port = taker.bind_to_any_port("127.0.0.1");
  const int refuser_port = refuser.bind_to_any_port("127.0.0.1");
  std::thread t1([&] { taker.listen_after_bind(); });
  std::thread t2([&] { refuser.listen_after_bind(); });
  const std::string invite = R"({"node":"0xabc","nonce":"n"})";

  const auto post = [&](const std::string& endpoint) {
    return EndpointRequest{.endpoint = endpoint,
                           .target = "/invite",
                           .headers = {{"Content-Type", "application/json"}},
                           .body = invite};
  };
  const auto answers = send_to_endpoints(
      {post("http://user:secret@127.0.0.1:" + std::to_string(taker_port) + "/admin?drop=1#x"),
       post("http://127.0.0.1:" + std::to_string(refuser_port)),
       post("http://127.0.0.1:" + std::to_string(free_port())),
       post("dict://127.0.0.1:" + std::to_string(taker_port)), post("http://[::1")},
      5, EndpointReach::kAny);
  ASSERT_EQ(answers.size(), 5u);
  EXPECT_TRUE(answers[0].ok()) << answers[0].error << " (posted to /invite only)";
  EXPECT_EQ(got_body, invite);
  EXPECT_EQ(got_type, "application/json");
  EXPECT_FALSE(got_query) << "the endpoint's query was sent";
  EXPECT_FALSE(got_credentials) << "the endpoint's credentials were sent";
  EXPECT_EQ(answers[1].status, 403);
  EXPECT_FALSE(answers[1].ok());
  EXPECT_EQ(answers[2].status, 0) << "nothing listens there";
  EXPECT_FALSE(answers[2].error.empty());
  EXPECT_EQ(answers[3].status, 0);
  EXPECT_NE(answers[3].error.find("dict"), std::string::npos) << answers[3].error;
  EXPECT_EQ(answers[4].status, 0);
  EXPECT_EQ(answers[4].error, "the endpoint is not a URL");
  taker.stop();
  refuser.stop();
  t1.join();
  t2.join();
}

// A body is read whole within its bound, and no further past it: the operator's fetch of a node's
// logs reads at most 1 MiB, whatever the node offers. The target's query and the request's
// headers arrive as given.
TEST(EndpointRequest, ABodyIsReadToItsBoundAndNoFurther) {
  std::mutex mu;  // the three requests are served at once
  std::string got_lines, got_signature;
  std::atomic<int64_t> sent{0};
  httplib::Server node;
  node.Get("/logs", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard lock(mu);
    got_lines = req.get_param_value("lines");
    if (req.has_header("X-Signature")) got_signature = req.get_header_value("X-Signature");
    res.set_content("line 1\nline 2\n", "text/plain");
  });
  node.Get("/flood", [&](const httplib::Request&, httplib::Response& res) {
    res.set_chunked_content_provider("text/plain", [&](size_t, httplib::DataSink& sink) {
      static const std::string chunk(64 * 1024, 'x');
      if (sent.load() >= (int64_t{1} << 30) || !sink.write(chunk.data(), chunk.size())) {
        sink.done();
        return false;
      }
      sent += static_cast<int64_t>(chunk.size());
      return true;
    });
  });
  const int port = node.bind_to_any_port("127.0.0.1");
  std::thread serving([&] { node.listen_after_bind(); });
  const std::string url = "http://127.0.0.1:" + std::to_string(port);

  const auto answers = send_to_endpoints(
      {{.endpoint = url,
        .method = "GET",
        .target = "/logs?lines=2",
        .headers = {{"X-Signature", "abc"}},
        .max_body_bytes = 14},
       {.endpoint = url, .method = "GET", .target = "/logs?lines=2", .max_body_bytes = 13},
       {.endpoint = url, .method = "GET", .target = "/flood", .max_body_bytes = 1 << 20}},
      30, EndpointReach::kAny);
  ASSERT_EQ(answers.size(), 3u);
  EXPECT_TRUE(answers[0].ok()) << answers[0].error;
  EXPECT_EQ(answers[0].body, "line 1\nline 2\n");
  EXPECT_EQ(got_lines, "2");
  EXPECT_EQ(got_signature, "abc");
  EXPECT_FALSE(answers[1].ok()) << "a byte over its bound was read";
  EXPECT_EQ(answers[1].error, "answered with more than 13 bytes");
  EXPECT_EQ(answers[1].body, "");
  EXPECT_EQ(answers[2].error, "answered with more than 1048576 bytes");
  node.stop();
  serving.join();
  EXPECT_LT(sent.load(), int64_t{64} << 20) << "bytes of the flood the endpoint got to send";
}

// A body trickled a byte every 100 ms (each well within any per-read time-out) ends at the
// request's deadline, not when the endpoint tires. The orchestrator's fetch of a node's logs runs
// on one of its server threads: before this deadline, each click held one for as long as the node
// liked.
TEST(EndpointRequest, ATrickledBodyEndsAtTheDeadline) {
  RawEndpoint trickler([](int fd) {
    RawEndpoint::trickle(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n", 30);
  });
  const auto t0 = std::chrono::steady_clock::now();
  const auto answers = send_to_endpoints(
      {{.endpoint = trickler.url(), .method = "GET", .target = "/logs", .max_body_bytes = 1 << 20}},
      1, EndpointReach::kAny);
  EXPECT_LT(seconds_since(t0), 10) << "the caller waited on the trickling endpoint";
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_FALSE(answers[0].ok());
  EXPECT_NE(answers[0].error.find("timed out"), std::string::npos) << answers[0].error;
  EXPECT_LT(trickler.first_answer_seconds(60), 10) << "seconds before the caller hung up";
}

}  // namespace
}  // namespace trellis::test
