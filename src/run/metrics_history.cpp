#include "run/metrics_history.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string_view>

#include "common/files.h"
#include "common/json.h"

namespace trellis::run {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// `line` with the bare tokens NaN, Infinity and -Infinity and numbers too large for a double
// (1e999), all outside strings, replaced by null: lines that Python's json module writes, and
// that nlohmann rejects. nullopt when there are none.
std::optional<std::string> nulled_non_finite(std::string_view line) {
  std::string out;
  bool in_string = false, changed = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < line.size()) {
        out += line[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') in_string = true;
    if (c == '-' || (c >= '0' && c <= '9')) {
      size_t end = line.find_first_not_of("+-0123456789.eE", i);
      if (end == std::string_view::npos) end = line.size();
      std::string number(line.substr(i, end - i));
      if (!std::isfinite(std::strtod(number.c_str(), nullptr))) {
        out += "null";
        i = end - 1;
        changed = true;
        continue;
      }
      if (end > i + 1 || c != '-') {  // a lone '-' may begin -Infinity
        out += number;
        i = end - 1;
        continue;
      }
    }
    bool replaced = false;
    for (std::string_view token : {"-Infinity", "Infinity", "NaN"}) {
      if (line.substr(i, token.size()) == token) {
        out += "null";
        i += token.size() - 1;
        replaced = changed = true;
        break;
      }
    }
    if (!replaced) out += c;
  }
  if (!changed) return std::nullopt;
  return out;
}

std::optional<Json> parse_line(std::string_view line) {
  try {
    return Json::parse(line);
  } catch (const Json::exception&) {
  }
  if (auto fixed = nulled_non_finite(line)) {
    try {
      return Json::parse(*fixed);
    } catch (const Json::exception&) {
    }
  }
  return std::nullopt;
}

// The row's step, or nullopt when "step" is missing or not an integer (3.0 counts as 3).
std::optional<int64_t> step_of(const Json& row) {
  if (!row.contains("step")) return std::nullopt;
  const Json& s = row["step"];
  if (json_integer_in(s, INT64_MIN / 2, INT64_MAX / 2)) return s.get<int64_t>();
  if (s.is_number_float()) {
    double d = s.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 1e15) return int64_t(d);
  }
  return std::nullopt;
}

}  // namespace

const std::vector<Point>& MetricsHistory::at(const std::string& name) const {
  static const std::vector<Point> kNone;
  auto it = series.find(name);
  return it == series.end() ? kNone : it->second;
}

MetricsHistory read_metrics_history(const std::filesystem::path& path) {
  MetricsHistory history;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return history;
  const std::string text = read_file(path);
  const std::string where = path.string();

  std::map<int64_t, Json> rows;  // by step; a later line for the same step wins
  size_t line_no = 0, begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    bool last = end == std::string::npos;
    if (last) end = text.size();
    std::string_view line(text.data() + begin, end - begin);
    begin = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    auto loc = fmt::format("{}:{}", where, line_no);
    std::optional<Json> row = parse_line(line);
    if (!row || !row->is_object()) {
      history.warnings.push_back(
          fmt::format("{}: {}; line skipped", loc,
                      !row && last ? "last line is not complete JSON (cut short by a crash?)"
                                   : (row ? "not a JSON object" : "not valid JSON")));
      continue;
    }
    std::optional<int64_t> step = step_of(*row);
    if (!step) {
      history.warnings.push_back(fmt::format("{}: no integer field 'step'; line skipped", loc));
      continue;
    }
    if (rows.count(*step)) {
      history.warnings.push_back(
          fmt::format("{}: step {} logged again; the later line is used", loc, *step));
    }
    rows[*step] = std::move(*row);
  }

  for (const auto& [step, row] : rows) {
    history.steps.push_back(step);
    for (const auto& [key, value] : row.items()) {
      if (key == "step") continue;
      if (value.is_null()) {
        history.series[key].push_back({double(step), kNaN});
      } else if (value.is_number()) {
        double v = value.get<double>();
        history.series[key].push_back({double(step), std::isfinite(v) ? v : kNaN});
      }
    }
  }
  return history;
}

}  // namespace trellis::run
