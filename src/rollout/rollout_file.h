// Rollout files: one Parquet file per submission with exactly the schema of
// specs/rollout-format.md (implemented in parquet/). Encoding is to bytes so that a worker can
// hash, sign and upload without a temporary file; decoding checks the schema strictly and refuses
// anything it cannot read exactly, with an Error naming the source and what was wrong.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "rollout/rollout_record.h"

namespace trellis::rollout {

inline constexpr const char* kSchemaVersion = "1";

// Called with the file body (every byte before the footer: the magic and all column chunks)
// once it is written; returns key/values appended to the footer metadata (e.g. the worker's
// signature over SHA-256(body)).
using SignBody = std::function<KeyValues(std::string_view body)>;

struct EncodeOptions {
  size_t rows_per_group = 1024;  // row group size
  int zstd_level = 3;            // 0 = uncompressed pages
};

// The Parquet file for `rows` (may be empty) with `metadata` (trellis.schema_version is added
// first) and then whatever `sign` returns.
std::string encode_rollout_file(const std::vector<RolloutRecord>& rows, const KeyValues& metadata,
                                const SignBody& sign = {}, const EncodeOptions& options = {});

struct RolloutFile {
  std::vector<RolloutRecord> rows;
  KeyValues metadata;     // footer key/value metadata as stored
  std::string_view body;  // view into the decoded bytes: the signed body
  size_t row_groups = 0;
};

// Decodes and validates (schema, types, levels, check_record on every row). `where` names the
// source in errors (a path or an upload). The returned body views `bytes`.
RolloutFile decode_rollout_file(std::string_view bytes, const std::string& where);

// Reads a file from disk and decodes it.
RolloutFile read_rollout_file(const std::string& path, std::string& bytes_out);

// The value of a metadata key, or "" when absent.
std::string metadata_value(const KeyValues& metadata, const std::string& key);

}  // namespace trellis::rollout
