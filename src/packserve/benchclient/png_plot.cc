// png_plot.cc: see png_plot.h.
#include "packserve/benchclient/png_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace packserve::benchclient {
namespace {

constexpr Rgb kWhite{255, 255, 255}, kBlack{0, 0, 0}, kGrid{225, 225, 225}, kGray{90, 90, 90};

}  // namespace

Rgb palette(int index) {
  static constexpr Rgb kColors[] = {
      {31, 119, 180}, {255, 127, 14}, {44, 160, 44}, {214, 39, 40}, {148, 103, 189}};
  return kColors[static_cast<size_t>(std::abs(index)) % 5];
}

std::vector<double> nice_ticks(double lo, double hi, int max_ticks) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return {0.0, 1.0};
  if (hi < lo) std::swap(lo, hi);
  if (hi == lo) {
    lo -= 0.5;
    hi += 0.5;
  }
  max_ticks = std::max(max_ticks, 1);
  const double raw = (hi - lo) / max_ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag * 10;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (mag * m >= raw) {
      step = mag * m;
      break;
    }
  }
  const double first = std::floor(lo / step + 1e-9) * step;
  std::vector<double> ticks;
  for (double t = first; ticks.size() < 64; t += step) {
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
    if (t >= hi - step * 1e-9) break;
  }
  return ticks;
}

std::string format_tick(double value) {
  char buf[32];
  const double a = std::abs(value);
  if (a >= 1e6) {
    std::snprintf(buf, sizeof(buf), "%gM", value / 1e6);
  } else if (a >= 1e4) {
    std::snprintf(buf, sizeof(buf), "%gk", value / 1e3);
  } else {
    std::snprintf(buf, sizeof(buf), "%g", value);
  }
  return buf;
}

Series cdf_series(std::vector<double> values, std::string name, Rgb color) {
  std::sort(values.begin(), values.end());
  Series s{std::move(name), color, {}, true};
  const double n = static_cast<double>(values.size());
  if (!values.empty()) s.points.emplace_back(values.front(), 0.0);
  for (size_t i = 0; i < values.size(); ++i) {
    s.points.emplace_back(values[i], static_cast<double>(i + 1) / n);
  }
  return s;
}

Canvas render_chart(const LineChart& chart) {
  Canvas canvas(chart.width_px, chart.height_px, kWhite);
  const int32_t left = 70, right = chart.width_px - 20, top = 36, bottom = chart.height_px - 46;
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo, y_lo = x_lo, y_hi = -x_lo;
  for (const Series& s : chart.series) {
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x_lo = std::min(x_lo, x);
      x_hi = std::max(x_hi, x);
      y_lo = std::min(y_lo, y);
      y_hi = std::max(y_hi, y);
    }
  }
  if (!std::isfinite(x_lo)) x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;
  if (chart.x_from_zero && x_lo >= 0) x_lo = 0;
  if (chart.y_from_zero && y_lo >= 0) y_lo = 0;
  const std::vector<double> xt = nice_ticks(x_lo, x_hi, 8);
  const std::vector<double> yt = nice_ticks(y_lo, y_hi, 6);
  x_lo = xt.front(), x_hi = xt.back(), y_lo = yt.front(), y_hi = yt.back();
  auto px = [&](double x) {
    return left + static_cast<int32_t>(std::lround((x - x_lo) / (x_hi - x_lo) * (right - left)));
  };
  auto py = [&](double y) {
    return bottom - static_cast<int32_t>(std::lround((y - y_lo) / (y_hi - y_lo) * (bottom - top)));
  };
  for (double t : xt) {
    const int32_t x = px(t);
    canvas.line(x, top, x, bottom, kGrid);
    canvas.line(x, bottom, x, bottom + 4, kBlack);
    const std::string label = format_tick(t);
    canvas.text(x - Canvas::text_width(label) / 2, bottom + 8, label, kGray);
  }
  for (double t : yt) {
    const int32_t y = py(t);
    canvas.line(left, y, right, y, kGrid);
    canvas.line(left - 4, y, left, y, kBlack);
    const std::string label = format_tick(t);
    canvas.text(left - 8 - Canvas::text_width(label), y - 3, label, kGray);
  }
  canvas.line(left, top, left, bottom, kBlack);
  canvas.line(left, bottom, right, bottom, kBlack);
  canvas.text((left + right - Canvas::text_width(chart.title, 2)) / 2, 8, chart.title, kBlack, 2);
  canvas.text((left + right - Canvas::text_width(chart.x_label)) / 2, bottom + 24, chart.x_label,
              kBlack);
  canvas.text(6, top - 14, chart.y_label, kBlack);

  for (const Series& s : chart.series) {
    bool have_prev = false;
    int32_t prev_x = 0, prev_y = 0;
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      const int32_t cx = px(x), cy = py(y);
      if (have_prev) {
        if (s.step) {
          canvas.line(prev_x, prev_y, cx, prev_y, s.color, 2);
          canvas.line(cx, prev_y, cx, cy, s.color, 2);
        } else {
          canvas.line(prev_x, prev_y, cx, cy, s.color, 2);
        }
      } else if (s.points.size() == 1) {
        canvas.fill_rect(cx - 2, cy - 2, cx + 2, cy + 2, s.color);
      }
      have_prev = true;
      prev_x = cx;
      prev_y = cy;
    }
  }
  int32_t legend_y = top + 6;
  for (const Series& s : chart.series) {
    if (s.name.empty()) continue;
    const int32_t w = Canvas::text_width(s.name);
    canvas.fill_rect(right - w - 30, legend_y, right - w - 16, legend_y + 6, s.color);
    canvas.text(right - w - 8, legend_y, s.name, kBlack);
    legend_y += 14;
  }
  return canvas;
}

Status write_chart_png(const LineChart& chart, const std::string& path) {
  return write_png(render_chart(chart).image(), path);
}

}  // namespace packserve::benchclient
