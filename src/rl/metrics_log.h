// Metrics log: per-step metrics (specs/rl.md §8 names) as one JSON object per line in
// metrics.jsonl, and the one-line console summary PRIME-RL users expect.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "common/json.h"

namespace trellis::rl {

// Ordered name -> value pairs, as they appear on the console line (metrics.jsonl sorts its keys).
class Metrics {
 public:
  void set(const std::string& name, double value);
  double get(const std::string& name) const;  // Error if absent
  bool has(const std::string& name) const;
  const std::vector<std::pair<std::string, double>>& items() const { return items_; }
  void append(const Metrics& other);  // set() each of other's

 private:
  std::vector<std::pair<std::string, double>> items_;
};

// The metrics as a JSON object, a non-finite value as null (JSON has no NaN or infinity).
Json to_json(const Metrics& metrics);

class MetricsLog {
 public:
  // Opens `path` for appending. Lines of steps >= first_step (left by a run that crashed after
  // its last checkpoint) are dropped first, so a resumed run never logs a step twice.
  MetricsLog(const std::filesystem::path& path, int64_t first_step = 0);
  void write(int64_t step, const Metrics& metrics);  // {"step": s, ...} and a flush

 private:
  std::filesystem::path path_;
};

// "step 12/100 | reward 0.431 | ..." with the named metrics that are present; each entry of
// `fields` is {metric name, label, printf format, factor applied first (100 for percent)}.
struct ConsoleField {
  const char* name;
  const char* label;
  const char* format;
  double scale = 1.0;
};
std::string console_line(int64_t step, int64_t steps, const Metrics& metrics,
                         const std::vector<ConsoleField>& fields);

}  // namespace trellis::rl
