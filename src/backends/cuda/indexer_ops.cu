// The CUDA backend's V4.1 indexer ops (scores, candidate blocks, top-k, row lookup), in
// cpu_deepseek_ops.cpp's operation order; the selections run cpu::torch_topk's algorithms
// (torch_topk_device.h) with one thread per token, so ties break exactly as on the CPU. Simple, not
// yet tuned.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backends/cuda/cuda_internal.cuh"
#include "backends/cuda/torch_topk_device.h"

namespace deepinfer::cuda {
namespace {

using topk::Elem;

// cpu::dot's order: 8 interleaved partial sums (element c into sum c % 8, FMA as GCC contracts the
// CPU loop), combined as ((0+4)+(1+5))+((2+6)+(3+7)).
__device__ float dot8(const float* __restrict__ a, const float* __restrict__ b, int64_t n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t c = 0; c < n; ++c) s[c & 7] = __fmaf_rn(a[c], b[c], s[c & 7]);
  return __fadd_rn(__fadd_rn(__fadd_rn(s[0], s[4]), __fadd_rn(s[1], s[5])),
                   __fadd_rn(__fadd_rn(s[2], s[6]), __fadd_rn(s[3], s[7])));
}

// Block (token t, 128 columns): one thread per column w of the token's score row.
__global__ void index_scores_kernel(const float* __restrict__ q, const float* __restrict__ weight, int64_t heads,
                                    int64_t dim, const float* __restrict__ keys, const int32_t* __restrict__ key_rows,
                                    const int32_t* __restrict__ key_begin, const int32_t* __restrict__ width,
                                    const int32_t* __restrict__ visible, int64_t ld, float* scores) {
  const int64_t t = blockIdx.x, w = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (w >= ld) return;
  if (w >= visible[t] || w >= width[t]) {
    scores[t * ld + w] = -kInf;
    return;
  }
  const float* key = keys + static_cast<int64_t>(key_rows[key_begin[t] + w]) * dim;
  float acc = 0;
  for (int64_t h = 0; h < heads; ++h) {
    float r = bf16_round(dot8(q + (t * heads + h) * dim, key, dim));
    r = r < 0.0f ? 0.0f : r;  // std::max(r, 0.0f)
    acc = __fadd_rn(acc, bf16_round(__fmul_rn(r, weight[t * heads + h])));
  }
  scores[t * ld + w] = bf16_round(acc);
}

// One thread per token; mask is zeroed before. q: a row of ceil(ld / bs) (block maximum, block) pairs.
__global__ void candidate_mask_kernel(const float* __restrict__ scores, int64_t tokens, int64_t ld,
                                      const int32_t* __restrict__ width, const int32_t* __restrict__ clen,
                                      const int32_t* __restrict__ ranked, int64_t bs, int64_t topk_blocks,
                                      uint8_t* mask, Elem* q_all) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= tokens) return;
  const int64_t W = width[t], nb = (W + bs - 1) / bs, last = clen[t] >= 1 ? (clen[t] - 1) / bs : -1;
  const float* row = scores + t * ld;
  Elem* q = q_all + t * ((ld + bs - 1) / bs);
  for (int64_t b = 0; b < nb; ++b) {
    float m = -kInf;
    for (int64_t w = b * bs; w < min(W, (b + 1) * bs); ++w) m = m < row[w] ? row[w] : m;
    q[b] = {b == last ? kInf : m, static_cast<int32_t>(b)};
  }
  const int64_t nbt = min(static_cast<int64_t>(ranked[t]), nb), kb = min(topk_blocks, nbt);
  topk::torch_topk(q, nbt, kb, true);
  uint8_t* mk = mask + t * ld;
  for (int64_t j = 0; j < kb; ++j) {
    if (!(q[j].v > -kInf)) continue;
    const int64_t b = q[j].i;
    for (int64_t w = b * bs; w < min(W, (b + 1) * bs); ++w) mk[w] = 1;
  }
}

// One thread per token of this chunk: the masked row as (score, column) pairs, the top m, then the
// chosen columns in ascending order (marked in `chosen`, zeroed before, and read back in column order).
__global__ void index_select_kernel(const float* __restrict__ scores, const uint8_t* __restrict__ mask,
                                    int64_t tokens, int64_t ld, const int32_t* __restrict__ ranked,
                                    const int32_t* __restrict__ visible, const int32_t* __restrict__ topk, int64_t K,
                                    int32_t* sel, Elem* q_all, uint8_t* chosen_all) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= tokens) return;
  const int64_t r = ranked[t], m = min(static_cast<int64_t>(topk[t]), r);
  Elem* q = q_all + t * ld;
  uint8_t* chosen = chosen_all + t * ld;
  for (int64_t w = 0; w < r; ++w) q[w] = {mask && !mask[t * ld + w] ? -kInf : scores[t * ld + w], static_cast<int32_t>(w)};
  topk::torch_topk(q, r, m, false);
  for (int64_t j = 0; j < m; ++j) chosen[q[j].i] = 1;
  int32_t* out = sel + t * K;
  int64_t j = 0;
  for (int64_t w = 0; w < r && j < m; ++w)
    if (chosen[w]) out[j++] = w < visible[t] ? static_cast<int32_t>(w) : -1;
  for (; j < K; ++j) out[j] = -1;
}

