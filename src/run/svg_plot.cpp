#include "run/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "run/html.h"

namespace trellis::run {
namespace {

const char* const kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                "#9467bd", "#8c564b", "#e377c2", "#17becf"};

// A nice step (1, 2 or 5 × 10^k) near span / target.
double nice_step(double span, int target) {
  double raw = span / std::max(target, 1);
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double norm = raw / mag;
  double f = norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10;
  return f * mag;
}

// Tick label with as many decimals as the tick step needs; scientific for extreme magnitudes.
std::string tick_label(double v, double step, double largest) {
  if (std::fabs(v) < step * 1e-9) v = 0;  // no "-0.00"
  int decimals = std::max(0, int(std::ceil(-std::log10(step) - 1e-9)));
  if (decimals > 6 || largest >= 1e7) return fmt::format("{:.3g}", v);
  return fmt::format("{:.{}f}", v, decimals);
}

std::string coord(double v) { return fmt::format("{:.2f}", v); }

struct Pixel {
  double x, y;
};

// At most the first, lowest, highest and last point of each pixel column, in order: the same
// picture as all points, with a bounded size however many steps a run has.
std::vector<Pixel> decimate(const std::vector<Pixel>& pixels) {
  if (pixels.size() <= size_t(2 * PlotFrame::plot_width())) return pixels;
  std::vector<Pixel> out;
  size_t i = 0;
  while (i < pixels.size()) {
    size_t j = i;
    double column = std::floor(pixels[i].x);
    size_t lo = i, hi = i;
    while (j < pixels.size() && std::floor(pixels[j].x) == column) {
      if (pixels[j].y > pixels[lo].y) lo = j;  // larger y is lower on screen
      if (pixels[j].y < pixels[hi].y) hi = j;
      ++j;
    }
    std::vector<size_t> keep = {i, lo, hi, j - 1};
    std::sort(keep.begin(), keep.end());
    keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
    for (size_t k : keep) out.push_back(pixels[k]);
    i = j;
  }
  return out;
}

}  // namespace

