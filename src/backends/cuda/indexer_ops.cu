// The CUDA backend's V4.1 indexer ops (scores, candidate blocks, top-k, row lookup), in
// cpu_deepseek_ops.cpp's operation order. The top-k is kernels/index_topk.h (radix select, the CPU's
// tie breaking replayed); the candidate blocks are the same top-k over the rows of block maxima.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backends/cuda/cuda_internal.cuh"
#include "backends/cuda/kernels/index_topk.h"

namespace deepinfer::cuda {
namespace {

// cpu::dot's order over a stored index key (kFp4E8m0x32, decoded exactly): 8 interleaved partial sums (element c
// into sum c % 8, FMA as GCC contracts the CPU loop), combined as ((0+4)+(1+5))+((2+6)+(3+7)).
__device__ float dot8(const float* __restrict__ a, const uint8_t* __restrict__ key, int64_t n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t c = 0; c < n; ++c) s[c & 7] = __fmaf_rn(a[c], row_value_d(key, RowFormat::kFp4E8m0x32, n, c), s[c & 7]);
  return __fadd_rn(__fadd_rn(__fadd_rn(s[0], s[4]), __fadd_rn(s[1], s[5])),
                   __fadd_rn(__fadd_rn(s[2], s[6]), __fadd_rn(s[3], s[7])));
}

// Column w of token t's score row: its key row, or nullptr (and -inf written) where w is past the
// token's visible or ranked width. The grids below run one thread per column.
template <class K>
__device__ __forceinline__ const K* index_key(int64_t t, int64_t w, int64_t dim, const K* keys,
                                                  const int32_t* key_rows, const int32_t* key_begin,
                                                  const int32_t* width, const int32_t* visible, int64_t ld,
                                                  float* scores) {
  if (w >= visible[t] || w >= width[t]) {
    scores[t * ld + w] = -kInf;
    return nullptr;
  }
  return keys + static_cast<int64_t>(key_rows[key_begin[t] + w]) * dim;
}

// Block (token t, 128 columns): one thread per column w of the token's score row.
__global__ void index_scores_kernel(const float* __restrict__ q, const float* __restrict__ weight, int64_t heads,
                                    int64_t dim, const uint8_t* __restrict__ keys, int64_t block_bytes,
                                    const int32_t* __restrict__ key_rows, const int32_t* __restrict__ key_begin,
                                    const int32_t* __restrict__ width, const int32_t* __restrict__ visible, int64_t ld,
                                    float* scores) {
  const int64_t t = blockIdx.x, w = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (w >= ld) return;
  if (w >= visible[t] || w >= width[t]) {
    scores[t * ld + w] = -kInf;
    return;
  }
  const uint8_t* key = keys + paged_row_offset_d(key_rows[key_begin[t] + w],
                                                 row_bytes_d(RowFormat::kFp4E8m0x32, dim), block_bytes);
  float acc = 0;
  for (int64_t h = 0; h < heads; ++h) {
    float r = bf16_round(dot8(q + (t * heads + h) * dim, key, dim));
    r = r < 0.0f ? 0.0f : r;  // std::max(r, 0.0f)
    acc = __fadd_rn(acc, bf16_round(__fmul_rn(r, weight[t * heads + h])));
  }
  scores[t * ld + w] = bf16_round(acc);
}

// index_scores_fp32 (V4's indexer): the same grid, fp32 throughout, the dot in channel order.
__global__ void index_scores_fp32_kernel(const float* __restrict__ q, const float* __restrict__ weight, int64_t heads,
                                         int64_t dim, const float* __restrict__ keys,
                                         const int32_t* __restrict__ key_rows, const int32_t* __restrict__ key_begin,
                                         const int32_t* __restrict__ width, const int32_t* __restrict__ visible,
                                         int64_t ld, float scale, float* scores) {
  const int64_t t = blockIdx.x, w = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (w >= ld) return;
  const float* key = index_key(t, w, dim, keys, key_rows, key_begin, width, visible, ld, scores);
  if (!key) return;
  float acc = 0;
  for (int64_t h = 0; h < heads; ++h) {
    const float* qh = q + (t * heads + h) * dim;
    float d = 0;
    for (int64_t c = 0; c < dim; ++c) d = __fmaf_rn(qh[c], key[c], d);
    acc = __fadd_rn(acc, __fmul_rn(__fmul_rn(d < 0.0f ? 0.0f : d, scale), weight[t * heads + h]));
  }
  scores[t * ld + w] = acc;
}

// index_select_stable: block = token; thread w ranks column w against every ranked column ((score
// descending, column ascending): a plain O(ranked^2) count, exact), then one pass writes the chosen
// columns in column order.
__global__ void index_select_stable_kernel(const float* __restrict__ scores, int64_t ld,
                                           const int32_t* __restrict__ ranked, const int32_t* __restrict__ visible,
                                           const int32_t* __restrict__ topk, int64_t K, uint8_t* chosen,
                                           int32_t* sel) {
  const int64_t t = blockIdx.x, r = ranked[t], m = topk[t] < r ? topk[t] : r;
  const float* row = scores + t * ld;
  uint8_t* ch = chosen + t * ld;
  for (int64_t w = threadIdx.x; w < r; w += blockDim.x) {
    const float v = row[w];
    int64_t rank = 0;
    for (int64_t u = 0; u < r && rank < m; ++u) rank += row[u] > v || (row[u] == v && u < w);
    ch[w] = rank < m;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  int64_t j = 0;
  for (int64_t w = 0; w < r && j < m; ++w)
    if (ch[w]) sel[t * K + j++] = w < visible[t] ? static_cast<int32_t>(w) : -1;
  for (; j < K; ++j) sel[t * K + j] = -1;
}

// index_scores at dim 128 (V4.1's indexer): CTA = (token, 64 keys), 8 warps. The token's q (32 heads
// at a time) and the 64 key rows are staged in shared memory; a group of 8 lanes computes an 8 heads x 8
// keys tile, lane j the partial sum j of cpu::dot's order (channels c = j, j+8, ..) for all 64 pairs,
// then a reduce-scatter over the group (xor 4, 1, 2) adds the partials as dot8 does,
// ((0+4)+(1+5))+((2+6)+(3+7)), so the scores stay bit for bit the CPU's. The 8 partials of a lane are
// 16 contiguous floats (a row is stored channel-permuted, 20 floats per partial: conflict-free 16-byte
// reads). One thread per key then sums the heads' terms in head order.
constexpr int kScDim = 128, kScKeys = 64, kScHeads = 32, kScThreads = 256, kScRow = 8 * 20;
constexpr int kScKeyBytes = kScDim / 2 + kScDim / 32;  // a stored index key (kFp4E8m0x32)
constexpr size_t kScSmem = sizeof(float) * ((kScHeads + kScKeys) * kScRow + kScHeads * (kScKeys + 1));

__device__ __forceinline__ int sc_pos(int c) { return (c & 7) * 20 + (c >> 3); }
// Channels 4 l .. 4 l + 3 of a row into its permuted shared-memory copy.
__device__ __forceinline__ void sc_store(float* d, int l, float4 v) {
  d[sc_pos(4 * l)] = v.x, d[sc_pos(4 * l + 1)] = v.y, d[sc_pos(4 * l + 2)] = v.z, d[sc_pos(4 * l + 3)] = v.w;
}

__global__ void __launch_bounds__(kScThreads, 2) index_scores_d128_kernel(
    const float* __restrict__ q, const float* __restrict__ weight, int64_t heads, const uint8_t* __restrict__ keys,
    int64_t block_bytes, const int32_t* __restrict__ key_rows, const int32_t* __restrict__ key_begin, const int32_t* __restrict__ width,
    const int32_t* __restrict__ visible, int64_t ld, float* scores) {
  extern __shared__ float4 sc_smem[];
  float* sq = reinterpret_cast<float*>(sc_smem);  // [32 heads][kScRow]
  float* sk = sq + kScHeads * kScRow;              // [64 keys][kScRow]
  float (*terms)[kScKeys + 1] = reinterpret_cast<float (*)[kScKeys + 1]>(sk + kScKeys * kScRow);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 3, j = lane & 7;
  const int64_t t = blockIdx.x, w0 = static_cast<int64_t>(blockIdx.y) * kScKeys;
  const int64_t vw = visible[t] < width[t] ? visible[t] : width[t];
  const int64_t nvalid = (vw < ld ? vw : ld) - w0;
  if (tid < kScKeys && w0 + tid < ld && tid >= nvalid) scores[t * ld + w0 + tid] = -kInf;
  if (nvalid <= 0) return;
  // Keys (kFp4E8m0x32: 64 bytes of e2m1 pairs, 4 UE8M0 scales): warp w stages rows w, w + 8, ..; a lane
  // decodes 4 channels (one 2-byte load and its scale).
  for (int r = warp; r < kScKeys; r += 8) {
    float4 v = make_float4(0, 0, 0, 0);
    if (r < nvalid) {
      const uint8_t* key = keys + paged_row_offset_d(key_rows[key_begin[t] + w0 + r], kScKeyBytes, block_bytes);
      const uint32_t b = reinterpret_cast<const uint16_t*>(key)[lane];
      const float sc = e8m0_to_float_d(key[kScDim / 2 + lane / 8]);
      v = make_float4(__fmul_rn(e2m1_to_float_d(b & 0xf), sc), __fmul_rn(e2m1_to_float_d((b >> 4) & 0xf), sc),
                      __fmul_rn(e2m1_to_float_d((b >> 8) & 0xf), sc), __fmul_rn(e2m1_to_float_d(b >> 12), sc));
    }
    sc_store(sk + r * kScRow, lane, v);
  }
  // Warp w: heads 8 (w % 4) .. + 7 of the chunk; keys (w / 4) * 32 + g + 4 c', c' = 0..7 (rows of the 4
  // groups of a warp 1 apart: their reads fall in different banks).
  const int hb = 8 * (warp & 3), kb = (warp >> 2) * 32 + g;
  float acc = 0;  // thread tid < 64: the head sum of key tid
  for (int64_t h0 = 0; h0 < heads; h0 += kScHeads) {
    __syncthreads();  // sq / terms of the previous chunk consumed
    for (int r = warp; r < kScHeads; r += 8) {
      float4 v = make_float4(0, 0, 0, 0);
      if (h0 + r < heads) v = reinterpret_cast<const float4*>(q + (t * heads + h0 + r) * kScDim)[lane];
      sc_store(sq + r * kScRow, lane, v);
    }
    __syncthreads();
    float s[8][8];
#pragma unroll
    for (int a = 0; a < 8; ++a)
#pragma unroll
      for (int b = 0; b < 8; ++b) s[a][b] = 0;
#pragma unroll
    for (int i4 = 0; i4 < 16; i4 += 4) {  // channels j + 8 i, i ascending: the FMA order of partial j
      float4 qa[8];
#pragma unroll
      for (int a = 0; a < 8; ++a) qa[a] = *reinterpret_cast<const float4*>(sq + (hb + a) * kScRow + j * 20 + i4);
#pragma unroll
      for (int b = 0; b < 8; ++b) {
        const float4 kv = *reinterpret_cast<const float4*>(sk + (kb + 4 * b) * kScRow + j * 20 + i4);
#pragma unroll
        for (int a = 0; a < 8; ++a) {
          s[a][b] = __fmaf_rn(qa[a].x, kv.x, s[a][b]);
          s[a][b] = __fmaf_rn(qa[a].y, kv.y, s[a][b]);
          s[a][b] = __fmaf_rn(qa[a].z, kv.z, s[a][b]);
          s[a][b] = __fmaf_rn(qa[a].w, kv.w, s[a][b]);
        }
      }
    }
    // Reduce-scatter of the 64 pairs over the group's 8 lanes. Step xor 4 keeps the heads a with bit 2
    // equal to lane bit 2, xor 1 the keys b with bit 2 equal to lane bit 0, xor 2 the keys with bit 1
    // equal to lane bit 1: lane j ends with heads {a : a>>2 == j>>2} x keys {b : b>>1 == (j&1)*2 + (j>>1&1)}.
    const bool l2 = j & 4, l0 = j & 1, l1 = j & 2;
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 8; ++b) {
        const float send = l2 ? s[a][b] : s[a + 4][b];
        const float got = __shfl_xor_sync(0xffffffffu, send, 4);
        s[a][b] = __fadd_rn(l2 ? s[a + 4][b] : s[a][b], got);  // now: head a + 4 * l2
      }
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const float send = l0 ? s[a][b] : s[a][b + 4];
        const float got = __shfl_xor_sync(0xffffffffu, send, 1);
        s[a][b] = __fadd_rn(l0 ? s[a][b + 4] : s[a][b], got);  // key b + 4 * l0
      }
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        const float send = l1 ? s[a][b] : s[a][b + 2];
        const float got = __shfl_xor_sync(0xffffffffu, send, 2);
        s[a][b] = __fadd_rn(l1 ? s[a][b + 2] : s[a][b], got);  // key b + 2 * l1 + 4 * l0
      }
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        const int h = hb + a + 4 * l2, kk = kb + 4 * (b + 2 * l1 + 4 * l0);
        float r = bf16_round(s[a][b]);
        r = r < 0.0f ? 0.0f : r;  // std::max(r, 0.0f)
        terms[h][kk] = h0 + h < heads ? bf16_round(__fmul_rn(r, weight[t * heads + h0 + h])) : 0.0f;
      }
    __syncthreads();
    if (tid < kScKeys)
      for (int h = 0; h < kScHeads && h0 + h < heads; ++h) acc = __fadd_rn(acc, terms[h][tid]);
  }
  if (tid < nvalid && tid < kScKeys) scores[t * ld + w0 + tid] = bf16_round(acc);
}

