// The Parquet schema of a table of ColumnSpecs: building it for the writer, and checking a file's
// schema against the expected columns for the reader, which also derives each leaf column's
// maximum definition and repetition levels. Accepted: exactly the expected columns in order, each
// REQUIRED or OPTIONAL (DuckDB writes OPTIONAL), with the expected physical type and string/int
// annotations; list columns as the standard 3-level LIST.
#pragma once

#include <string>
#include <vector>

#include "rollout/parquet/column.h"
#include "rollout/parquet/file_metadata.h"

namespace trellis::rollout::parquet {

// How a leaf column's levels map to rows (see the Dremel encoding in the Parquet spec).
struct LeafLevels {
  int max_def = 0;    // 0..3
  int max_rep = 0;    // 0 or 1
  int empty_def = 0;  // list columns: the definition level of an empty list
  int value_def = 0;  // the definition level of a present value (= max_def)
};

// Schema elements (root first) of a file holding `columns`, all REQUIRED.
std::vector<SchemaElement> build_schema(const std::vector<ColumnSpec>& columns);

// Checks `schema` against `columns`; Error naming `where` and the column at fault otherwise.
// Returns the levels of each column's leaf, in order.
std::vector<LeafLevels> check_schema(const std::vector<SchemaElement>& schema,
                                     const std::vector<ColumnSpec>& columns,
                                     const std::string& where);

// A column's path_in_schema: {name} or {name, "list", "element"}.
std::vector<std::string> leaf_path(const ColumnSpec& column);

// "STRING", "LIST<INT32>", ... for messages and `trellis rollouts inspect`.
std::string logical_type_name(const ColumnSpec& column);

}  // namespace trellis::rollout::parquet
