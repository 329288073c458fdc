// The shard fetcher's end game, against real HTTP servers on loopback: a relay that trickles
// one shard (a link that slows to a crawl mid-transfer) next to a healthy one. And the streaming
// assembler: shards landing out of order build the verified file; a wrong one builds nothing.
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "common/error.h"
#include "common/files.h"
#include "error_of.h"
#include "shardcast/assembler.h"
#include "shardcast/origin.h"
#include "shardcast/shard_fetcher.h"
#include "shardcast/shard_server.h"
#include "shardcast_test_util.h"

namespace trellis::shardcast {
namespace {
namespace fs = std::filesystem;
using test::error_of;
using test::TempDir;

// Serves a data directory's files (byte ranges too), but `slow_path` at about 100 KiB/s: fast
// enough for the stall timer, slow next to everything else.
class TricklingRelay {
 public:
  TricklingRelay(fs::path dir, std::string slow_path)
      : dir_(std::move(dir)), slow_path_(std::move(slow_path)) {
    server_.Get(R"(/.*)", [this](const httplib::Request& req, httplib::Response& res) {
      std::string body;
      try {
        body = read_file(dir_ / req.path.substr(1));
      } catch (const Error&) {
        res.status = 404;
        return;
      }
      const bool slow = req.path == slow_path_;
      res.set_content_provider(
          body.size(), "application/octet-stream",
          [this, body, slow](size_t offset, size_t length, httplib::DataSink& sink) {
            if (slow) std::this_thread::sleep_for(std::chrono::milliseconds(20));
            const size_t n = slow ? std::min<size_t>(length, 2048) : length;
            return !stopping_ && sink.write(body.data() + offset, n);
          });
    });
    port_ = server_.bind_to_any_port("127.0.0.1");  // listening from here on
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~TricklingRelay() {
    stopping_ = true;
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  const fs::path dir_;
  const std::string slow_path_;
  httplib::Server server_;
  std::atomic<bool> stopping_{false};
  int port_ = 0;
  std::thread thread_;
};

struct Published {
  std::string data;
  VersionEntry entry;
};

Published publish(const fs::path& dir, size_t bytes, int64_t shard_size) {
  Published p;
  p.data = test::random_bytes(bytes, 99);
  write_file_atomic(dir.parent_path() / "staged.bin", p.data);
  PublishOptions o;
  o.shard_size = shard_size;
  o.probe_size = 4096;
  p.entry = publish_version(dir, 1, 1, dir.parent_path() / "staged.bin", Identity::generate(), o);
  return p;
}

// Fetches `entry` from [trickling, healthy] with two transfers in flight, every shard's first
// transfer going to the trickling relay (seeded as by far the fastest, and `fastest` choice
// keeps it so). Returns the fetch's statistics and the bytes each relay delivered.
std::pair<FetchStats, std::vector<int64_t>> fetch_trickling_first(const VersionEntry& entry,
                                                                  const fs::path& out_dir,
                                                                  const std::string& trickling,
                                                                  const std::string& healthy,
                                                                  bool endgame) {
  RelaySelector selector({trickling, healthy}, RelayChoice::Fastest, 1);
  selector.seed(0, true, 1e12);
  selector.seed(1, true, 1e3);
  FetchOptions o;
  o.parallel = 2;
  o.endgame = endgame;
  o.version_timeout_s = 120;
  const std::vector<Holding> both(2, Holding::Complete);
  const FetchStats st = fetch_shards(
      entry, out_dir, selector, both, [&](const HttpOptions&) { return both; }, o);
  std::vector<int64_t> bytes;
  for (const auto& r : selector.stats()) bytes.push_back(r.bytes);
  return {st, bytes};
}

TEST(ShardcastEndGame, ATransferThatSlowsDownIsSplitWithAnotherRelayByteRanges) {
  TempDir tmp;
  const fs::path data = tmp.path() / "data";
  const int64_t shard = 256 << 10;
  const Published p = publish(data, 8 * shard, shard);  // 8 shards
  TricklingRelay trickling(data, shard_url_path(1, 5));
  ServerOptions so;
  so.data_dir = data;
  ShardServer healthy(so);
  healthy.start();

  // Shard 6 trickles in. Once nothing else is left, the idle thread takes the second half of
  // what it still misses to the healthy relay (with an HTTP range), again and again, until the
  // rest is under 1/8 of the shard. Nothing is fetched twice and nothing counts as a failure.
  const auto [st, bytes] =
      fetch_trickling_first(p.entry, tmp.path() / "a", trickling.url(), healthy.url(), true);
  ASSERT_TRUE(st.complete) << st.error;
  EXPECT_GE(st.splits, 2);
  EXPECT_EQ(st.failed_attempts, 0);
  EXPECT_EQ(st.shards_downloaded, 8);
  EXPECT_GT(bytes[1], shard / 2);             // the healthy relay took over most of shard 6
  EXPECT_EQ(bytes[0] + bytes[1], 8 * shard);  // every byte once
  for (size_t i = 0; i < 8; ++i)
    EXPECT_EQ(read_file(tmp.path() / "a" / shard_file_name(i)), p.data.substr(i * shard, shard));

  // Without the end game the trickling relay delivers all of it.
  const auto [without, without_bytes] =
      fetch_trickling_first(p.entry, tmp.path() / "b", trickling.url(), healthy.url(), false);
  ASSERT_TRUE(without.complete) << without.error;
  EXPECT_EQ(without.splits, 0);
  EXPECT_EQ(without_bytes[1], 0);
}

TEST(ShardcastAssembler, ShardsLandingOutOfOrderBuildTheVerifiedFile) {
  TempDir tmp;
  const fs::path data = tmp.path() / "data";
  const Published p = publish(data, 5 * 4096 + 100, 4096);  // 6 shards, the last short
  const fs::path shards = data / version_dir_name(1);
  const fs::path out = tmp.path() / "out.bin";
  {
    ShardAssembler assembler(p.entry, shards, out);
    std::vector<std::thread> threads;
    for (size_t i : {4, 1, 5, 0, 3, 2}) threads.emplace_back([&, i] { assembler.shard_ready(i); });
    for (auto& t : threads) t.join();
    EXPECT_FALSE(fs::exists(out));  // only after the whole-file check
    assembler.finish();
  }
  EXPECT_EQ(read_file(out), p.data);
}

TEST(ShardcastAssembler, AFileThatDoesNotMatchTheSignedHashIsNeverRenamedIntoPlace) {
  TempDir tmp;
  const fs::path data = tmp.path() / "data";
  const Published p = publish(data, 3 * 4096, 4096);
  const fs::path shards = data / version_dir_name(1);
  write_file_atomic(shards / shard_file_name(1), test::random_bytes(4096, 7));
  const fs::path out = tmp.path() / "out.bin";
  {
    ShardAssembler assembler(p.entry, shards, out);
    for (size_t i = 0; i < 3; ++i) assembler.shard_ready(i);
    EXPECT_NE(error_of([&] { assembler.finish(); }).find("whole-file SHA-256"), std::string::npos);
  }
  EXPECT_FALSE(fs::exists(out));
  for (const auto& e : fs::directory_iterator(tmp.path()))  // and no temporary file is left
    EXPECT_EQ(e.path().filename().string().find("out.bin"), std::string::npos) << e.path();
}

}  // namespace
}  // namespace trellis::shardcast
