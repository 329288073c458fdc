#include "rollout/parquet/column.h"

#include "rollout/parquet/format.h"

namespace trellis::rollout::parquet {

Values empty_values(ValueType type) {
  switch (type) {
    case ValueType::kInt32:
      return std::vector<int32_t>{};
    case ValueType::kInt64:
      return std::vector<int64_t>{};
    case ValueType::kFloat:
      return std::vector<float>{};
    case ValueType::kBytes:
      return std::vector<std::string>{};
  }
  return std::vector<int32_t>{};
}

size_t value_count(const Values& values) {
  return std::visit([](const auto& v) { return v.size(); }, values);
}

int32_t physical_type(ValueType type) {
  switch (type) {
    case ValueType::kInt32:
      return static_cast<int32_t>(Type::kInt32);
    case ValueType::kInt64:
      return static_cast<int32_t>(Type::kInt64);
    case ValueType::kFloat:
      return static_cast<int32_t>(Type::kFloat);
    case ValueType::kBytes:
      return static_cast<int32_t>(Type::kByteArray);
  }
  return -1;
}

const char* value_type_name(ValueType type) {
  switch (type) {
    case ValueType::kInt32:
      return "int32";
    case ValueType::kInt64:
      return "int64";
    case ValueType::kFloat:
      return "float";
    case ValueType::kBytes:
      return "binary";
  }
  return "?";
}

}  // namespace trellis::rollout::parquet
