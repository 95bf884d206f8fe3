// Fuzz target: an image file (PNG, JPEG, WebP or anything else) through the decoder and the image
// processor with the release's settings. Malformed input must be a deepinfer::Error; an accepted image
// must give a canvas of the planned size and one patch row per ViT grid cell.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "core/error.h"
#include "vision/image_processor.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace deepinfer::vision;
  VisionConfig c;  // defaults: patch 14, 3x3 cells, 1024 tokens, min_pixels 544^2
  try {
    const RgbImage img = decode_image(std::span<const uint8_t>(data, size), "fuzz");
    if (img.width <= 0 || img.height <= 0 || img.rgb.size() != static_cast<size_t>(img.width * img.height * 3))
      std::abort();
    const ProcessedImage p = process_image(img, c);
    if (p.plan.span_len() > c.max_image_tokens ||
        p.pixels.size() != static_cast<size_t>(p.n_vit_h * p.n_vit_w * 3 * c.patch_size * c.patch_size))
      std::abort();
  } catch (const deepinfer::Error&) {
  }
  return 0;
}