// candidate_mask, step 1. Thread (token t, block b): bv[t, b] = the block maximum (std::max's order: a NaN
// never enters), +inf for block (clen - 1) / bs, -inf past the token's nb blocks (up to ldb); flag[t, b] = 0.
// Thread b == 0 also writes the token's ranked blocks min(ranked, nb) and the top-k count for index_topk.
__global__ void block_max_kernel(const float* __restrict__ scores, int64_t ld, const int32_t* __restrict__ width,
                                 const int32_t* __restrict__ clen, const int32_t* __restrict__ ranked, int64_t bs,
                                 int32_t topk_blocks, int64_t ldb, float* bv, uint8_t* flag, int32_t* ranked_b,
                                 int32_t* topk_b) {
  const int64_t t = blockIdx.x, b = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b >= ldb) return;
  const int64_t W = width[t], nb = (W + bs - 1) / bs, last = clen[t] >= 1 ? (clen[t] - 1) / bs : -1;
  const float* row = scores + t * ld;
  float m = -kInf;
  for (int64_t w = b * bs; w < min(W, (b + 1) * bs); ++w) m = m < row[w] ? row[w] : m;
  bv[t * ldb + b] = b < nb && b == last ? kInf : m;
  flag[t * ldb + b] = 0;
  if (b == 0) {
    ranked_b[t] = static_cast<int32_t>(min(static_cast<int64_t>(ranked[t]), nb));
    topk_b[t] = topk_blocks;
  }
}

