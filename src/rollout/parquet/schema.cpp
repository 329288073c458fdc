#include "rollout/parquet/schema.h"

#include "common/error.h"
#include "rollout/parquet/format.h"

namespace trellis::rollout::parquet {
namespace {

constexpr int32_t kRequired = static_cast<int32_t>(Repetition::kRequired);
constexpr int32_t kOptional = static_cast<int32_t>(Repetition::kOptional);
constexpr int32_t kRepeated = static_cast<int32_t>(Repetition::kRepeated);

SchemaElement leaf_element(const ColumnSpec& c, const std::string& name) {
  SchemaElement e;
  e.type = physical_type(c.type);
  e.repetition = kRequired;
  e.name = name;
  if (c.utf8) {
    e.converted_type = static_cast<int32_t>(ConvertedType::kUtf8);
    e.logical = static_cast<int16_t>(LogicalKind::kString);
  }
  return e;
}

std::string describe(const SchemaElement& e) {
  std::string s = "'" + e.name + "'";
  if (e.type) s += " " + type_name(*e.type);
  if (e.converted_type) s += " " + converted_type_name(*e.converted_type);
  if (e.repetition) s += " " + repetition_name(*e.repetition);
  return s;
}

// Checks a leaf's physical type and annotations against the column's.
void check_leaf(const SchemaElement& e, const ColumnSpec& c, const std::string& at) {
  if (!e.type || *e.type != physical_type(c.type))
    fail(at, "column '{}' has physical type {}, expected {}", c.name,
         e.type ? type_name(*e.type) : std::string("none (a group)"),
         type_name(physical_type(c.type)));
  if (e.num_children && *e.num_children != 0)
    fail(at, "column '{}' is a group, expected a primitive", c.name);
  const auto logical = e.logical ? static_cast<LogicalKind>(*e.logical) : LogicalKind::kNone;
  const int32_t conv = e.converted_type.value_or(-1);
  bool ok = true;
  switch (c.type) {
    case ValueType::kBytes:
      if (c.utf8) {
        ok = (conv == -1 || conv == static_cast<int32_t>(ConvertedType::kUtf8)) &&
             (logical == LogicalKind::kNone || logical == LogicalKind::kString) &&
             (conv != -1 || logical != LogicalKind::kNone);
      } else {
        ok = conv == -1 && logical == LogicalKind::kNone;
      }
      break;
    case ValueType::kInt32:
    case ValueType::kInt64: {
      const bool is32 = c.type == ValueType::kInt32;
      const int32_t want =
          static_cast<int32_t>(is32 ? ConvertedType::kInt32 : ConvertedType::kInt64);
      ok = (conv == -1 || conv == want) &&
           (logical == LogicalKind::kNone || (logical == LogicalKind::kInteger && e.int_signed &&
                                              e.int_bit_width == (is32 ? 32 : 64)));
      break;
    }
    case ValueType::kFloat:
      ok = conv == -1 && logical == LogicalKind::kNone;
      break;
  }
  if (!ok)
    fail(at, "column '{}' has annotation {}{}, expected {}", c.name,
         conv == -1 ? std::string("none") : converted_type_name(conv),
         logical == LogicalKind::kNone ? std::string("")
                                       : " / logical type " + std::to_string(*e.logical),
         c.utf8 ? "STRING" : "none (plain " + std::string(value_type_name(c.type)) + ")");
}

// REQUIRED -> 0, OPTIONAL -> 1 extra definition level; anything else is refused.
int optional_levels(const SchemaElement& e, const std::string& column, const std::string& at) {
  if (!e.repetition) fail(at, "column '{}': schema element {} has no repetition", column, e.name);
  if (*e.repetition == kRequired) return 0;
  if (*e.repetition == kOptional) return 1;
  fail(at, "column '{}': schema element '{}' is {}, expected REQUIRED or OPTIONAL", column, e.name,
       repetition_name(*e.repetition));
}

}  // namespace

std::vector<SchemaElement> build_schema(const std::vector<ColumnSpec>& columns) {
  std::vector<SchemaElement> out;
  SchemaElement root;
  root.name = "schema";
  root.num_children = static_cast<int32_t>(columns.size());
  out.push_back(root);
  for (const ColumnSpec& c : columns) {
    if (!c.list) {
      out.push_back(leaf_element(c, c.name));
      continue;
    }
    SchemaElement outer;
    outer.name = c.name;
    outer.repetition = kRequired;
    outer.num_children = 1;
    outer.converted_type = static_cast<int32_t>(ConvertedType::kList);
    outer.logical = static_cast<int16_t>(LogicalKind::kList);
    SchemaElement middle;
    middle.name = "list";
    middle.repetition = kRepeated;
    middle.num_children = 1;
    out.push_back(outer);
    out.push_back(middle);
    out.push_back(leaf_element(c, "element"));
  }
  return out;
}

std::vector<LeafLevels> check_schema(const std::vector<SchemaElement>& schema,
                                     const std::vector<ColumnSpec>& columns,
                                     const std::string& where) {
  const std::string at = where + ", schema";
  if (schema.empty()) fail(at, "the schema is empty");
  const SchemaElement& root = schema[0];
  if (root.type || root.num_children.value_or(-1) != static_cast<int32_t>(columns.size()))
    fail(at, "the schema has {} top-level columns, expected {}", root.num_children.value_or(0),
         columns.size());
  std::vector<LeafLevels> leaves;
  size_t i = 1;
  const auto next = [&](const std::string& column) -> const SchemaElement& {
    if (i >= schema.size()) fail(at, "the schema ends inside column '{}'", column);
    return schema[i++];
  };
  for (size_t k = 0; k < columns.size(); ++k) {
    const ColumnSpec& c = columns[k];
    const SchemaElement& e = next(c.name);
    if (e.name != c.name) fail(at, "column {} is {}, expected '{}'", k, describe(e), c.name);
    LeafLevels lv;
    const int outer = optional_levels(e, c.name, at);
    if (!c.list) {
      check_leaf(e, c, at);
      lv.max_def = lv.value_def = outer;
      leaves.push_back(lv);
      continue;
    }
    // <name> (LIST) { repeated group list { <element> } }
    const auto logical = e.logical ? static_cast<LogicalKind>(*e.logical) : LogicalKind::kNone;
    const bool list_annotated =
        (e.converted_type.value_or(-1) == static_cast<int32_t>(ConvertedType::kList) ||
         logical == LogicalKind::kList) &&
        (!e.converted_type || *e.converted_type == static_cast<int32_t>(ConvertedType::kList)) &&
        (logical == LogicalKind::kNone || logical == LogicalKind::kList);
    if (e.type || e.num_children.value_or(0) != 1 || !list_annotated)
      fail(at, "column '{}' is {}, expected a LIST group with one child", c.name, describe(e));
    const SchemaElement& middle = next(c.name);
    if (middle.type || middle.num_children.value_or(0) != 1 ||
        middle.repetition.value_or(-1) != kRepeated || middle.name != "list")
      fail(at,
           "column '{}': the LIST's child is {}, expected a repeated group named 'list' with one "
           "child",
           c.name, describe(middle));
    const SchemaElement& element = next(c.name);
    const int inner = optional_levels(element, c.name, at);
    check_leaf(element, c, at);
    lv.max_rep = 1;
    lv.empty_def = outer;
    lv.max_def = lv.value_def = outer + 1 + inner;
    leaves.push_back(lv);
  }
  if (i != schema.size())
    fail(at, "the schema has {} elements after the expected columns", schema.size() - i);
  return leaves;
}

std::vector<std::string> leaf_path(const ColumnSpec& column) {
  if (column.list) return {column.name, "list", "element"};
  return {column.name};
}

std::string logical_type_name(const ColumnSpec& column) {
  std::string element = column.utf8 ? "STRING" : column.type == ValueType::kBytes ? "BINARY" : "";
  if (element.empty()) element = type_name(physical_type(column.type));
  return column.list ? "LIST<" + element + ">" : element;
}

}  // namespace trellis::rollout::parquet
