// The origin's publishing: shards and hashes against an independent split of the file, atomic
// version directories, retention, and the remains of an interrupted publish.
#include "shardcast/origin.h"

#include <gtest/gtest.h>

#include <random>

#include "common/files.h"
#include "common/hashing.h"
#include "shardcast_test_util.h"

namespace trellis::shardcast {
namespace {
namespace fs = std::filesystem;

TEST(ShardcastOrigin, PublishesShardsWhoseHashesAndConcatenationMatchTheFile) {
  test::TempDir tmp;
  const std::string data = test::random_bytes(10'000, 1);
  write_file_atomic(tmp.path() / "model.bin", data);
  const Identity trainer = Identity::generate();
  PublishOptions o;
  o.shard_size = 4096;
  o.probe_size = 1000;
  const VersionEntry e =
      publish_version(tmp.path() / "origin", 3, 30, tmp.path() / "model.bin", trainer, o);
  ASSERT_EQ(e.shards.size(), 3u);  // 4096 + 4096 + 1808
  EXPECT_EQ(e.size, 10'000);
  EXPECT_EQ(e.sha256, sha256_hex(data));
  std::string joined;
  for (size_t i = 0; i < 3; ++i) {
    const std::string shard = read_file(tmp.path() / "origin" / "v3" / shard_file_name(i));
    EXPECT_EQ(shard, data.substr(i * 4096, 4096));
    EXPECT_EQ(e.shards[i].sha256, sha256_hex(shard));
    joined += shard;
  }
  EXPECT_EQ(joined, data);
  EXPECT_TRUE(e.signed_by(trainer.address()));
  const Manifest m = read_manifest(tmp.path() / "origin");
  ASSERT_NE(m.find(3), nullptr);
  EXPECT_EQ(m.find(3)->step, 30);
  EXPECT_EQ(fs::file_size(tmp.path() / "origin" / kProbeFile), 1000u);
}

TEST(ShardcastOrigin, TheSixthVersionEvictsTheFirstFromManifestAndDisk) {
  test::TempDir tmp;
  const Identity trainer = Identity::generate();
  PublishOptions o;
  o.shard_size = 100;
  o.keep = 5;
  for (int64_t v = 1; v <= 6; ++v) {
    write_file_atomic(tmp.path() / "f", test::random_bytes(250, static_cast<uint64_t>(v)));
    publish_version(tmp.path() / "o", v, v, tmp.path() / "f", trainer, o);
    EXPECT_EQ(read_manifest(tmp.path() / "o").versions.front().version,
              std::max<int64_t>(1, v - 4));
  }
  const Manifest m = read_manifest(tmp.path() / "o");
  ASSERT_EQ(m.versions.size(), 5u);
  EXPECT_EQ(m.versions.front().version, 2);
  EXPECT_FALSE(fs::exists(tmp.path() / "o" / "v1"));
  EXPECT_TRUE(fs::exists(tmp.path() / "o" / "v6" / shard_file_name(2)));
}

TEST(ShardcastOrigin, AnInterruptedPublishLeavesNothingListedAndIsCleanedUp) {
  test::TempDir tmp;
  const Identity trainer = Identity::generate();
  write_file_atomic(tmp.path() / "f", test::random_bytes(300, 3));
  PublishOptions o;
  o.shard_size = 128;
  publish_version(tmp.path() / "o", 1, 1, tmp.path() / "f", trainer, o);
  // A crash while writing version 2: its shards exist only under v2.tmp.
  write_file_atomic(tmp.path() / "o" / "v2.tmp" / shard_file_name(0), "partial");
  EXPECT_EQ(read_manifest(tmp.path() / "o").versions.size(), 1u);
  remove_versions_after(tmp.path() / "o", 1);
  EXPECT_FALSE(fs::exists(tmp.path() / "o" / "v2.tmp"));
  // Publishing the same number again replaces it (a resumed trainer).
  write_file_atomic(tmp.path() / "f", test::random_bytes(200, 4));
  const auto again = publish_version(tmp.path() / "o", 1, 1, tmp.path() / "f", trainer, o);
  EXPECT_EQ(read_manifest(tmp.path() / "o").find(1)->sha256, again.sha256);
  EXPECT_EQ(again.shards.size(), 2u);
  EXPECT_FALSE(fs::exists(tmp.path() / "o" / "v1" / shard_file_name(2)));
  // A resumed trainer drops versions of the abandoned timeline.
  publish_version(tmp.path() / "o", 2, 2, tmp.path() / "f", trainer, o);
  remove_versions_after(tmp.path() / "o", 1);
  EXPECT_EQ(read_manifest(tmp.path() / "o").newest()->version, 1);
  EXPECT_FALSE(fs::exists(tmp.path() / "o" / "v2"));
}

TEST(ShardcastOrigin, BackgroundPublishingAnnouncesEachVersionOnceListed) {
  test::TempDir tmp;
  std::vector<int64_t> announced;
  std::mutex mu;
  {
    PublishOptions o;
    o.shard_size = 64;
    Origin origin(tmp.path() / "o", Identity::generate(), o);
    for (int64_t v = 0; v < 3; ++v) {
      const fs::path f = tmp.path() / ("staged" + std::to_string(v));
      write_file_atomic(f, test::random_bytes(100, static_cast<uint64_t>(v)));
      origin.publish(v, v, f, [&, dir = tmp.path() / "o"](const VersionEntry& e) {
        EXPECT_NE(read_manifest(dir).find(e.version), nullptr);  // listed before the callback
        std::lock_guard lock(mu);
        announced.push_back(e.version);
      });
    }
    origin.wait_idle();
    EXPECT_FALSE(fs::exists(tmp.path() / "staged0"));  // the origin consumed its input
  }
  EXPECT_EQ(announced, (std::vector<int64_t>{0, 1, 2}));
}

}  // namespace
}  // namespace trellis::shardcast