// Step 3: the chosen blocks (index_topk's sel rows, -1 padded) whose maximum is > -inf get flag 1.
__global__ void block_flag_kernel(const int32_t* __restrict__ sel, int64_t tokens, int64_t K,
                                  const float* __restrict__ bv, int64_t ldb, uint8_t* flag) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= tokens * K) return;
  const int64_t t = e / K, b = sel[e];
  if (b >= 0 && bv[t * ldb + b] > -kInf) flag[t * ldb + b] = 1;
}

// Step 4: every mask byte of the token's row: 1 in the first width[t] columns of a flagged block.
__global__ void block_mask_kernel(const uint8_t* __restrict__ flag, int64_t ldb, const int32_t* __restrict__ width,
                                  int64_t ld, int64_t bs, uint8_t* mask) {
  const int64_t t = blockIdx.x, w = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (w >= ld) return;
  mask[t * ld + w] = w < width[t] && flag[t * ldb + w / bs];
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
                               const uint8_t* keys, int64_t key_block_bytes, const int32_t* key_rows,
                               const int32_t* key_begin, const int32_t* width, const int32_t* visible, int64_t ld,
                               float* scores) {
  constexpr int threads = 128;
  check_sizes(tokens >= 0 && heads >= 0 && dim >= 0 && dim % 32 == 0 && ld >= 0 && tokens <= INT32_MAX &&
                  key_block_bytes >= 0 && (ld + threads - 1) / threads <= 65535,
              "index_scores");
  if (tokens == 0 || ld == 0) return;
  impl_->bind();
  // the d128 kernel's 2-byte key loads: rows at even offsets (68-byte rows in even-sized blocks)
  if (dim == kScDim && (reinterpret_cast<uintptr_t>(q) & 15) == 0 && (reinterpret_cast<uintptr_t>(keys) & 1) == 0 &&
      key_block_bytes % 2 == 0) {
    check_sizes((ld + kScKeys - 1) / kScKeys <= 65535, "index_scores");
    const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>((ld + kScKeys - 1) / kScKeys));
    check_cuda(cudaFuncSetAttribute(index_scores_d128_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(kScSmem)), "cudaFuncSetAttribute(index_scores_d128_kernel)");
    index_scores_d128_kernel<<<grid, kScThreads, kScSmem, impl_->stream>>>(q, weight, heads, keys, key_block_bytes,
                                                                          key_rows, key_begin, width, visible, ld,
                                                                          scores);
    check_launch("index_scores_d128_kernel");
    return;
  }
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>((ld + threads - 1) / threads));
  index_scores_kernel<<<grid, threads, 0, impl_->stream>>>(q, weight, heads, dim, keys, key_block_bytes, key_rows,
                                                           key_begin, width, visible, ld, scores);
  check_launch("index_scores_kernel");
}

