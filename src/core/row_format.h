// The stored formats of state rows (a row kind's dtype in a state layout) and how a row is found in a
// paged arena. The quantized formats hold a row exactly as the reference's quantization point leaves it
// (DeepSeek-V4.1 inference/model.py): codes then scales, one row contiguous.
//   kFp8E8m0x32  e4m3 [width], then UE8M0 [width / 32]  (act_quant, block 32: the window K=V rows)
//   kFp4E4m3x16  e2m1 pairs [width / 2] (low nibble = even element), then E4M3 [width / 16]
//                (fp4_act_quant with E4M3 scales, block 16: the compressed KV rows)
//   kFp4E8m0x32  e2m1 pairs [width / 2], then UE8M0 [width / 32]  (fp4_act_quant, block 32: index keys)
// quantize_row computes the scale from the block's amax exactly as the CPU backend's fake_quant_* ops,
// so dequantize_row(quantize_row(x)) is bitwise fake_quant(x): each value is code x scale, an exact
// fp32 product that bf16 also holds exactly (docs/v41.md, "State").
#pragma once
#include <cstddef>
#include <cstdint>

namespace deepinfer {

enum class RowFormat : int32_t { kF32 = 0, kBf16 = 1, kFp8E8m0x32 = 2, kFp4E4m3x16 = 3, kFp4E8m0x32 = 4 };

const char* row_format_name(RowFormat f);
// Bytes of one row of `width` values (width must be a multiple of the format's block; checked).
int64_t row_bytes(RowFormat f, int64_t width);
bool row_format_ok(RowFormat f, int64_t width);  // width fits the format's block

// Row r of rows of `rb` bytes packed into blocks of `block_bytes` (rows never straddle a block; a block
// holds block_bytes / rb of them, the rest of it unused): its byte offset from the arena's base.
// block_bytes 0: rows back to back.
inline int64_t paged_row_offset(int64_t r, int64_t rb, int64_t block_bytes) {
  if (block_bytes == 0) return r * rb;
  const int64_t per = block_bytes / rb;
  return (r / per) * block_bytes + (r % per) * rb;
}

// Host reference codecs of the quantized formats (and kF32 / kBf16: a copy / RNE narrowing).
void quantize_row(const float* x, int64_t width, RowFormat f, uint8_t* out);
void dequantize_row(const uint8_t* row, int64_t width, RowFormat f, float* out);

}  // namespace deepinfer
