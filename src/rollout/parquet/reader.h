// Reads a Parquet file whose schema must be exactly a given list of ColumnSpecs (schema.h says
// what is accepted) into ColumnData. Pages: dictionary pages, data pages v1 and v2; values PLAIN
// or dictionary-encoded (RLE_DICTIONARY / PLAIN_DICTIONARY); levels RLE; zstd or no compression.
// Everything else (other encodings and codecs, nulls, encryption, external column chunks,
// inconsistent counts, offsets outside the file, sizes above the limits below) is an Error naming
// the source, row group and column. Memory use is bounded by the file's real content and the
// limits, never by a length field alone.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "rollout/parquet/column.h"
#include "rollout/parquet/file_metadata.h"

namespace trellis::rollout::parquet {

inline constexpr size_t kMaxFooterBytes = size_t{64} << 20;
inline constexpr int64_t kMaxRows = int64_t{1} << 20;             // rows in one file
inline constexpr int64_t kMaxValuesPerColumn = int64_t{1} << 25;  // list elements, one column

// The footer of a Parquet file, checked for magic bytes and size only.
struct Footer {
  FileMetaData meta;
  size_t body_size = 0;  // bytes before the footer
};
Footer read_footer(std::string_view bytes, const std::string& where);

struct Table {
  std::vector<ColumnData> columns;  // in spec order; list columns have offsets
  size_t rows = 0;
  Footer footer;
};

Table read_table(std::string_view bytes, const std::vector<ColumnSpec>& specs,
                 const std::string& where);

}  // namespace trellis::rollout::parquet
