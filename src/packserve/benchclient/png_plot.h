// png_plot.h: line charts and CDFs rendered onto a Canvas (raster.h) and written as PNG
// (png.h): axes, "nice" ticks (1, 2, 5 x 10^k) with labels, grid, a title, axis labels and a
// legend. Used by `packserve bench --out DIR` for ttft_cdf.png, tpot_cdf.png,
// throughput_over_time.png and running_batch_over_time.png.
// Thread-safety: pure functions over values.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "packserve/benchclient/raster.h"
#include "packserve/common/status.h"

namespace packserve::benchclient {

struct Series {
  std::string name;  // legend text; empty = no legend entry
  Rgb color;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in order
  bool step = false;  // draw as a step function (horizontal then vertical), as a CDF
};

struct LineChart {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<Series> series;
  int32_t width_px = 800;
  int32_t height_px = 480;
  bool y_from_zero = true;  // the y range starts at 0 (when all y >= 0)
  bool x_from_zero = true;  // the x range starts at 0 (when all x >= 0)
};

// Tick values covering [lo, hi] with a step of 1, 2 or 5 x 10^k, at most `max_ticks` + 1
// of them; the first tick <= lo and the last >= hi. lo == hi gives a unit-wide range.
std::vector<double> nice_ticks(double lo, double hi, int max_ticks);
// A short label for a tick value: "0", "2.5", "120", "15k", "1.5M".
std::string format_tick(double value);

// The empirical CDF of `values` as a step series: (v_(i), (i + 1) / n) for sorted v.
Series cdf_series(std::vector<double> values, std::string name, Rgb color);

Canvas render_chart(const LineChart& chart);
Status write_chart_png(const LineChart& chart, const std::string& path);

// Distinct series colours (blue, orange, green, red, purple).
Rgb palette(int index);

}  // namespace packserve::benchclient
