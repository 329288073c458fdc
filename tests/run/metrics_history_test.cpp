// Metrics history: metrics.jsonl read back per metric, with the damage a live or crashed run
// leaves (missing steps, partial keys, non-finite values, a cut-short last line) handled.
#include <gtest/gtest.h>

#include <cmath>

#include "run/metrics_history.h"
#include "temp_dir.h"

namespace trellis::run {
namespace {

using test::RunTempDir;
using test::write_text;

TEST(MetricsHistory, SeriesPerMetricSortedByStep) {
  RunTempDir dir;
  write_text(dir.path() / "m.jsonl",
             "{\"step\":3,\"loss\":0.3,\"reward/mean\":0.6}\n"
             "\n"
             "{\"step\":0,\"loss\":0.5,\"reward/mean\":0.1,\"note\":\"text\",\"flag\":true}\n"
             "{\"step\":1,\"loss\":0.4}\n");
  MetricsHistory h = read_metrics_history(dir.path() / "m.jsonl");
  EXPECT_TRUE(h.warnings.empty());
  EXPECT_EQ(h.steps, (std::vector<int64_t>{0, 1, 3}));
  ASSERT_EQ(h.at("loss").size(), 3u);
  EXPECT_EQ(h.at("loss")[0].step, 0);
  EXPECT_DOUBLE_EQ(h.at("loss")[0].value, 0.5);
  EXPECT_EQ(h.at("loss")[2].step, 3);
  ASSERT_EQ(h.at("reward/mean").size(), 2u);  // step 1 did not log it
  EXPECT_EQ(h.at("reward/mean")[1].step, 3);
  EXPECT_FALSE(h.has("note"));  // strings and booleans are not series
  EXPECT_FALSE(h.has("flag"));
  EXPECT_FALSE(h.has("step"));
  EXPECT_TRUE(h.at("absent").empty());
}

TEST(MetricsHistory, NullNaNAndInfinityBecomeNaN) {
  RunTempDir dir;
  write_text(dir.path() / "m.jsonl",
             "{\"step\":0,\"a\":null,\"b\":NaN,\"c\":Infinity,\"d\":-Infinity,\"e\":1.5,"
             "\"say \\\"NaN\\\" Infinity\":2}\n");
  MetricsHistory h = read_metrics_history(dir.path() / "m.jsonl");
  EXPECT_TRUE(h.warnings.empty()) << h.warnings.front();
  for (const char* k : {"a", "b", "c", "d"}) {
    ASSERT_EQ(h.at(k).size(), 1u) << k;
    EXPECT_TRUE(std::isnan(h.at(k)[0].value)) << k;
  }
  EXPECT_DOUBLE_EQ(h.at("e")[0].value, 1.5);
  // Tokens inside a string are left alone.
  ASSERT_TRUE(h.has("say \"NaN\" Infinity"));
  EXPECT_DOUBLE_EQ(h.at("say \"NaN\" Infinity")[0].value, 2);
}

TEST(MetricsHistory, CutShortLastLineIsSkippedWithAWarning) {
  RunTempDir dir;
  write_text(dir.path() / "m.jsonl",
             "{\"step\":0,\"loss\":1}\n{\"step\":1,\"loss\":2}\n{\"step\":2,\"lo");
  MetricsHistory h = read_metrics_history(dir.path() / "m.jsonl");
  EXPECT_EQ(h.steps, (std::vector<int64_t>{0, 1}));
  ASSERT_EQ(h.warnings.size(), 1u);
  EXPECT_NE(h.warnings[0].find("m.jsonl:3"), std::string::npos) << h.warnings[0];
  EXPECT_NE(h.warnings[0].find("last line"), std::string::npos) << h.warnings[0];
}

TEST(MetricsHistory, BadLinesAndRepeatedStepsAreNamed) {
  RunTempDir dir;
  write_text(dir.path() / "m.jsonl",
             "{\"step\":0,\"loss\":1}\n"
             "garbage\n"
             "{\"loss\":5}\n"
             "{\"step\":\"7\",\"loss\":5}\n"
             "[1,2]\n"
             "{\"step\":0,\"loss\":9}\n"
             "{\"step\":2.0,\"loss\":3}\n");
  MetricsHistory h = read_metrics_history(dir.path() / "m.jsonl");
  EXPECT_EQ(h.steps, (std::vector<int64_t>{0, 2}));
  ASSERT_EQ(h.at("loss").size(), 2u);
  EXPECT_DOUBLE_EQ(h.at("loss")[0].value, 9);  // the later line for step 0
  ASSERT_EQ(h.warnings.size(), 5u);
  EXPECT_NE(h.warnings[0].find(":2:"), std::string::npos) << h.warnings[0];
  EXPECT_NE(h.warnings[1].find(":3: no integer field 'step'"), std::string::npos);
  EXPECT_NE(h.warnings[2].find(":4: no integer field 'step'"), std::string::npos);
  EXPECT_NE(h.warnings[3].find(":5: not a JSON object"), std::string::npos);
  EXPECT_NE(h.warnings[4].find(":6: step 0 logged again"), std::string::npos);
}

TEST(MetricsHistory, MissingOrEmptyFileIsEmpty) {
  RunTempDir dir;
  EXPECT_TRUE(read_metrics_history(dir.path() / "none.jsonl").empty());
  write_text(dir.path() / "m.jsonl", "");
  MetricsHistory h = read_metrics_history(dir.path() / "m.jsonl");
  EXPECT_TRUE(h.empty());
  EXPECT_TRUE(h.series.empty());
  EXPECT_TRUE(h.warnings.empty());
}

}  // namespace
}  // namespace trellis::run
