#include "rl/metrics_log.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/files.h"
#include "common/json.h"

namespace trellis::rl {

void Metrics::set(const std::string& name, double value) {
  for (auto& [n, v] : items_) {
    if (n == name) {
      v = value;
      return;
    }
  }
  items_.emplace_back(name, value);
}

bool Metrics::has(const std::string& name) const {
  for (const auto& [n, v] : items_)
    if (n == name) return true;
  return false;
}

double Metrics::get(const std::string& name) const {
  for (const auto& [n, v] : items_)
    if (n == name) return v;
  fail("metrics", "no metric '{}'", name);
}

void Metrics::append(const Metrics& other) {
  for (const auto& [n, v] : other.items_) set(n, v);
}

MetricsLog::MetricsLog(const std::filesystem::path& path, int64_t first_step) : path_(path) {
  if (!std::filesystem::exists(path)) return;
  std::istringstream in(read_file(path));
  std::string kept, line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    Json row;
    try {
      row = Json::parse(line);
    } catch (const Json::exception&) {
      continue;  // a line cut short by a crash
    }
    if (row.contains("step") && row["step"].is_number_integer() &&
        row["step"].get<int64_t>() >= first_step) {
      continue;
    }
    kept += line + "\n";
  }
  write_file_atomic(path, kept);
}

Json to_json(const Metrics& metrics) {
  Json out = Json::object();
  for (const auto& [name, value] : metrics.items()) {
    if (std::isfinite(value)) {
      out[name] = value;
    } else {
      out[name] = nullptr;
    }
  }
  return out;
}

void MetricsLog::write(int64_t step, const Metrics& metrics) {
  Json row = to_json(metrics);
  row["step"] = step;
  std::ofstream out(path_, std::ios::app);
  out << json_text(row) << "\n";
  out.flush();
  if (!out) fail(path_.string(), "cannot append metrics");
}

std::string console_line(int64_t step, int64_t steps, const Metrics& metrics,
                         const std::vector<ConsoleField>& fields) {
  std::string line = fmt::format("step {}/{}", step, steps);
  char buf[64];
  for (const auto& f : fields) {
    if (!metrics.has(f.name)) continue;
    std::snprintf(buf, sizeof buf, f.format, f.scale * metrics.get(f.name));
    line += fmt::format(" | {} {}", f.label, buf);
  }
  return line;
}

}  // namespace trellis::rl
