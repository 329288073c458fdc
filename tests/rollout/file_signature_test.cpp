// Whole-file signatures: a worker's signature covers every byte of the rollout file but the
// signature itself, so no byte of the footer (row counts, row groups, key/value metadata, column
// metadata) can be edited after signing; the honest file verifies.
#include <gtest/gtest.h>

#include <cstring>

#include "common/error.h"
#include "common/identity.h"
#include "rollout/parquet/file_metadata.h"
#include "rollout/parquet/format.h"
#include "rollout/parquet/reader.h"
#include "rollout/rollout_file.h"
#include "rollout/rollout_test_util.h"
#include "rollout/signing.h"

namespace trellis::rollout {
namespace {

using test_data::sample_records;

std::string signed_file(const Identity& worker, size_t rows_per_group = 4) {
  EncodeOptions options;
  options.rows_per_group = rows_per_group;
  return encode_rollout_file(sample_records(12), {{"trellis.model", "qwen3-0.6b"}},
                             sign_body_with(worker), options);
}

// The error of decoding and verifying `bytes`, or "" when both pass.
std::string verify_error(std::string_view bytes, const Identity& worker) {
  try {
    verify_file_signature(decode_rollout_file(bytes, "edited.parquet"), worker.address(),
                          "edited.parquet");
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

// `bytes` with its footer replaced by `meta` serialized (the body unchanged).
std::string with_footer(const std::string& bytes, const parquet::FileMetaData& meta) {
  const parquet::Footer f = parquet::read_footer(bytes, "t");
  std::string out = bytes.substr(0, f.body_size);
  parquet::append_footer(out, meta);
  return out;
}

TEST(FileSignature, HonestFileVerifies) {
  const Identity worker = Identity::generate();
  EXPECT_EQ(verify_error(signed_file(worker), worker), "");
  const Identity other = Identity::generate();
  EXPECT_NE(verify_error(signed_file(worker), other).find("signature"), std::string::npos);
}

TEST(FileSignature, EditedMetadataValueIsCaught) {
  const Identity worker = Identity::generate();
  const std::string bytes = signed_file(worker);
  parquet::FileMetaData meta = parquet::read_footer(bytes, "t").meta;
  for (auto& [k, v] : meta.key_value_metadata)
    if (k == "trellis.model") v = "a-bigger-model";
  const std::string edited = with_footer(bytes, meta);
  ASSERT_NO_THROW(decode_rollout_file(edited, "edited.parquet"));  // still a valid file
  const std::string e = verify_error(edited, worker);
  EXPECT_NE(e.find("signature"), std::string::npos) << e;
  EXPECT_NE(e.find("edited.parquet"), std::string::npos) << e;
}

TEST(FileSignature, DroppedRowGroupIsCaught) {
  // Rows removed by editing the footer alone: the last row group and its row count go, the body
  // (which still holds their bytes) does not change.
  const Identity worker = Identity::generate();
  const std::string bytes = signed_file(worker);
  parquet::FileMetaData meta = parquet::read_footer(bytes, "t").meta;
  ASSERT_EQ(meta.row_groups.size(), 3u);
  meta.num_rows -= meta.row_groups.back().num_rows;
  meta.row_groups.pop_back();
  const std::string edited = with_footer(bytes, meta);
  ASSERT_EQ(decode_rollout_file(edited, "edited.parquet").rows.size(), 8u);
  EXPECT_NE(verify_error(edited, worker), "");
}

TEST(FileSignature, EveryByteOfTheFileIsCovered) {
  // Flipping any one byte anywhere (body, footer, footer length, magic, the signature itself)
  // makes the file fail to decode or to verify.
  const Identity worker = Identity::generate();
  const std::string bytes = signed_file(worker, 100);
  ASSERT_EQ(verify_error(bytes, worker), "");
  size_t passed = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string edited = bytes;
    edited[i] ^= 0x01;
    if (verify_error(edited, worker).empty()) {
      ++passed;
      ADD_FAILURE() << "a flipped byte at offset " << i << " of " << bytes.size()
                    << " still verifies";
      if (passed > 5) break;
    }
  }
}

}  // namespace
}  // namespace trellis::rollout
