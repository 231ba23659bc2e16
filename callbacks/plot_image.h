#pragma once
/// PlotImage: a small RGB raster for the plots callbacks write (LearningRateFinder's), with lines,
/// discs and rectangles, saved as a PNG (8-bit RGB, no interlace; the image data in stored deflate
/// blocks of a zlib stream, so no compression library is needed).
///
/// Thread-safety: none (one owner).
#include <cstdint>
#include <string>
#include <vector>

namespace volt {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
};

class PlotImage {
 public:
  /// A white image; ConfigError unless 1 <= width, height <= 8192.
  PlotImage(int width, int height);
  int width() const { return width_; }
  int height() const { return height_; }
  /// Pixel (x, y), y downwards; outside the image: ignored.
  void set(int x, int y, Rgb c);
  Rgb at(int x, int y) const;
  /// A line of `thickness` pixels between two points in pixel coordinates.
  void line(double x0, double y0, double x1, double y1, Rgb c, double thickness = 1.0);
  /// A filled disc.
  void disc(double cx, double cy, double radius, Rgb c);
  /// A rectangle's outline, corners included.
  void rect(int x0, int y0, int x1, int y1, Rgb c);
  /// The PNG file's bytes.
  std::string png() const;
  /// Writes png() to `path` (Error naming it on failure).
  void write_png(const std::string& path) const;

 private:
  int width_, height_;
  std::vector<uint8_t> rgb_;  // row-major, 3 bytes a pixel
};

}  // namespace volt
