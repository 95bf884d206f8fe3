// The vision tower's bidirectional attention on the tensor cores (internal; see vision_attention.cu).
#pragma once
#include <cstdint>

namespace deepinfer::cuda {

// out[t, h] = bf16(sum_j softmax_j(scale <q[t,h], k[j,h]>) v[j,h]) over t's sequence (rows seq_begin[s] ..
// seq_begin[s + 1], device memory, `seqs` sequences), head dim 64: q/k/v bf16 bits, row t at q + t * ld
// (heads x 64 values; the fused projection's [tokens, 3, heads, 64] has ld = 3 * heads * 64), out bf16 bits
// [tokens, heads, 64]; rows in no sequence are not written; scale > 0. On `stream` (a cudaStream_t).
void vision_attention_bf16(const uint16_t* q, const uint16_t* k, const uint16_t* v, int64_t ld, int64_t tokens,
                           int64_t heads, const int32_t* seq_begin, int64_t seqs, float scale, uint16_t* out,
                           void* stream);

}  // namespace deepinfer::cuda
