#include "volt/callbacks/plot_image.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>

#include "volt/core/errors.h"
#include "volt/core/files.h"

namespace volt {

namespace {
uint32_t crc32(const std::string& bytes, size_t from) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[n] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = from; i < bytes.size(); ++i) c = table[(c ^ static_cast<uint8_t>(bytes[i])) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t adler32(const std::string& bytes) {
  uint32_t a = 1, b = 0;
  for (unsigned char ch : bytes) {
    a = (a + ch) % 65521;
    b = (b + a) % 65521;
  }
  return (b << 16) | a;
}

void put32(std::string& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<char>((v >> s) & 0xFF));
}

void chunk(std::string& out, const char* type, const std::string& data) {
  put32(out, static_cast<uint32_t>(data.size()));
  const size_t start = out.size();
  out.append(type, 4);
  out += data;
  put32(out, crc32(out, start));
}

/// A zlib stream of `raw` in stored (uncompressed) deflate blocks.
std::string zlib_stored(const std::string& raw) {
  std::string z = {'\x78', '\x01'};
  size_t pos = 0;
  do {
    const size_t n = std::min<size_t>(65535, raw.size() - pos);
    const bool last = pos + n == raw.size();
    z.push_back(last ? '\x01' : '\x00');
    z.push_back(static_cast<char>(n & 0xFF));
    z.push_back(static_cast<char>(n >> 8));
    z.push_back(static_cast<char>(~n & 0xFF));
    z.push_back(static_cast<char>((~n >> 8) & 0xFF));
    z.append(raw, pos, n);
    pos += n;
  } while (pos < raw.size());
  put32(z, adler32(raw));
  return z;
}
}  // namespace

PlotImage::PlotImage(int width, int height) : width_(width), height_(height) {
  VOLT_CHECK(width >= 1 && height >= 1 && width <= 8192 && height <= 8192, ConfigError, "PlotImage: ", width, "x",
             height, " is not a size from 1x1 to 8192x8192");
  rgb_.assign(static_cast<size_t>(width) * height * 3, 255);
}

void PlotImage::set(int x, int y, Rgb c) {
  if (x < 0 || y < 0 || x >= width_ || y >= height_) return;
  uint8_t* p = &rgb_[(static_cast<size_t>(y) * width_ + x) * 3];
  p[0] = c.r;
  p[1] = c.g;
  p[2] = c.b;
}

Rgb PlotImage::at(int x, int y) const {
  const uint8_t* p = &rgb_[(static_cast<size_t>(y) * width_ + x) * 3];
  return {p[0], p[1], p[2]};
}

void PlotImage::disc(double cx, double cy, double radius, Rgb c) {
  for (int y = static_cast<int>(std::floor(cy - radius)); y <= static_cast<int>(std::ceil(cy + radius)); ++y)
    for (int x = static_cast<int>(std::floor(cx - radius)); x <= static_cast<int>(std::ceil(cx + radius)); ++x)
      if ((x - cx) * (x - cx) + (y - cy) * (y - cy) <= radius * radius) set(x, y, c);
}

void PlotImage::line(double x0, double y0, double x1, double y1, Rgb c, double thickness) {
  if (!std::isfinite(x0) || !std::isfinite(y0) || !std::isfinite(x1) || !std::isfinite(y1)) return;
  const double length = std::hypot(x1 - x0, y1 - y0);
  const int steps = std::max(1, static_cast<int>(std::ceil(length * 2)));
  const double r = std::max(0.5, thickness / 2);
  for (int i = 0; i <= steps; ++i) {
    const double t = static_cast<double>(i) / steps;
    disc(x0 + t * (x1 - x0), y0 + t * (y1 - y0), r, c);
  }
}

void PlotImage::rect(int x0, int y0, int x1, int y1, Rgb c) {
  for (int x = x0; x <= x1; ++x) {
    set(x, y0, c);
    set(x, y1, c);
  }
  for (int y = y0; y <= y1; ++y) {
    set(x0, y, c);
    set(x1, y, c);
  }
}

std::string PlotImage::png() const {
  std::string out = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  put32(ihdr, static_cast<uint32_t>(width_));
  put32(ihdr, static_cast<uint32_t>(height_));
  ihdr += {'\x08', '\x02', '\x00', '\x00', '\x00'};  // 8 bits, RGB, deflate, adaptive filters, no interlace
  chunk(out, "IHDR", ihdr);
  std::string raw;
  raw.reserve(static_cast<size_t>(height_) * (1 + width_ * 3));
  for (int y = 0; y < height_; ++y) {
    raw.push_back('\0');  // filter: none
    raw.append(reinterpret_cast<const char*>(&rgb_[static_cast<size_t>(y) * width_ * 3]),
               static_cast<size_t>(width_) * 3);
  }
  chunk(out, "IDAT", zlib_stored(raw));
  chunk(out, "IEND", "");
  return out;
}

void PlotImage::write_png(const std::string& path) const {
  const std::string bytes = png();
  const std::string err = detail::write_file_atomic(path, bytes);
  VOLT_CHECK(err.empty(), Error, "cannot write the image: ", err, "; is the folder writable, the disk full?");
}

}  // namespace volt
