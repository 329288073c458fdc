// The HTTP client under the SHARDCAST fetcher and relays, against a real server on loopback.
#include "shardcast/http_fetch.h"

#include <httplib.h>

#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace trellis::shardcast {
namespace {

TEST(HttpFetch, AConnectionFromAnotherSourceAddressIsNeverReusedForTheNext) {
  // Servers tell clients apart by address (the relays' allowlist). libcurl keeps connections
  // open between transfers: a request naming no address must not go out on one bound to
  // 127.0.0.2, or the server answers the wrong client (a 403 to a node on its allowlist).
  httplib::Server server;
  server.Get("/who", [](const httplib::Request& req, httplib::Response& res) {
    res.set_content(req.remote_addr, "text/plain");
  });
  server.set_keep_alive_timeout(1);  // stop() waits for the connection libcurl keeps open
  const int port = server.bind_to_any_port("127.0.0.1");
  std::thread serving([&] { server.listen_after_bind(); });
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/who";
  const auto who = [&](const std::string& source_ip) {
    HttpOptions options;
    options.timeout_s = 5;
    options.source_ip = source_ip;
    std::string body;
    const HttpResult r = http_get_string(url, options, body);
    return r.ok() ? body : "error: " + r.error;
  };
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(who("127.0.0.2"), "127.0.0.2") << round;
    EXPECT_EQ(who(""), "127.0.0.1") << round;
    EXPECT_EQ(who(""), "127.0.0.1") << round;
    EXPECT_EQ(who("127.0.0.3"), "127.0.0.3") << round;
  }
  server.stop();
  serving.join();
}

}  // namespace
}  // namespace trellis::shardcast
