// Rollout files: encode/decode round trips (row groups, empty lists, empty files, zstd and
// uncompressed pages, multi-page chunks, metadata and the signed body) and the reader's refusal
// of malformed files (truncated, flipped bytes, wrong magic, wrong schema, bad records).
#include "rollout/rollout_file.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "common/error.h"
#include "rollout/parquet/reader.h"
#include "rollout/parquet/rollout_columns.h"
#include "rollout/parquet/writer.h"
#include "rollout/rollout_test_util.h"

namespace trellis::rollout {
namespace {

using test_data::sample_record;
using test_data::sample_records;

// Expects decode to throw an Error whose message contains `needle`.
void expect_rejected(std::string_view bytes, const std::string& needle) {
  try {
    decode_rollout_file(bytes, "test.parquet");
    ADD_FAILURE() << "decoded a file that should be refused (expected: " << needle << ")";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << needle;
    EXPECT_NE(std::string(e.what()).find("test.parquet"), std::string::npos) << e.what();
  }
}

TEST(RolloutFile, RoundTripsRowsAcrossRowGroups) {
  const auto rows = sample_records(50);
  EncodeOptions options;
  options.rows_per_group = 7;  // 8 row groups, the last one short
  const std::string bytes = encode_rollout_file(rows, {{"model", "qwen3-0.6b"}}, {}, options);
  const RolloutFile file = decode_rollout_file(bytes, "mem");
  EXPECT_EQ(file.row_groups, 8u);
  ASSERT_EQ(file.rows.size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(file.rows[i], rows[i]) << "row " << i;
  EXPECT_EQ(metadata_value(file.metadata, "trellis.schema_version"), kSchemaVersion);
  EXPECT_EQ(metadata_value(file.metadata, "model"), "qwen3-0.6b");
  EXPECT_EQ(metadata_value(file.metadata, "absent"), "");
  // Empty lists survive as empty, not as a neighbour's values.
  EXPECT_TRUE(file.rows[0].prompt_tokens.empty());
  EXPECT_TRUE(file.rows[1].completion_tokens.empty());
  EXPECT_FALSE(file.rows[2].prompt_tokens.empty());
}

TEST(RolloutFile, UncompressedAndZstdDecodeTheSame) {
  const auto rows = sample_records(20);
  EncodeOptions plain;
  plain.zstd_level = 0;
  const std::string a = encode_rollout_file(rows, {}, {}, plain);
  const std::string b = encode_rollout_file(rows, {}, {});
  EXPECT_NE(a, b);
  EXPECT_EQ(decode_rollout_file(a, "a").rows, rows);
  EXPECT_EQ(decode_rollout_file(b, "b").rows, rows);
}

TEST(RolloutFile, EmptyFileRoundTrips) {
  const std::string bytes = encode_rollout_file({}, {{"k", "v"}});
  const RolloutFile file = decode_rollout_file(bytes, "empty");
  EXPECT_TRUE(file.rows.empty());
  EXPECT_EQ(file.row_groups, 0u);
  EXPECT_EQ(metadata_value(file.metadata, "k"), "v");
  EXPECT_EQ(file.body, "PAR1");
}

TEST(RolloutFile, AllEmptyListsAndEmptyStrings) {
  RolloutRecord r;
  r.finish_reason = "eos";
  const std::vector<RolloutRecord> rows(3, r);
  EXPECT_EQ(decode_rollout_file(encode_rollout_file(rows, {}), "m").rows, rows);
}

TEST(RolloutFile, LongListsSpanSeveralPages) {
  // 3 rows of 200k tokens: about 2.4 MB per list column, so several pages per chunk.
  std::vector<RolloutRecord> rows;
  for (int i = 0; i < 3; ++i) {
    RolloutRecord r = sample_record(i + 2);
    r.completion_tokens.assign(200000, i);
    for (size_t t = 0; t < r.completion_tokens.size(); ++t) r.completion_tokens[t] += t;
    r.completion_logprobs.assign(200000, -0.5f);
    r.token_versions.assign(200000, 3);
    rows.push_back(r);
  }
  const std::string bytes = encode_rollout_file(rows, {});
  EXPECT_EQ(decode_rollout_file(bytes, "long").rows, rows);
}

TEST(RolloutFile, SignBodySeesTheBodyAndItsValuesGoLast) {
  const auto rows = sample_records(10);
  std::string seen;
  const std::string bytes = encode_rollout_file(rows, {{"model", "m"}}, [&](std::string_view body) {
    seen = std::string(body);
    return KeyValues{{"trellis.signature", "sig:" + std::to_string(body.size())}};
  });
  ASSERT_GT(seen.size(), 4u);
  EXPECT_EQ(seen.substr(0, 4), "PAR1");
  EXPECT_EQ(bytes.substr(0, seen.size()), seen);
  const RolloutFile file = decode_rollout_file(bytes, "signed");
  EXPECT_EQ(file.body, seen);
  EXPECT_EQ(file.body.data(), bytes.data());  // a view into the decoded bytes
  ASSERT_EQ(file.metadata.size(), 3u);
  EXPECT_EQ(file.metadata[0].first, "trellis.schema_version");
  EXPECT_EQ(file.metadata[1], (std::pair<std::string, std::string>{"model", "m"}));
  EXPECT_EQ(file.metadata[2].first, "trellis.signature");
  EXPECT_EQ(file.metadata[2].second, "sig:" + std::to_string(seen.size()));
}

TEST(RolloutFile, ReadsFromDisk) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("trellis_rollout_" + std::to_string(::getpid()) + ".parquet");
  const auto rows = sample_records(5);
  {
    const std::string bytes = encode_rollout_file(rows, {});
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  }
  std::string bytes;
  EXPECT_EQ(read_rollout_file(path.string(), bytes).rows, rows);
  std::filesystem::remove(path);
  EXPECT_THROW(read_rollout_file(path.string(), bytes), Error);
}

// ---- malformed files ----

TEST(RolloutFileRejects, EveryTruncation) {
  const std::string bytes = encode_rollout_file(sample_records(4), {{"k", "v"}});
  for (size_t n = 0; n < bytes.size(); ++n)
    EXPECT_THROW(decode_rollout_file(std::string_view(bytes).substr(0, n), "cut"), Error)
        << "prefix of " << n << " bytes";
  // Cut in the middle but the magic restored at the end.
  std::string cut = bytes.substr(0, bytes.size() / 2) + bytes.substr(bytes.size() - 8);
  expect_rejected(cut, "footer");
}

TEST(RolloutFileRejects, WrongMagic) {
  std::string bytes = encode_rollout_file(sample_records(2), {});
  std::string head = bytes, tail = bytes;
  head[0] = 'X';
  tail[tail.size() - 1] = 'X';
  expect_rejected(head, "magic bytes PAR1 are missing at the start");
  expect_rejected(tail, "magic bytes PAR1 are missing at the end");
  std::string encrypted = bytes;
  encrypted.replace(encrypted.size() - 4, 4, "PARE");
  expect_rejected(encrypted, "encrypted");
  expect_rejected("PAR1", "not a Parquet file");
}

TEST(RolloutFileRejects, AbsurdFooterLength) {
  std::string bytes = encode_rollout_file(sample_records(2), {});
  const uint32_t huge = 0xfffffff0u;
  std::memcpy(bytes.data() + bytes.size() - 8, &huge, 4);
  expect_rejected(bytes, "footer length");
}

TEST(RolloutFileRejects, FlippedBytesNeverCrashOrMisread) {
  // Every single-byte corruption of a small file either fails with an Error or decodes to rows
  // that pass check_record (a flip inside a float or a token id is undetectable without a
  // checksum; that is what the signature over the body is for).
  const auto rows = sample_records(6);
  for (int level : {0, 3}) {
    EncodeOptions options;
    options.zstd_level = level;
    options.rows_per_group = 4;
    const std::string bytes = encode_rollout_file(rows, {{"k", "v"}}, {}, options);
    size_t rejected = 0;
    for (size_t i = 0; i < bytes.size(); ++i) {
      for (uint8_t mask : {0x01, 0x80, 0xff}) {
        std::string bad = bytes;
        bad[i] = static_cast<char>(bad[i] ^ mask);
        try {
          decode_rollout_file(bad, "flip");
        } catch (const Error&) {
          ++rejected;
        }
      }
    }
    // Structure (headers, levels, lengths, footer) is most of a small file: most flips fail.
    EXPECT_GT(rejected, bytes.size()) << "zstd level " << level;
  }
}

TEST(RolloutFileRejects, InconsistentListLengths) {
  auto rows = sample_records(3);
  rows[2].completion_logprobs.push_back(-1.0f);
  expect_rejected(encode_rollout_file(rows, {}), "row 2");
  rows = sample_records(3);
  rows[1].token_versions.clear();
  rows[1].completion_tokens = {1, 2};
  rows[1].completion_logprobs = {-1, -2};
  expect_rejected(encode_rollout_file(rows, {}), "token_versions has 0 entries");
}

TEST(RolloutFileRejects, BadRecordValues) {
  auto rows = sample_records(2);
  rows[0].finish_reason = "stop";
  expect_rejected(encode_rollout_file(rows, {}), "finish_reason");
  rows = sample_records(2);
  rows[1].proof = std::string(100, 'x');
  expect_rejected(encode_rollout_file(rows, {}), "proof");
}

TEST(RolloutFileRejects, UnknownSchemaVersion) {
  std::string bytes = encode_rollout_file(sample_records(2), {});
  // Same length, so the footer stays valid: "trellis.schema_version" -> "1" becomes "9".
  const std::string key = std::string("trellis.schema_version") + '\x18' + '\x01' + '1';
  const size_t at = bytes.rfind(key);
  ASSERT_NE(at, std::string::npos);
  bytes[at + key.size() - 1] = '9';
  expect_rejected(bytes, "schema version '9'");
}

// Writes `rows` with a modified column list through the raw writer.
std::string write_with_columns(const std::vector<parquet::ColumnSpec>& specs,
                               const std::vector<parquet::ColumnData>& columns, size_t rows) {
  return parquet::write_table(specs, columns, rows, {}, {}, {});
}

TEST(RolloutFileRejects, WrongSchema) {
  const auto rows = sample_records(3);
  const auto specs = parquet::rollout_columns();
  const auto columns = parquet::records_to_columns(rows);

  {  // a column missing
    auto s = specs;
    auto c = columns;
    s.pop_back();
    c.pop_back();
    expect_rejected(write_with_columns(s, c, rows.size()), "18 top-level columns, expected 19");
  }
  {  // two columns swapped
    auto s = specs;
    auto c = columns;
    std::swap(s[2], s[3]);
    std::swap(c[2], c[3]);
    expect_rejected(write_with_columns(s, c, rows.size()), "expected 'step'");
  }
  {  // a column renamed
    auto s = specs;
    s[0].name = "run";
    expect_rejected(write_with_columns(s, columns, rows.size()), "expected 'run_id'");
  }
  {  // int64 seed written as int32
    auto s = specs;
    auto c = columns;
    s[10].type = parquet::ValueType::kInt32;
    c[10].values = std::vector<int32_t>(rows.size(), 1);
    expect_rejected(write_with_columns(s, c, rows.size()), "column 'seed' has physical type INT32");
  }
  {  // a string column without its UTF8 annotation
    auto s = specs;
    s[4].utf8 = false;
    expect_rejected(write_with_columns(s, columns, rows.size()), "column 'task_id' has annotation");
  }
  {  // binary proof annotated as a string
    auto s = specs;
    auto r = rows;
    for (auto& row : r) row.proof.clear();
    s[18].utf8 = true;
    expect_rejected(write_with_columns(s, parquet::records_to_columns(r), r.size()),
                    "column 'proof' has annotation");
  }
  {  // a list where a scalar belongs
    auto s = specs;
    auto c = columns;
    s[2].list = true;
    c[2].offsets = {0, 1, 2, 3};
    expect_rejected(write_with_columns(s, c, rows.size()), "column 'step'");
  }
  {  // an extra column
    auto s = specs;
    auto c = columns;
    s.push_back({"extra", parquet::ValueType::kInt32, false, false});
    c.push_back({std::vector<int32_t>(rows.size(), 0), {}});
    expect_rejected(write_with_columns(s, c, rows.size()), "20 top-level columns, expected 19");
  }
}

TEST(RolloutFileWriter, RefusesInconsistentColumns) {
  const auto rows = sample_records(3);
  auto columns = parquet::records_to_columns(rows);
  columns[7].offsets[1] = 1000;  // not sorted, past the values
  EXPECT_THROW(write_with_columns(parquet::rollout_columns(), columns, rows.size()), Error);
  auto bad_utf8 = rows;
  bad_utf8[1].task_id = "\xff\xfe";
  EXPECT_THROW(encode_rollout_file(bad_utf8, {}), Error);
}

}  // namespace
}  // namespace trellis::rollout
