#include "rollout/parquet/writer.h"

#include <algorithm>

#include "common/error.h"
#include "rollout/parquet/compression.h"
#include "rollout/parquet/encoding.h"
#include "rollout/parquet/file_metadata.h"
#include "rollout/parquet/format.h"
#include "rollout/parquet/levels.h"
#include "rollout/parquet/page_header.h"
#include "rollout/parquet/schema.h"

namespace trellis::rollout::parquet {
namespace {

constexpr const char* kWhere = "Parquet writer";

size_t value_bytes(const Values& values, size_t i) {
  if (const auto* s = std::get_if<std::vector<std::string>>(&values)) return 4 + (*s)[i].size();
  return std::holds_alternative<std::vector<int64_t>>(values) ? 8 : 4;
}

void check_columns(const std::vector<ColumnSpec>& specs, const std::vector<ColumnData>& columns,
                   size_t rows) {
  if (columns.size() != specs.size())
    fail(kWhere, "{} columns given for a schema of {}", columns.size(), specs.size());
  for (size_t k = 0; k < specs.size(); ++k) {
    const ColumnSpec& spec = specs[k];
    const ColumnData& col = columns[k];
    if (col.values.index() != empty_values(spec.type).index())
      fail(kWhere, "column '{}' holds the wrong value type (expected {})", spec.name,
           value_type_name(spec.type));
    const size_t n = value_count(col.values);
    if (spec.list) {
      if (col.offsets.size() != rows + 1 || col.offsets.front() != 0 || col.offsets.back() != n ||
          !std::is_sorted(col.offsets.begin(), col.offsets.end()))
        fail(kWhere, "column '{}' has list offsets inconsistent with {} rows and {} values",
             spec.name, rows, n);
    } else if (n != rows) {
      fail(kWhere, "column '{}' has {} values for {} rows", spec.name, n, rows);
    }
    if (const auto* s = std::get_if<std::vector<std::string>>(&col.values)) {
      for (size_t i = 0; i < s->size(); ++i) {
        if ((*s)[i].size() > 0x7fffffffu)
          fail(kWhere, "column '{}' value {} is larger than 2 GiB", spec.name, i);
        if (spec.utf8 && !is_valid_utf8((*s)[i]))
          fail(kWhere, "column '{}' value {} is not valid UTF-8", spec.name, i);
      }
    }
  }
}

int32_t checked_i32(size_t n, const char* what) {
  if (n > 0x7fffffffu) fail(kWhere, "{} of {} does not fit a Parquet page", what, n);
  return static_cast<int32_t>(n);
}

// Appends one column chunk (rows [r0, r1)) to `out` and returns its metadata.
ColumnMetaData write_chunk(const ColumnSpec& spec, const ColumnData& col, size_t r0, size_t r1,
                           const WriteOptions& options, std::string& out) {
  ColumnMetaData meta;
  meta.type = physical_type(spec.type);
  meta.encodings = {static_cast<int32_t>(Encoding::kPlain)};
  if (spec.list) meta.encodings.push_back(static_cast<int32_t>(Encoding::kRle));
  meta.path_in_schema = leaf_path(spec);
  meta.codec = codec_for_level(options.zstd_level);
  meta.data_page_offset = static_cast<int64_t>(out.size());
  const size_t chunk_start = out.size();

  const auto first_value = [&](size_t row) { return spec.list ? col.offsets[row] : row; };
  size_t row = r0;
  do {  // at least one page, even for an empty row group
    // Rows for this page: whole rows up to about kTargetPageBytes of values.
    size_t end = row, bytes = 0;
    while (end < r1 && (end == row || bytes < kTargetPageBytes)) {
      for (size_t v = first_value(end); v < first_value(end + 1); ++v)
        bytes += value_bytes(col.values, v);
      ++end;
    }
    const size_t v0 = first_value(row), v1 = first_value(end);
    std::string page;
    size_t num_values = end - row;
    if (spec.list) {
      std::vector<uint32_t> rep, def;
      for (size_t r = row; r < end; ++r) {
        const size_t n = col.offsets[r + 1] - col.offsets[r];
        if (n == 0) {
          rep.push_back(0);
          def.push_back(0);  // empty list
        }
        for (size_t i = 0; i < n; ++i) {
          rep.push_back(i == 0 ? 0 : 1);
          def.push_back(1);
        }
      }
      num_values = rep.size();
      encode_levels_v1(rep, 1, page);
      encode_levels_v1(def, 1, page);
    }
    encode_plain(col.values, v0, v1, page);
    const std::string compressed = compress_page(page, options.zstd_level);

    PageHeader h;
    h.type = static_cast<int32_t>(PageType::kDataPage);
    h.uncompressed_page_size = checked_i32(page.size(), "a page");
    h.compressed_page_size = checked_i32(compressed.size(), "a compressed page");
    h.num_values = checked_i32(num_values, "a page's value count");
    h.encoding = static_cast<int32_t>(Encoding::kPlain);
    h.definition_level_encoding = static_cast<int32_t>(Encoding::kRle);
    h.repetition_level_encoding = static_cast<int32_t>(Encoding::kRle);
    const std::string header = serialize_page_header(h);
    out += header;
    out += compressed;
    meta.num_values += static_cast<int64_t>(num_values);
    meta.total_uncompressed_size += static_cast<int64_t>(header.size() + page.size());
    row = end;
  } while (row < r1);
  meta.total_compressed_size = static_cast<int64_t>(out.size() - chunk_start);
  return meta;
}

}  // namespace

std::string write_table(const std::vector<ColumnSpec>& specs,
                        const std::vector<ColumnData>& columns, size_t rows,
                        const WriteOptions& options, const KeyValueList& metadata,
                        const std::function<KeyValueList(std::string_view)>& finish_body) {
  check_columns(specs, columns, rows);
  if (options.rows_per_group == 0) fail(kWhere, "rows_per_group must be at least 1");
  if (options.zstd_level < 0 || options.zstd_level > 22)
    fail(kWhere, "zstd level {} is outside 0..22", options.zstd_level);

  FileMetaData meta;
  meta.version = 2;
  meta.schema = build_schema(specs);
  meta.num_rows = static_cast<int64_t>(rows);
  meta.created_by = options.created_by;

  std::string out(kMagic, kMagicSize);
  for (size_t r0 = 0; r0 < rows; r0 += options.rows_per_group) {
    const size_t r1 = std::min(rows, r0 + options.rows_per_group);
    RowGroup group;
    group.num_rows = static_cast<int64_t>(r1 - r0);
    group.file_offset = static_cast<int64_t>(out.size());
    const size_t group_start = out.size();
    for (size_t k = 0; k < specs.size(); ++k) {
      ColumnChunk chunk;
      chunk.meta_data = write_chunk(specs[k], columns[k], r0, r1, options, out);
      chunk.file_offset = chunk.meta_data->data_page_offset;
      group.total_byte_size += chunk.meta_data->total_uncompressed_size;
      group.columns.push_back(std::move(chunk));
    }
    group.total_compressed_size = static_cast<int64_t>(out.size() - group_start);
    meta.row_groups.push_back(std::move(group));
  }

  meta.key_value_metadata = metadata;
  if (finish_body) {
    const KeyValueList extra = finish_body(out);
    meta.key_value_metadata.insert(meta.key_value_metadata.end(), extra.begin(), extra.end());
  }
  append_footer(out, meta);
  return out;
}

}  // namespace trellis::rollout::parquet
