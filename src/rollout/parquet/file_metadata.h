// The Parquet footer (FileMetaData and the structs in it) as plain structs, with the fields
// Trellis writes and checks, serialized to and parsed from the Thrift compact protocol. Parsing
// keeps every field needed to validate a file; fields it does not use (statistics, column
// orders, indexes) are skipped.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trellis::rollout::parquet {

class BudgetMeter;

struct SchemaElement {
  std::optional<int32_t> type;  // Type; absent for groups
  std::optional<int32_t> type_length;
  std::optional<int32_t> repetition;  // Repetition; absent only for the root
  std::string name;
  std::optional<int32_t> num_children;  // set for groups
  std::optional<int32_t> converted_type;
  // LogicalType union: which member is set (LogicalKind values) and, for INTEGER, its fields.
  std::optional<int16_t> logical;
  int8_t int_bit_width = 0;
  bool int_signed = false;
};

struct ColumnMetaData {
  int32_t type = 0;
  std::vector<int32_t> encodings;
  std::vector<std::string> path_in_schema;
  int32_t codec = 0;
  int64_t num_values = 0;
  int64_t total_uncompressed_size = 0;
  int64_t total_compressed_size = 0;
  int64_t data_page_offset = 0;
  std::optional<int64_t> dictionary_page_offset;
};

struct ColumnChunk {
  std::optional<std::string> file_path;  // external column data: refused on read
  int64_t file_offset = 0;
  std::optional<ColumnMetaData> meta_data;
  bool encrypted = false;  // crypto_metadata or encrypted_column_metadata present
};

struct RowGroup {
  std::vector<ColumnChunk> columns;
  int64_t total_byte_size = 0;
  int64_t num_rows = 0;
  std::optional<int64_t> file_offset;
  std::optional<int64_t> total_compressed_size;
};

struct FileMetaData {
  int32_t version = 0;
  std::vector<SchemaElement> schema;  // depth-first, root first
  int64_t num_rows = 0;
  std::vector<RowGroup> row_groups;
  std::vector<std::pair<std::string, std::string>> key_value_metadata;
  // Set by parsing: where each key/value entry's value starts in the footer bytes (npos for an
  // entry without a value), so that a signature stored in one can be located in the raw file.
  std::vector<size_t> key_value_offsets;
  std::string created_by;
  bool encrypted = false;  // encryption_algorithm present
};

std::string serialize_file_metadata(const FileMetaData& meta);
// Ends a file: appends the serialized footer, its length (4 bytes, little-endian) and the magic.
void append_footer(std::string& out, const FileMetaData& meta);

// Parses footer bytes; Error naming `where` if they are not a FileMetaData or lack required
// fields, or if its lists or the memory they take exceed `meter`'s budget (checked before each
// element is added). The first form uses the default budget for a file of bytes.size().
FileMetaData parse_file_metadata(std::string_view bytes, const std::string& where);
FileMetaData parse_file_metadata(std::string_view bytes, const std::string& where,
                                 BudgetMeter& meter);

}  // namespace trellis::rollout::parquet
