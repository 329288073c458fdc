// Reads a Parquet file whose schema must be exactly a given list of ColumnSpecs (schema.h says
// what is accepted) into ColumnData. Pages: dictionary pages, data pages v1 and v2; values PLAIN
// or dictionary-encoded (RLE_DICTIONARY / PLAIN_DICTIONARY); levels RLE; zstd or no compression.
// Everything else (other encodings and codecs, nulls, encryption, external column chunks,
// inconsistent counts, offsets outside the file, sizes above the decode budget) is an Error naming
// the source, row group and column. Every size a file declares or implies (footer, row groups,
// pages, decompressed bytes, levels, dictionary expansion, rows, list values) is charged to a
// DecodeBudget before anything is allocated for it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "rollout/parquet/budget.h"
#include "rollout/parquet/column.h"
#include "rollout/parquet/file_metadata.h"

namespace trellis::rollout::parquet {

// The footer of a Parquet file, checked for magic bytes and size only.
struct Footer {
  FileMetaData meta;
  size_t body_size = 0;  // bytes before the footer
};
// The first form uses the default DecodeBudget for a file of bytes.size(); the second charges
// the footer's size and contents to `meter`.
Footer read_footer(std::string_view bytes, const std::string& where);
Footer read_footer(std::string_view bytes, const std::string& where, BudgetMeter& meter);

struct Table {
  std::vector<ColumnData> columns;  // in spec order; list columns have offsets
  size_t rows = 0;
  Footer footer;
  uint64_t decoded_bytes = 0;  // what the decode charged to its budget (budget.h)
};

// Reads the whole file within `budget` (budget.h): Error naming the limit, the source, row group
// and column as soon as the file would exceed it, before the allocation that would.
Table read_table(std::string_view bytes, const std::vector<ColumnSpec>& specs,
                 const std::string& where, const DecodeBudget& budget = {});

}  // namespace trellis::rollout::parquet
