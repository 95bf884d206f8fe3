// The stored number formats on the device: e4m3 / UE8M0 / e2m1 encoders and decoders (core/dtype.cpp's
// recipes, RNE, bit for bit) and the state row formats of core/row_format.h (sizes, paged addressing,
// decoding and quantize_row's block quantization).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/row_format.h"

namespace deepinfer::cuda {

__device__ __forceinline__ float e4m3_to_float_d(uint32_t bits) {
  if ((bits & 0x7f) == 0x7f) return __int_as_float(0x7fc00000);
  const int e = (bits >> 3) & 0xf, m = bits & 7;
  const float v = e == 0 ? ldexpf(static_cast<float>(m), -9) : ldexpf(8.0f + m, e - 10);
  return (bits & 0x80) ? -v : v;
}
// UE8M0 scale byte: 2^(b - 127); byte 0 is the subnormal 2^-127, byte 0xff NaN.
__device__ __forceinline__ float e8m0_to_float_d(uint32_t b) {
  return b == 0xff ? __int_as_float(0x7fc00000) : __uint_as_float(b == 0 ? 0x00400000u : b << 23);
}
// e2m1 nibble (bit 3 the sign) from its bits: 0.5 m for exponent 0, (1 + m / 2) 2^(e - 1) otherwise.
__device__ __forceinline__ float e2m1_to_float_d(uint32_t nibble) {
  const uint32_t e = (nibble >> 1) & 3, m = nibble & 1;
  const uint32_t mag = e == 0 ? (m ? 0x3f000000u : 0u) : ((e + 126) << 23) | (m << 22);
  return __uint_as_float(mag | ((nibble & 8) << 28));
}

__device__ __forceinline__ uint32_t float_to_e4m3_d(float x) {
  uint32_t u = __float_as_uint(x);
  const uint32_t sign = (u >> 24) & 0x80;
  u &= 0x7fffffffu;
  if (u >= 0x43f00000u) return sign | 0x7f;
  if (u < 0x3c800000u) {
    const uint32_t r = __float_as_uint(__fadd_rn(__uint_as_float(u), 16384.0f)) - __float_as_uint(16384.0f);
    return sign | (r & 0xff);
  }
  u += 0xc4000000u + 0x7ffff + ((u >> 20) & 1);
  return (sign | (u >> 20)) & 0xff;
}

__device__ __forceinline__ uint32_t ue8m0_ceil_byte_d(float ratio) {
  const uint32_t u = __float_as_uint(ratio) & 0x7fffffffu;
  const uint32_t e = u >> 23, m = u & 0x7fffff;
  if (e == 0) return m <= 0x00400000u ? 0 : 1;
  if (e == 0xff || (e == 0xfe && m != 0)) return 0xff;
  return e + (m != 0);
}

__device__ __forceinline__ uint32_t float_to_e2m1_d(float x) {
  if (isnan(x)) return 0;
  const uint32_t sign = signbit(x) ? 8 : 0;
  const float a = fabsf(x);
  constexpr float kMid[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  uint32_t code = 0;
#pragma unroll
  for (uint32_t i = 0; i < 7; ++i)
    if (a > kMid[i] || (a == kMid[i] && (i & 1))) code = i + 1;
  return sign | code;
}

// --- state rows (core/row_format.h) ---
__host__ __device__ __forceinline__ int64_t row_bytes_d(RowFormat f, int64_t width) {
  switch (f) {
    case RowFormat::kF32: return width * 4;
    case RowFormat::kBf16: return width * 2;
    case RowFormat::kFp8E8m0x32: return width + width / 32;
    case RowFormat::kFp4E4m3x16: return width / 2 + width / 16;
    default: return width / 2 + width / 32;  // kFp4E8m0x32
  }
}
__host__ __device__ __forceinline__ int64_t paged_row_offset_d(int64_t r, int64_t rb, int64_t block_bytes) {
  if (block_bytes == 0) return r * rb;
  const int64_t per = block_bytes / rb;
  return (r / per) * block_bytes + (r % per) * rb;
}
// Value c of a quantized row of `width` values (kFp8E8m0x32, kFp4E4m3x16, kFp4E8m0x32): code x scale,
// an exact fp32 product.
__device__ __forceinline__ float row_value_d(const uint8_t* row, RowFormat f, int64_t width, int64_t c) {
  if (f == RowFormat::kFp8E8m0x32) return __fmul_rn(e4m3_to_float_d(row[c]), e8m0_to_float_d(row[width + c / 32]));
  const float code = e2m1_to_float_d((row[c / 2] >> (4 * (c & 1))) & 0xf);
  const uint32_t sb = row[width / 2 + (f == RowFormat::kFp4E4m3x16 ? c / 16 : c / 32)];
  return __fmul_rn(code, f == RowFormat::kFp4E4m3x16 ? e4m3_to_float_d(sb) : e8m0_to_float_d(sb));
}

}  // namespace deepinfer::cuda
