// The invite sweep against a hostile node endpoint: the orchestrator posts invites to whatever URL
// a stranger publishes in discovery, so it must read nothing of the answer but its status.
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
#include "orchestrator/state.h"

namespace trellis::test {
namespace {

namespace fs = std::filesystem;

// Without the handler that stops at the status, the orchestrator read the whole gigabyte into
// memory (and an endless body until it ran out).
TEST(InviteSweep, ANodeEndpointsEndlessAnswerIsNotRead) {
  const fs::path dir =
      fs::temp_directory_path() / ("trellis_invite_sweep_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const Identity keeper = Identity::generate(), node = Identity::generate();

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

  discovery::ServerOptions d;
  d.port = 0;
  d.data_dir = dir / "discovery";
  d.readers = {keeper.address()};
  discovery::Server discovery(d);
  discovery.start();
  discovery::NodeMetadata m;
  m.address = node.address();
  m.endpoint = "http://127.0.0.1:" + std::to_string(endpoint_port);
  m.hardware = {"AMD EPYC", 2, 24 * 1024, 100 * 1024, 1000, {}};
  m.software_version = "0.1.0";
  discovery::Client(discovery.url()).publish(node, m);

  orchestrator::State state(dir / "state.sqlite", "run-1", keeper);
  orchestrator::SweepOptions options;
  options.discovery_url = discovery.url();
  options.domain = "math";
  orchestrator::InviteSweep sweep(options, state);
  EXPECT_EQ(sweep.sweep_once("http://127.0.0.1:1"), 1) << "the node took its invite";

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!finished && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(finished) << "the endpoint is still sending";
  // What the kernel's socket buffers took before the connection closed, and no more.
  EXPECT_LT(sent.load(), int64_t{64} << 20) << "bytes of the answer the orchestrator took";
  endpoint.stop();
  serving.join();
  discovery.stop();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace trellis::test
