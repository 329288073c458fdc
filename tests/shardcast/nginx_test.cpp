// Production relays: real nginx (the Debian package) serving a relay's data directory with the
// configuration `trellis relay nginx-config` writes. `trellis shardcast fetch` through it must
// verify; the allowlist include refuses an unlisted address (403); the request rate gives 429.
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "cli/trellis_process.h"
#include "common/files.h"
#include "nginx_process.h"
#include "shardcast/http_fetch.h"
#include "shardcast/nginx_config.h"
#include "shardcast/origin.h"
#include "shardcast_test_util.h"

namespace trellis::shardcast {
namespace {
namespace fs = std::filesystem;
using test::status_of;

using test::free_port;
using test::kNginx;
using test::NginxProcess;
using test::run_command;

TEST(ShardcastNginx, ServesARelayDirectoryWithTheGeneratedConfigAndItsRules) {
  if (!fs::exists(kNginx)) GTEST_SKIP() << "nginx is not installed (scripts/setup.sh installs it)";
  test::TempDir tmp;
  const std::string data = test::random_bytes(300'000, 42);
  write_file_atomic(tmp.path() / "model.bin", data);
  const Identity trainer = Identity::generate();
  PublishOptions p;
  p.shard_size = 64 << 10;
  p.probe_size = 16 << 10;
  publish_version(tmp.path() / "relay", 4, 4, tmp.path() / "model.bin", trainer, p);

  const int port = free_port();
  const fs::path conf_dir = tmp.path() / "nginx";
  std::string out;
  ASSERT_EQ(run_command(
                fmt::format("{} relay nginx-config --out {} --set relay.port={} --set "
                            "relay.data_dir={} --set relay.requests_per_s=50 --set relay.burst=60 "
                            "--set 'relay.allow=[\"127.0.0.1\"]'",
                            TRELLIS_BIN, conf_dir.string(), port, (tmp.path() / "relay").string()),
                &out),
            0)
      << out;
  const fs::path conf = conf_dir / "nginx.conf";
  ASSERT_EQ(
      run_command(fmt::format("{} -t -p {} -c {}", kNginx, conf_dir.string(), conf.string()), &out),
      0)
      << "nginx rejects the generated configuration:\n"
      << out;

  const NginxProcess nginx(conf_dir, conf);
  const std::string url = fmt::format("http://127.0.0.1:{}", port);
  for (int i = 0; i < 200 && status_of(url + "/healthz") != 200; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  ASSERT_EQ(status_of(url + "/healthz"), 200) << read_file(conf_dir / "error.log");

  // A client fetch through nginx verifies every shard and the whole file.
  ASSERT_EQ(run_command(
                fmt::format("{} shardcast fetch --relays {} --version latest --out {} "
                            "--trainer-key {}",
                            TRELLIS_BIN, url, (tmp.path() / "out.bin").string(), trainer.address()),
                &out),
            0)
      << out;
  EXPECT_NE(out.find("fetched version 4"), std::string::npos) << out;
  EXPECT_EQ(read_file(tmp.path() / "out.bin"), data);
  // The end game's byte ranges: nginx answers 206 with exactly the bytes asked for.
  HttpOptions ranged;
  ranged.range_begin = 1000;
  ranged.range_end = 5000;
  std::string part;
  const HttpResult r = http_get_string(url + shard_url_path(4, 1), ranged, part);
  EXPECT_EQ(r.status, 206) << r.error;
  EXPECT_EQ(part, data.substr((64 << 10) + 1000, 4000));

  // The allowlist: 127.0.0.2 is not listed; the paths outside the layout are not served.
  EXPECT_EQ(status_of(url + "/manifest.json", "127.0.0.2"), 403);
  EXPECT_EQ(status_of(url + "/../relay/manifest.json"), 404);
  EXPECT_EQ(status_of(url + "/v4/other.bin"), 404);
  // The relay daemon's rewrite + reload admits it.
  write_file_atomic(conf_dir / "allowlist.conf",
                    nginx_allowlist({"127.0.0.1"}, std::vector<std::string>{"127.0.0.2"}));
  ASSERT_EQ(
      run_command(fmt::format("{} -p {} -c {} -s reload", kNginx, conf_dir.string(), conf.string()),
                  &out),
      0)
      << out;
  bool admitted = false;
  for (int i = 0; i < 200 && !admitted; ++i) {
    admitted = status_of(url + "/manifest.json", "127.0.0.2") == 200;
    if (!admitted) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  EXPECT_TRUE(admitted);

  // The request rate: 50/s with a burst of 60; a quick 150 requests overrun it.
  int limited = 0;
  for (int i = 0; i < 150; ++i) limited += status_of(url + "/manifest.json") == 429;
  EXPECT_GT(limited, 0);
}

TEST(ShardcastNginx, AllowlistIncludeListsStaticEntriesAndActiveNodes) {
  EXPECT_EQ(nginx_allowlist({}, std::nullopt).find("allow all;") != std::string::npos, true);
  const std::string closed = nginx_allowlist({"10.0.0.0/8"}, std::vector<std::string>{"1.2.3.4"});
  EXPECT_NE(closed.find("allow 10.0.0.0/8;\nallow 1.2.3.4;\ndeny all;"), std::string::npos);
  EXPECT_NE(nginx_allowlist({}, std::vector<std::string>{}).find("deny all;"), std::string::npos);
}

}  // namespace
}  // namespace trellis::shardcast
