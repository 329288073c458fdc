// Rollout files against DuckDB, an independent Parquet implementation, in both directions:
// DuckDB reads files our writer produced (column names, types, values, key/value metadata), and
// our reader reads files DuckDB wrote with the rollout schema (dictionary pages, OPTIONAL
// columns, several row groups), refusing what it does not support (snappy, delta encodings,
// nulls) with a clear error. DuckDB runs through its Node package (tests/interop/
// duckdb_rollouts.js), pinned in tests/interop/package-lock.json.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/files.h"
#include "common/hashing.h"
#include "common/json.h"
#include "interop/duckdb_script.h"
#include "rollout/rollout_file.h"
#include "rollout/rollout_test_util.h"
#include "rollout/signing.h"

namespace trellis::rollout {
namespace {

namespace fs = std::filesystem;

using test::run_duckdb;
using test::shell_quote;

// A scratch directory removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("trellis_duckdb_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// Compares a DuckDB row (duckdb_rollouts.js's JSON form) with a record, field by field.
void expect_same_row(const Json& j, const RolloutRecord& r, size_t row) {
  SCOPED_TRACE("row " + std::to_string(row));
  EXPECT_EQ(j.at("run_id").get<std::string>(), r.run_id);
  EXPECT_EQ(j.at("node_address").get<std::string>(), r.node_address);
  EXPECT_EQ(j.at("step").get<int32_t>(), r.step);
  EXPECT_EQ(j.at("submission").get<int32_t>(), r.submission);
  EXPECT_EQ(j.at("task_id").get<std::string>(), r.task_id);
  EXPECT_EQ(j.at("group_index").get<int32_t>(), r.group_index);
  EXPECT_EQ(j.at("prompt_tokens").get<std::vector<int32_t>>(), r.prompt_tokens);
  EXPECT_EQ(j.at("completion_tokens").get<std::vector<int32_t>>(), r.completion_tokens);
  // FLOAT values arrive as the double of the same value: exact comparison.
  const auto logprobs = j.at("completion_logprobs").get<std::vector<double>>();
  ASSERT_EQ(logprobs.size(), r.completion_logprobs.size());
  for (size_t i = 0; i < logprobs.size(); ++i)
    EXPECT_EQ(static_cast<float>(logprobs[i]), r.completion_logprobs[i]) << "logprob " << i;
  EXPECT_EQ(j.at("token_versions").get<std::vector<int32_t>>(), r.token_versions);
  EXPECT_EQ(j.at("seed").get<std::string>(), std::to_string(r.seed));
  EXPECT_EQ(static_cast<float>(j.at("temperature").get<double>()), r.temperature);
  EXPECT_EQ(j.at("finish_reason").get<std::string>(), r.finish_reason);
  EXPECT_EQ(static_cast<float>(j.at("reward").get<double>()), r.reward);
  EXPECT_EQ(static_cast<float>(j.at("task_reward").get<double>()), r.task_reward);
  EXPECT_EQ(static_cast<float>(j.at("length_penalty").get<double>()), r.length_penalty);
  EXPECT_EQ(j.at("target_length").get<int32_t>(), r.target_length);
  EXPECT_EQ(static_cast<float>(j.at("advantage").get<double>()), r.advantage);
  EXPECT_EQ(from_hex(j.at("proof").get<std::string>(), "proof"), r.proof);
}

void expect_rejected(const fs::path& file, const std::string& needle) {
  std::string bytes;
  try {
    read_rollout_file(file.string(), bytes);
    ADD_FAILURE() << file.string() << " decoded; expected an error containing: " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << needle;
  }
}

TEST(DuckDbInterop, DuckDbReadsOurFiles) {
  TempDir dir;
  const auto rows = test_data::sample_records(23);
  EncodeOptions options;
  options.rows_per_group = 10;
  const fs::path file = dir.path / "ours.parquet";
  write_file_atomic(file, encode_rollout_file(
                              rows, {{"model", "qwen3-0.6b"}},
                              [](std::string_view body) {
                                return KeyValues{{"trellis.body_sha256", sha256_hex(body)}};
                              },
                              options));
  const Json out = run_duckdb("read " + shell_quote(file.string()));
  if (out.is_null()) return;

  const std::vector<std::pair<std::string, std::string>> expected_columns = {
      {"run_id", "VARCHAR"},
      {"node_address", "VARCHAR"},
      {"step", "INTEGER"},
      {"submission", "INTEGER"},
      {"task_id", "VARCHAR"},
      {"group_index", "INTEGER"},
      {"prompt_tokens", "INTEGER[]"},
      {"completion_tokens", "INTEGER[]"},
      {"completion_logprobs", "FLOAT[]"},
      {"token_versions", "INTEGER[]"},
      {"seed", "BIGINT"},
      {"temperature", "FLOAT"},
      {"finish_reason", "VARCHAR"},
      {"reward", "FLOAT"},
      {"task_reward", "FLOAT"},
      {"length_penalty", "FLOAT"},
      {"target_length", "INTEGER"},
      {"advantage", "FLOAT"},
      {"proof", "BLOB"}};
  const Json& columns = out.at("columns");
  ASSERT_EQ(columns.size(), expected_columns.size()) << columns.dump();
  for (size_t i = 0; i < columns.size(); ++i) {
    EXPECT_EQ(columns[i].at("name").get<std::string>(), expected_columns[i].first);
    EXPECT_EQ(columns[i].at("type").get<std::string>(), expected_columns[i].second)
        << "column " << expected_columns[i].first;
  }

  EXPECT_EQ(out.at("row_groups").get<int>(), 3);
  const Json& got = out.at("rows");
  ASSERT_EQ(got.size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) expect_same_row(got[i], rows[i], i);

  std::vector<std::pair<std::string, std::string>> kv;
  for (const Json& e : out.at("kv"))
    kv.emplace_back(e.at("key").get<std::string>(), e.at("value").get<std::string>());
  std::string bytes;
  const RolloutFile ours = read_rollout_file(file.string(), bytes);
  const std::vector<std::pair<std::string, std::string>> expected_kv = {
      {"trellis.schema_version", "1"},
      {"model", "qwen3-0.6b"},
      {"trellis.body_sha256", sha256_hex(ours.body)}};
  EXPECT_EQ(kv, expected_kv);
}

TEST(DuckDbInterop, WeReadDuckDbFiles) {
  TempDir dir;
  const Json out = run_duckdb("write " + shell_quote(dir.path.string()));
  if (out.is_null()) return;
  const Json& expected = out.at("rows");
  ASSERT_EQ(expected.size(), 10u);

  for (const char* name : {"zstd.parquet", "uncompressed.parquet"}) {
    SCOPED_TRACE(name);
    std::string bytes;
    const RolloutFile file = read_rollout_file((dir.path / name).string(), bytes);
    ASSERT_EQ(file.rows.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) expect_same_row(expected[i], file.rows[i], i);
    // Spot checks that do not go through the JSON: empty lists, non-ASCII, a 2-chunk proof.
    EXPECT_TRUE(file.rows[0].prompt_tokens.empty());
    EXPECT_TRUE(file.rows[1].completion_tokens.empty());
    EXPECT_EQ(file.rows[4].task_id, "task-4-\xc3\xa9t\xc3\xa9");
    EXPECT_EQ(file.rows[3].proof, std::string(516, 'D'));
    EXPECT_EQ(file.rows[2].prompt_tokens, (std::vector<int32_t>{2000, 2001, 2002, 2003, 2004}));
  }
  {
    std::string bytes;
    const RolloutFile file = read_rollout_file((dir.path / "zstd.parquet").string(), bytes);
    EXPECT_EQ(metadata_value(file.metadata, "model"), "duck");
    EXPECT_EQ(metadata_value(file.metadata, "trellis.schema_version"), "1");
  }
  {
    std::string bytes;
    const RolloutFile file = read_rollout_file((dir.path / "many.parquet").string(), bytes);
    const Json& many = out.at("many");
    EXPECT_EQ(file.row_groups, 3u);
    ASSERT_EQ(file.rows.size(), many.size());
    for (size_t i = 0; i < many.size(); ++i) expect_same_row(many[i], file.rows[i], i);
  }

  expect_rejected(dir.path / "snappy.parquet", "compression SNAPPY is not supported");
  expect_rejected(dir.path / "nulls.parquet", "column 'task_id' holds a null");
  expect_rejected(dir.path / "v2.parquet", "is not supported");
}

// sign_rollout_file signs what another writer wrote: DuckDB's body is kept byte for byte, and
// the signature covers it and the new footer (any byte of either changed fails the check).
TEST(DuckDbInterop, AFileDuckDbWroteIsSignedWithItsBodyKept) {
  TempDir dir;
  const Json out = run_duckdb("write " + shell_quote(dir.path.string()));
  if (out.is_null()) return;
  const std::string duck = read_file(dir.path / "zstd.parquet");
  const Identity node = Identity::generate();
  const std::string signed_bytes = sign_rollout_file(duck, sign_body_with(node), "test");
  const RolloutFile file = decode_rollout_file(signed_bytes, "signed");
  EXPECT_EQ(file.body, std::string_view(duck).substr(0, file.body.size()));
  EXPECT_EQ(metadata_value(file.metadata, "model"), "duck");  // DuckDB's own key/values stay
  EXPECT_NO_THROW(verify_file_signature(file, node.address(), "signed"));
  EXPECT_THROW(verify_file_signature(file, Identity::generate().address(), "signed"), Error);
  // Signing again (another key) replaces the signature rather than adding one.
  const Identity other = Identity::generate();
  const std::string again = sign_rollout_file(signed_bytes, sign_body_with(other), "test");
  const RolloutFile resigned = decode_rollout_file(again, "again");
  EXPECT_EQ(std::count_if(resigned.metadata.begin(), resigned.metadata.end(),
                          [](const auto& e) { return e.first == kSignatureKey; }),
            1);
  EXPECT_NO_THROW(verify_file_signature(resigned, other.address(), "again"));
  std::string tampered = signed_bytes;
  tampered[file.body.size() / 2] ^= 1;
  try {
    verify_file_signature(decode_rollout_file(tampered, "tampered"), node.address(), "tampered");
    ADD_FAILURE() << "a changed body byte verified";
  } catch (const Error&) {
  }
  EXPECT_THROW(sign_rollout_file("PAR1 not parquet", sign_body_with(node), "junk"), Error);
}

}  // namespace
}  // namespace trellis::rollout
