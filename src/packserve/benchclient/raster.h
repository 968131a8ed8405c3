// raster.h: a tiny RGB canvas for the benchmark plots: pixels, lines, rectangles and text in a
// built-in 5x7 bitmap font (ASCII digits, letters (lower case drawn as upper case) and
// " .,-/():%_=+<>[]"; anything else draws as '?').
// Coordinates: x to the right, y down, (0, 0) the top-left pixel; drawing outside the canvas
// is clipped, never an error.
// Thread-safety: a Canvas is a value; no shared state.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "packserve/benchclient/png.h"

namespace packserve::benchclient {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};

// The 7 rows of glyph `c`, bit 4 = leftmost of 5 columns.
std::array<uint8_t, 7> glyph_rows(char c);

class Canvas {
 public:
  static constexpr int32_t kGlyphWidth = 5, kGlyphHeight = 7, kGlyphAdvance = 6;

  Canvas(int32_t width, int32_t height, Rgb background);
  int32_t width() const { return image_.width; }
  int32_t height() const { return image_.height; }
  const RgbImage& image() const { return image_; }
  Rgb pixel(int32_t x, int32_t y) const;  // precondition: inside the canvas

  void set(int32_t x, int32_t y, Rgb color);
  void fill_rect(int32_t x0, int32_t y0, int32_t x1, int32_t y1, Rgb color);  // inclusive
  // Bresenham line; `thickness` >= 1 pixels (a square brush).
  void line(int32_t x0, int32_t y0, int32_t x1, int32_t y1, Rgb color, int32_t thickness = 1);
  // Text with its top-left at (x, y); each font pixel is scale x scale.
  void text(int32_t x, int32_t y, std::string_view s, Rgb color, int32_t scale = 1);
  static int32_t text_width(std::string_view s, int32_t scale = 1) {
    return s.empty() ? 0 : static_cast<int32_t>(s.size()) * kGlyphAdvance * scale - scale;
  }

 private:
  RgbImage image_;
};

}  // namespace packserve::benchclient
