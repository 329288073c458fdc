#include "rollout/rollout_file.h"

#include <algorithm>

#include "common/error.h"
#include "common/files.h"
#include "rollout/parquet/reader.h"
#include "rollout/parquet/rollout_columns.h"
#include "rollout/parquet/writer.h"

namespace trellis::rollout {

namespace {

constexpr const char* kSchemaVersionKey = "trellis.schema_version";
constexpr const char* kSignatureDomain = "trellis rollout file signature v2\n";

// Where the value of the first kSignatureKey entry lies in `bytes` (npos if there is none).
size_t signature_offset(const parquet::Footer& footer) {
  const auto& kv = footer.meta.key_value_metadata;
  for (size_t i = 0; i < kv.size(); ++i) {
    if (kv[i].first != kSignatureKey) continue;
    const size_t offset = footer.meta.key_value_offsets[i];
    return offset == std::string::npos ? offset : footer.body_size + offset;
  }
  return std::string::npos;
}

// Hex SHA-256 of bytes[body_size, end) with `size` bytes at `offset` (in that range) set to '0'.
std::string blanked_footer_sha256(std::string_view bytes, size_t body_size, size_t offset,
                                  size_t size) {
  std::string tail(bytes.substr(body_size));
  std::fill_n(tail.begin() + static_cast<std::ptrdiff_t>(offset - body_size), size, '0');
  return sha256_hex(tail);
}

// Overwrites the signature placeholder of a finished file (the value of its kSignatureKey
// entry, kSignatureHexSize '0' characters) with sign.sign_file over the file as it is.
std::string write_signature(std::string bytes, const SignBody& sign) {
  const std::string where = "rollout writer";
  const parquet::Footer footer = parquet::read_footer(bytes, where);
  const size_t offset = signature_offset(footer);
  if (offset == std::string::npos) fail(where, "the signature placeholder is missing");
  const std::string_view body = std::string_view(bytes).substr(0, footer.body_size);
  const std::string message = file_signature_message(
      sha256(body), blanked_footer_sha256(bytes, footer.body_size, offset, kSignatureHexSize));
  const std::string signature = sign.sign_file(message);
  if (signature.size() != kSignatureHexSize)
    fail(where, "a signature of {} characters, expected {}", signature.size(), kSignatureHexSize);
  bytes.replace(offset, kSignatureHexSize, signature);
  return bytes;
}

}  // namespace

std::string file_signature_message(const Sha256& body_sha256, std::string_view footer_sha256_hex) {
  std::string message = kSignatureDomain;
  message.append(reinterpret_cast<const char*>(body_sha256.data()), body_sha256.size());
  message += from_hex(footer_sha256_hex, "the footer hash");
  const Sha256 digest = sha256(message);
  return std::string(reinterpret_cast<const char*>(digest.data()), digest.size());
}

std::string encode_rollout_file(const std::vector<RolloutRecord>& rows, const KeyValues& metadata,
                                const SignBody& sign, const EncodeOptions& options) {
  const bool whole_file = static_cast<bool>(sign.sign_file);
  // Ours are the ones that count: the schema version, and when signing, the signature keys.
  const auto ours = [&](const std::string& key) {
    return key == kSchemaVersionKey ||
           (whole_file && (key == kSignatureKey || key == kBodySha256Key));
  };
  KeyValues kv = {{kSchemaVersionKey, kSchemaVersion}};
  for (const auto& entry : metadata)
    if (!ours(entry.first)) kv.push_back(entry);
  parquet::WriteOptions wo;
  wo.rows_per_group = options.rows_per_group;
  wo.zstd_level = options.zstd_level;
  wo.created_by = "trellis rollout writer";
  std::function<KeyValues(std::string_view)> finish_body;
  if (sign) {
    finish_body = [&](std::string_view body) {
      KeyValues extra = sign.body_metadata ? sign.body_metadata(body) : KeyValues{};
      if (whole_file) {
        std::erase_if(extra, [](const auto& e) { return e.first == kSignatureKey; });
        extra.emplace_back(kSignatureKey, std::string(kSignatureHexSize, '0'));  // placeholder
      }
      return extra;
    };
  }
  std::string bytes =
      parquet::write_table(parquet::rollout_columns(), parquet::records_to_columns(rows),
                           rows.size(), wo, kv, finish_body);
  return whole_file ? write_signature(std::move(bytes), sign) : bytes;
}

std::string sign_rollout_file(std::string_view bytes, const SignBody& sign,
                              const std::string& where) {
  parquet::Footer footer = parquet::read_footer(bytes, where);
  auto& kv = footer.meta.key_value_metadata;
  std::erase_if(
      kv, [](const auto& e) { return e.first == kSignatureKey || e.first == kBodySha256Key; });
  const std::string_view body = bytes.substr(0, footer.body_size);
  if (sign.body_metadata)
    for (auto& entry : sign.body_metadata(body)) kv.push_back(std::move(entry));
  std::erase_if(kv, [](const auto& e) { return e.first == kSignatureKey; });
  if (sign.sign_file) kv.emplace_back(kSignatureKey, std::string(kSignatureHexSize, '0'));
  std::string out(body);
  parquet::append_footer(out, footer.meta);
  return sign.sign_file ? write_signature(std::move(out), sign) : out;
}

RolloutFile decode_rollout_file(std::string_view bytes, const std::string& where) {
  return decode_rollout_file(bytes, where, DecodeBudget{});
}

RolloutFile decode_rollout_file(std::string_view bytes, const std::string& where,
                                const DecodeBudget& budget) {
  parquet::Table table = parquet::read_table(bytes, parquet::rollout_columns(), where, budget);
  RolloutFile file;
  file.metadata = table.footer.meta.key_value_metadata;
  // Files written by other tools (DuckDB, pandas) carry no version; ours must be one we know.
  for (const auto& [key, value] : file.metadata)
    if (key == kSchemaVersionKey && value != kSchemaVersion)
      fail(where, "rollout file schema version '{}' is not supported (this build reads '{}')",
           value, kSchemaVersion);
  file.rows = parquet::columns_to_records(table.columns, table.rows);
  for (size_t i = 0; i < file.rows.size(); ++i) check_record(file.rows[i], i, where);
  file.body = bytes.substr(0, table.footer.body_size);
  file.row_groups = table.footer.meta.row_groups.size();
  const size_t offset = signature_offset(table.footer);
  if (offset != std::string::npos) {
    file.footer_sha256 = blanked_footer_sha256(bytes, table.footer.body_size, offset,
                                               metadata_value(file.metadata, kSignatureKey).size());
  }
  return file;
}

RolloutFile read_rollout_file(const std::string& path, std::string& bytes_out) {
  bytes_out = read_file(path);
  return decode_rollout_file(bytes_out, path);
}

std::string metadata_value(const KeyValues& metadata, const std::string& key) {
  for (const auto& [k, v] : metadata)
    if (k == key) return v;
  return "";
}

}  // namespace trellis::rollout
