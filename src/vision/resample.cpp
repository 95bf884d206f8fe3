#include "vision/resample.h"

#include <cmath>
#include <vector>

#include "core/error.h"

namespace deepinfer::vision {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

double bicubic(double x) {  // Keys' cubic convolution, a = -0.5
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// For each output sample: the first input sample, how many, and their fixed-point weights.
struct Taps {
  int64_t ksize = 0;
  std::vector<int64_t> first, count;
  std::vector<int32_t> weight;  // [out, ksize]
};

Taps precompute(int64_t in_size, int64_t out_size) {
  const double scale = static_cast<double>(static_cast<float>(in_size)) / static_cast<double>(out_size);
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = 2.0 * filterscale;
  Taps t;
  t.ksize = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  t.first.resize(out_size);
  t.count.resize(out_size);
  t.weight.assign(out_size * t.ksize, 0);
  std::vector<double> k(t.ksize);
  for (int64_t o = 0; o < out_size; ++o) {
    const double center = (o + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int64_t lo = static_cast<int64_t>(center - support + 0.5);  // C's truncating (int) cast, as Pillow
    if (lo < 0) lo = 0;
    int64_t hi = static_cast<int64_t>(center + support + 0.5);
    if (hi > in_size) hi = in_size;
    const int64_t n = hi - lo;
    double ww = 0.0;
    for (int64_t x = 0; x < n; ++x) {
      k[x] = bicubic((x + lo - center + 0.5) * ss);
      ww += k[x];
    }
    for (int64_t x = 0; x < n; ++x) {
      const double v = ww != 0.0 ? k[x] / ww : k[x];
      const double f = v * (1 << kPrecisionBits);
      t.weight[o * t.ksize + x] = static_cast<int32_t>(v < 0 ? -0.5 + f : 0.5 + f);
    }
    t.first[o] = lo;
    t.count[o] = n;
  }
  return t;
}

uint8_t clip8(int64_t v) {
  if (v >= (int64_t{1} << kPrecisionBits << 8)) return 255;
  if (v <= 0) return 0;
  return static_cast<uint8_t>(v >> kPrecisionBits);
}

// One pass along an axis: `stride` bytes between neighbouring input samples on that axis.
void pass(const uint8_t* in, uint8_t* out, const Taps& t, int64_t out_size, int64_t lines, int64_t line_in,
          int64_t line_out, int64_t stride_in, int64_t stride_out) {
  for (int64_t l = 0; l < lines; ++l)
    for (int64_t o = 0; o < out_size; ++o) {
      const int32_t* w = &t.weight[o * t.ksize];
      for (int c = 0; c < 3; ++c) {
        int64_t acc = int64_t{1} << (kPrecisionBits - 1);
        const uint8_t* src = in + l * line_in + t.first[o] * stride_in + c;
        for (int64_t x = 0; x < t.count[o]; ++x) acc += int64_t{src[x * stride_in]} * w[x];
        out[l * line_out + o * stride_out + c] = clip8(acc);
      }
    }
}

}  // namespace

RgbImage resize_bicubic(const RgbImage& in, int64_t width, int64_t height) {
  check(width > 0 && height > 0, "resize_bicubic: target size ", width, "x", height, " is empty");
  if (width == in.width && height == in.height) return in;  // Pillow copies, no resampling
  RgbImage cur = in;
  if (width != in.width) {  // horizontal pass: every row
    const Taps t = precompute(in.width, width);
    RgbImage out{width, in.height, std::vector<uint8_t>(width * in.height * 3)};
    pass(cur.rgb.data(), out.rgb.data(), t, width, in.height, in.width * 3, width * 3, 3, 3);
    cur = std::move(out);
  }
  if (height != in.height) {  // vertical pass: every column
    const Taps t = precompute(in.height, height);
    RgbImage out{width, height, std::vector<uint8_t>(width * height * 3)};
    pass(cur.rgb.data(), out.rgb.data(), t, height, width, 3, 3, width * 3, width * 3);
    cur = std::move(out);
  }
  return cur;
}

}  // namespace deepinfer::vision