__global__ void lookup_rows_kernel(const int32_t* __restrict__ in, int64_t tokens, int64_t k,
                                   const int32_t* __restrict__ table, const int32_t* __restrict__ begin, int32_t* out,
                                   int64_t out_ld) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= tokens * k) return;
  const int64_t t = e / k, j = e % k;
  const int32_t r = in[e];
  out[t * out_ld + j] = r < 0 ? -1 : table[begin[t] + r];
}

}  // namespace

void CudaBackend::index_scores(const float* q, const float* weight, int64_t tokens, int64_t heads, int64_t dim,
                               const float* keys, const int32_t* key_rows, const int32_t* key_begin,
                               const int32_t* width, const int32_t* visible, int64_t ld, float* scores) {
  constexpr int threads = 128;
  check_sizes(tokens >= 0 && heads >= 0 && dim >= 0 && ld >= 0 && tokens <= INT32_MAX &&
                  (ld + threads - 1) / threads <= 65535,
              "index_scores");
  if (tokens == 0 || ld == 0) return;
  impl_->bind();
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>((ld + threads - 1) / threads));
  index_scores_kernel<<<grid, threads, 0, impl_->stream>>>(q, weight, heads, dim, keys, key_rows, key_begin, width,
                                                           visible, ld, scores);
  check_launch("index_scores_kernel");
}

void CudaBackend::candidate_mask(const float* scores, int64_t tokens, int64_t ld, const int32_t* width,
                                 const int32_t* clen, const int32_t* ranked, int64_t block, int64_t topk_blocks,
                                 uint8_t* mask) {
  check_sizes(tokens >= 0 && ld >= 0 && block > 0 && topk_blocks >= 0, "candidate_mask");
  if (tokens == 0 || ld == 0) return;
  impl_->bind();
  check_cuda(cudaMemsetAsync(mask, 0, static_cast<size_t>(tokens * ld), impl_->stream), "candidate_mask (zero)");
  const int64_t nb = (ld + block - 1) / block;
  Elem* q = static_cast<Elem*>(impl_->workspace(static_cast<size_t>(tokens * nb) * sizeof(Elem)));
  candidate_mask_kernel<<<grid_for(tokens, 64), 64, 0, impl_->stream>>>(scores, tokens, ld, width, clen, ranked,
                                                                        block, topk_blocks, mask, q);
  check_launch("candidate_mask_kernel");
}

void CudaBackend::index_select(const float* scores, const uint8_t* mask, int64_t tokens, int64_t ld,
                               const int32_t* ranked, const int32_t* visible, const int32_t* topk, int64_t K,
                               int32_t* sel) {
  check_sizes(tokens >= 0 && ld >= 0 && K >= 0 && ld <= INT32_MAX, "index_select");
  if (tokens == 0 || K == 0) return;
  impl_->bind();
  // Per token: ld (score, column) pairs and ld flags; chunks of tokens keep the workspace <= 256 MiB.
  const size_t per_token = static_cast<size_t>(std::max<int64_t>(ld, 1)) * (sizeof(Elem) + 1);
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(tokens, (256u << 20) / per_token));
  char* ws = static_cast<char*>(impl_->workspace(chunk * per_token));
  Elem* q = reinterpret_cast<Elem*>(ws);
  uint8_t* chosen = reinterpret_cast<uint8_t*>(ws + chunk * ld * sizeof(Elem));
  for (int64_t t0 = 0; t0 < tokens; t0 += chunk) {
    const int64_t nt = std::min(chunk, tokens - t0);
    if (ld) check_cuda(cudaMemsetAsync(chosen, 0, static_cast<size_t>(nt * ld), impl_->stream), "index_select (zero)");
    index_select_kernel<<<grid_for(nt, 64), 64, 0, impl_->stream>>>(
        scores + t0 * ld, mask ? mask + t0 * ld : nullptr, nt, ld, ranked + t0, visible + t0, topk + t0, K,
        sel + t0 * K, q, chosen);
    check_launch("index_select_kernel");
  }
}

void CudaBackend::lookup_rows(const int32_t* in, int64_t tokens, int64_t k, const int32_t* table, const int32_t* begin,
                              int32_t* out, int64_t out_ld) {
  check_sizes(tokens >= 0 && k >= 0 && out_ld >= k, "lookup_rows");
  if (tokens * k == 0) return;
  impl_->bind();
  lookup_rows_kernel<<<grid_for(tokens * k, 256), 256, 0, impl_->stream>>>(in, tokens, k, table, begin, out, out_ld);
  check_launch("lookup_rows_kernel");
}

}  // namespace deepinfer::cuda
