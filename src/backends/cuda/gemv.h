// Decode GEMV for the CUDA backend (internal; bf16 and fp32 weights): y[m, n] = x[m, k] w[n, k]^T for m <= kGemvMaxM, streaming
// each weight row once with 16-byte loads. Accumulation order per output (fixed, independent of m and of
// how many weight rows a block takes, hence batch invariant over m = 1..kGemvMaxM): thread t of 128 sums
// its 16-byte chunks c = t, t + 128, ... in order as one sequential fp32 FMA chain (elements in order
// within a chunk), then a xor-butterfly over the warp, then the 4 warps' partials added in order.
#pragma once
#include <cstdint>

namespace deepinfer::cuda {

constexpr int64_t kGemvMaxM = 8;

// True when the kernel applies: 1 <= m <= kGemvMaxM, k a multiple of the elements per 16 bytes, x and w
// 16-byte aligned, sizes within int32.
bool gemv_fits(const void* x, int64_t m, int64_t k, const void* w, int64_t n, int64_t elem_bytes);
// bf16 x, w (uint16 bits), fp32 y and accumulation. Launches on `stream` (a cudaStream_t).
void gemv_bf16(const uint16_t* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y, void* stream);
// Block-diagonal: w stacks `groups` [rows, k] matrices, x rows hold groups * k channels, y [m, groups * rows]
// (ops::Backend::linear_block_diag); each output's order as gemv_bf16's; bf16_out rounds the outputs.
void gemv_bf16_block_diag(const uint16_t* x, int64_t m, int64_t k, int64_t groups, const uint16_t* w, int64_t rows,
                          bool bf16_out, float* y, void* stream);
// fp32 x, w (the mHC projections at decode).
void gemv_f32(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y, void* stream);
// Split K for few outputs over a long k (the mHC's 24 outputs of 20,480 channels fill 24 blocks alone):
// split s of `splits` sums its k / splits channels, as gemv_f32 sums a whole row, into row i, column j
// of partial + s * split_stride (rows n apart); the caller adds the splits in order. gemv_split_fits: k
// splits into whole 16-byte chunks.
bool gemv_split_fits(int64_t k, int64_t splits, int64_t elem_bytes);
void gemv_f32_split(const float* x, int64_t m, int64_t k, const float* w, int64_t n, int64_t splits, float* partial,
                    int64_t split_stride, void* stream);

}  // namespace deepinfer::cuda
