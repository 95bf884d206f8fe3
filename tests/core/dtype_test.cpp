// Exhaustive and tie-case tests of the scalar conversions in core/dtype.h, checked against the
// spec's tables (architecture §2.2-2.3) and formulas written independently of the implementation.
#include "core/dtype.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

namespace deepinfer {
namespace {

uint32_t bits_of(float x) { return std::bit_cast<uint32_t>(x); }
float float_of(uint32_t u) { return std::bit_cast<float>(u); }

// Same value, and same sign for zeros.
void expect_same(float got, float want, int code) {
  EXPECT_EQ(got, want) << "code " << code;
  EXPECT_EQ(std::signbit(got), std::signbit(want)) << "code " << code;
}

// e4m3fn by its definition: bias 7, subnormals at e == 0, S.1111.111 is NaN.
double e4m3_reference(int b) {
  const int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
  const double mag = e == 0 ? m / 8.0 * std::ldexp(1.0, -6) : (1 + m / 8.0) * std::ldexp(1.0, e - 7);
  return s ? -mag : mag;
}

TEST(DType, NamesAndBits) {
  const DType all[] = {DType::F64, DType::F32, DType::F16,  DType::BF16, DType::F8_E4M3,
                       DType::F8_E8M0, DType::F4_E2M1X2, DType::I8, DType::U8, DType::I16,
                       DType::I32, DType::I64, DType::BOOL};
  const size_t bits[] = {64, 32, 16, 16, 8, 8, 4, 8, 8, 16, 32, 64, 8};
  for (size_t i = 0; i < std::size(all); ++i) {
    EXPECT_EQ(dtype_bits(all[i]), bits[i]) << dtype_name(all[i]);
    EXPECT_EQ(dtype_from_name(dtype_name(all[i])), all[i]) << dtype_name(all[i]);
    EXPECT_EQ(dtype_is_float(all[i]), i <= 6) << dtype_name(all[i]);
  }
  EXPECT_EQ(dtype_name(DType::BF16), "BF16");
  EXPECT_EQ(dtype_name(DType::F8_E4M3), "F8_E4M3");
  EXPECT_EQ(dtype_from_name("bf16"), std::nullopt);
  EXPECT_EQ(dtype_from_name(""), std::nullopt);
}

TEST(E4M3, DecodeAll256) {
  for (int b = 0; b < 256; ++b) {
    const float v = e4m3_to_float(static_cast<uint8_t>(b));
    if ((b & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(v)) << b;
      continue;
    }
    expect_same(v, static_cast<float>(e4m3_reference(b)), b);
  }
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x7e), kE4M3Max);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_float(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
}

TEST(E4M3, RoundTripEveryCode) {
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;  // NaN
    EXPECT_EQ(float_to_e4m3(e4m3_to_float(static_cast<uint8_t>(b))), b) << b;
  }
}

TEST(E4M3, TiesGoToEvenAndNeighboursToNearest) {
  for (int b = 0; b < 0x7e; ++b) {
    for (int s : {0, 0x80}) {
      const double lo = e4m3_reference(b | s), hi = e4m3_reference((b + 1) | s);
      const float mid = static_cast<float>((lo + hi) / 2);  // exact: needs 5 significant bits
      const int even = (b & 1) ? b + 1 : b;
      EXPECT_EQ(float_to_e4m3(mid), even | s) << "tie between " << b << " and " << b + 1;
      EXPECT_EQ(float_to_e4m3(std::nextafter(mid, 0.0f)), b | s);
      EXPECT_EQ(float_to_e4m3(std::nextafter(mid, s ? -1e9f : 1e9f)), (b + 1) | s);
    }
  }
}

TEST(E4M3, NonSaturatingOverflowAndSpecials) {
  EXPECT_EQ(float_to_e4m3(448.0f), 0x7e);
  EXPECT_EQ(float_to_e4m3(464.0f), 0x7e);  // tie between 448 and 480: even mantissa, stays finite
  EXPECT_EQ(float_to_e4m3(-464.0f), 0xfe);
  EXPECT_EQ(float_to_e4m3(std::nextafter(464.0f, 1e9f)) & 0x7f, 0x7f);  // rounds past 448: NaN
  EXPECT_EQ(float_to_e4m3(1e6f), 0x7f);
  EXPECT_EQ(float_to_e4m3(-1e6f), 0xff);
  EXPECT_EQ(float_to_e4m3(INFINITY), 0x7f);
  EXPECT_TRUE(std::isnan(e4m3_to_float(float_to_e4m3(NAN))));
  EXPECT_EQ(float_to_e4m3(1e-30f), 0x00);
  EXPECT_EQ(float_to_e4m3(-1e-30f), 0x80);
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -10)), 0x00);        // tie 0 / 2^-9 -> 0
  EXPECT_EQ(float_to_e4m3(3 * std::ldexp(1.0f, -10)), 0x02);    // tie 2^-9 / 2^-8 -> 2^-8
}

