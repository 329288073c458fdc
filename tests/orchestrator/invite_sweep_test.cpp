// The invite sweep against hostile node endpoints: the orchestrator posts invites to whatever URL
// a stranger publishes in discovery, so it must read nothing of an answer but its status, and no
// endpoint may hold the sweep past its deadline or delay another node's invite.
#include "orchestrator/invite_sweep.h"

#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "common/identity.h"
#include "discovery/client.h"
#include "discovery/server.h"
#include "orchestrator/endpoint_request.h"
#include "orchestrator/state.h"
#include "raw_endpoint.h"

namespace trellis::test {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// An invite's request, as the sweep sends it, to `endpoint`.
orchestrator::EndpointRequest invite(const std::string& endpoint) {
  return {.endpoint = endpoint, .target = "/invite", .body = "{}"};
}

// An orchestrator's state and a discovery service that lists the nodes a test publishes.
class InviteSweep : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    discovery::ServerOptions d;
    d.port = 0;
    d.data_dir = dir_ / "discovery";
    d.readers = {keeper_.address()};
    discovery_ = std::make_unique<discovery::Server>(d);
    discovery_->start();
    state_ = std::make_unique<orchestrator::State>(dir_ / "state.sqlite", "run-1", keeper_);
    options_.discovery_url = discovery_->url();
    options_.domain = "math";
    options_.reach = orchestrator::EndpointReach::kAny;  // the test's endpoints are on loopback
  }
  void TearDown() override {
    discovery_->stop();
    fs::remove_all(dir_);
  }
  // A new node whose endpoint is `endpoint`, in discovery.
  void publish(const std::string& endpoint) {
    const Identity node = Identity::generate();
    discovery::NodeMetadata m;
    m.address = node.address();
    m.endpoint = endpoint;
    m.hardware = {"AMD EPYC", 2, 24 * 1024, 100 * 1024, 1000, {}};
    m.software_version = "0.1.0";
    discovery::Client(discovery_->url()).publish(node, m);
  }

  const fs::path dir_ =
      fs::temp_directory_path() / ("trellis_invite_sweep_" + std::to_string(::getpid()));
  const Identity keeper_ = Identity::generate();
  std::unique_ptr<discovery::Server> discovery_;
  std::unique_ptr<orchestrator::State> state_;
  orchestrator::SweepOptions options_;
};

// Without the stop at the first byte of the body, the orchestrator read the whole gigabyte into
// memory (and an endless body until it ran out).
TEST_F(InviteSweep, ANodeEndpointsEndlessAnswerIsNotRead) {
  // The node's endpoint: takes the invite and answers 200 with a body of 1 GiB, counting what it
  // manages to send before the orchestrator hangs up.
  constexpr int64_t kOffered = int64_t{1} << 30;
  std::atomic<int64_t> sent{0};
  std::atomic<bool> finished{false};
  httplib::Server endpoint;
  endpoint.Post("/invite", [&](const httplib::Request&, httplib::Response& res) {
    res.set_chunked_content_provider(
        "application/json",
        [&](size_t, httplib::DataSink& sink) {
          static const std::string chunk(1 << 20, ' ');
          if (sent.load() >= kOffered || !sink.write(chunk.data(), chunk.size())) {
            sink.done();
            return false;
          }
          sent += static_cast<int64_t>(chunk.size());
          return true;
        },
        [&](bool) { finished = true; });
  });
  const int endpoint_port = endpoint.bind_to_any_port("127.0.0.1");
  std::thread serving([&] { endpoint.listen_after_bind(); });
  publish("http://127.0.0.1:" + std::to_string(endpoint_port));

  orchestrator::InviteSweep sweep(options_, *state_);
  EXPECT_EQ(sweep.sweep_once("http://127.0.0.1:1"), 1) << "the node took its invite";

  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (!finished && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(finished) << "the endpoint is still sending";
  // What the kernel's socket buffers took before the connection closed, and no more.
  EXPECT_LT(sent.load(), int64_t{64} << 20) << "bytes of the answer the orchestrator took";
  endpoint.stop();
  serving.join();
}

// An endpoint that sends its answer's headers a byte at a time, each within the per-read
// time-out, held the sweep for as long as it kept at it (httplib had no deadline per request),
// and the other nodes' invites waited behind it. Now it costs its own deadline and no more.
TEST_F(InviteSweep, ATricklingEndpointDelaysNoOtherNodesInvite) {
  RawEndpoint trickler([](int fd) { RawEndpoint::trickle_headers(fd, 30); });
  httplib::Server honest;
  honest.Post("/invite", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{}", "application/json");
  });
  const int honest_port = honest.bind_to_any_port("127.0.0.1");
  std::thread serving([&] { honest.listen_after_bind(); });
  publish(trickler.url());
  publish("http://127.0.0.1:" + std::to_string(honest_port));

  options_.request_timeout_s = 1;
  orchestrator::InviteSweep sweep(options_, *state_);
  const auto t0 = Clock::now();
  EXPECT_EQ(sweep.sweep_once("http://127.0.0.1:1"), 1) << "the honest node took its invite";
  EXPECT_LT(seconds_since(t0), 10) << "the sweep waited on the trickling endpoint";

  const double trickled_s = trickler.first_answer_seconds(60);
  EXPECT_GE(trickled_s, 0) << "the trickler never stopped";
  EXPECT_LT(trickled_s, 10) << "seconds before the orchestrator hung up on the trickler";
  honest.stop();
  serving.join();
}

