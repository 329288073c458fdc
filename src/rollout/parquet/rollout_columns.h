// The 19 columns of a rollout file (specs/rollout-format.md) as ColumnSpecs, in file order, and
// the conversion between RolloutRecords and column data.
#pragma once

#include <vector>

#include "rollout/parquet/column.h"
#include "rollout/rollout_record.h"

namespace trellis::rollout::parquet {

const std::vector<ColumnSpec>& rollout_columns();

std::vector<ColumnData> records_to_columns(const std::vector<RolloutRecord>& rows);

// Rows from columns shaped by rollout_columns() (as read_table returns them).
std::vector<RolloutRecord> columns_to_records(const std::vector<ColumnData>& columns, size_t rows);

}  // namespace trellis::rollout::parquet
