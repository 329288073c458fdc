// Run report: report.html in a run directory, one self-contained page that opens offline with
// JavaScript disabled (inline CSS and server-side SVG, no external resources). It shows the run's
// name, steps and resolved config.toml, a summary table, and one plot per metric group of
// metrics.jsonl (reward with a 10-step moving average, completion length, loss, grad norm,
// entropy, mismatch, clipping, staleness, throughput, MFU, step time, trainer idle fraction);
// groups whose metrics were never logged are left out. When reference/metrics.jsonl exists, its
// reward is overlaid dashed as the "single-process reference", to compare a distributed run with
// the single-process loop.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace trellis::run {

struct Report {
  std::string html;
  std::vector<std::string> warnings;  // skipped metrics lines ("path:line: why"), also on the page
};

// The page for `run_dir` (a missing or empty metrics.jsonl gives a page saying no steps yet).
// Throws Error when run_dir is not a directory or one of its files cannot be read.
Report render_report(const std::filesystem::path& run_dir);

// Writes render_report(run_dir) to run_dir/report.html atomically (readers see the old page or
// the whole new one) and logs its warnings.
void write_report(const std::filesystem::path& run_dir);

}  // namespace trellis::run
