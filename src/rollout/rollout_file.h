// Rollout files: one Parquet file per submission with exactly the schema of
// specs/rollout-format.md (implemented in parquet/). Encoding is to bytes so that a worker can
// hash, sign and upload without a temporary file; decoding checks the schema strictly and refuses
// anything it cannot read exactly, with an Error naming the source and what was wrong, and works
// within a DecodeBudget, since the files come from untrusted workers (docs/rollout-files.md).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "common/hashing.h"
#include "rollout/parquet/budget.h"
#include "rollout/rollout_record.h"

namespace trellis::rollout {

inline constexpr const char* kSchemaVersion = "1";

// Footer metadata of a signed file (signing.h): the hex SHA-256 of the body (every byte before
// the footer) and the worker's hex Ed25519 signature of the whole file (file_signature_message).
inline constexpr const char* kBodySha256Key = "trellis.body_sha256";  // 64 hex digits
inline constexpr const char* kSignatureKey = "trellis.signature";     // 128 hex digits
inline constexpr size_t kSignatureHexSize = 128;

// How encode_rollout_file signs a file; empty ({}) for an unsigned file. signing.h's
// sign_body_with makes one from a worker's identity.
struct SignBody {
  SignBody() = default;
  // Only key/values computed from the body, appended to the footer (no whole-file signature).
  template <typename F>
  requires std::is_invocable_r_v<KeyValues, F&, std::string_view> SignBody(
      F body_metadata_fn)  // NOLINT(google-explicit-constructor): any such callable is one
      : body_metadata(std::move(body_metadata_fn)) {}

  // Called with the body (every byte before the footer: the magic and all column chunks) once
  // it is written; returns key/values appended to the footer metadata.
  std::function<KeyValues(std::string_view body)> body_metadata;
  // When set, the file gets a whole-file signature: the footer ends its metadata with
  // kSignatureKey and kSignatureHexSize '0' characters (after body_metadata's key/values; any
  // other kSignatureKey or kBodySha256Key in the caller's metadata is dropped), and once the
  // file is complete those characters are overwritten with sign_file(file_signature_message(...)),
  // which must be kSignatureHexSize characters.
  std::function<std::string(std::string_view message)> sign_file;

  explicit operator bool() const { return body_metadata || sign_file; }
};

struct EncodeOptions {
  size_t rows_per_group = 1024;  // row group size
  int zstd_level = 3;            // 0 = uncompressed pages
};

// The limits a decode works within (parquet/budget.h documents each field and its default).
using DecodeBudget = parquet::DecodeBudget;

// The Parquet file for `rows` (may be empty) with `metadata` (trellis.schema_version is added
// first) and then what `sign` adds: body_metadata's key/values, then the whole-file signature.
std::string encode_rollout_file(const std::vector<RolloutRecord>& rows, const KeyValues& metadata,
                                const SignBody& sign = {}, const EncodeOptions& options = {});

// Signs a finished Parquet file of any writer (DuckDB, pandas, ours) as encode_rollout_file signs
// its own: the body (every byte before the footer) is kept byte for byte, the footer is written
// again by this writer with `sign`'s key/values in place of any signature keys it had. For tools
// that write rollouts with another Parquet library. Error naming `where` for a file whose footer
// cannot be read.
std::string sign_rollout_file(std::string_view bytes, const SignBody& sign,
                              const std::string& where);

struct RolloutFile {
  std::vector<RolloutRecord> rows;
  KeyValues metadata;     // footer key/value metadata as stored
  std::string_view body;  // view into the decoded bytes: every byte before the footer
  size_t row_groups = 0;
  // Hex SHA-256 of every byte after the body (footer, footer length, magic) with the value of
  // the first kSignatureKey entry replaced by as many '0' characters: with `body`, what
  // verify_file_signature checks the signature against. Empty when the file has no signature.
  std::string footer_sha256;
};

// Decodes and validates (schema, types, levels, check_record on every row) within `budget` (the
// first form: the default DecodeBudget, which every honest upload fits). `where` names the source
// in errors (a path or an upload). The returned body views `bytes`.
RolloutFile decode_rollout_file(std::string_view bytes, const std::string& where);
RolloutFile decode_rollout_file(std::string_view bytes, const std::string& where,
                                const DecodeBudget& budget);

// The 32 bytes a whole-file signature signs: SHA-256 of "trellis rollout file signature v2\n",
// the body's SHA-256 and the blanked footer's (RolloutFile::footer_sha256, hex), so that it
// covers every byte of the file but the signature itself.
std::string file_signature_message(const Sha256& body_sha256, std::string_view footer_sha256_hex);

// Reads a file from disk and decodes it.
RolloutFile read_rollout_file(const std::string& path, std::string& bytes_out);

// The value of a metadata key, or "" when absent.
std::string metadata_value(const KeyValues& metadata, const std::string& key);

}  // namespace trellis::rollout
