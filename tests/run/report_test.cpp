// Run report: the page for a run directory shows plots for the metrics present and only those, at
// the right coordinates, escapes what it inserts, loads nothing from the network, survives
// cut-short and empty metrics, and replaces report.html atomically.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include <fmt/format.h>

#include "common/error.h"
#include "error_of.h"
#include "run/report.h"
#include "svg_points.h"
#include "temp_dir.h"

namespace trellis::run {
namespace {

namespace fs = std::filesystem;
using test::count_of;
using test::error_of;
using test::expected_pixel;
using test::polylines;
using test::RunTempDir;
using test::write_text;

const std::vector<double> kMean = {0.1, 0.3, 0.2, 0.9, 0.5};
const std::vector<double> kTask = {0.2, 0.4, 0.3, 1.0, 0.6};

// Five steps of reward, loss and mismatch, plus a key the report does not know.
std::string small_metrics() {
  std::string out;
  for (size_t i = 0; i < kMean.size(); ++i) {
    out += fmt::format(
        "{{\"step\":{},\"reward/mean\":{},\"reward/task\":{},\"loss\":{},\"mismatch/k3\":{},"
        "\"mismatch/masked_low_frac\":0.01,\"custom/thing\":{},\"time/step\":30}}\n",
        i, kMean[i], kTask[i], -0.01 * double(i), 0.05, 7 + i);
  }
  return out;
}

// The text of the <section id="plot-<id>"> in `html`, or "" when there is none.
std::string section(const std::string& html, const std::string& id) {
  size_t begin = html.find("<section class=\"plot\" id=\"plot-" + id + "\"");
  if (begin == std::string::npos) return "";
  return html.substr(begin, html.find("</section>", begin) - begin);
}

TEST(Report, PlotsExactlyTheGroupsWhoseMetricsArePresent) {
  RunTempDir dir;
  write_text(dir.path() / "metrics.jsonl", small_metrics());
  std::string html = render_report(dir.path()).html;
  for (const char* id : {"reward", "loss", "mismatch", "time"}) {
    EXPECT_NE(section(html, id), "") << id;
  }
  for (const char* id :
       {"length", "grad-norm", "entropy", "clipping", "staleness", "throughput", "mfu", "idle"}) {
    EXPECT_EQ(section(html, id), "") << id;
    EXPECT_EQ(html.find("#plot-" + std::string(id)), std::string::npos) << id;  // nor in the nav
  }
  // The mismatch plot has the two mismatch metrics logged, not the third.
  std::string mismatch = section(html, "mismatch");
  EXPECT_EQ(polylines(mismatch, "mismatch/k3").size(), 1u);
  EXPECT_EQ(polylines(mismatch, "mismatch/masked_low_frac").size(), 1u);
  EXPECT_EQ(mismatch.find("masked_high_frac"), std::string::npos);
  // The unknown key is listed, not plotted.
  EXPECT_NE(html.find("<td>custom/thing</td>"), std::string::npos);
  EXPECT_EQ(html.find("data-series=\"custom/thing\""), std::string::npos);
  // Summary: 5 steps, reward means (all five steps are both the first and last 10), total time.
  EXPECT_NE(html.find("<th>Steps logged</th><td class=\"num\">5</td>"), std::string::npos);
  EXPECT_NE(html.find("<td class=\"num\">0.4</td>"), std::string::npos);  // mean of kMean
  EXPECT_NE(html.find("2 min 30 s"), std::string::npos);                  // 5 × 30 s
}

// A decoupled run's pool metrics: samples generated, trained and dropped over the run, and the
// validation backlog, each in a plot, with generated / trained in the summary.
TEST(Report, ShowsWhatAdmissionControlKeptFromBeingGenerated) {
  RunTempDir dir;
  write_text(dir.path() / "metrics.jsonl",
             "{\"step\":0,\"samples/generated\":160,\"samples/trained\":128,"
             "\"samples/dropped\":0,\"validation/backlog_samples\":64,"
             "\"validation/judged_samples_per_s\":30}\n"
             "{\"step\":1,\"samples/generated\":288,\"samples/trained\":256,"
             "\"samples/dropped\":8,\"validation/backlog_samples\":0,"
             "\"validation/judged_samples_per_s\":40}\n");
  const std::string html = render_report(dir.path()).html;
  const std::string samples = section(html, "samples");
  ASSERT_NE(samples, "");
  for (const char* id : {"samples/generated", "samples/trained", "samples/dropped"})
    EXPECT_EQ(polylines(samples, id).size(), 1u) << id;
  EXPECT_EQ(polylines(section(html, "validation"), "validation/backlog_samples").size(), 1u);
  EXPECT_NE(html.find("<th>Samples generated / trained (admission control)</th><td "
                      "class=\"num\">288 / 256 = 1.125</td>"),
            std::string::npos)
      << html.substr(html.find("<section id=\"summary\">"), 1500);
}

TEST(Report, RewardCurvesLandAtTheirCoordinates) {
  RunTempDir dir;
  write_text(dir.path() / "metrics.jsonl", small_metrics());
  std::string reward = section(render_report(dir.path()).html, "reward");
  ASSERT_NE(reward, "");
  // Steps 0..4 on x; values 0.1..1.0 give the nice y range [0, 1].
  auto check = [&](const std::string& id, const std::vector<double>& values) {
    auto lines = polylines(reward, id);
    ASSERT_EQ(lines.size(), 1u) << id;
    ASSERT_EQ(lines[0].size(), values.size()) << id;
    for (size_t i = 0; i < values.size(); ++i) {
      auto [x, y] = expected_pixel(double(i), values[i], 0, 4, 0, 1);
      EXPECT_NEAR(lines[0][i].first, x, 0.006) << id << " step " << i;
      EXPECT_NEAR(lines[0][i].second, y, 0.006) << id << " step " << i;
    }
  };
  check("reward/mean", kMean);
  check("reward/task", kTask);
  // The 10-step moving average: with five steps, the running mean.
  std::vector<double> avg;
  double sum = 0;
  for (size_t i = 0; i < kMean.size(); ++i) avg.push_back((sum += kMean[i]) / double(i + 1));
  check("reward/mean:avg10", avg);
  EXPECT_NE(reward.find("mean (10-step avg)"), std::string::npos);
}

TEST(Report, ReferenceRewardIsOverlaidDashed) {
  RunTempDir dir;
  write_text(dir.path() / "metrics.jsonl", small_metrics());
  std::string html = render_report(dir.path()).html;
  EXPECT_EQ(html.find("single-process reference"), std::string::npos);

  write_text(dir.path() / "reference" / "metrics.jsonl",
             "{\"step\":0,\"reward/mean\":0.0}\n{\"step\":4,\"reward/mean\":0.8}\n");
  html = render_report(dir.path()).html;
  std::string reward = section(html, "reward");
  EXPECT_NE(reward.find(">single-process reference</text>"), std::string::npos);
  auto lines = polylines(reward, "reference:reward/mean");
  ASSERT_EQ(lines.size(), 1u);
  ASSERT_EQ(lines[0].size(), 2u);
  auto [x, y] = expected_pixel(4, 0.8, 0, 4, 0, 1);
  EXPECT_NEAR(lines[0][1].first, x, 0.006);
  EXPECT_NEAR(lines[0][1].second, y, 0.006);
  size_t at = reward.find("<polyline data-series=\"reference:reward/mean\"");
  EXPECT_NE(reward.substr(at, reward.find('>', at) - at).find("stroke-dasharray"),
            std::string::npos);
  EXPECT_NE(html.find("Single-process reference reward"), std::string::npos);
}

TEST(Report, EscapesRunNameConfigAndMetricNames) {
  RunTempDir parent;
  const std::string evil = "<img src=x onerror=alert(1)>\"'&run";
  fs::path dir = parent.path() / evil;
  write_text(dir / "metrics.jsonl",
             "{\"step\":0,\"<b>key</b>\":1,\"reward/mean\":0.5}\n{\"step\":1,\"<b>key</b>\":2}\n");
  write_text(dir / "config.toml", "[run]\nname = \"</pre><script>alert('x')</script>\"\n");
  std::string html = render_report(dir).html;
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("<b>key"), std::string::npos);
  EXPECT_EQ(count_of(html, "</pre>"), 1u);  // only the config block's own
  EXPECT_NE(html.find("&lt;img src=x onerror=alert(1)&gt;&quot;&#39;&amp;run"), std::string::npos);
  EXPECT_NE(html.find("&lt;/pre&gt;&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"),
            std::string::npos);
  EXPECT_NE(html.find("&lt;b&gt;key&lt;/b&gt;"), std::string::npos);
  EXPECT_NE(html.find("<details id=\"config\">"), std::string::npos);
}

TEST(Report, LoadsNothingFromTheNetwork) {
  RunTempDir dir;
  write_text(dir.path() / "metrics.jsonl", small_metrics());
  write_text(dir.path() / "config.toml", "[run]\nname = \"t\"\n");
  write_text(dir.path() / "reference" / "metrics.jsonl", "{\"step\":0,\"reward/mean\":0.1}\n");
  std::string html = render_report(dir.path()).html;
  EXPECT_EQ(html.find("http://"), std::string::npos);
  EXPECT_EQ(html.find("https://"), std::string::npos);
  EXPECT_EQ(html.find("src=\"//"), std::string::npos);
  EXPECT_EQ(html.find("href=\"//"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
  EXPECT_EQ(html.find("@import"), std::string::npos);
  EXPECT_EQ(html.find("url("), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);
}

TEST(Report, CutShortLastLineIsSkippedAndNamed) {
  RunTempDir dir;
  write_text(dir.path() / "metrics.jsonl", small_metrics() + "{\"step\":5,\"reward/me");
  Report report = render_report(dir.path());
  ASSERT_EQ(report.warnings.size(), 1u);
  EXPECT_NE(report.warnings[0].find("metrics.jsonl:6"), std::string::npos);
  EXPECT_NE(report.html.find("<section id=\"warnings\">"), std::string::npos);
  EXPECT_NE(report.html.find("metrics.jsonl:6"), std::string::npos);
  EXPECT_NE(report.html.find("<th>Steps logged</th><td class=\"num\">5</td>"), std::string::npos);
  EXPECT_EQ(polylines(section(report.html, "reward"), "reward/mean")[0].size(), 5u);
}

TEST(Report, EmptyOrMissingMetricsSayNoStepsYet) {
  RunTempDir dir;
  std::string html = render_report(dir.path()).html;  // no metrics.jsonl at all
  EXPECT_NE(html.find("id=\"no-steps\""), std::string::npos);
  EXPECT_EQ(html.find("<svg"), std::string::npos);
  write_text(dir.path() / "metrics.jsonl", "");
  html = render_report(dir.path()).html;
  EXPECT_NE(html.find("id=\"no-steps\""), std::string::npos);
  EXPECT_EQ(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("</html>"), std::string::npos);
  write_text(dir.path() / "metrics.jsonl", "{\"step\":0,\"los");  // only a cut-short line
  Report report = render_report(dir.path());
  EXPECT_NE(report.html.find("id=\"no-steps\""), std::string::npos);
  EXPECT_EQ(report.warnings.size(), 1u);
}

TEST(Report, SingleStepAndNonFiniteValues) {
  RunTempDir dir;
  write_text(
      dir.path() / "metrics.jsonl",
      "{\"step\":3,\"reward/mean\":0.5,\"loss\":null,\"entropy\":NaN,\"grad_norm\":1e999}\n");
  std::string html = render_report(dir.path()).html;
  std::string reward = section(html, "reward");
  EXPECT_TRUE(polylines(reward, "reward/mean").empty());
  EXPECT_NE(reward.find("<circle data-series=\"reward/mean\""), std::string::npos);
  // Logged but never finite: the plot is there, empty, with a note.
  for (const char* id : {"loss", "entropy", "grad-norm"}) {
    std::string s = section(html, id);
    EXPECT_NE(s, "") << id;
    EXPECT_NE(s.find("non-finite value"), std::string::npos) << id;
    EXPECT_EQ(s.find("data-series"), std::string::npos) << id;
  }
  EXPECT_FALSE(test::has_non_finite_text(html));
}

TEST(Report, WriteReplacesTheFileAtomically) {
  RunTempDir dir;
  write_text(dir.path() / "metrics.jsonl", small_metrics());
  write_text(dir.path() / "report.html", "old page");
  write_report(dir.path());
  std::string page;
  {
    std::ifstream in(dir.path() / "report.html");
    page.assign(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(page.substr(page.size() - 8), "</html>\n");
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path())) names.insert(e.path().filename());
  EXPECT_EQ(names, (std::set<std::string>{"metrics.jsonl", "report.html"}));  // no temp file left
}

TEST(Report, FailedWriteLeavesNoPartialFile) {
  RunTempDir dir;
  write_text(dir.path() / "metrics.jsonl", small_metrics());
  // report.html is a non-empty directory: the final rename must fail.
  write_text(dir.path() / "report.html" / "keep", "x");
  std::string err = error_of([&] { write_report(dir.path()); });
  EXPECT_NE(err.find("report.html"), std::string::npos) << err;
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path())) names.insert(e.path().filename());
  EXPECT_EQ(names, (std::set<std::string>{"metrics.jsonl", "report.html"}));
  EXPECT_TRUE(fs::exists(dir.path() / "report.html" / "keep"));
}

TEST(Report, NotADirectoryIsAnErrorNamingIt) {
  RunTempDir dir;
  std::string err = error_of([&] { write_report(dir.path() / "nope"); });
  EXPECT_NE(err.find("not a run directory"), std::string::npos) << err;
  EXPECT_NE(err.find("nope"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(dir.path() / "nope"));
}

}  // namespace
}  // namespace trellis::run
