// Sparse (gathered) attention with a per-head sink on BF16 tensor cores, raw device pointers: V4.1's MLA-style
// attention, one 512-wide row per index serving as both K and V for all heads of a token.
//   s_j = scale <q[t, h], row(idx[t, j])>,  out[t, h] = sum_j softmax_j(s, sink[h]) row(idx[t, j])
// computed as the CPU backend's sparse_attention_online with block 64: an online softmax over chunks of 64
// indices (running max from -1e30, the sink excluded from it), probabilities rounded to bf16 against the
// running max before the P.V product, exp(sink - max) added to the denominator at the end.
// Rows: idx >= 0 is row idx of the state arena `pool` (paged in blocks of pool_block_bytes, core/row_format.h),
// idx <= -2 is row ops::fresh_row_index(idx) of `fresh` (back to back), -1 is none (a token with no row gives
// 0). Index columns j < window are window rows (RowFormat::kFp8E8m0x32: 512 e4m3 + 16 UE8M0, 528 bytes), the
// others compressed rows (kFp4E4m3x16: 256 bytes of e2m1 pairs + 32 E4M3 scales, 288 bytes; arena only);
// the gather decodes them to their exact bf16 values.
//
// Layouts: q [tokens, heads, 512] and out likewise (contiguous); idx [tokens, k] int32; sink [heads] fp32.
// q and out are bf16 (uint16 bits), or fp32 when `f32` is set (the CUDA backend's tensors: q is read
// rounded to bf16, exact for the model's bf16-valued data, and out is written unrounded).
// Requirements (checked): dim == 512, heads % 64 == 0, 16-byte aligned pointers, pool_block_bytes a
// multiple of 16.
//
// Kernel: one CTA per (token, 64 heads), 8 warps: warp w takes heads 16 (w % 4).. and the half w / 4 of the
// 512 channels. Each chunk's 64 rows are gathered once for all 64 heads into a swizzled, double-buffered
// shared-memory bf16 tile: each thread loads its share of the next chunk (codes and the scale of 8
// channels a piece) into registers in batches, each issued before one stretch of this chunk's math and
// decoded and stored after it. S = Q K^T by
// mma.sync m16n8k16 over each warp's 256 channels, the two halves summed through shared memory, then the
// online softmax in registers and O += P V with P straight from the S registers.
//
// Split (flash-decoding): with splits > 1 each (token, 64 heads) is shared by `splits` CTAs, split s taking
// chunks [s * c, (s + 1) * c) (c = ceil(chunks / splits)), each writing its unnormalized O, running max and
// sum to `partial`; a second kernel combines them in split order. Used where tokens x heads / 64 leaves
// the GPU's SMs idle (decode); the probabilities round against each split's own running max.
#pragma once
#include <cstdint>

namespace deepinfer::cuda {

struct SparseAttnArgs {
  const void* q = nullptr;
  const uint8_t* pool = nullptr;
  int64_t pool_block_bytes = 0;
  const uint8_t* fresh = nullptr;
  const int32_t* idx = nullptr;
  int64_t k = 0, window = 0;
  const float* sink = nullptr;
  float scale = 1.0f;
  void* out = nullptr;
  int64_t tokens = 0, heads = 0, dim = 512;
  bool f32 = false;  // q and out fp32 instead of bf16
  int64_t splits = 1;
  float* partial = nullptr;  // splits > 1: sparse_attention_partial_bytes of device scratch
};

// The splits that fill `sms` SMs for this shape (1: no split): a function of the shape only.
int64_t sparse_attention_splits(int64_t tokens, int64_t heads, int64_t k, int64_t sms);
size_t sparse_attention_partial_bytes(int64_t tokens, int64_t heads, int64_t splits);

void sparse_attention_bf16(const SparseAttnArgs& args, void* stream);

}  // namespace deepinfer::cuda
