#include "rollout/parquet/rollout_columns.h"

#include <cstddef>
#include <functional>
#include <string>

namespace trellis::rollout::parquet {
namespace {

using Rows = std::vector<RolloutRecord>;

// How one column maps to a RolloutRecord member.
struct Binding {
  ColumnSpec spec;
  std::function<ColumnData(const Rows&)> put;
  std::function<void(const ColumnData&, Rows&)> get;
};

template <typename T>
Binding scalar(const char* name, ValueType type, T RolloutRecord::*member, bool utf8 = false) {
  Binding b;
  b.spec = ColumnSpec{name, type, utf8, false};
  b.put = [member](const Rows& rows) {
    std::vector<T> v;
    v.reserve(rows.size());
    for (const RolloutRecord& r : rows) v.push_back(r.*member);
    return ColumnData{std::move(v), {}};
  };
  b.get = [member](const ColumnData& c, Rows& rows) {
    const auto& v = std::get<std::vector<T>>(c.values);
    for (size_t i = 0; i < rows.size(); ++i) rows[i].*member = v[i];
  };
  return b;
}

template <typename T>
Binding list(const char* name, ValueType type, std::vector<T> RolloutRecord::*member) {
  Binding b;
  b.spec = ColumnSpec{name, type, false, true};
  b.put = [member](const Rows& rows) {
    ColumnData c{std::vector<T>{}, {0}};
    auto& v = std::get<std::vector<T>>(c.values);
    for (const RolloutRecord& r : rows) {
      v.insert(v.end(), (r.*member).begin(), (r.*member).end());
      c.offsets.push_back(v.size());
    }
    return c;
  };
  b.get = [member](const ColumnData& c, Rows& rows) {
    const auto& v = std::get<std::vector<T>>(c.values);
    for (size_t i = 0; i < rows.size(); ++i)
      (rows[i].*member)
          .assign(v.begin() + static_cast<std::ptrdiff_t>(c.offsets[i]),
                  v.begin() + static_cast<std::ptrdiff_t>(c.offsets[i + 1]));
  };
  return b;
}

const std::vector<Binding>& bindings() {
  using R = RolloutRecord;
  using VT = ValueType;
  static const std::vector<Binding> kBindings = {
      scalar("run_id", VT::kBytes, &R::run_id, true),
      scalar("node_address", VT::kBytes, &R::node_address, true),
      scalar("step", VT::kInt32, &R::step),
      scalar("submission", VT::kInt32, &R::submission),
      scalar("task_id", VT::kBytes, &R::task_id, true),
      scalar("group_index", VT::kInt32, &R::group_index),
      list("prompt_tokens", VT::kInt32, &R::prompt_tokens),
      list("completion_tokens", VT::kInt32, &R::completion_tokens),
      list("completion_logprobs", VT::kFloat, &R::completion_logprobs),
      list("token_versions", VT::kInt32, &R::token_versions),
      scalar("seed", VT::kInt64, &R::seed),
      scalar("temperature", VT::kFloat, &R::temperature),
      scalar("finish_reason", VT::kBytes, &R::finish_reason, true),
      scalar("reward", VT::kFloat, &R::reward),
      scalar("task_reward", VT::kFloat, &R::task_reward),
      scalar("length_penalty", VT::kFloat, &R::length_penalty),
      scalar("target_length", VT::kInt32, &R::target_length),
      scalar("advantage", VT::kFloat, &R::advantage),
      scalar("proof", VT::kBytes, &R::proof),
  };
  return kBindings;
}

}  // namespace

const std::vector<ColumnSpec>& rollout_columns() {
  static const std::vector<ColumnSpec> kColumns = [] {
    std::vector<ColumnSpec> out;
    for (const Binding& b : bindings()) out.push_back(b.spec);
    return out;
  }();
  return kColumns;
}

std::vector<ColumnData> records_to_columns(const std::vector<RolloutRecord>& rows) {
  std::vector<ColumnData> out;
  for (const Binding& b : bindings()) out.push_back(b.put(rows));
  return out;
}

std::vector<RolloutRecord> columns_to_records(const std::vector<ColumnData>& columns, size_t rows) {
  std::vector<RolloutRecord> out(rows);
  for (size_t k = 0; k < bindings().size(); ++k) bindings()[k].get(columns[k], out);
  return out;
}

}  // namespace trellis::rollout::parquet
