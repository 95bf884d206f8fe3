// DeepSeek-V4.1's image processor (inference/image_processor.py; VISION.md steps 1-3): the plan (token
// grid for an image size), the canvas (aspect-preserving bicubic resize, gray-127 padding) and the
// normalized patches the ViT embeds.
#pragma once
#include <cstdint>
#include <vector>

#include "vision/image_decode.h"
#include "vision/vision_config.h"

namespace deepinfer::vision {

struct ImagePlan {
  int64_t n_llm_h = 0, n_llm_w = 0;  // aligner token grid
  int64_t best_h = 0, best_w = 0;    // canvas size in pixels, multiples of the patch size
  int64_t n_vit_h(int64_t patch) const { return best_h / patch; }
  int64_t n_vit_w(int64_t patch) const { return best_w / patch; }
  // START + (IMAGE * n_llm_w + NEWLINE) * n_llm_h + END
  int64_t span_len() const { return n_llm_h * (n_llm_w + 1) + 2; }
};

// plan_image_grid: min_pixels up-scaling (int truncation), ceil to the patch size, solve_resize_ratio
// when the span would exceed max_image_tokens.
ImagePlan plan_image_grid(int64_t width, int64_t height, const VisionConfig& c);

// ImageOps.pad(image, (best_w, best_h), color=(127,127,127)): the largest aspect-preserving bicubic resize
// inside the box, pasted at round((box - resized) / 2) (half to even). With max_wh_ratio set and the image
// that wide, a plain resize to the box instead (the reference's branch).
struct Canvas {
  RgbImage image;
  int64_t resized_w = 0, resized_h = 0, paste_x = 0, paste_y = 0;
};
Canvas make_canvas(const RgbImage& image, const ImagePlan& plan, const VisionConfig& c);

// bf16(((u / 255) - 0.5) / 0.5) in fp32 for each uint8 level.
float normalized_pixel(uint8_t u);

// [n_vit_h * n_vit_w, 3, patch, patch]: patches in row-major order, each flattened [channel, y, x].
std::vector<float> pixel_values(const RgbImage& canvas, int64_t patch);

struct ProcessedImage {
  ImagePlan plan;
  int64_t n_vit_h = 0, n_vit_w = 0;
  std::vector<float> pixels;  // pixel_values of the canvas
};
ProcessedImage process_image(const RgbImage& image, const VisionConfig& c);

}  // namespace deepinfer::vision
