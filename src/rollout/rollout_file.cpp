#include "rollout/rollout_file.h"

#include "common/error.h"
#include "common/files.h"
#include "rollout/parquet/reader.h"
#include "rollout/parquet/rollout_columns.h"
#include "rollout/parquet/writer.h"

namespace trellis::rollout {

namespace {
constexpr const char* kSchemaVersionKey = "trellis.schema_version";
}  // namespace

std::string encode_rollout_file(const std::vector<RolloutRecord>& rows, const KeyValues& metadata,
                                const SignBody& sign, const EncodeOptions& options) {
  KeyValues kv = {{kSchemaVersionKey, kSchemaVersion}};
  for (const auto& entry : metadata)
    if (entry.first != kSchemaVersionKey) kv.push_back(entry);  // ours is the one that counts
  parquet::WriteOptions wo;
  wo.rows_per_group = options.rows_per_group;
  wo.zstd_level = options.zstd_level;
  wo.created_by = "trellis rollout writer";
  return parquet::write_table(parquet::rollout_columns(), parquet::records_to_columns(rows),
                              rows.size(), wo, kv, sign);
}

RolloutFile decode_rollout_file(std::string_view bytes, const std::string& where) {
  parquet::Table table = parquet::read_table(bytes, parquet::rollout_columns(), where);
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
