// The MXFP4 expert GEMMs of fp8_gemm (the routed experts, grouped or not): fp8_gemm (fp8_gemm.h) calls
// them itself; the arguments and the result are fp8_gemm's, up to the fp32 summation order.
//
// Decode and small prefill (mxfp4_gemm.cu; up to 24 rows a group on average, 24 ungrouped): one CTA (a
// warpgroup) streams 64 rows of one active expert's weights once over the whole K, with the activations
// of a batch of up to NT of the group's tokens (NT = 8 up to 8 rows a group on average, else 32) and both
// scale sets, through a cp.async ring; a persistent grid walks (64-row slice, token batch, K stage) items
// with the next items' copies in flight across slices. Each warp widens its 16 rows' e2m1 codes in
// registers to e4m3 codes of 2^-6 times their value (same sign / exponent / mantissa layout, bias 6
// higher: shifts and masks) and feeds them as wgmma's A operand (m64nNTk32, A from registers). The
// activations, deinterleaved once a stage into even-k and odd-k halves of each K block to match the
// codes' nibble split, are B in shared memory. Each K block's fp32 partial is promoted with the two UE8M0
// scales (times 2^6) into fp32 accumulators, in K order. A group of more than NT rows takes them in
// batches of NT, each streaming the slice again. Scale bytes above 251 (2^124 and up) are read as 251.
//
// Prefill past 24 rows a group (mxfp4_prefill.cu): both scales folded into exact bf16 values (the
// activations once, by a pre-pass into the workspace), each warp widening its weight rows straight into
// the A registers of bf16 wgmma, 128 weight rows x up to 64 / 128 tokens a CTA, no promotion.
//
// Results depend on a row's own inputs only (no split K), not on m or the other groups; but the kernel
// and batch width follow the rows, so not batch-invariant (fp8_gemm's WGMMA path keeps that).
#pragma once
#include "backends/cuda/kernels/fp8_gemm.h"

namespace deepinfer::cuda {

// Whether these kernels take `a`: MXFP4, k % 256 == 0, n % 64 == 0, not batch-invariant (a token's bits
// would depend on which batch size the mean picks).
bool mxfp4_gemm_fits(const Fp8GemmArgs& a);
// Device workspace the call needs (the prefill kernel's bf16 activations; 0 for the decode one).
size_t mxfp4_gemm_workspace_bytes(const Fp8GemmArgs& a);
// Enqueues it (after fp8_gemm's argument checks).
void mxfp4_gemm(const Fp8GemmArgs& a, void* workspace, void* stream);

}  // namespace deepinfer::cuda
