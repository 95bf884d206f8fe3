#include "core/row_format.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"

namespace deepinfer {
namespace {

// The quantization block (values per scale) of a quantized format; 0 for kF32 / kBf16.
int64_t scale_block(RowFormat f) {
  switch (f) {
    case RowFormat::kFp8E8m0x32: return 32;
    case RowFormat::kFp4E4m3x16: return 16;
    case RowFormat::kFp4E8m0x32: return 32;
    default: return 0;
  }
}

bool is_fp4(RowFormat f) { return f == RowFormat::kFp4E4m3x16 || f == RowFormat::kFp4E8m0x32; }

}  // namespace

const char* row_format_name(RowFormat f) {
  switch (f) {
    case RowFormat::kF32: return "F32";
    case RowFormat::kBf16: return "BF16";
    case RowFormat::kFp8E8m0x32: return "FP8 e4m3 + UE8M0/32";
    case RowFormat::kFp4E4m3x16: return "FP4 e2m1 + E4M3/16";
    case RowFormat::kFp4E8m0x32: return "FP4 e2m1 + UE8M0/32";
  }
  return "?";
}

bool row_format_ok(RowFormat f, int64_t width) {
  const int64_t b = scale_block(f);
  return width >= 0 && (b == 0 || width % b == 0);
}

int64_t row_bytes(RowFormat f, int64_t width) {
  check(row_format_ok(f, width), "a row of ", width, " values cannot be stored as ", row_format_name(f));
  switch (f) {
    case RowFormat::kF32: return width * 4;
    case RowFormat::kBf16: return width * 2;
    case RowFormat::kFp8E8m0x32: return width + width / 32;
    case RowFormat::kFp4E4m3x16: return width / 2 + width / 16;
    case RowFormat::kFp4E8m0x32: return width / 2 + width / 32;
  }
  return 0;
}

void quantize_row(const float* x, int64_t width, RowFormat f, uint8_t* out) {
  if (f == RowFormat::kF32) return void(std::memcpy(out, x, width * sizeof(float)));
  if (f == RowFormat::kBf16) {
    for (int64_t c = 0; c < width; ++c) {
      const uint16_t b = float_to_bf16(x[c]);
      std::memcpy(out + 2 * c, &b, 2);
    }
    return;
  }
  const int64_t block = scale_block(f);
  const bool fp4 = is_fp4(f);
  uint8_t* scales = out + (fp4 ? width / 2 : width);
  if (fp4) std::fill_n(out, width / 2, uint8_t{0});
  // the amax floors and scale rules of CpuBackend::fake_quant_fp8 / _fp4 / _fp4_e4m3
  const float floor = f == RowFormat::kFp8E8m0x32   ? 1e-4f
                      : f == RowFormat::kFp4E4m3x16 ? 6.0f * std::ldexp(1.0f, -9)
                                                    : 6.0f * std::ldexp(1.0f, -126);
  const float qmax = fp4 ? kE2M1Max : kE4M3Max;
  for (int64_t b = 0; b < width / block; ++b) {
    const float* v = x + b * block;
    float amax = floor;
    for (int64_t i = 0; i < block; ++i) amax = std::max(amax, std::fabs(v[i]));
    uint8_t sb;
    float s;
    if (f == RowFormat::kFp4E4m3x16) {
      sb = float_to_e4m3(std::min(amax / kE2M1Max, kE4M3Max));
      s = e4m3_to_float(sb);
    } else {
      sb = ue8m0_ceil_byte(amax / qmax);
      s = e8m0_to_float(sb);
    }
    scales[b] = sb;
    for (int64_t i = 0; i < block; ++i) {
      const int64_t c = b * block + i;
      const float q = std::clamp(v[i] / s, -qmax, qmax);
      if (fp4)
        out[c / 2] |= static_cast<uint8_t>(float_to_e2m1(q) << (4 * (c % 2)));
      else
        out[c] = float_to_e4m3(q);
    }
  }
}

void dequantize_row(const uint8_t* row, int64_t width, RowFormat f, float* out) {
  if (f == RowFormat::kF32) return void(std::memcpy(out, row, width * sizeof(float)));
  if (f == RowFormat::kBf16) {
    for (int64_t c = 0; c < width; ++c) {
      uint16_t b;
      std::memcpy(&b, row + 2 * c, 2);
      out[c] = bf16_to_float(b);
    }
    return;
  }
  // every code's value (the readers decode whole rows on their hot path)
  static const auto tables = [] {
    std::array<float, 256 + 16> t{};
    for (int b = 0; b < 256; ++b) t[b] = e4m3_to_float(static_cast<uint8_t>(b));
    for (int n = 0; n < 16; ++n) t[256 + n] = e2m1_to_float(static_cast<uint8_t>(n));
    return t;
  }();
  const float* e4m3 = tables.data();
  const float* e2m1 = tables.data() + 256;
  const int64_t block = scale_block(f);
  const bool fp4 = is_fp4(f);
  const uint8_t* scales = row + (fp4 ? width / 2 : width);
  for (int64_t b = 0; b < width / block; ++b) {
    const float s = f == RowFormat::kFp4E4m3x16 ? e4m3[scales[b]] : e8m0_to_float(scales[b]);
    float* o = out + b * block;
    if (fp4) {
      const uint8_t* p = row + b * block / 2;
      for (int64_t i = 0; i < block / 2; ++i) {
        o[2 * i] = e2m1[p[i] & 0xf] * s;
        o[2 * i + 1] = e2m1[p[i] >> 4] * s;
      }
    } else {
      const uint8_t* p = row + b * block;
      for (int64_t i = 0; i < block; ++i) o[i] = e4m3[p[i]] * s;
    }
  }
}

}  // namespace deepinfer
