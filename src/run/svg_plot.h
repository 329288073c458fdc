// SVG line plots for the run report: metric series against the step, drawn server-side as inline
// SVG (no script, no external resources) with axes, ticks, grid, axis labels and a legend.
//
// Geometry, so that callers and tests can locate a value: the plot area is the rectangle
// [kLeft, kWidth - kRight] x [kTop, kHeight - kBottom]; the x axis spans exactly the steps present
// (± 1 around a single step) and the y axis spans the "nice" tick range (see nice_axis) around the
// finite values. A point (step, value) is drawn at
//   x = kLeft + (step - x.lo) / (x.hi - x.lo) * plot width,
//   y = kTop + (y.hi - value) / (y.hi - y.lo) * plot height,
// printed with two decimals. Non-finite values break a line into segments; a segment of one point
// is drawn as a dot. Every polyline and dot carries data-series="<series id>".
#pragma once

#include <string>
#include <vector>

#include "run/metrics_history.h"

namespace trellis::run {

struct PlotFrame {
  static constexpr double kWidth = 760, kHeight = 280;
  static constexpr double kLeft = 72, kRight = 210, kTop = 14, kBottom = 46;  // legend on the right
  static constexpr double plot_width() { return kWidth - kLeft - kRight; }
  static constexpr double plot_height() { return kHeight - kTop - kBottom; }
};

struct PlotSeries {
  std::string id;     // data-series attribute: the metric name, or a name for a derived curve
  std::string label;  // legend text
  std::vector<Point> points;
  std::string color;  // any SVG colour; empty picks one from a palette by position
  bool dashed = false;
};

struct Plot {
  std::string title;    // aria-label of the figure
  std::string y_label;  // y axis label; the x axis is "step"
  std::vector<PlotSeries> series;
};

// An axis range and its tick positions.
struct Axis {
  double lo = 0, hi = 1;
  std::vector<double> ticks;
};

// The range from the largest multiple of a nice step (1, 2 or 5 × 10^k, about `target` ticks)
// at or below `lo` to the smallest at or above `hi`, and its ticks. lo == hi is widened first
// (by 10% of |lo|, or 1 around 0). E.g. [0.03, 0.97] -> [0, 1] with ticks 0, 0.2, ..., 1.
Axis nice_axis(double lo, double hi, int target = 5);

// The plot as an <svg> element (no XML namespace, as inline SVG in HTML5 needs none).
std::string render_svg(const Plot& plot);

}  // namespace trellis::run
