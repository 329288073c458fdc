// Test helpers that read plots back out of SVG/HTML text: the points of each polyline of a series,
// and where a value should land according to the geometry documented in run/svg_plot.h.
#pragma once

#include <cstdio>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "run/svg_plot.h"

namespace trellis::test {

using XY = std::pair<double, double>;

// The points of every <polyline data-series="id" ...> in `text`, one vector per polyline.
inline std::vector<std::vector<XY>> polylines(const std::string& text, const std::string& id) {
  std::vector<std::vector<XY>> out;
  const std::regex re("<polyline data-series=\"" + id + "\"[^>]*points=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator();
       ++it) {
    std::vector<XY> points;
    std::string pts = (*it)[1];
    const std::regex pair_re("(-?[0-9.]+),(-?[0-9.]+)");
    for (auto p = std::sregex_iterator(pts.begin(), pts.end(), pair_re);
         p != std::sregex_iterator(); ++p) {
      points.emplace_back(std::stod((*p)[1]), std::stod((*p)[2]));
    }
    out.push_back(points);
  }
  return out;
}

inline size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Whether `text` holds a printed NaN or infinity ("nan", "-inf", "Infinity" as a word), as a
// coordinate or label computed from a non-finite value would.
inline bool has_non_finite_text(const std::string& text) {
  static const std::regex re("(^|[^A-Za-z])-?(nan|inf|infinity)([^A-Za-z]|$)", std::regex::icase);
  return std::regex_search(text, re);
}

// Pixel position of (step, value) for axes [x_lo, x_hi] x [y_lo, y_hi], computed here from the
// frame constants rather than by the plotting code.
inline XY expected_pixel(double step, double value, double x_lo, double x_hi, double y_lo,
                         double y_hi) {
  using F = run::PlotFrame;
  double w = F::kWidth - F::kLeft - F::kRight, h = F::kHeight - F::kTop - F::kBottom;
  return {F::kLeft + (step - x_lo) / (x_hi - x_lo) * w,
          F::kTop + (y_hi - value) / (y_hi - y_lo) * h};
}

}  // namespace trellis::test
