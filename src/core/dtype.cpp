#include "core/dtype.h"

#include <bit>
#include <cmath>
#include <limits>

namespace deepinfer {

namespace {

struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t bits;
  bool is_float;
};

constexpr DTypeInfo kInfos[] = {
    {DType::F64, "F64", 64, true},          {DType::F32, "F32", 32, true},
    {DType::F16, "F16", 16, true},          {DType::BF16, "BF16", 16, true},
    {DType::F8_E4M3, "F8_E4M3", 8, true},   {DType::F8_E8M0, "F8_E8M0", 8, true},
    {DType::F4_E2M1X2, "F4", 4, true},  // safetensors' "F4": shape counts nibbles, two per byte
    {DType::I8, "I8", 8, false},            {DType::U8, "U8", 8, false},
    {DType::I16, "I16", 16, false},         {DType::I32, "I32", 32, false},
    {DType::I64, "I64", 64, false},         {DType::BOOL, "BOOL", 8, false},
};

const DTypeInfo& info(DType t) { return kInfos[static_cast<size_t>(t)]; }

float from_bits(uint32_t u) { return std::bit_cast<float>(u); }
uint32_t to_bits(float x) { return std::bit_cast<uint32_t>(x); }

constexpr float kE2M1Values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

}  // namespace

size_t dtype_bits(DType t) { return info(t).bits; }
std::string_view dtype_name(DType t) { return info(t).name; }
bool dtype_is_float(DType t) { return info(t).is_float; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const DTypeInfo& i : kInfos)
    if (i.name == name) return i.type;
  return std::nullopt;
}

uint16_t float_to_bf16(float x) {
  if (std::isnan(x)) return 0x7fc0;  // torch's canonical bf16 NaN
  uint32_t u = to_bits(x);
  u += 0x7fff + ((u >> 16) & 1);  // RNE on the 16 dropped bits; a carry into the exponent is correct
  return static_cast<uint16_t>(u >> 16);
}

float fp16_to_float(uint16_t bits) {
  const uint32_t sign = uint32_t{bits & 0x8000u} << 16;
  const uint32_t e = (bits >> 10) & 0x1f, m = bits & 0x3ff;
  if (e == 0x1f) return from_bits(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    const float v = std::ldexp(static_cast<float>(m), -24);  // subnormal: m * 2^-24, exact
    return sign ? -v : v;
  }
  return from_bits(sign | ((e + 112) << 23) | (m << 13));  // rebias 15 -> 127
}

uint16_t float_to_fp16(float x) {
  uint32_t u = to_bits(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return sign | 0x7e00 | static_cast<uint16_t>((u >> 13) & 0x3ff);  // quiet NaN
  if (u >= 0x477ff000u) return sign | 0x7c00;  // >= 65520 rounds to inf (and inf stays inf)
  if (u >= 0x38800000u) {                      // normal fp16 range, >= 2^-14
    u += 0xfff + ((u >> 13) & 1);
    return sign | static_cast<uint16_t>((u - 0x38000000u) >> 13);
  }
  // Subnormal: adding 0.5 (ulp 2^-24, the fp16 subnormal step) lets the FPU do the RNE.
  const uint32_t r = to_bits(from_bits(u) + 0.5f) - to_bits(0.5f);
  return sign | static_cast<uint16_t>(r);
}

float e4m3_to_float(uint8_t bits) {
  if ((bits & 0x7f) == 0x7f) return std::numeric_limits<float>::quiet_NaN();
  const int e = (bits >> 3) & 0xf, m = bits & 7;
  const float v = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(8.0f + m, e - 10);
  return (bits & 0x80) ? -v : v;
}

// Same bit recipe as c10's fp8e4m3fn_from_fp32_value, so results match torch exactly.
uint8_t float_to_e4m3(float x) {
  uint32_t u = to_bits(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80);
  u &= 0x7fffffffu;
  if (u >= 0x43f00000u) return sign | 0x7f;  // >= 480 (or inf/NaN): rounds past 448, NaN
  if (u < 0x3c800000u) {                     // below 2^-6: subnormal
    // Adding 2^14 (ulp 2^-9, the e4m3 subnormal step) lets the FPU do the RNE.
    const uint32_t r = to_bits(from_bits(u) + 16384.0f) - to_bits(16384.0f);
    return sign | static_cast<uint8_t>(r);
  }
  u += 0xc4000000u + 0x7ffff + ((u >> 20) & 1);  // rebias 127 -> 7 (mod 2^32), then RNE on 20 bits
  return sign | static_cast<uint8_t>(u >> 20);
}

float e8m0_to_float(uint8_t bits) {
  if (bits == 0xff) return std::numeric_limits<float>::quiet_NaN();
  return from_bits(bits == 0 ? 0x00400000u : uint32_t{bits} << 23);  // 2^-127 is an fp32 subnormal
}

// For normal ratios this is the reference's bit formula (byte = e + (m != 0)). Subnormal ratios
// (which the reference's amax floors never produce) get the true ceiling: 2^-127 (byte 0) when
// r <= 2^-127, else 2^-126 (byte 1). Ratios above 2^127 have no UE8M0 ceiling and give 0xff (NaN).
uint8_t ue8m0_ceil_byte(float ratio) {
  const uint32_t u = to_bits(ratio) & 0x7fffffffu;
  const uint32_t e = u >> 23, m = u & 0x7fffff;
  if (e == 0) return m <= 0x00400000u ? 0 : 1;
  if (e == 0xff || (e == 0xfe && m != 0)) return 0xff;
  return static_cast<uint8_t>(e + (m != 0));
}

float e2m1_to_float(uint8_t nibble) {
  const float v = kE2M1Values[nibble & 7];
  return (nibble & 8) ? -v : v;
}

uint8_t float_to_e2m1(float x) {
  // No NaN code exists; NaN maps to 0 (in fake-quant the NaN scale still carries NaN through).
  if (std::isnan(x)) return 0;
  const uint8_t sign = std::signbit(x) ? 8 : 0;
  const float a = std::fabs(x);
  // Midpoints between codes i and i+1; a tie goes up exactly when code i is odd (RNE).
  constexpr float kMid[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  uint8_t code = 0;
  for (uint8_t i = 0; i < 7; ++i)
    if (a > kMid[i] || (a == kMid[i] && (i & 1))) code = i + 1;
  return sign | code;
}

}  // namespace deepinfer