void CudaBackend::index_scores_fp32(const float* q, const float* weight, int64_t tokens, int64_t heads, int64_t dim,
                                    const float* keys, const int32_t* key_rows, const int32_t* key_begin,
                                    const int32_t* width, const int32_t* visible, int64_t ld, float scale,
                                    float* scores) {
  constexpr int threads = 128;
  check_sizes(tokens >= 0 && heads >= 0 && dim >= 0 && ld >= 0 && tokens <= INT32_MAX &&
                  (ld + threads - 1) / threads <= 65535,
              "index_scores_fp32");
  if (tokens == 0 || ld == 0) return;
  impl_->bind();
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>((ld + threads - 1) / threads));
  index_scores_fp32_kernel<<<grid, threads, 0, impl_->stream>>>(q, weight, heads, dim, keys, key_rows, key_begin,
                                                                width, visible, ld, scale, scores);
  check_launch("index_scores_fp32_kernel");
}

void CudaBackend::index_select_stable(const float* scores, int64_t tokens, int64_t ld, const int32_t* ranked,
                                      const int32_t* visible, const int32_t* topk, int64_t K, int32_t* sel) {
  check_sizes(tokens >= 0 && ld >= 0 && K >= 0 && tokens <= INT32_MAX, "index_select_stable");
  if (tokens == 0) return;
  impl_->bind();
  uint8_t* chosen = static_cast<uint8_t*>(impl_->workspace(static_cast<size_t>(tokens * std::max<int64_t>(ld, 1))));
  index_select_stable_kernel<<<static_cast<unsigned>(tokens), 128, 0, impl_->stream>>>(scores, ld, ranked, visible,
                                                                                     topk, K, chosen, sel);
  check_launch("index_select_stable_kernel");
}

