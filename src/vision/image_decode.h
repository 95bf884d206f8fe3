// Decoding image files (PNG through libpng, JPEG through libjpeg-turbo, WebP through libwebp) to 8-bit RGB, as Pillow's
// Image.open(...).convert("RGB") gives them: alpha dropped (not composited), gray and palettes expanded,
// 16-bit samples cut to their high byte, no gamma or colour-profile conversion.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace deepinfer::vision {

struct RgbImage {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> rgb;  // [height, width, 3], row-major
};

// Pillow's decompression-bomb limit: larger images are refused, not decoded.
constexpr int64_t kMaxImagePixels = 178956970;

// `what` names the image in errors ("image_0.png", "image 2 of the request"). A corrupt or truncated
// file, or another format, is a deepinfer::Error naming it and the reason.
RgbImage decode_image(std::span<const uint8_t> bytes, const std::string& what);
RgbImage read_image_file(const std::string& path);
// The bytes of an image file as they are (decoded later); throws naming the path if it cannot be read.
std::vector<uint8_t> read_image_bytes(const std::string& path);

}  // namespace deepinfer::vision
