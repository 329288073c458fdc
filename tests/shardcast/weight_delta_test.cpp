// Weight deltas: make + apply reproduce every version bit for bit over many versions of evolving
// weights, cost little more than the changed elements' bytes, and never yield wrong weights from
// a corrupt delta, a wrong base, or a delta applied twice.
#include "shardcast/weight_delta.h"

#include <algorithm>
#include <cstring>
#include <random>

#include <gtest/gtest.h>

#include "common/files.h"
#include "common/hashing.h"
#include "common/json.h"
#include "error_of.h"
#include "fake_weights.h"
#include "shardcast_test_util.h"

namespace trellis::shardcast {
namespace {
namespace fs = std::filesystem;
using test::error_of;
using test::FakeWeights;
using test::TempDir;

// The hashes a signed manifest would carry for `file`.
std::vector<TensorHash> hashes_of(const fs::path& file) {
  const FileWeights w(file);
  return hash_regions(w, weight_regions(w));
}

// Two versions of evolving weights in `dir` (v1, then v2 after one step of `change`), the delta
// from v1 to v2, and v2's signed hashes.
struct TwoVersions {
  fs::path v1, v2, delta;
  std::vector<TensorHash> hashes;
};
TwoVersions two_versions(const fs::path& dir, uint64_t seed, double change) {
  FakeWeights w(seed);
  write_file_atomic(dir / "v1", w.file());
  w.step(change);
  write_file_atomic(dir / "v2", w.file());
  const FileWeights v1(dir / "v1"), v2(dir / "v2");
  EXPECT_TRUE(make_delta(v1, v2, weight_regions(v2), dir / "d"));
  return {dir / "v1", dir / "v2", dir / "d", hashes_of(dir / "v2")};
}

// Elements of `b` that differ from `a`, counted naively tensor by tensor (header bytes as
// single-byte elements): the independent count the delta's statistics must equal.
int64_t naive_changed(const FakeWeights& w, const std::string& a, const std::string& b) {
  const auto& last = w.tensors().back();
  const size_t data = a.size() - static_cast<size_t>(last.begin + last.numel * last.width);
  int64_t n = 0;
  for (size_t i = 0; i < data; ++i) n += a[i] != b[i];
  for (const auto& t : w.tensors())
    for (int64_t i = 0; i < t.numel; ++i)
      n += a.compare(data + t.begin + i * t.width, t.width, b, data + t.begin + i * t.width,
                     t.width) != 0;
  return n;
}

TEST(WeightDelta, RegionsFollowTheSafetensorsHeader) {
  TempDir tmp;
  FakeWeights w(1);
  write_file_atomic(tmp.path() / "w.safetensors", w.file());
  const auto regions = weight_regions(FileWeights(tmp.path() / "w.safetensors"));
  ASSERT_EQ(regions.size(), 1 + w.tensors().size());
  EXPECT_EQ(regions[0].name, "__header__");
  EXPECT_EQ(regions[1].name, "model.embed_tokens.weight");
  EXPECT_EQ(regions[1].element_size, 2);
  EXPECT_EQ(regions[3].element_size, 1);  // FP8 codes
  EXPECT_EQ(regions.back().element_size, 8);
  EXPECT_EQ(regions.back().offset + regions.back().size, static_cast<int64_t>(w.file().size()));
  // Not safetensors: one region of single bytes.
  write_file_atomic(tmp.path() / "r.bin", test::random_bytes(5000, 3));
  const auto raw = weight_regions(FileWeights(tmp.path() / "r.bin"));
  ASSERT_EQ(raw.size(), 1u);
  EXPECT_EQ(raw[0].name, "__file__");
  EXPECT_EQ(raw[0].size, 5000);
}

TEST(WeightDelta, ReproducesEveryVersionBitForBitOverManyVersions) {
  TempDir tmp;
  FakeWeights w(7, 8);
  // Fractions changed per version: none, sparse as after an RL step, dense, everything, random
  // bits rather than ulps.
  const std::vector<std::pair<double, bool>> steps = {
      {0.0, true}, {0.001, true}, {0.01, true}, {0.01, true},  {0.05, true}, {0.3, true},
      {1.0, true}, {0.01, false}, {0.5, false}, {0.002, true}, {0.02, true}, {0.0005, true}};
  fs::path held = tmp.path() / "held.safetensors";  // what a worker holds: only ever applied
  write_file_atomic(held, w.file());
  std::string prev = w.file();
  for (size_t v = 0; v < 3 * steps.size(); ++v) {
    const auto [fraction, small] = steps[v % steps.size()];
    const int64_t expect_changed = w.step(fraction, small);
    const std::string next = w.file();
    write_file_atomic(tmp.path() / "prev", prev);
    write_file_atomic(tmp.path() / "next", next);
    const FileWeights base(tmp.path() / "prev"), target(tmp.path() / "next");
    const auto stats = make_delta(base, target, weight_regions(target), tmp.path() / "delta.bin");
    ASSERT_TRUE(stats);
    EXPECT_EQ(stats->changed_elements, expect_changed) << "version " << v;
    EXPECT_EQ(stats->changed_elements, naive_changed(w, prev, next)) << "version " << v;
    EXPECT_EQ(stats->bytes, static_cast<int64_t>(fs::file_size(tmp.path() / "delta.bin")));
    if (small) {
      // A small constant (the footer: a few dozen bytes per block) plus at most 1.25 x the
      // changed elements' own bytes.
      EXPECT_LE(stats->bytes, 1.25 * static_cast<double>(stats->changed_bytes) + 4096)
          << "version " << v << ": " << stats->changed_elements << " changed";
    }
    const fs::path out = tmp.path() / ("v" + std::to_string(v));
    apply_delta(FileWeights(held), tmp.path() / "delta.bin", hashes_of(tmp.path() / "next"), out,
                "test");
    ASSERT_EQ(read_file(out), next) << "version " << v;
    fs::remove(held);
    held = out;
    prev = next;
  }
}

TEST(WeightDelta, AppliedTwiceOrToTheWrongBaseNeverYieldsWrongWeights) {
  TempDir tmp;
  const auto [v1_path, v2_path, delta, hashes] = two_versions(tmp.path(), 3, 0.02);
  const FileWeights v2(v2_path);
  // Twice: applied to its own result, the result again.
  apply_delta(v2, delta, hashes, tmp.path() / "again", "test");
  EXPECT_EQ(read_file(tmp.path() / "again"), read_file(v2_path));
  // To another base of the same size: an error naming a tensor, and no file.
  FakeWeights other(99);
  write_file_atomic(tmp.path() / "other", other.file());
  const std::string error = error_of([&] {
    apply_delta(FileWeights(tmp.path() / "other"), delta, hashes, tmp.path() / "bad", "test");
  });
  EXPECT_NE(error.find("does not match the trainer's signed hash"), std::string::npos) << error;
  EXPECT_FALSE(fs::exists(tmp.path() / "bad"));
  // To a base of another size: refused before anything is applied.
  write_file_atomic(tmp.path() / "short", read_file(v1_path).substr(100));
  EXPECT_NE(error_of([&] {
              apply_delta(FileWeights(tmp.path() / "short"), delta, hashes, tmp.path() / "bad",
                          "test");
            }).find("bytes"),
            std::string::npos);
  EXPECT_FALSE(
      make_delta(FileWeights(tmp.path() / "short"), v2, weight_regions(v2), tmp.path() / "none"));
}

TEST(WeightDelta, ACorruptDeltaIsAnErrorNeverACrashOrWrongWeights) {
  TempDir tmp;
  const auto [v1_path, v2_path, delta, hashes] = two_versions(tmp.path(), 5, 0.05);
  const FileWeights v1(v1_path);
  const std::string good = read_file(delta);
  const std::string want = read_file(v2_path);
  std::mt19937_64 rng(11);
  int errors = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::string bad = good;
    switch (trial % 4) {
      case 0:  // a flipped byte anywhere
        bad[rng() % bad.size()] ^= static_cast<char>(1 + rng() % 255);
        break;
      case 1:  // cut short
        bad.resize(rng() % bad.size());
        break;
      case 2:  // a flipped byte in the footer
        bad[bad.size() - 16 - rng() % std::min<size_t>(bad.size() - 16, 2000)] ^= 0x20;
        break;
      default:  // garbage of the same size
        bad = test::random_bytes(good.size(), rng());
    }
    write_file_atomic(tmp.path() / "bad", bad);
    fs::remove(tmp.path() / "out");
    const std::string error =
        error_of([&] { apply_delta(v1, tmp.path() / "bad", hashes, tmp.path() / "out", "test"); });
    if (error.empty()) {
      EXPECT_EQ(read_file(tmp.path() / "out"), want) << "trial " << trial;  // harmless change
    } else {
      ++errors;
      EXPECT_FALSE(fs::exists(tmp.path() / "out")) << "trial " << trial;
    }
  }
  EXPECT_GT(errors, 250);
}

// A footer whose block lists hold numbers that are not 64-bit integers (a fraction, a float far
// out of range, which nlohmann's conversion turns into undefined behaviour; found by the fuzzer):
// refused by name before any is used.
TEST(WeightDelta, AFooterOfNonIntegersIsRefusedByName) {
  TempDir tmp;
  const auto [v1_path, v2_path, delta, hashes] = two_versions(tmp.path(), 3, 0.05);
  const std::string good = read_file(delta);
  uint64_t footer_size = 0;
  std::memcpy(&footer_size, good.data() + good.size() - 16, 8);
  const size_t footer_at = good.size() - 16 - footer_size;
  const Json footer = parse_json(good.substr(footer_at, footer_size), "test");
  for (const Json& number : {Json(2.5), Json(1e41), Json(-1e300)}) {
    Json changed = footer;
    changed["blocks"][0][1] = number;
    const std::string text = changed.dump();
    const uint64_t size = text.size();
    std::string bad = good.substr(0, footer_at) + text;
    bad.append(reinterpret_cast<const char*>(&size), 8);
    bad += good.substr(good.size() - 8);
    write_file_atomic(tmp.path() / "bad", bad);
    const std::string error = error_of([&] {
      apply_delta(FileWeights(v1_path), tmp.path() / "bad", hashes, tmp.path() / "out", "test");
    });
    EXPECT_NE(error.find("a block is a list of 6 integers (test: blocks[0])"), std::string::npos)
        << number.dump() << ": " << error;
    EXPECT_FALSE(fs::exists(tmp.path() / "out"));
  }
}

// Into a version's shard files (a relay): the shards are the file cut every shard_size bytes,
// each committed only when every tensor matched; a failed apply leaves no shard, partial or not.
TEST(WeightDelta, AppliesIntoShardFiles) {
  TempDir tmp;
  const auto [v1_path, v2_path, delta_path, hashes] = two_versions(tmp.path(), 8, 0.03);
  const std::string want = read_file(v2_path);
  const std::string delta = read_file(delta_path);
  const auto size = static_cast<int64_t>(want.size());
  const int64_t shard_size = size / 5 + 3;  // shards end inside tensors; the last one shorter
  {
    ShardSink sink(tmp.path() / "shards", size, shard_size, FileKind::Full);
    apply_delta(FileWeights(v1_path), delta, hashes, sink, "test");
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(tmp.path() / "shards"))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  ASSERT_EQ(names.size(), 5u);
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(names[i], shard_file_name(i));
    EXPECT_EQ(read_file(tmp.path() / "shards" / names[i]),
              want.substr(i * static_cast<size_t>(shard_size), static_cast<size_t>(shard_size)))
        << names[i];
  }
  // The wrong base: an Error, and the directory stays empty.
  FakeWeights other(98);
  write_file_atomic(tmp.path() / "other", other.file());
  const std::string error = error_of([&] {
    ShardSink sink(tmp.path() / "failed", size, shard_size, FileKind::Full);
    apply_delta(FileWeights(tmp.path() / "other"), delta, hashes, sink, "test");
  });
  EXPECT_NE(error.find("does not match the trainer's signed hash"), std::string::npos) << error;
  EXPECT_TRUE(fs::is_empty(tmp.path() / "failed"));
}

}  // namespace
}  // namespace trellis::shardcast
