// png_plot_test.cc: ticks worked out by hand, glyph pixels on the canvas, the CDF steps, and a
// rendered chart that puts the series colour where the data says.
#include "packserve/benchclient/png_plot.h"

#include <gtest/gtest.h>

#include <cmath>

namespace packserve::benchclient {
namespace {

TEST(NiceTicks, HandWorkedRanges) {
  // [0, 97] in <= 8 steps: raw step 12.1 -> 20; ticks 0..100.
  EXPECT_EQ(nice_ticks(0, 97, 8), (std::vector<double>{0, 20, 40, 60, 80, 100}));
  // [0, 1] in <= 6 steps: raw 0.1667 -> 0.2.
  const std::vector<double> t = nice_ticks(0, 1, 6);
  ASSERT_EQ(t.size(), 6u);
  EXPECT_DOUBLE_EQ(t[5], 1.0);
  // [3, 3] widens to [2.5, 3.5]: raw 0.125 -> 0.2, first tick 2.4.
  const std::vector<double> u = nice_ticks(3, 3, 8);
  EXPECT_LE(u.front(), 2.5);
  EXPECT_GE(u.back(), 3.5);
  // [-7, 13] in <= 4: raw 5 -> 5; ticks -10..15.
  EXPECT_EQ(nice_ticks(-7, 13, 4), (std::vector<double>{-10, -5, 0, 5, 10, 15}));
}

TEST(FormatTick, ShortLabels) {
  EXPECT_EQ(format_tick(0), "0");
  EXPECT_EQ(format_tick(2.5), "2.5");
  EXPECT_EQ(format_tick(120), "120");
  EXPECT_EQ(format_tick(15000), "15k");
  EXPECT_EQ(format_tick(1500000), "1.5M");
}

TEST(Canvas, GlyphPixels) {
  Canvas c(20, 10, Rgb{255, 255, 255});
  c.text(1, 1, "1", Rgb{0, 0, 0});
  // '1' row 0 = 0x04: only column 2 set; row 6 = 0x0E: columns 1..3.
  for (int col = 0; col < 5; ++col) {
    EXPECT_EQ(c.pixel(1 + col, 1) == (Rgb{0, 0, 0}), col == 2) << col;
    EXPECT_EQ(c.pixel(1 + col, 7) == (Rgb{0, 0, 0}), col >= 1 && col <= 3) << col;
  }
  EXPECT_EQ(glyph_rows('a'), glyph_rows('A'));
  EXPECT_EQ(glyph_rows('~'), glyph_rows('?'));
  EXPECT_EQ(Canvas::text_width("ab"), 11);
}

TEST(Canvas, LineEndpointsAndClipping) {
  Canvas c(10, 10, Rgb{0, 0, 0});
  const Rgb red{255, 0, 0};
  c.line(0, 0, 9, 9, red);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(c.pixel(i, i), red);
  EXPECT_EQ(c.pixel(1, 0), (Rgb{0, 0, 0}));
  c.line(-50, 5, 50, 5, red);  // clipped, no crash
  EXPECT_EQ(c.pixel(0, 5), red);
  EXPECT_EQ(c.pixel(9, 5), red);
}

TEST(CdfSeries, Steps) {
  const Series s = cdf_series({3, 1, 2, 2}, "x", palette(0));
  ASSERT_EQ(s.points.size(), 5u);
  EXPECT_EQ(s.points[0], (std::pair<double, double>{1, 0}));
  EXPECT_EQ(s.points[1], (std::pair<double, double>{1, 0.25}));
  EXPECT_EQ(s.points[3], (std::pair<double, double>{2, 0.75}));
  EXPECT_EQ(s.points[4], (std::pair<double, double>{3, 1.0}));
  EXPECT_TRUE(s.step);
}

TEST(RenderChart, SeriesDrawnWhereTheDataIs) {
  LineChart chart;
  chart.title = "t";
  // A horizontal line at y = 50 over x in [0, 100]: axes 0..100 on both.
  chart.series.push_back(Series{"", Rgb{255, 0, 0}, {{0, 50}, {100, 50}, {100, 100}}, false});
  const Canvas c = render_chart(chart);
  // Plot area x in [70, 780], y in [36, 434]; y = 50 -> row 434 - 199 = 235.
  const int32_t y = 434 - static_cast<int32_t>(std::lround(0.5 * (434 - 36)));
  EXPECT_EQ(c.pixel(400, y), (Rgb{255, 0, 0}));
  EXPECT_EQ(c.pixel(400, y - 10), (Rgb{255, 255, 255}));
  EXPECT_EQ(c.pixel(70, 300), (Rgb{0, 0, 0}));  // the y axis
}

}  // namespace
}  // namespace packserve::benchclient