// A stranger's endpoint at a loopback address (or a name that resolves to one: the check is on
// the address connected to): by default no invite goes there, and the sweep says which setting
// a pool on a private network needs. Without the check, the endpoint got its POST.
TEST_F(InviteSweep, NoInviteGoesToAnAddressThePublicInternetDoesNotReach) {
  std::atomic<int> posts{0};
  httplib::Server internal;
  internal.Post("/invite", [&](const httplib::Request&, httplib::Response& res) {
    ++posts;
    res.set_content("{}", "application/json");
  });
  const int port = internal.bind_to_any_port("127.0.0.1");
  std::thread serving([&] { internal.listen_after_bind(); });
  const std::string by_address = "http://127.0.0.1:" + std::to_string(port);
  const std::string by_name = "http://localhost:" + std::to_string(port);
  publish(by_address);
  publish(by_name);

  options_.reach = orchestrator::EndpointReach::kPublic;  // the default
  orchestrator::InviteSweep sweep(options_, *state_);
  EXPECT_EQ(sweep.sweep_once("http://127.0.0.1:1"), 0) << "a node at loopback was invited";
  EXPECT_EQ(posts.load(), 0) << "the internal service was posted to";

  const auto answers = orchestrator::send_to_endpoints({invite(by_address), invite(by_name)}, 5,
                                                       orchestrator::EndpointReach::kPublic);
  ASSERT_EQ(answers.size(), 2u);
  for (const auto& a : answers) {
    EXPECT_EQ(a.status, 0);
    EXPECT_FALSE(a.refused_address.empty());
    EXPECT_NE(a.error.find("orchestrator.invite_private_addresses = true"), std::string::npos)
        << a.error;
  }
  EXPECT_EQ(answers[0].refused_address, "127.0.0.1");
  EXPECT_EQ(posts.load(), 0);

  // The same endpoints in a pool on a private network.
  const auto allowed = orchestrator::send_to_endpoints({invite(by_address), invite(by_name)}, 5,
                                                       orchestrator::EndpointReach::kAny);
  EXPECT_TRUE(allowed[0].ok()) << allowed[0].error;
  EXPECT_TRUE(allowed[1].ok()) << allowed[1].error;
  EXPECT_EQ(posts.load(), 2);
  internal.stop();
  serving.join();
}

}  // namespace
}  // namespace trellis::test
