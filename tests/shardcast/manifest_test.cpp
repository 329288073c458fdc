// Manifest entries: JSON round trip, strict parsing, and the trainer's signature over every
// field a client relies on.
#include "shardcast/manifest.h"

#include <functional>
#include <vector>

#include <gtest/gtest.h>

#include "common/hashing.h"
#include "error_of.h"

namespace trellis::shardcast {
namespace {

using test::error_of;

VersionEntry entry_of(const std::string& data, int64_t version, int64_t shard_size) {
  VersionEntry e;
  e.version = version;
  e.step = version + 100;
  e.size = static_cast<int64_t>(data.size());
  e.sha256 = sha256_hex(data);
  e.shard_size = shard_size;
  for (size_t at = 0; at < data.size(); at += static_cast<size_t>(shard_size)) {
    const std::string piece = data.substr(at, static_cast<size_t>(shard_size));
    e.shards.push_back({static_cast<int64_t>(piece.size()), sha256_hex(piece)});
  }
  return e;
}

TEST(ShardcastManifest, RoundTripsThroughJsonAndKeepsVersionsOrdered) {
  Manifest m;
  m.put(entry_of("abcdefghij", 3, 4));
  m.put(entry_of("0123456789", 1, 3));
  m.versions[0].complete = false;
  ASSERT_EQ(m.versions.front().version, 1);
  const Manifest back = parse_manifest(to_json(m).dump(), "test");
  ASSERT_EQ(back.versions.size(), 2u);
  EXPECT_EQ(back.versions[0].version, 1);
  EXPECT_FALSE(back.versions[0].complete);
  EXPECT_EQ(back.versions[1].shards.size(), 3u);  // 4 + 4 + 2 bytes
  EXPECT_EQ(back.versions[1].shards[2].size, 2);
  EXPECT_EQ(back.versions[1].signing_message(), m.versions[1].signing_message());
  EXPECT_EQ(back.newest()->version, 3);
}

TEST(ShardcastManifest, RefusesEntriesWhoseShardsDoNotAddUp) {
  Manifest m;
  m.put(entry_of("abcdefghij", 0, 4));
  Json j = to_json(m);
  j["versions"][0]["size"] = 11;
  EXPECT_NE(error_of([&] { manifest_from_json(j, "m.json"); }).find("add up"), std::string::npos);
  j = to_json(m);
  j["versions"][0]["shards"][0]["size"] = 3;  // a short shard before the last
  EXPECT_NE(error_of([&] { manifest_from_json(j, "m.json"); }).find("shards[0]"),
            std::string::npos);
  j = to_json(m);
  j["versions"][0]["sha256"] = "xyz";
  EXPECT_NE(error_of([&] { manifest_from_json(j, "m.json"); }).find("hex"), std::string::npos);
  Manifest two;
  two.put(entry_of("ab", 1, 4));
  two.put(entry_of("cd", 2, 4));
  j = to_json(two);
  std::swap(j["versions"][0], j["versions"][1]);
  EXPECT_NE(error_of([&] { manifest_from_json(j, "m.json"); }).find("ascending"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_manifest("{not json", "m.json"); }).find("m.json"),
            std::string::npos);
}

// ---- budgets and fuzzer findings (fuzz/manifest_fuzz.cpp) ----

TEST(ShardcastManifest, RefusesTextOverTheSizeLimit) {
  const std::string msg =
      error_of([] { parse_manifest(std::string(kMaxManifestBytes + 1, ' '), "m.json"); });
  EXPECT_NE(msg.find("more than the limit of 67108864"), std::string::npos) << msg;
  EXPECT_NE(msg.find("m.json"), std::string::npos) << msg;
}

TEST(ShardcastManifest, RefusesMoreVersionsOrShardsThanTheLimits) {
  // Counted before any entry is read: the entries here are not even objects.
  Json j = {{"format", "trellis-shardcast/1"},
            {"versions", Json::array_t(kMaxManifestVersions + 1)}};
  std::string msg = error_of([&] { manifest_from_json(j, "m.json"); });
  EXPECT_NE(msg.find("1025 versions, more than the limit of 1024"), std::string::npos) << msg;
  Manifest m;
  m.put(entry_of("abcdefghij", 0, 4));
  j = to_json(m);
  j["versions"][0]["shards"] = Json::array_t(kMaxManifestShards + 1);
  msg = error_of([&] { manifest_from_json(j, "m.json"); });
  EXPECT_NE(msg.find("65537 shards, more than the limit of 65536 (m.json: versions[0])"),
            std::string::npos)
      << msg;
}

TEST(ShardcastManifest, RefusesMissingVersionsAndShardSizesThatOverflow) {
  std::string msg = error_of([] { parse_manifest(R"({"format": "trellis-shardcast/1"})", "m"); });
  EXPECT_NE(msg.find("missing array field 'versions'"), std::string::npos) << msg;
  // Three shards of 2^62 bytes would overflow the running total (signed: undefined behaviour).
  Manifest m;
  m.put(entry_of("abcdefghij", 0, 4));
  Json j = to_json(m);
  const int64_t quarter = int64_t{1} << 62;
  j["versions"][0]["size"] = INT64_MAX;
  j["versions"][0]["shard_size"] = quarter;
  for (auto& shard : j["versions"][0]["shards"]) shard["size"] = quarter;
  msg = error_of([&] { manifest_from_json(j, "m.json"); });
  EXPECT_NE(msg.find("the shard sizes add up to more than the file's"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(m.json: versions[0].shards[1])"), std::string::npos) << msg;
  j["versions"][0]["size"] = 1e300;  // not an int64_t: refused, not converted
  msg = error_of([&] { manifest_from_json(j, "m.json"); });
  EXPECT_NE(msg.find("field 'size' = 1e+300 is not an integer"), std::string::npos) << msg;
}

TEST(ShardcastManifest, SignatureCoversEveryShardHashAndOnlyTheTrainerKeyVerifies) {
  const Identity trainer = Identity::generate(), other = Identity::generate();
  VersionEntry e = entry_of("some weights, sharded", 7, 5);
  e.sign(trainer);
  EXPECT_TRUE(e.signed_by(trainer.address()));
  EXPECT_FALSE(e.signed_by(other.address()));

  VersionEntry tampered = e;
  tampered.shards[1].sha256 = sha256_hex("other bytes");
  EXPECT_FALSE(tampered.signed_by(trainer.address()));
  tampered = e;
  tampered.step += 1;
  EXPECT_FALSE(tampered.signed_by(trainer.address()));
  // A relay's own flag is not signed: listing a version as incomplete keeps it valid.
  tampered = e;
  tampered.complete = false;
  EXPECT_TRUE(tampered.signed_by(trainer.address()));
  // Re-signing with another key and claiming to be the trainer does not help.
  tampered = e;
  tampered.sign(other);
  tampered.signer = trainer.address();
  EXPECT_FALSE(tampered.signed_by(trainer.address()));
}

// An entry with tensor hashes and a delta (weight_delta.h): both round-trip, both are signed,
// and both are checked before anything relies on them.
VersionEntry entry_with_delta() {
  VersionEntry e = entry_of("abcdefghij", 5, 4);
  e.tensors = {{"__header__", 0, 4, sha256_hex("abcd")}, {"w", 4, 6, sha256_hex("efghij")}};
  e.delta = DeltaInfo{4, 3, sha256_hex("xyz"), {{3, sha256_hex("xyz")}}, 2, 7, 2};
  return e;
}

TEST(ShardcastManifest, TensorHashesAndTheDeltaRoundTripAndAreSigned) {
  Manifest m;
  m.put(entry_with_delta());
  m.versions[0].delta_complete = false;
  const Identity trainer = Identity::generate();
  m.versions[0].sign(trainer);
  const Manifest back = parse_manifest(to_json(m).dump(), "m.json");
  const VersionEntry& e = back.versions.at(0);
  ASSERT_EQ(e.tensors.size(), 2u);
  EXPECT_EQ(e.tensors[1].name, "w");
  ASSERT_TRUE(e.delta);
  EXPECT_EQ(e.delta->base, 4);
  EXPECT_EQ(e.delta->changed_elements, 2);
  EXPECT_FALSE(e.delta_complete);
  EXPECT_TRUE(e.signed_by(trainer.address()));
  EXPECT_EQ(ShardedFile::delta_of(e).size, 3);
  EXPECT_EQ(shard_url_path(5, 0, FileKind::Delta), "/v5/delta_00001.bin");
  // Every field a client relies on is signed: a relay cannot swap a tensor hash, the delta's
  // hash or its base.
  for (const auto& tamper : std::vector<std::function<void(VersionEntry&)>>{
           [](VersionEntry& v) { v.tensors[1].sha256 = sha256_hex("other"); },
           [](VersionEntry& v) { v.tensors[0].name = "__other__"; },
           [](VersionEntry& v) { v.delta->sha256 = sha256_hex("other"); },
           [](VersionEntry& v) { v.delta->base = 3; },
           [](VersionEntry& v) { v.delta->shards[0].sha256 = sha256_hex("other"); },
           [](VersionEntry& v) { v.delta.reset(); }}) {
    VersionEntry forged = e;
    tamper(forged);
    EXPECT_FALSE(forged.signed_by(trainer.address()));
  }
}

TEST(ShardcastManifest, RefusesTensorHashesWithGapsAndDeltasThatDoNotFit) {
  Manifest m;
  m.put(entry_with_delta());
  const Json good = to_json(m);
  const auto error = [](const Json& j) {
    return error_of([&] { manifest_from_json(j, "m.json"); });
  };
  Json j = good;
  j["versions"][0]["tensors"][1]["offset"] = 5;  // a byte no tensor covers
  EXPECT_NE(error(j).find("does not follow"), std::string::npos) << error(j);
  j = good;
  j["versions"][0]["tensors"][1]["size"] = 5;  // short of the file's end
  EXPECT_NE(error(j).find("cover"), std::string::npos) << error(j);
  j = good;
  j["versions"][0]["tensors"][1]["name"] = "a\nb";
  EXPECT_NE(error(j).find("newline"), std::string::npos) << error(j);
  j = good;
  j["versions"][0]["delta"]["base"] = 5;  // not an earlier version
  EXPECT_NE(error(j).find("earlier"), std::string::npos) << error(j);
  j = good;
  j["versions"][0]["delta"]["shards"][0]["size"] = 2;  // shards that do not make the delta
  EXPECT_NE(error(j).find("add up"), std::string::npos) << error(j);
  j = good;
  j["versions"][0]["delta"]["changed_elements"] = 8;  // more than there are
  EXPECT_NE(error(j).find("changed_elements"), std::string::npos) << error(j);
  j = good;
  j["versions"][0].erase("tensors");  // a delta whose result nothing could check
  EXPECT_NE(error(j).find("tensors' hashes"), std::string::npos) << error(j);
}

}  // namespace
}  // namespace trellis::shardcast