TEST(E8M0, DecodeAll256) {
  for (int b = 0; b < 255; ++b) EXPECT_EQ(e8m0_to_float(static_cast<uint8_t>(b)), std::ldexp(1.0f, b - 127)) << b;
  EXPECT_TRUE(std::isnan(e8m0_to_float(0xff)));
  EXPECT_EQ(e8m0_to_float(127), 1.0f);
  EXPECT_EQ(bits_of(e8m0_to_float(0)), 0x00400000u);  // 2^-127 is an fp32 subnormal
}

TEST(E8M0, CeilByteRoundTripsEveryCode) {
  for (int b = 0; b < 255; ++b) EXPECT_EQ(ue8m0_ceil_byte(e8m0_to_float(static_cast<uint8_t>(b))), b) << b;
}

TEST(E8M0, CeilBytePowersOfTwoAndNeighbours) {
  for (int k = -126; k <= 127; ++k) {
    const float p = std::ldexp(1.0f, k);
    EXPECT_EQ(ue8m0_ceil_byte(p), k + 127) << k;
    EXPECT_EQ(ue8m0_ceil_byte(std::nextafter(p, INFINITY)), k + 128) << k;  // 0xff above 2^127
    EXPECT_EQ(ue8m0_ceil_byte(std::nextafter(p, 0.0f)), k + 127) << k;
  }
  // The spec's formula on fp32 bits: k = e - 127 + (m != 0), byte = k + 127.
  std::mt19937 rng(7);
  for (int i = 0; i < 100000; ++i) {
    const uint32_t u = (rng() % 0x7f000000u) + 0x00800000u;  // normal, below 2^127
    EXPECT_EQ(ue8m0_ceil_byte(float_of(u)), (u >> 23) + ((u & 0x7fffff) != 0)) << std::hex << u;
  }
  EXPECT_EQ(ue8m0_ceil_byte(448.0f / 448.0f), 127);
  EXPECT_EQ(ue8m0_ceil_byte(1e-4f / 448.0f), 127 - 22);  // 2^-23 < 2.23e-7 <= 2^-22
  // Subnormal ratios get the true ceiling: 2^-127 (byte 0) up to 2^-127, else 2^-126 (byte 1).
  EXPECT_EQ(ue8m0_ceil_byte(float_of(1)), 0);
  EXPECT_EQ(ue8m0_ceil_byte(float_of(0x00400000u)), 0);
  EXPECT_EQ(ue8m0_ceil_byte(float_of(0x00400001u)), 1);
  EXPECT_EQ(ue8m0_ceil_byte(float_of(0x007fffffu)), 1);
  EXPECT_EQ(ue8m0_ceil_byte(3e38f), 0xff);
}

TEST(E2M1, DecodeAll16AgainstSpecTable) {
  const float table[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int c = 0; c < 16; ++c) expect_same(e2m1_to_float(static_cast<uint8_t>(c)), table[c], c);
  EXPECT_EQ(e2m1_to_float(7), kE2M1Max);
}

TEST(E2M1, RoundTripEveryCode) {
  for (int c = 0; c < 16; ++c) EXPECT_EQ(float_to_e2m1(e2m1_to_float(static_cast<uint8_t>(c))), c) << c;
}

TEST(E2M1, TiesAndSaturation) {
  const std::pair<float, int> cases[] = {{0.25f, 0}, {0.75f, 2}, {1.25f, 2}, {1.75f, 4}, {2.5f, 4},
                                         {3.5f, 6},  {5.0f, 6},  {6.5f, 7},  {100.0f, 7}, {INFINITY, 7}};
  for (auto [x, code] : cases) {
    EXPECT_EQ(float_to_e2m1(x), code) << x;
    EXPECT_EQ(float_to_e2m1(-x), code | 8) << -x;
  }
  EXPECT_EQ(float_to_e2m1(-0.1f), 8);
}

// Nearest grid value by brute force, ties to the even code.
int e2m1_reference(float x) {
  const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  const float a = std::min(std::fabs(x), 6.0f);
  int best = 0;
  for (int c = 1; c < 8; ++c) {
    const float d = std::fabs(a - grid[c]), db = std::fabs(a - grid[best]);
    if (d < db || (d == db && c % 2 == 0)) best = c;
  }
  return best | (std::signbit(x) ? 8 : 0);
}

