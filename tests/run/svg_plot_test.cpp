// SVG plots: nice axes, values at the documented pixel positions, gaps at non-finite values,
// legends, escaping and bounded size.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "run/svg_plot.h"
#include "svg_points.h"

namespace trellis::run {
namespace {

using test::count_of;
using test::expected_pixel;
using test::polylines;

const double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(SvgPlot, NiceAxisCoversTheDataWithRoundTicks) {
  Axis a = nice_axis(0.03, 0.97);
  EXPECT_DOUBLE_EQ(a.lo, 0);
  EXPECT_DOUBLE_EQ(a.hi, 1);
  ASSERT_EQ(a.ticks.size(), 6u);
  for (size_t i = 0; i < a.ticks.size(); ++i) EXPECT_NEAR(a.ticks[i], 0.2 * double(i), 1e-12);

  Axis b = nice_axis(-0.013, 0.031);
  EXPECT_NEAR(b.lo, -0.02, 1e-12);
  EXPECT_NEAR(b.hi, 0.04, 1e-12);

  Axis c = nice_axis(17058, 17058);  // one value: widened by 10%
  EXPECT_LE(c.lo, 17058 * 0.9 + 1e-9);
  EXPECT_GE(c.hi, 17058 * 1.1 - 1e-9);
  EXPECT_LT(c.lo, c.hi);

  Axis z = nice_axis(0, 0);
  EXPECT_LE(z.lo, -1);
  EXPECT_GE(z.hi, 1);

  Axis huge = nice_axis(-1e308, 1e308);
  for (double t : huge.ticks) EXPECT_TRUE(std::isfinite(t));
  EXPECT_TRUE(std::isfinite(huge.lo) && std::isfinite(huge.hi));
}

TEST(SvgPlot, ValuesLandAtTheDocumentedPixels) {
  Plot plot{"Reward", "reward", {}};
  std::vector<Point> pts = {{10, 0.0}, {11, 0.25}, {12, 0.5}, {13, 1.0}, {14, 0.75}};
  plot.series.push_back({"reward/mean", "mean", pts, "", false});
  std::string svg = render_svg(plot);
  auto lines = polylines(svg, "reward/mean");
  ASSERT_EQ(lines.size(), 1u) << svg;
  ASSERT_EQ(lines[0].size(), pts.size());
  for (size_t i = 0; i < pts.size(); ++i) {
    // x spans the steps 10..14, y the nice range [0, 1].
    auto [x, y] = expected_pixel(pts[i].step, pts[i].value, 10, 14, 0, 1);
    EXPECT_NEAR(lines[0][i].first, x, 0.006) << i;
    EXPECT_NEAR(lines[0][i].second, y, 0.006) << i;
  }
  // The first point is the plot area's bottom-left corner, the highest its top.
  EXPECT_NEAR(lines[0][0].first, PlotFrame::kLeft, 0.006);
  EXPECT_NEAR(lines[0][0].second, PlotFrame::kHeight - PlotFrame::kBottom, 0.006);
  EXPECT_NEAR(lines[0][3].second, PlotFrame::kTop, 0.006);
  // Axis furniture.
  EXPECT_NE(svg.find(">step</text>"), std::string::npos);
  EXPECT_NE(svg.find(">reward</text>"), std::string::npos);
  EXPECT_NE(svg.find(">mean</text>"), std::string::npos);  // legend
  EXPECT_NE(svg.find(">0.2</text>"), std::string::npos);   // a y tick
  EXPECT_NE(svg.find(">12</text>"), std::string::npos);    // an x tick
}

TEST(SvgPlot, NonFiniteValuesBreakTheLineAndLonePointsAreDots) {
  Plot plot{"t", "y", {}};
  plot.series.push_back(
      {"m", "m", {{0, 1}, {1, 2}, {2, kNaN}, {3, 3}, {4, kNaN}, {5, 4}, {6, 5}}, "", false});
  std::string svg = render_svg(plot);
  auto lines = polylines(svg, "m");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].size(), 2u);
  EXPECT_EQ(lines[1].size(), 2u);
  EXPECT_EQ(count_of(svg, "<circle data-series=\"m\""), 1u);  // the lone value at step 3
  EXPECT_NE(svg.find(">0</text>"), std::string::npos);        // x tick at step 0, not "-0"
  EXPECT_EQ(svg.find(">-0"), std::string::npos);
  auto [x, y] = expected_pixel(3, 3, 0, 6, 1, 5);  // y: nice range [1, 5]
  EXPECT_NE(svg.find(fmt::format("cx=\"{:.2f}\" cy=\"{:.2f}\"", x, y)), std::string::npos) << svg;
  EXPECT_FALSE(test::has_non_finite_text(svg));
}

TEST(SvgPlot, SingleStepAndAllNaNStillDrawAxes) {
  Plot one{"t", "y", {{"m", "m", {{7, 0.5}}, "", false}}};
  std::string svg = render_svg(one);
  EXPECT_TRUE(polylines(svg, "m").empty());
  // x: ±1 step around 7; y: 0.5 ± 10% is [0.45, 0.55], nice (step 0.02) [0.44, 0.56].
  auto [x, y] = expected_pixel(7, 0.5, 6, 8, 0.44, 0.56);
  EXPECT_NE(svg.find(fmt::format("cx=\"{:.2f}\" cy=\"{:.2f}\"", x, y)), std::string::npos) << svg;

  Plot none{"t", "y", {{"m", "m", {{0, kNaN}, {1, kNaN}}, "", false}}};
  svg = render_svg(none);
  EXPECT_EQ(svg.find("data-series"), std::string::npos);
  EXPECT_NE(svg.find(">step</text>"), std::string::npos);
  EXPECT_FALSE(test::has_non_finite_text(svg));
}

TEST(SvgPlot, DashedSeriesLegendAndEscaping) {
  Plot plot{"<t>", "a&b", {}};
  plot.series.push_back({"x\"y", "<ref>", {{0, 1}, {1, 2}}, "", true});
  std::string svg = render_svg(plot);
  EXPECT_NE(svg.find("stroke-dasharray"), std::string::npos);
  EXPECT_NE(svg.find("&lt;ref&gt;"), std::string::npos);
  EXPECT_NE(svg.find("a&amp;b"), std::string::npos);
  EXPECT_NE(svg.find("aria-label=\"&lt;t&gt;\""), std::string::npos);
  EXPECT_NE(svg.find("data-series=\"x&quot;y\""), std::string::npos);
  EXPECT_EQ(svg.find("<ref>"), std::string::npos);
}

TEST(SvgPlot, LongSeriesAreDecimatedToThePlotWidth) {
  std::vector<Point> pts;
  for (int i = 0; i < 100000; ++i) pts.push_back({double(i), std::sin(i * 0.01)});
  std::string svg = render_svg(Plot{"t", "y", {{"m", "m", pts, "", false}}});
  auto lines = polylines(svg, "m");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_LE(lines[0].size(), size_t(4 * PlotFrame::plot_width() + 4));
  EXPECT_GT(lines[0].size(), size_t(PlotFrame::plot_width()));
  // The extremes survive: sin reaches ±1, the nice range is [-1, 1].
  double top = 1e9, bottom = -1e9;
  for (auto [x, y] : lines[0]) top = std::min(top, y), bottom = std::max(bottom, y);
  EXPECT_NEAR(top, PlotFrame::kTop, 0.05);
  EXPECT_NEAR(bottom, PlotFrame::kHeight - PlotFrame::kBottom, 0.05);
}

}  // namespace
}  // namespace trellis::run
