// Element types of checkpoints and activations, and exact scalar conversions between them and fp32.
// Rounding is round-to-nearest-even everywhere (as torch's casts), so fake-quantization here matches
// the reference bit for bit.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace deepinfer {

enum class DType : uint8_t {
  F64, F32, F16, BF16,
  F8_E4M3,    // OCP float8_e4m3fn: max 448, no infinities, 0x7f/0xff are NaN
  F8_E8M0,    // UE8M0 scale byte: value 2^(byte-127), 0xff is NaN
  F4_E2M1X2,  // two fp4 e2m1 values per byte, low nibble = even element
  I8, U8, I16, I32, I64, BOOL,
};

size_t dtype_bits(DType t);                                  // bits per element (F4_E2M1X2: 4)
std::string_view dtype_name(DType t);                        // safetensors spelling, e.g. "BF16"
std::optional<DType> dtype_from_name(std::string_view name); // accepts the safetensors spellings
bool dtype_is_float(DType t);

// --- 16-bit floats ---
inline float bf16_to_float(uint16_t bits) {  // exact; inline for the hot loops that read bf16 rows
  const uint32_t u = uint32_t{bits} << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
uint16_t float_to_bf16(float x);  // RNE, NaN stays NaN
// bf16_to_float(float_to_bf16(x)), inline for the hot loops that round activations to bf16.
inline float round_to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = x != x ? 0x7fc00000u : (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u;
  std::memcpy(&x, &u, 4);
  return x;
}
float fp16_to_float(uint16_t bits);
uint16_t float_to_fp16(float x);  // RNE, overflow to inf

// --- fp8 e4m3fn ---
float e4m3_to_float(uint8_t bits);
// RNE; a finite value whose rounded magnitude exceeds 448 becomes NaN (torch's non-saturating cast);
// callers that quantize clamp to +-448 first, as the reference does.
uint8_t float_to_e4m3(float x);
constexpr float kE4M3Max = 448.0f;

// --- UE8M0 power-of-two scales ---
float e8m0_to_float(uint8_t bits);
// The UE8M0 scale for a positive ratio r = amax / qmax: 2^ceil(log2 r) computed on the fp32 bits
// (exponent + 1 if any mantissa bit is set), returned as the stored byte. r must be > 0 and finite.
uint8_t ue8m0_ceil_byte(float ratio);

// --- fp4 e2m1 (one nibble, bit 3 = sign) ---
float e2m1_to_float(uint8_t nibble);
uint8_t float_to_e2m1(float x);   // RNE on the e2m1 grid, saturating at +-6
constexpr float kE2M1Max = 6.0f;

}  // namespace deepinfer
