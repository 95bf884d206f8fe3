#include "vision/image_processor.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/error.h"
#include "vision/resample.h"

namespace deepinfer::vision {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Python's round(): to nearest, ties to even (the default floating-point rounding mode).
int64_t round_half_even(double x) { return static_cast<int64_t>(std::nearbyint(x)); }

ImagePlan grid_for(int64_t best_h, int64_t best_w, const VisionConfig& c) {
  ImagePlan p;
  p.best_h = best_h;
  p.best_w = best_w;
  p.n_llm_h = ceil_div(best_h / c.patch_size, c.downsample_ratio);
  p.n_llm_w = ceil_div(best_w / c.patch_size, c.downsample_ratio);
  return p;
}

// The largest aspect-preserving pixel size whose token grid fits in max_image_tokens (sizes in doubles,
// like the reference's Python numbers).
std::pair<int64_t, int64_t> solve_resize_ratio(double height, double width, const VisionConfig& c) {
  const double r = height / width;
  const double max_w = std::sqrt(static_cast<double>(c.max_image_tokens - 2) / r + 0.25) - 0.5;
  const double max_h = max_w * r;
  const int64_t cell = c.patch_size * c.downsample_ratio;
  if (max_w < 1.0) return {(c.max_image_tokens - 2) / 2 * cell, cell};  // very tall: one column
  if (max_h < 1.0) return {cell, (c.max_image_tokens - 3) * cell};      // very wide: one row
  const double beta = std::min(std::floor(max_w) * cell / width, std::floor(max_h) * cell / height);
  const auto snap = [&](double v) { return static_cast<int64_t>(std::floor(v * beta / c.patch_size)) * c.patch_size; };
  return {snap(height), snap(width)};
}

}  // namespace

ImagePlan plan_image_grid(int64_t width_px, int64_t height_px, const VisionConfig& c) {
  const int64_t p = c.patch_size;
  double width = static_cast<double>(width_px), height = static_cast<double>(height_px);
  if (c.max_wh_ratio && width > height * *c.max_wh_ratio) width = height * *c.max_wh_ratio;
  if (width * height > 0 && width * height < static_cast<double>(c.min_pixels)) {
    const double ratio = std::pow(static_cast<double>(c.min_pixels) / (width * height), 0.5);
    width = std::trunc(width * ratio);  // Python int()
    height = std::trunc(height * ratio);
  }
  ImagePlan plan = grid_for(static_cast<int64_t>(std::ceil(height / p)) * p,
                            static_cast<int64_t>(std::ceil(width / p)) * p, c);
  if (plan.span_len() > c.max_image_tokens) {
    const auto [h, w] = solve_resize_ratio(height, width, c);
    plan = grid_for(h, w, c);
  }
  check(plan.best_h >= p && plan.best_w >= p, "image of ", width_px, "x", height_px,
        " pixels is too narrow for one ", p, "x", p, " patch within ", c.max_image_tokens, " image tokens");
  check(plan.span_len() <= c.max_image_tokens, "image of ", width_px, "x", height_px, " pixels needs ",
        plan.span_len(), " image tokens, more than max_image_tokens ", c.max_image_tokens);
  return plan;
}

Canvas make_canvas(const RgbImage& image, const ImagePlan& plan, const VisionConfig& c) {
  const int64_t W = plan.best_w, H = plan.best_h;
  Canvas out;
  if (c.max_wh_ratio && static_cast<double>(image.width) >= *c.max_wh_ratio * static_cast<double>(image.height)) {
    out.image = resize_bicubic(image, W, H);
    out.resized_w = W;
    out.resized_h = H;
    return out;
  }
  // ImageOps.contain: keep one side of the box, round the other from the image's aspect ratio.
  int64_t rw = W, rh = H;
  const double im_ratio = static_cast<double>(image.width) / static_cast<double>(image.height);
  const double box_ratio = static_cast<double>(W) / static_cast<double>(H);
  if (im_ratio > box_ratio)
    rh = round_half_even(static_cast<double>(image.height) / static_cast<double>(image.width) * W);
  else if (im_ratio < box_ratio)
    rw = round_half_even(static_cast<double>(image.width) / static_cast<double>(image.height) * H);
  check(rw > 0 && rh > 0, "image of ", image.width, "x", image.height, " pixels is too thin to fit a ", W, "x", H,
        " canvas");
  const RgbImage resized = resize_bicubic(image, rw, rh);
  out.resized_w = rw;
  out.resized_h = rh;
  if (rw != W) out.paste_x = round_half_even((W - rw) * 0.5);
  else out.paste_y = round_half_even((H - rh) * 0.5);
  out.image = RgbImage{W, H, std::vector<uint8_t>(W * H * 3, 127)};
  for (int64_t y = 0; y < rh; ++y)
    std::copy_n(resized.rgb.data() + y * rw * 3, rw * 3,
                out.image.rgb.data() + ((y + out.paste_y) * W + out.paste_x) * 3);
  return out;
}

float normalized_pixel(uint8_t u) { return round_to_bf16((static_cast<float>(u) / 255.0f - 0.5f) / 0.5f); }

std::vector<float> pixel_values(const RgbImage& canvas, int64_t p) {
  float lut[256];
  for (int u = 0; u < 256; ++u) lut[u] = normalized_pixel(static_cast<uint8_t>(u));
  const int64_t nh = canvas.height / p, nw = canvas.width / p;
  std::vector<float> out(nh * nw * 3 * p * p);
  float* o = out.data();
  for (int64_t i = 0; i < nh; ++i)
    for (int64_t j = 0; j < nw; ++j)
      for (int64_t ch = 0; ch < 3; ++ch)
        for (int64_t y = 0; y < p; ++y)
          for (int64_t x = 0; x < p; ++x) *o++ = lut[canvas.rgb[((i * p + y) * canvas.width + j * p + x) * 3 + ch]];
  return out;
}

ProcessedImage process_image(const RgbImage& image, const VisionConfig& c) {
  ProcessedImage r;
  r.plan = plan_image_grid(image.width, image.height, c);
  r.n_vit_h = r.plan.n_vit_h(c.patch_size);
  r.n_vit_w = r.plan.n_vit_w(c.patch_size);
  r.pixels = pixel_values(make_canvas(image, r.plan, c).image, c.patch_size);
  return r;
}

}  // namespace deepinfer::vision
