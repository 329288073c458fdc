// The fuzzer's seed corpus (fuzz/corpus/rollout_reader/) through decode_rollout_file: valid_*
// files decode, bad_* files fail with an Error, and nothing crashes. Also keeps the seeds honest:
// a reader change that breaks one shows up here, not only when someone runs the fuzzer.
#include <gtest/gtest.h>

#include <filesystem>

#include "common/error.h"
#include "common/files.h"
#include "rollout/rollout_file.h"

namespace trellis::rollout {
namespace {

namespace fs = std::filesystem;

TEST(FuzzCorpus, ValidSeedsDecodeBadSeedsFail) {
  const fs::path dir = fs::path(TRELLIS_SOURCE_DIR) / "fuzz" / "corpus" / "rollout_reader";
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  size_t valid = 0, bad = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    SCOPED_TRACE(name);
    const std::string bytes = read_file(entry.path());
    if (name.rfind("valid_", 0) == 0) {
      ++valid;
      EXPECT_NO_THROW(decode_rollout_file(bytes, name));
    } else {
      ++bad;
      EXPECT_THROW(decode_rollout_file(bytes, name), Error);
    }
  }
  EXPECT_GE(valid, 3u);
  EXPECT_GE(bad, 3u);
}

}  // namespace
}  // namespace trellis::rollout