TEST(E2M1, MatchesBruteForceNearest) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-8.0f, 8.0f);
  for (int i = 0; i < 200000; ++i) {
    const float x = dist(rng);
    EXPECT_EQ(float_to_e2m1(x), e2m1_reference(x)) << x;
  }
  for (float mid : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f})
    for (float x : {std::nextafter(mid, 0.0f), std::nextafter(mid, 9.0f)})
      EXPECT_EQ(float_to_e2m1(x), e2m1_reference(x)) << x;
}

// The nearer of the two bf16 values bracketing x (ties to even), by distance in double.
uint16_t bf16_reference(float x) {
  const uint32_t u = bits_of(x);
  const uint16_t lo = static_cast<uint16_t>(u >> 16), hi = lo + 1;
  if ((u & 0xffff) == 0) return lo;
  auto value = [](uint16_t h) {  // the pattern after the largest finite one stands for 2^128
    return (h & 0x7fff) == 0x7f80 ? std::copysign(std::ldexp(1.0, 128), (h & 0x8000) ? -1.0 : 1.0)
                                  : static_cast<double>(float_of(uint32_t{h} << 16));
  };
  const double dl = std::fabs(x - value(lo)), dh = std::fabs(x - value(hi));
  return dl < dh ? lo : dh < dl ? hi : ((lo & 1) ? hi : lo);
}

TEST(BF16, DecodeAndRoundTripAllCodes) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float v = bf16_to_float(static_cast<uint16_t>(h));
    EXPECT_EQ(bits_of(v), h << 16);
    if (std::isnan(v)) EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(v))));
    else EXPECT_EQ(float_to_bf16(v), h);
  }
}

TEST(BF16, TiesAndRandomValues) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7f80) == 0x7f80) continue;  // inf / NaN have no midpoint above them
    const float mid = float_of(h << 16 | 0x8000);
    EXPECT_EQ(float_to_bf16(mid), (h & 1) ? h + 1 : h) << std::hex << h;
  }
  std::mt19937 rng(3);
  for (int i = 0; i < 1000000; ++i) {
    const float x = float_of(rng());
    if (std::isnan(x)) continue;
    ASSERT_EQ(float_to_bf16(x), bf16_reference(x)) << std::hex << bits_of(x);
  }
  EXPECT_EQ(float_to_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(float_to_bf16(-INFINITY), 0xff80);
  EXPECT_EQ(float_to_bf16(3.4e38f), 0x7f80);  // rounds up past the largest finite bf16
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(float_of(0x7f800001u)))));  // NaN, not inf
}

TEST(FP16, DecodeAllCodesAgainstCompiler) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float v = fp16_to_float(static_cast<uint16_t>(h));
    const float want = static_cast<float>(std::bit_cast<_Float16>(static_cast<uint16_t>(h)));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(v)) << h;
      EXPECT_EQ(float_to_fp16(v) & 0x7e00, 0x7e00) << h;  // NaN stays (quiet) NaN
    } else {
      expect_same(v, want, static_cast<int>(h));
      EXPECT_EQ(float_to_fp16(v), h);
    }
  }
}

TEST(FP16, TiesSubnormalsAndRandomValuesAgainstCompiler) {
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const double lo = fp16_to_float(static_cast<uint16_t>(h));
    const double hi = h + 1 == 0x7c00 ? 65536.0 : fp16_to_float(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((lo + hi) / 2);  // exact: needs 12 significant bits
    EXPECT_EQ(float_to_fp16(mid), (h & 1) ? h + 1 : h) << h;
    EXPECT_EQ(float_to_fp16(-mid), ((h & 1) ? h + 1 : h) | 0x8000) << h;
  }
  std::mt19937 rng(5);
  for (int i = 0; i < 1000000; ++i) {
    // Half the samples in the fp16 range and just below it, where the interesting rounding is.
    const uint32_t u = (i & 1) ? rng() : (rng() & 0x80000000u) | (0x33000000u + rng() % 0x14800000u);
    const float x = float_of(u);
    if (std::isnan(x)) continue;
    ASSERT_EQ(float_to_fp16(x), std::bit_cast<uint16_t>(static_cast<_Float16>(x))) << std::hex << u;
  }
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7c00);  // tie with the next binade: rounds to inf
  EXPECT_EQ(float_to_fp16(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(float_to_fp16(-INFINITY), 0xfc00);
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -25)), 0x0000);              // tie 0 / 2^-24
  EXPECT_EQ(float_to_fp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(float_to_fp16(3 * std::ldexp(1.0f, -25)), 0x0002);          // tie 1 / 2 (x 2^-24)
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -14)), 0x0400);
}

}  // namespace
}  // namespace deepinfer
