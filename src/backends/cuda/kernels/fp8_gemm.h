// FP8 e4m3 GEMM with UE8M0 block scales (DeepSeek's V4 / V4.1 weight format), raw device pointers:
//   y[m, n] = bf16( sum over K blocks b, in order, of (a_s[b, i] w_s[n / blk, b]) * sum_{k in b} a[i, k] w[n, k] )
// blk = 32 (V4.1: 32x32 weight blocks, 1x32 activation scales) or 128 (V4: 128x128 and 1x128).
// Each K block's partial is formed by the tensor cores in fp32 and promoted into an fp32 accumulator
// with its two scales (the accumulation order of the reference's block-scaled GEMM).
//
// Layouts (all row-major, strides in elements):
//   a       [m, k] e4m3, row stride lda
//   a_scale [k / blk, m] UE8M0 bytes, K-block-major (row stride ld_as >= m, a multiple of 16; 16-byte
//           aligned): what fp8_quantize_act writes,
//           so the scales of one K block for a run of tokens are contiguous
//   w       [n, k] e4m3, row stride ldw (the checkpoint's layout)
//   w_scale [ceil(n / blk), k / blk] UE8M0 bytes, row stride ld_ws (the checkpoint's layout)
//   y       [m, n] bf16 bits, row stride ldy
// MXFP4 weights (the routed experts) go to mxfp4_gemm.h's kernel (widened in registers) where it fits;
// otherwise (batch-invariant, k % 256 != 0, more than 256 rows a group) they are widened to e4m3 in shared
// memory (exact: every e2m1 value is an e4m3 value) by the producer warpgroup, their 1 x 32 scales applied
// in the promotion like the others.
// Requirements (checked, deepinfer::Error otherwise): k % 128 == 0; lda, ldw % 16 == 0; a, w 16-byte
// aligned; n, ldy even; m, n >= 1; groups <= 512.
//
// Kernel: TMA (128-byte swizzle) into a multi-stage shared-memory ring filled by one producer warpgroup,
// two consumer warpgroups issuing wgmma m64nNk32 into a partial per K block that is then scaled into the
// fp32 accumulator (one warpgroup's promotion overlaps the other's wgmmas). m <= 64 (decode) swaps the operands (weights on
// the 128-row side, tokens on the N = 16..64 side) and splits K over CTAs so the weight stream fills
// the GPU; the splits are reduced in a fixed order (no atomics), so results depend on (m, n, k) only.
#pragma once
#include <cstddef>
#include <cstdint>

namespace deepinfer::cuda {

enum class WeightFormat : int {
  kFp8Block = 0,  // e4m3 [n, k], UE8M0 per blk x blk: w_scale [ceil(n / blk), k / blk]
  kMxfp4 = 1,     // e2m1 two per byte (low nibble = even k) [n, k / 2], UE8M0 per 1 x 32, stored
                  // K-block-major like the activations' scales: w_scale [k / 32, groups * n]; n % 128 == 0
};

struct Fp8GemmArgs {
  const uint8_t* a = nullptr;
  int64_t lda = 0;
  const uint8_t* a_scale = nullptr;
  int64_t ld_as = 0;
  const uint8_t* w = nullptr;
  int64_t ldw = 0;  // bytes per weight row (k for FP8, k / 2 for MXFP4)
  const uint8_t* w_scale = nullptr;
  int64_t ld_ws = 0;
  uint16_t* y = nullptr;
  int64_t ldy = 0;
  // Instead of y (FP8 block weights only): the same bf16 values written widened to fp32 (the CUDA
  // backend's activations), saving a widening pass. Exactly one of y and y_f32 is set.
  float* y_f32 = nullptr;
  int64_t m = 0, n = 0, k = 0;
  int blk = 128;  // K block of both scales (MXFP4: 32)
  WeightFormat wfmt = WeightFormat::kFp8Block;
  // Grouped GEMM (the routed experts): groups > 0 and group_offsets[groups + 1] on the device, rows
  // [go[g], go[g + 1]) of a (and of y) multiplying group g's weights: rows [g n, (g + 1) n) of w and the
  // matching rows of w_scale. max_group_rows (<= m) is a host-side bound that picks the tile shape.
  int groups = 0;
  const int* group_offsets = nullptr;
  int64_t max_group_rows = 0;
  // Batch invariant: K is never split, so a row's result depends on (n, k) and its own inputs only,
  // not on m (the split count otherwise grows as m shrinks, and fp32 addition is not associative).
  bool batch_invariant = false;
};

// Bytes of device workspace fp8_gemm needs for this shape (0 when it runs unsplit; grouped never splits).
size_t fp8_gemm_workspace_bytes(int64_t m, int64_t n, int64_t k, int blk, bool batch_invariant = false);
// ... for this call (the split-K partials above, or the MXFP4 prefill kernel's bf16 activations, m x k x 2
// bytes, for MXFP4 weights past 24 rows a group on average); 16-byte aligned.
size_t fp8_gemm_workspace_bytes(const Fp8GemmArgs& args);
// Enqueues the GEMM on `stream` (a cudaStream_t); `workspace` holds fp8_gemm_workspace_bytes bytes.
void fp8_gemm(const Fp8GemmArgs& args, void* workspace, void* stream);

// Activation quantization (act_quant): x [m, k] bf16 (row stride ldx) -> q [m, k] e4m3 (row stride ldq)
// and scales [k / blk, m] UE8M0 (row stride ld_s), per 1 x blk block: amax floored at 1e-4,
// s = 2^ceil(log2(amax / 448)), q = e4m3(clamp(x / s, +-448)), RNE; bit-identical to the CPU backend's
// fake_quant_fp8. k % blk == 0, blk 32 or 128, ldx % 8 == 0, ldq % 8 == 0, 16-byte aligned x and q.
// The fp32 overload takes the model's fp32 activations (the same values when they hold bf16s).
void fp8_quantize_act(const uint16_t* x, int64_t ldx, int64_t m, int64_t k, int blk, uint8_t* q, int64_t ldq,
                      uint8_t* scale, int64_t ld_s, void* stream);
void fp8_quantize_act(const float* x, int64_t ldx, int64_t m, int64_t k, int blk, uint8_t* q, int64_t ldq,
                      uint8_t* scale, int64_t ld_s, void* stream);

}  // namespace deepinfer::cuda
