// Metrics history: a run's metrics.jsonl read back as one series of (step, value) points per
// metric name, for the run report. Tolerates what a live or crashed run leaves behind: missing
// steps, metrics logged only on some steps, null/NaN/Infinity values and a last line cut short.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace trellis::run {

// One logged value. `value` is NaN where the line held null, NaN or ±Infinity (the metrics log
// writes null for a non-finite number; Python writers write NaN/Infinity).
struct Point {
  double step;
  double value;
};

struct MetricsHistory {
  std::vector<int64_t> steps;                        // every logged step, ascending, unique
  std::map<std::string, std::vector<Point>> series;  // per numeric key (not "step"), by step;
                                                     // only the rows that carry the key
  std::vector<std::string> warnings;                 // lines skipped or replaced, "path:line: ..."

  bool empty() const { return steps.empty(); }
  bool has(const std::string& name) const { return series.count(name) > 0; }
  // The series of `name`, or an empty one when the metric was never logged.
  const std::vector<Point>& at(const std::string& name) const;
};

// Reads `path` (a missing file is an empty history). A line that is not a JSON object with an
// integer "step" is skipped with a warning (the usual case: the last line of a run that crashed
// mid-write); a step logged twice keeps its later line, with a warning. Keys whose values are not
// numbers or null (strings, lists, booleans) are ignored. Throws Error only when the file exists
// but cannot be read.
MetricsHistory read_metrics_history(const std::filesystem::path& path);

}  // namespace trellis::run
