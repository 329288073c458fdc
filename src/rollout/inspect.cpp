#include "rollout/inspect.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>

#include "rollout/parquet/format.h"
#include "rollout/parquet/reader.h"
#include "rollout/parquet/rollout_columns.h"
#include "rollout/parquet/schema.h"
#include "rollout/rollout_file.h"

namespace trellis::rollout {
namespace {

constexpr size_t kMaxValueChars = 96;  // metadata values and strings are cut beyond this

std::string shorten(const std::string& s, size_t max = kMaxValueChars) {
  std::string out;
  for (char c : s.substr(0, max)) out += (static_cast<unsigned char>(c) < 0x20) ? '.' : c;
  if (s.size() > max) out += fmt::format("... ({} bytes)", s.size());
  return out;
}

// Mean, min and max of a series.
struct Stat {
  double sum = 0;
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  size_t n = 0;
  void add(double v) {
    sum += v;
    min = std::min(min, v);
    max = std::max(max, v);
    ++n;
  }
  std::string show() const {
    if (n == 0) return "-";
    return fmt::format("mean {:.4g}  min {:.4g}  max {:.4g}", sum / static_cast<double>(n), min,
                       max);
  }
};

std::string range_text(const std::set<int32_t>& s) {
  if (s.empty()) return "-";
  if (s.size() == 1) return std::to_string(*s.begin());
  return fmt::format("{}..{} ({} distinct)", *s.begin(), *s.rbegin(), s.size());
}

std::string list_preview(const std::vector<int32_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size() && i < 6; ++i) out += (i ? "," : "") + std::to_string(v[i]);
  if (v.size() > 6) out += ",...";
  return out + "]";
}

void schema_section(const parquet::FileMetaData& meta, std::string& out) {
  out += "schema:\n";
  out += fmt::format("  {:<20} {:<11} {:<14} {}\n", "column", "physical", "logical", "repetition");
  size_t e = 1;  // schema elements: root first, then each column's (1 or 3)
  for (const parquet::ColumnSpec& c : parquet::rollout_columns()) {
    const parquet::SchemaElement& top = meta.schema.at(e);
    const parquet::SchemaElement& leaf = meta.schema.at(c.list ? e + 2 : e);
    std::string repetition = parquet::repetition_name(top.repetition.value_or(0));
    if (c.list) repetition += ", elements " + parquet::repetition_name(leaf.repetition.value_or(0));
    out += fmt::format("  {:<20} {:<11} {:<14} {}\n", c.name,
                       parquet::type_name(leaf.type.value_or(-1)), parquet::logical_type_name(c),
                       repetition);
    e += c.list ? 3 : 1;
  }
}

void row_group_section(const parquet::FileMetaData& meta, std::string& out) {
  out += fmt::format("row groups: {}\n", meta.row_groups.size());
  for (size_t g = 0; g < meta.row_groups.size(); ++g) {
    const parquet::RowGroup& group = meta.row_groups[g];
    int64_t compressed = 0, uncompressed = 0;
    std::set<std::string> codecs, encodings;
    for (const parquet::ColumnChunk& chunk : group.columns) {
      if (!chunk.meta_data) continue;
      compressed += chunk.meta_data->total_compressed_size;
      uncompressed += chunk.meta_data->total_uncompressed_size;
      codecs.insert(parquet::codec_name(chunk.meta_data->codec));
      for (int32_t enc : chunk.meta_data->encodings) encodings.insert(parquet::encoding_name(enc));
    }
    out += fmt::format("  {}: {} rows, {} bytes ({} uncompressed), {}; encodings {}\n", g,
                       group.num_rows, compressed, uncompressed, fmt::join(codecs, "/"),
                       fmt::join(encodings, ", "));
  }
}

void summary_section(const RolloutFile& file, std::string& out) {
  Stat reward, task_reward, advantage, length_penalty, completion, prompt;
  std::map<std::string, size_t> finish;
  std::set<int32_t> steps, versions, submissions;
  std::set<std::pair<std::string, int32_t>> groups;
  std::set<std::string> runs, nodes;
  size_t proof_bytes = 0;
  for (const RolloutRecord& r : file.rows) {
    reward.add(r.reward);
    task_reward.add(r.task_reward);
    advantage.add(r.advantage);
    length_penalty.add(r.length_penalty);
    completion.add(static_cast<double>(r.completion_tokens.size()));
    prompt.add(static_cast<double>(r.prompt_tokens.size()));
    ++finish[r.finish_reason];
    steps.insert(r.step);
    submissions.insert(r.submission);
    versions.insert(r.token_versions.begin(), r.token_versions.end());
    groups.insert({r.run_id + "/" + std::to_string(r.step) + "/" + r.node_address, r.group_index});
    runs.insert(r.run_id);
    nodes.insert(r.node_address);
    proof_bytes += r.proof.size();
  }
  out += "summary:\n";
  out += fmt::format("  reward             {}\n", reward.show());
  out += fmt::format("  task_reward        {}\n", task_reward.show());
  out += fmt::format("  length_penalty     {}\n", length_penalty.show());
  out += fmt::format("  advantage          {}\n", advantage.show());
  out += fmt::format("  completion length  {}\n", completion.show());
  out += fmt::format("  prompt length      {}\n", prompt.show());
  std::string reasons;
  for (const auto& [reason, n] : finish)
    reasons += fmt::format("{}{} {}", reasons.empty() ? "" : ", ", reason, n);
  out += fmt::format("  finish reasons     {}\n", reasons.empty() ? "-" : reasons);
  out += fmt::format("  steps              {}\n", range_text(steps));
  out += fmt::format("  submissions        {}\n", range_text(submissions));
  out += fmt::format("  token versions     {}\n", range_text(versions));
  out += fmt::format("  groups             {}\n", groups.size());
  out += fmt::format("  runs               {}\n", fmt::join(runs, ", "));
  out += fmt::format("  nodes              {}\n", nodes.size());
  out += fmt::format("  proofs             {} bytes ({} chunk proofs)\n", proof_bytes,
                     proof_bytes / 258);
}

void rows_section(const RolloutFile& file, size_t show_rows, std::string& out) {
  const size_t n = std::min(show_rows, file.rows.size());
  if (n == 0) return;
  out += fmt::format("first {} of {} rows:\n", n, file.rows.size());
  out += fmt::format("  {:>4} {:>5} {:<18} {:>5} {:>4} {:>8} {:>8} {:>8} {:<6} {:>6} {:>6} {}\n",
                     "row", "group", "task_id", "step", "sub", "seed", "reward", "adv", "finish",
                     "prompt", "compl", "completion tokens");
  for (size_t i = 0; i < n; ++i) {
    const RolloutRecord& r = file.rows[i];
    out += fmt::format(
        "  {:>4} {:>5} {:<18} {:>5} {:>4} {:>8} {:>8.4g} {:>8.4g} {:<6} {:>6} {:>6} {}\n", i,
        r.group_index, shorten(r.task_id, 18), r.step, r.submission, r.seed, r.reward, r.advantage,
        r.finish_reason, r.prompt_tokens.size(), r.completion_tokens.size(),
        list_preview(r.completion_tokens));
  }
}

}  // namespace

std::string inspect_rollout_file(std::string_view bytes, const std::string& where,
                                 size_t show_rows) {
  const RolloutFile file = decode_rollout_file(bytes, where);
  const parquet::Footer footer = parquet::read_footer(bytes, where);
  const parquet::FileMetaData& meta = footer.meta;

  std::string out;
  out += fmt::format("file: {} ({} bytes, body {} bytes, footer {} bytes)\n", where, bytes.size(),
                     footer.body_size, bytes.size() - footer.body_size);
  out += fmt::format("created by: {}; format version {}\n",
                     meta.created_by.empty() ? "-" : shorten(meta.created_by), meta.version);
  out += fmt::format("rows: {}\n", file.rows.size());
  row_group_section(meta, out);
  schema_section(meta, out);
  out += fmt::format("metadata: {} keys\n", file.metadata.size());
  for (const auto& [key, value] : file.metadata)
    out += fmt::format("  {} = {}\n", shorten(key), shorten(value));
  summary_section(file, out);
  rows_section(file, show_rows, out);
  return out;
}

}  // namespace trellis::rollout