// The candidate blocks as index_select of the block maxima: torch_topk's sorted and unsorted forms choose
// the same set (the sort only orders it), and the mask needs only the set.
void CudaBackend::candidate_mask(const float* scores, int64_t tokens, int64_t ld, const int32_t* width,
                                 const int32_t* clen, const int32_t* ranked, int64_t block, int64_t topk_blocks,
                                 uint8_t* mask) {
  check_sizes(tokens >= 0 && ld >= 0 && block > 0 && topk_blocks >= 0 && tokens <= INT32_MAX &&
                  (ld + 255) / 256 <= 65535,
              "candidate_mask");
  if (tokens == 0 || ld == 0) return;
  impl_->bind();
  const int64_t nb = (ld + block - 1) / block, ldb = (nb + 3) / 4 * 4;  // block rows 16-byte aligned
  const int64_t K = std::min(topk_blocks, nb);
  if (K == 0) {
    check_cuda(cudaMemsetAsync(mask, 0, static_cast<size_t>(tokens * ld), impl_->stream), "candidate_mask (zero)");
    return;
  }
  auto up = [](size_t n) { return (n + 255) / 256 * 256; };
  const size_t bv_bytes = up(tokens * ldb * 4), sel_bytes = up(tokens * K * 4), flag_bytes = up(tokens * ldb),
               cnt_bytes = up(tokens * 4);
  uint8_t* ws = static_cast<uint8_t*>(impl_->workspace(bv_bytes + sel_bytes + flag_bytes + 2 * cnt_bytes +
                                                       index_topk_workspace_bytes(tokens, ldb, K)));
  float* bv = reinterpret_cast<float*>(ws);
  int32_t* sel = reinterpret_cast<int32_t*>(ws + bv_bytes);
  uint8_t* flag = ws + bv_bytes + sel_bytes;
  int32_t* ranked_b = reinterpret_cast<int32_t*>(ws + bv_bytes + sel_bytes + flag_bytes);
  int32_t* topk_b = reinterpret_cast<int32_t*>(ws + bv_bytes + sel_bytes + flag_bytes + cnt_bytes);
  void* topk_ws = ws + bv_bytes + sel_bytes + flag_bytes + 2 * cnt_bytes;
  const int32_t kb = static_cast<int32_t>(std::min<int64_t>(topk_blocks, INT32_MAX));
  block_max_kernel<<<dim3(static_cast<unsigned>(tokens), grid_for(ldb, 128)), 128, 0, impl_->stream>>>(
      scores, ld, width, clen, ranked, block, kb, ldb, bv, flag, ranked_b, topk_b);
  check_launch("block_max_kernel");
  IndexTopkArgs a;
  a.scores = bv, a.ld = ldb, a.ranked = ranked_b, a.visible = ranked_b, a.topk = topk_b;
  a.tokens = tokens, a.K = K, a.sel = sel;
  index_topk(a, topk_ws, impl_->stream);
  block_flag_kernel<<<grid_for(tokens * K, 256), 256, 0, impl_->stream>>>(sel, tokens, K, bv, ldb, flag);
  check_launch("block_flag_kernel");
  block_mask_kernel<<<dim3(static_cast<unsigned>(tokens), grid_for(ld, 256)), 256, 0, impl_->stream>>>(
      flag, ldb, width, ld, block, mask);
  check_launch("block_mask_kernel");
}

void CudaBackend::index_select(const float* scores, const uint8_t* mask, int64_t tokens, int64_t ld,
                               const int32_t* ranked, const int32_t* visible, const int32_t* topk, int64_t K,
                               int32_t* sel) {
  check_sizes(tokens >= 0 && ld >= 0 && K >= 0 && ld <= INT32_MAX / 2, "index_select");
  if (tokens == 0 || K == 0) return;
  impl_->bind();
  IndexTopkArgs a;
  a.scores = scores, a.mask = mask, a.ld = ld, a.ranked = ranked, a.visible = visible, a.topk = topk;
  a.tokens = tokens, a.K = K, a.sel = sel;
  index_topk(a, impl_->workspace(index_topk_workspace_bytes(tokens, ld, K)), impl_->stream);
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
