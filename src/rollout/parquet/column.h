// The in-memory form of a table the Parquet writer takes and the reader returns: a fixed list of
// columns (ColumnSpec), each either one value per row or a list per row, with its values in one
// typed vector.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace trellis::rollout::parquet {

enum class ValueType { kInt32, kInt64, kFloat, kBytes };

// One top-level column. List columns are the standard 3-level LIST of `type` elements; `utf8`
// marks BYTE_ARRAY columns annotated as strings (the others are plain binary).
struct ColumnSpec {
  std::string name;
  ValueType type = ValueType::kInt32;
  bool utf8 = false;
  bool list = false;
};

using Values = std::variant<std::vector<int32_t>, std::vector<int64_t>, std::vector<float>,
                            std::vector<std::string>>;

struct ColumnData {
  Values values;
  // List columns: row r holds values [offsets[r], offsets[r + 1]); rows + 1 entries. Empty for
  // scalar columns (row r is values[r]).
  std::vector<uint64_t> offsets;
};

Values empty_values(ValueType type);
size_t value_count(const Values& values);
// The Parquet physical type (Type) of a ValueType.
int32_t physical_type(ValueType type);
const char* value_type_name(ValueType type);

}  // namespace trellis::rollout::parquet
