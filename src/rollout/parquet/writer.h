// Writes a table (ColumnSpecs + ColumnData) as one Parquet file in memory: row groups of
// `rows_per_group` rows, one column chunk per column and row group, data pages v1 of about
// kTargetPageBytes cut at row boundaries, PLAIN values, RLE levels for lists, zstd or no
// compression, footer key/value metadata. Every column is REQUIRED; lists are standard 3-level
// LISTs of REQUIRED elements.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rollout/parquet/column.h"

namespace trellis::rollout::parquet {

using KeyValueList = std::vector<std::pair<std::string, std::string>>;

inline constexpr size_t kTargetPageBytes = size_t{1} << 20;

struct WriteOptions {
  size_t rows_per_group = 1024;
  int zstd_level = 3;  // 0 = uncompressed pages
  std::string created_by = "trellis";
};

// Returns the file. `metadata` goes into the footer, followed by what `finish_body` returns when
// called with the body (every byte before the footer) once it is complete; `finish_body` may be
// empty. Error if the columns do not match the specs (wrong type, row counts, list offsets) or a
// string column holds invalid UTF-8.
std::string write_table(const std::vector<ColumnSpec>& specs,
                        const std::vector<ColumnData>& columns, size_t rows,
                        const WriteOptions& options, const KeyValueList& metadata,
                        const std::function<KeyValueList(std::string_view)>& finish_body);

}  // namespace trellis::rollout::parquet
