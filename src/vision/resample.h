// Bicubic resizing bit-exact with Pillow's Image.resize(size, BICUBIC) for 8-bit RGB (libImaging/Resample.c):
// a separable filter whose support widens by the shrink factor (antialiasing), weights normalized in
// double then fixed to 22 fractional bits, a horizontal pass clipped to uint8, then a vertical pass.
#pragma once
#include "vision/image_decode.h"

namespace deepinfer::vision {

RgbImage resize_bicubic(const RgbImage& in, int64_t width, int64_t height);

}  // namespace deepinfer::vision
