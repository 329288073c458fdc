// The local rollout store: file names are checked before they touch the disk (no path can leave
// its step directory), writes are whole files, moves are renames, listing skips anything that is
// not a rollout file.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "error_of.h"
#include "rollout/store.h"

namespace trellis::rollout {
namespace {

namespace fs = std::filesystem;

const std::string kNode(64, 'a');

fs::path fresh_dir(const std::string& name) {
  auto dir =
      fs::temp_directory_path() / ("trellis_store_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

TEST(RolloutStore, NamesRoundTripAndRefuseAnythingElse) {
  EXPECT_EQ(stored_file_name(kNode, 3, "t"), kNode + "-3.parquet");
  const StoredName parsed = parse_stored_file_name(kNode + "-12.parquet", "t");
  EXPECT_EQ(parsed.node_address, kNode);
  EXPECT_EQ(parsed.submission, 12);
  for (const std::string& bad :
       {std::string("../../etc/passwd"), kNode + "-1.parquet/..", kNode + "-1.txt",
        kNode + "-01.parquet", kNode + "--1.parquet", kNode + "-.parquet", kNode + ".parquet",
        std::string(63, 'a') + "-1.parquet", std::string(64, 'A') + "-1.parquet",
        std::string(64, 'g') + "-1.parquet", "../" + std::string(61, 'a') + "-1.parquet",
        kNode + "-99999999999.parquet"}) {
    const std::string e = test::error_of([&] { parse_stored_file_name(bad, "the name"); });
    EXPECT_NE(e.find("not a rollout file name"), std::string::npos) << bad << ": " << e;
  }
  EXPECT_NE(test::error_of([] { stored_file_name("../x", 0, "t"); }).find("64 lowercase hex"),
            std::string::npos);
  EXPECT_NE(test::error_of([] { stored_file_name(kNode, -1, "t"); }).find("out of range"),
            std::string::npos);
}

TEST(RolloutStore, WritesReadsListsAndRemoves) {
  const auto dir = fresh_dir("basic");
  const RolloutStore store(dir / "rollouts");
  const std::string a = stored_file_name(kNode, 0, "t"), b = stored_file_name(kNode, 1, "t");
  using Listing = std::vector<std::pair<int64_t, std::string>>;
  EXPECT_TRUE(store.list().empty());
  store.write(5, a, "x");
  store.write(2, b, "bytes of b");
  store.write(2, a, std::string("a\0a", 3));
  EXPECT_EQ(store.path(2, a), dir / "rollouts" / "step_2" / a);
  EXPECT_TRUE(fs::exists(dir / "rollouts" / "step_2" / a));
  EXPECT_EQ(store.read(2, a), std::string("a\0a", 3));
  EXPECT_EQ(store.read(2, b), "bytes of b");
  EXPECT_EQ(store.list(), (Listing{{2, a}, {2, b}, {5, a}}));
  store.write(2, a, "replaced");  // the last whole write wins
  EXPECT_EQ(store.read(2, a), "replaced");

  // Strays and temporary files of writes in progress are not listed, nor are directories that
  // are no step's.
  std::ofstream(dir / "rollouts" / "step_2" / (a + ".tmp.1.2")) << "partial";
  std::ofstream(dir / "rollouts" / "step_2" / "notes.txt") << "x";
  for (const char* stray : {"step_", "step_x", "step_07", "steps_3", "step_99999999999"}) {
    fs::create_directories(dir / "rollouts" / stray);
    std::ofstream(dir / "rollouts" / stray / a) << "x";
  }
  EXPECT_EQ(store.list(), (Listing{{2, a}, {2, b}, {5, a}}));

  EXPECT_TRUE(store.contains(2, b));
  store.remove(2, b);
  EXPECT_FALSE(store.contains(2, b));
  store.remove(2, b);  // absent is fine
  const std::string e = test::error_of([&] { store.read(2, b); });
  EXPECT_NE(e.find("no such rollout file"), std::string::npos) << e;
  fs::remove_all(dir);
}

// The orchestrator moves a file between its directories (validating/, rollouts/, rejected/) by
// renaming it: the file arrives whole, replaces one of the same name, and a missing file is an
// error naming it.
TEST(RolloutStore, MovesFilesBetweenStoresByRenaming) {
  const auto dir = fresh_dir("moves");
  const RolloutStore validating(dir / "validating"), accepted(dir / "rollouts");
  const std::string a = stored_file_name(kNode, 0, "t");
  validating.write(3, a, "the file");
  accepted.write(3, a, "an older copy");
  validating.move_to(3, a, accepted.path(3, a));
  EXPECT_FALSE(validating.contains(3, a));
  EXPECT_EQ(accepted.read(3, a), "the file");

  validating.move_from(accepted.path(3, a), 3, a);  // back, into a step directory not there yet
  EXPECT_FALSE(accepted.contains(3, a));
  EXPECT_EQ(validating.read(3, a), "the file");

  const std::string e = test::error_of([&] { accepted.move_to(3, a, validating.path(3, a)); });
  EXPECT_NE(e.find("cannot move the file to"), std::string::npos) << e;
  EXPECT_NE(e.find((dir / "rollouts" / "step_3" / a).string()), std::string::npos) << e;
  EXPECT_EQ(validating.read(3, a), "the file");  // a failed move leaves the target alone
  fs::remove_all(dir);
}

TEST(RolloutStore, RefusesPathsOutsideItsSteps) {
  const auto dir = fresh_dir("traversal");
  const RolloutStore store(dir / "rollouts");
  EXPECT_NE(test::error_of([&] { store.write(0, "../../escape.parquet", "x"); }), "");
  EXPECT_NE(test::error_of([&] { store.write(-1, stored_file_name(kNode, 0, "t"), "x"); }), "");
  EXPECT_NE(test::error_of([&] { store.read(0, "/etc/passwd"); }), "");
  EXPECT_FALSE(fs::exists(dir / "escape.parquet"));
  EXPECT_FALSE(fs::exists(dir / "rollouts" / "escape.parquet"));
  EXPECT_FALSE(fs::exists(dir.parent_path() / "escape.parquet"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace trellis::rollout