Axis nice_axis(double lo, double hi, int target) {
  Axis axis;
  if (!std::isfinite(lo) || !std::isfinite(hi) || lo > hi) {
    lo = 0;
    hi = 1;
  }
  if (lo == hi) {
    double pad = lo == 0 ? 1 : std::fabs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  double span = hi - lo;
  if (!std::isfinite(span) || !std::isfinite(nice_step(span, target))) {
    // Near the limits of double: plain evenly spaced ticks over the data range.
    axis.lo = lo;
    axis.hi = hi;
    for (int i = 0; i <= 4; ++i) axis.ticks.push_back(lo * (1 - i / 4.0) + hi * (i / 4.0));
    return axis;
  }
  double step = nice_step(span, target);
  double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
  axis.lo = first * step;
  axis.hi = last * step;
  for (double k = first; k <= last + 0.5; k += 1) axis.ticks.push_back(k * step);
  return axis;
}

std::string render_svg(const Plot& plot) {
  using F = PlotFrame;
  const double pw = F::plot_width(), ph = F::plot_height();

  // Ranges: x over every point's step, y over the finite values.
  double xlo = std::numeric_limits<double>::infinity(), xhi = -xlo, ylo = xlo, yhi = -xlo;
  for (const auto& s : plot.series) {
    for (const Point& p : s.points) {
      xlo = std::min(xlo, p.step);
      xhi = std::max(xhi, p.step);
      if (std::isfinite(p.value)) {
        ylo = std::min(ylo, p.value);
        yhi = std::max(yhi, p.value);
      }
    }
  }
  if (!(xlo <= xhi)) xlo = 0, xhi = 1;
  if (xlo == xhi) xlo -= 1, xhi += 1;
  if (!(ylo <= yhi)) ylo = 0, yhi = 1;
  const Axis y = nice_axis(ylo, yhi);
  const double xstep = std::max(1.0, nice_step(xhi - xlo, 6));

  auto px = [&](double step) { return F::kLeft + (step - xlo) / (xhi - xlo) * pw; };
  // Halves first (exact in binary) so that a range near the limits of double cannot overflow.
  auto py = [&](double v) { return F::kTop + (y.hi / 2 - v / 2) / (y.hi / 2 - y.lo / 2) * ph; };

  std::string out = fmt::format(
      "<svg class=\"plot\" viewBox=\"0 0 {0} {1}\" width=\"{0}\" height=\"{1}\" role=\"img\" "
      "aria-label=\"{2}\" style=\"font:11px sans-serif\">\n",
      F::kWidth, F::kHeight, html_escape(plot.title));
  out += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#fff\" stroke=\"#888\"/>\n",
      F::kLeft, F::kTop, pw, ph);

  // Y ticks and horizontal grid.
  double largest = std::max(std::fabs(y.lo), std::fabs(y.hi));
  double ystep = y.ticks.size() > 1 ? y.ticks[1] - y.ticks[0] : 1;
  for (double t : y.ticks) {
    std::string yy = coord(py(t));
    out += fmt::format(
        "<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#e4e4e4\"/>"
        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" dominant-baseline=\"middle\" "
        "fill=\"#333\">{}</text>\n",
        F::kLeft, F::kLeft + pw, yy, yy, F::kLeft - 6, yy,
        html_escape(tick_label(t, ystep, largest)));
  }
  // X ticks (whole steps) and vertical grid.
  for (double t = std::ceil(xlo / xstep - 1e-9) * xstep; t <= xhi + 1e-9; t += xstep) {
    std::string xx = coord(px(t));
    out += fmt::format(
        "<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#e4e4e4\"/>"
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#333\">{}</text>\n",
        xx, xx, F::kTop, F::kTop + ph, xx, F::kTop + ph + 16,
        fmt::format("{:.0f}", t == 0 ? 0.0 : t));
  }
  // Axis labels.
  out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#000\">step</text>\n",
                     F::kLeft + pw / 2, F::kHeight - 10);
  out += fmt::format(
      "<text transform=\"translate(14,{}) rotate(-90)\" text-anchor=\"middle\" "
      "fill=\"#000\">{}</text>\n",
      F::kTop + ph / 2, html_escape(plot.y_label));

  // Series: one polyline per run of finite values, a dot for a lone value.
  for (size_t i = 0; i < plot.series.size(); ++i) {
    const PlotSeries& s = plot.series[i];
    const std::string color =
        s.color.empty() ? kPalette[i % std::size(kPalette)] : html_escape(s.color);
    const std::string id = html_escape(s.id);
    const std::string dash = s.dashed ? " stroke-dasharray=\"6 4\"" : "";
    // Each series a little thinner than the one before, so that one drawn over another with the
    // same values (staleness mean and max) leaves both visible.
    const std::string width = fmt::format("{:.1f}", std::max(1.0, 2.4 - 0.5 * double(i)));
    std::vector<Pixel> segment;
    auto flush = [&] {
      if (segment.size() == 1) {
        out +=
            fmt::format("<circle data-series=\"{}\" cx=\"{}\" cy=\"{}\" r=\"2.5\" fill=\"{}\"/>\n",
                        id, coord(segment[0].x), coord(segment[0].y), color);
      } else if (segment.size() > 1) {
        out += fmt::format(
            "<polyline data-series=\"{}\" fill=\"none\" stroke=\"{}\" "
            "stroke-width=\"{}\"{} points=\"",
            id, color, width, dash);
        const char* sep = "";
        for (const Pixel& p : decimate(segment)) {
          out += fmt::format("{}{},{}", sep, coord(p.x), coord(p.y));
          sep = " ";
        }
        out += "\"/>\n";
      }
      segment.clear();
    };
    for (const Point& p : s.points) {
      if (std::isfinite(p.value)) {
        segment.push_back({px(p.step), py(p.value)});
      } else {
        flush();
      }
    }
    flush();

    // Legend entry.
    double lx = F::kWidth - F::kRight + 14, ly = F::kTop + 10 + 20 * double(i);
    out += fmt::format(
        "<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"2\"{}/>"
        "<text x=\"{}\" y=\"{}\" dominant-baseline=\"middle\" fill=\"#000\">{}</text>\n",
        lx, lx + 24, ly, ly, color, dash, lx + 30, ly, html_escape(s.label));
  }
  out += "</svg>\n";
  return out;
}

}  // namespace trellis::run
