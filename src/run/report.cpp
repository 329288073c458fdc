#include "run/report.h"

#include <chrono>
#include <cmath>
#include <ctime>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "common/logging.h"
#include "run/html.h"
#include "run/metrics_history.h"
#include "run/statistics.h"
#include "run/svg_plot.h"

namespace trellis::run {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kWindow = 10;  // steps in the moving average and the summary's first/last means

struct SeriesSpec {
  const char* metric;
  const char* label;
};

struct GroupSpec {
  const char* id;  // the section's id: plot-<id>
  const char* title;
  const char* y_label;
  std::vector<SeriesSpec> series;
};

// The plots, in page order. Metrics of very different scales (tokens/s and MFU, seconds and the
// idle fraction) get plots of their own so that neither is flattened against the axis.
const std::vector<GroupSpec>& groups() {
  static const std::vector<GroupSpec> kGroups = {
      {"reward", "Reward", "reward", {{"reward/mean", "mean"}, {"reward/task", "task"}}},
      {"length", "Completion length", "tokens", {{"seq_len/mean", "mean"}, {"seq_len/max", "max"}}},
      {"loss", "Loss", "loss", {{"loss", "loss"}}},
      {"grad-norm", "Gradient norm", "grad norm", {{"grad_norm", "grad norm"}}},
      {"entropy", "Entropy", "entropy (nats)", {{"entropy", "entropy"}}},
      {"mismatch",
       "Trainer/inference mismatch",
       "k3 KL / token fraction",
       {{"mismatch/k3", "k3 KL"},
        {"mismatch/masked_low_frac", "masked low frac"},
        {"mismatch/masked_high_frac", "masked high frac"}}},
      {"clipping",
       "Clipping",
       "token fraction",
       {{"clip/low_frac", "low"}, {"clip/high_frac", "high"}, {"clip/delta_frac", "delta"}}},
      {"staleness",
       "Staleness",
       "policy versions behind",
       {{"staleness/mean", "mean"}, {"staleness/max", "max"}}},
      {"throughput",
       "Throughput",
       "tokens/s",
       {{"throughput/rollout_tok_s", "rollout tok/s"}, {"throughput/train_tok_s", "train tok/s"}}},
      {"mfu", "Model FLOPs utilization", "MFU", {{"throughput/mfu", "MFU"}}},
      {"time",
       "Time per step",
       "seconds",
       {{"time/step", "step"}, {"time/wait_for_data", "wait for data"}}},
      {"idle", "Trainer idle fraction", "fraction", {{"trainer/idle_frac", "trainer idle"}}},
      {"submissions",
       "Submissions (accepted, rejected by the orchestrator or a validator, waiting for a verdict)",
       "files",
       {{"submissions/accepted", "accepted"},
        {"submissions/rejected", "rejected"},
        {"submissions/validating", "validating"}}},
  };
  return kGroups;
}

const char* const kStyle = R"(
body { font: 14px/1.45 system-ui, sans-serif; color: #222; max-width: 820px; margin: 24px auto;
       padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 4px; word-break: break-all; }
h2 { font-size: 17px; margin: 28px 0 6px; }
table { border-collapse: collapse; }
td, th { padding: 3px 12px 3px 0; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr + tr td, tr + tr th { border-top: 1px solid #eee; }
pre { background: #f6f6f6; padding: 10px; overflow: auto; font-size: 12px; }
.meta { color: #555; margin: 0; }
.note { color: #666; font-size: 12px; margin: 2px 0; }
.warn { color: #8a4b00; }
nav a { margin-right: 10px; }
svg.plot { max-width: 100%; height: auto; }
)";

std::string text(std::string_view s) { return html_escape(json_safe_text(s)); }

std::string number(double v) {
  if (!std::isfinite(v)) return "n/a";
  return fmt::format("{:.4g}", v);
}

std::string duration(double seconds) {
  if (!std::isfinite(seconds)) return "n/a";
  if (seconds < 60) return fmt::format("{:.1f} s", seconds);
  auto total = int64_t(std::llround(seconds));
  if (total < 3600) return fmt::format("{} min {:02} s", total / 60, total % 60);
  return fmt::format("{} h {:02} min {:02} s", total / 3600, total % 3600 / 60, total % 60);
}

std::string utc(std::time_t t) {
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

std::string utc_mtime(const fs::path& path) {
  std::error_code ec;
  auto t = fs::last_write_time(path, ec);
  if (ec) return "n/a";
  return utc(std::chrono::system_clock::to_time_t(std::chrono::file_clock::to_sys(t)));
}

// The run's name: the last component of its directory, however the path was spelled.
std::string run_name(const fs::path& run_dir) {
  fs::path p = fs::absolute(run_dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

// The reward metric the summary and the reference overlay use: reward/mean, else reward/task.
const char* reward_metric(const MetricsHistory& h) {
  return h.has("reward/mean") || !h.has("reward/task") ? "reward/mean" : "reward/task";
}

size_t non_finite(const std::vector<Point>& points) {
  size_t n = 0;
  for (const Point& p : points) n += !std::isfinite(p.value);
  return n;
}

std::string header(const std::string& name, const fs::path& run_dir, const MetricsHistory& h) {
  std::string out = fmt::format("<h1>Run report: {}</h1>\n", text(name));
  if (h.empty()) {
    out += "<p class=\"meta\">Steps: none logged yet</p>\n";
  } else {
    int64_t first = h.steps.front(), last = h.steps.back();
    int64_t missing = last - first + 1 - int64_t(h.steps.size());
    out += fmt::format("<p class=\"meta\">Steps: {} logged, step {} to {}{}</p>\n", h.steps.size(),
                       first, last, missing > 0 ? fmt::format(" ({} missing)", missing) : "");
  }
  // Metrics carry no wall-clock time unless a writer adds "timestamp" (Unix seconds); otherwise
  // the file's modification time tells when the last step was logged.
  const auto& ts = h.at("timestamp");
  double t0 = NAN, t1 = last_finite(ts);
  for (const Point& p : ts)
    if (std::isfinite(p.value)) {
      t0 = p.value;
      break;
    }
  if (std::isfinite(t0) && std::isfinite(t1) && std::fabs(t0) < 1e12 && std::fabs(t1) < 1e12) {
    out += fmt::format("<p class=\"meta\">Metrics: {} to {}</p>\n", utc(std::time_t(t0)),
                       utc(std::time_t(t1)));
  } else if (fs::exists(run_dir / "metrics.jsonl")) {
    out += fmt::format("<p class=\"meta\">Metrics: metrics.jsonl last written {}</p>\n",
                       utc_mtime(run_dir / "metrics.jsonl"));
  }
  out += fmt::format("<p class=\"meta\">Directory: {}</p>\n",
                     text(fs::absolute(run_dir).lexically_normal().string()));
  return out;
}

std::string config_section(const fs::path& run_dir) {
  const fs::path path = run_dir / "config.toml";
  if (!fs::exists(path)) return "<p class=\"note\">No config.toml in the run directory.</p>\n";
  return fmt::format(
      "<details id=\"config\"><summary>Resolved configuration (config.toml)</summary>"
      "<pre>{}</pre></details>\n",
      text(read_file(path)));
}

std::string warnings_section(const std::vector<std::string>& warnings) {
  if (warnings.empty()) return "";
  std::string out = "<section id=\"warnings\"><h2>Warnings</h2><ul class=\"warn\">\n";
  for (const auto& w : warnings) out += fmt::format("<li>{}</li>\n", text(w));
  return out + "</ul></section>\n";
}

std::string summary_section(const MetricsHistory& h, const MetricsHistory* reference) {
  int64_t first = h.steps.front(), last = h.steps.back();
  std::string rows;
  auto row = [&](const std::string& what, const std::string& value) {
    rows += fmt::format("<tr><th>{}</th><td class=\"num\">{}</td></tr>\n", what, value);
  };
  row("Steps logged", fmt::format("{}", h.steps.size()));
  const char* reward = reward_metric(h);
  if (h.has(reward)) {
    double a = window_mean(h.at(reward), double(first), double(first + kWindow - 1));
    double b = window_mean(h.at(reward), double(last - kWindow + 1), double(last));
    row(fmt::format("Reward ({}), mean of steps {}&ndash;{}", text(reward), first,
                    std::min(last, first + kWindow - 1)),
        number(a));
    row(fmt::format("Reward ({}), mean of steps {}&ndash;{}", text(reward),
                    std::max(first, last - kWindow + 1), last),
        number(b));
    row("Reward change (last &minus; first)", number(b - a));
  }
  if (reference && !reference->empty()) {
    const char* ref_reward = reward_metric(*reference);
    int64_t rlast = reference->steps.back();
    row(fmt::format("Single-process reference reward, mean of steps {}&ndash;{}",
                    std::max(reference->steps.front(), rlast - kWindow + 1), rlast),
        number(window_mean(reference->at(ref_reward), double(rlast - kWindow + 1), double(rlast))));
  }
  if (h.has("seq_len/mean")) {
    row("Final completion length (seq_len/mean, tokens)",
        number(last_finite(h.at("seq_len/mean"))));
  }
  if (h.has("time/step")) {
    row("Total step time (sum of time/step)", duration(finite_sum(h.at("time/step"))));
  }
  return "<section id=\"summary\"><h2>Summary</h2><table>\n" + rows + "</table></section>\n";
}

std::string plot_section(const GroupSpec& group, const MetricsHistory& h,
                         const MetricsHistory* reference) {
  Plot plot{group.title, group.y_label, {}};
  for (const SeriesSpec& s : group.series) {
    if (h.has(s.metric)) plot.series.push_back({s.metric, s.label, h.at(s.metric), "", false});
  }
  if (plot.series.empty()) return "";
  std::string notes;
  for (const PlotSeries& s : plot.series) {
    if (size_t n = non_finite(s.points)) {
      notes += fmt::format(
          "<p class=\"note\">{}: {} non-finite value{} not drawn; "
          "the line breaks there.</p>\n",
          text(s.id), n, n == 1 ? "" : "s");
    }
  }
  if (std::string_view(group.id) == "reward") {
    const char* reward = reward_metric(h);
    if (h.has(reward)) {
      plot.series.push_back(
          {std::string(reward) + ":avg10",
           fmt::format("{} ({}-step avg)", reward == std::string("reward/mean") ? "mean" : "task",
                       kWindow),
           moving_average(h.at(reward), kWindow), "#000000", false});
    }
    if (reference && reference->has(reward_metric(*reference))) {
      plot.series.push_back({"reference:" + std::string(reward_metric(*reference)),
                             "single-process reference", reference->at(reward_metric(*reference)),
                             "#7f7f7f", true});
    }
  }
  return fmt::format("<section class=\"plot\" id=\"plot-{}\"><h2>{}</h2>\n{}{}</section>\n",
                     group.id, text(group.title), render_svg(plot), notes);
}

std::string other_metrics_section(const MetricsHistory& h) {
  std::set<std::string> plotted = {"timestamp"};
  for (const GroupSpec& g : groups())
    for (const SeriesSpec& s : g.series) plotted.insert(s.metric);
  std::string rows;
  for (const auto& [name, points] : h.series) {
    if (plotted.count(name)) continue;
    double lo = NAN, hi = NAN;
    for (const Point& p : points) {
      if (!std::isfinite(p.value)) continue;
      lo = std::isfinite(lo) ? std::min(lo, p.value) : p.value;
      hi = std::isfinite(hi) ? std::max(hi, p.value) : p.value;
    }
    rows += fmt::format(
        "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
        "<td class=\"num\">{}</td><td class=\"num\">{}</td></tr>\n",
        text(name), points.size(), number(lo), number(hi), number(last_finite(points)));
  }
  if (rows.empty()) return "";
  return "<section id=\"other-metrics\"><h2>Other metrics</h2><table>\n"
         "<tr><th>metric</th><th>steps</th><th>min</th><th>max</th><th>last</th></tr>\n" +
         rows + "</table></section>\n";
}

}  // namespace

Report render_report(const fs::path& run_dir) {
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) throw Error("not a run directory", run_dir.string());
  Report report;
  MetricsHistory h = read_metrics_history(run_dir / "metrics.jsonl");
  report.warnings = h.warnings;
  std::optional<MetricsHistory> reference;
  if (fs::exists(run_dir / "reference" / "metrics.jsonl")) {
    reference = read_metrics_history(run_dir / "reference" / "metrics.jsonl");
    report.warnings.insert(report.warnings.end(), reference->warnings.begin(),
                           reference->warnings.end());
  }
  const MetricsHistory* ref = reference ? &*reference : nullptr;

  const std::string name = run_name(run_dir);
  std::string& out = report.html;
  out = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      "<title>Trellis run report: {}</title>\n<style>{}</style>\n</head>\n<body>\n<header>\n",
      text(name), kStyle);
  out += header(name, run_dir, h);
  out += config_section(run_dir);
  out += "</header>\n";
  out += warnings_section(report.warnings);
  if (h.empty()) {
    out +=
        "<p id=\"no-steps\">No steps logged yet: metrics.jsonl is missing or holds no "
        "complete line. Run <code>trellis report</code> again once the trainer has logged a "
        "step.</p>\n";
  } else {
    out += summary_section(h, ref);
    std::string plots, nav;
    for (const GroupSpec& g : groups()) {
      std::string section = plot_section(g, h, ref);
      if (section.empty()) continue;
      plots += section;
      nav += fmt::format("<a href=\"#plot-{}\">{}</a>\n", g.id, text(g.title));
    }
    if (!nav.empty()) out += "<nav>\n" + nav + "</nav>\n";
    out += plots;
    out += other_metrics_section(h);
  }
  out += fmt::format(
      "<footer><p class=\"note\">Generated by trellis report at {}.</p></footer>\n"
      "</body>\n</html>\n",
      utc(std::time(nullptr)));
  return report;
}

void write_report(const fs::path& run_dir) {
  Report report = render_report(run_dir);
  for (const auto& w : report.warnings) log::warn("{}", w);
  write_file_atomic(run_dir / "report.html", report.html);
}

}  // namespace trellis::run
