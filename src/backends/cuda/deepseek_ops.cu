// The CUDA backend's DeepSeek ops (MoE routing and combine, hc_mean, V4.1 compressor pooling, Engram),
// in cpu_deepseek_ops.cpp's operation order: sequential fp32 sums in the CPU's order, a fused
// multiply-add where GCC contracts the CPU's `acc += a * b` (x86-64-v3), the same bf16 rounding points.
// Simple kernels (one thread per output or per row) unless a comment says otherwise.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cuda/cuda_internal.cuh"
#include "backends/cuda/torch_topk_device.h"
#include "core/dtype.h"

namespace deepinfer::cuda {
namespace {

// out[e] = e4m3(q[e]) * e8m0(s[e / 32]) as the CPU's dtype.cpp decoders give them, the product rounded
// once; NaN as the CPU's bits (0x7fc00000, where
// the GPU's multiply would give its canonical 0x7fffffff).
// out[i, d] of row ids[i] of (q, s) (ids null: row i).
__global__ void dequant_rows_kernel(const uint8_t* __restrict__ q, const uint8_t* __restrict__ s,
                                    const int64_t* __restrict__ ids, int total, int dim, float* __restrict__ out) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= total) return;
  const int64_t row = ids ? ids[e / dim] : e / dim, d = e % dim;
  const float v = __fmul_rn(e4m3_to_float_d(q[row * dim + d]), e8m0_to_float_d(s[row * (dim / 32) + d / 32]));
  out[e] = isnan(v) ? __int_as_float(0x7fc00000) : v;  // the CPU's product keeps its operand's quiet NaN
}

using topk::Elem;

__device__ __forceinline__ float max_of(float a, float b) { return a < b ? b : a; }  // std::max(a, b)

__global__ void hc_mean_kernel(const float* __restrict__ x, int64_t rows, int64_t hc, int64_t dim, float* out,
                               int64_t out_ld) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= rows * dim) return;
  const int64_t t = e / dim, d = e % dim;
  float acc = 0;
  for (int64_t k = 0; k < hc; ++k) acc = __fadd_rn(acc, x[(t * hc + k) * dim + d]);
  out[t * out_ld + d] = bf16_round(__fdiv_rn(acc, static_cast<float>(hc)));
}

__global__ void softmax_pool_v41_kernel(const float* __restrict__ kv, const float* __restrict__ score,
                                        int64_t windows, int64_t slots, int64_t channels, float* z) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= windows * channels) return;
  const int64_t w = e / channels, c = e % channels;
  const float* sc = score + w * slots * channels + c;
  const float* v = kv + w * slots * channels + c;
  float mx = -kInf, den = 0, acc = 0;
  for (int64_t s = 0; s < slots; ++s) mx = max_of(mx, sc[s * channels]);
  for (int64_t s = 0; s < slots; ++s) den = __fadd_rn(den, expf_cr(sc[s * channels] - mx));
  for (int64_t s = 0; s < slots; ++s) acc = __fmaf_rn(v[s * channels], __fdiv_rn(expf_cr(sc[s * channels] - mx), den), acc);
  z[e] = bf16_round(acc);
}

// One warp per token, its row in shared memory. The scores are elementwise; the softmax's max ignores NaN
// in any order, its sum runs in expert order on lane 0. The selection takes the best remaining expert k
// times (a warp reduction); while no chosen value ties another remaining one, that is cpu::torch_topk's
// unique sorted answer, else lane 0 runs the torch_topk port on the row (its exact tie order).
constexpr int kRouteWarps = 4;

__host__ __device__ inline size_t route_row_bytes(int64_t E) {  // scores, (value, expert) pairs, taken flags
  return (static_cast<size_t>(E) * sizeof(float) + 7) / 8 * 8 + static_cast<size_t>(E) * sizeof(Elem) +
         (static_cast<size_t>(E) + 7) / 8 * 8;
}

__global__ void __launch_bounds__(kRouteWarps * 32) moe_route_kernel(const float* __restrict__ logits, int64_t n,
                                                                     int64_t E, const float* bias,
                                                                     const float* bias_vl, const uint8_t* image,
                                                                     ops::Backend::RouteParams p, int32_t* sel,
                                                                     float* weight, float* scores) {
  extern __shared__ __align__(8) unsigned char route_smem[];
  const int lane = threadIdx.x & 31, wid = threadIdx.x / 32;
  const int64_t t = blockIdx.x * static_cast<int64_t>(kRouteWarps) + wid, k = p.k;
  if (t >= n) return;  // the whole warp
  unsigned char* row = route_smem + wid * route_row_bytes(E);
  float* sc = reinterpret_cast<float*>(row);
  Elem* q = reinterpret_cast<Elem*>(row + (E * sizeof(float) + 7) / 8 * 8);
  uint8_t* taken = reinterpret_cast<uint8_t*>(q + E);
  const float* lg = logits + t * E;
  const float T = p.temperature;
  if (p.score_func == ops::Backend::ScoreFunc::kSoftmax) {
    float mx = -kInf;
    for (int64_t e = lane; e < E; e += 32) mx = max_of(mx, __fdiv_rn(lg[e], T));
    for (int o = 16; o > 0; o >>= 1) mx = max_of(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    for (int64_t e = lane; e < E; e += 32) sc[e] = expf_cr(__fdiv_rn(lg[e], T) - mx);
    __syncwarp();
    float z = 0;
    if (lane == 0)
      for (int64_t e = 0; e < E; ++e) z = __fadd_rn(z, sc[e]);
    z = __shfl_sync(0xffffffffu, z, 0);
    for (int64_t e = lane; e < E; e += 32) sc[e] = __fdiv_rn(sc[e], z);
  } else {
    for (int64_t e = lane; e < E; e += 32) {
      const float v = __fdiv_rn(lg[e], T);
      sc[e] = p.score_func == ops::Backend::ScoreFunc::kSigmoid ? __fdiv_rn(1.0f, 1.0f + expf_cr(-v))
                                                                : sqrtf(v > 20.0f ? v : log1pf_cr(expf_cr(v)));
    }
  }
  const float* b = image && image[t] ? bias_vl : bias;
  for (int64_t e = lane; e < E; e += 32) {
    q[e] = {__fadd_rn(sc[e], b ? b[e] : 0.0f), static_cast<int32_t>(e)};
    taken[e] = 0;
    if (scores) scores[t * E + e] = sc[e];
  }
  __syncwarp();
  int32_t* st = sel + t * k;
  bool tie = false;
  for (int64_t r = 0; r < k && !tie; ++r) {
    Elem best{0.0f, -1};
    for (int64_t e = lane; e < E; e += 32)  // ascending e: the lower index among equals
      if (!taken[e] && (best.i < 0 || topk::before(q[e], best))) best = q[e];
    for (int o = 16; o > 0; o >>= 1) {  // the first in (value order, then index): the same on every lane
      const Elem other{__shfl_xor_sync(0xffffffffu, best.v, o), __shfl_xor_sync(0xffffffffu, best.i, o)};
      if (other.i >= 0 && (best.i < 0 || topk::before(other, best) || (!topk::before(best, other) && other.i < best.i)))
        best = other;
    }
    bool equal = false;
    for (int64_t e = lane; e < E; e += 32)
      equal |= !taken[e] && e != best.i && !topk::before(q[e], best) && !topk::before(best, q[e]);
    tie = __any_sync(0xffffffffu, equal);
    if (lane == 0 && !tie) {
      taken[best.i] = 1;
      st[r] = best.i;
    }
    __syncwarp();
  }
  if (lane != 0) return;
  if (tie) {
    topk::torch_topk(q, E, k, true);
    for (int64_t j = 0; j < k; ++j) st[j] = q[j].i;
  }
  float sum = 0;
  for (int64_t j = 0; j < k; ++j) sum = __fadd_rn(sum, weight[t * k + j] = sc[st[j]]);
  for (int64_t j = 0; j < k; ++j) {
    float w = weight[t * k + j];
    if (p.normalize && k > 1) w = __fdiv_rn(w, __fadd_rn(sum, 1e-20f));
    weight[t * k + j] = __fmul_rn(w, p.route_scale);
  }
}

__global__ void moe_combine_kernel(const float* __restrict__ y, const int32_t* __restrict__ slot, int64_t n, int64_t k,
                                   int64_t dim, const float* __restrict__ shared, float* out) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= n * dim) return;
  const int64_t t = e / dim, d = e % dim;
  float acc = 0;
  for (int64_t j = 0; j < k; ++j) {
    const int32_t s = slot[t * k + j];
    if (s >= 0) acc = __fadd_rn(acc, y[static_cast<int64_t>(s) * dim + d]);
  }
  out[e] = bf16_round(__fadd_rn(acc, shared ? shared[e] : 0.0f));
}

// One block per (token, stream). cpu_order (DEEPINFER_FP8_GEMM=exact): the three sums keep the CPU's d
// order, so each is one serial chain: the block stages h, key and w in shared memory, lane 0 of warps 0,
// 1, 2 runs one chain each (h . h, key . key, (h * w) . key) from there (~60 us a launch at 5120
// channels). Else each thread sums a strided slice and the block adds them as a tree (an order fixed by
// the row alone: batch invariant). Then every thread applies the gate to its channels.
constexpr int kGateThreads = 256;
__global__ void __launch_bounds__(kGateThreads) engram_gate_kernel(float* x, const float* __restrict__ kv,
                                                                   const float* __restrict__ qk, const uint8_t* image,
                                                                   int64_t hc, int64_t D, float eps, float dscale,
                                                                   bool cpu_order) {
  const int64_t t = blockIdx.x / hc, k = blockIdx.x % hc;
  if (image && image[t]) return;  // gate 0 for image-span tokens
  extern __shared__ float gate_smem[];
  float* hs = gate_smem;  // [D] each
  float* ks = hs + D;
  float* ws = ks + D;
  float* h = x + (t * hc + k) * D;
  const float* key = kv + t * (hc + 1) * D + k * D;
  const float* val = kv + t * (hc + 1) * D + hc * D;
  const float* w = qk + k * D;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    hs[d] = h[d];
    ks[d] = key[d];
    ws[d] = w[d];
  }
  __syncthreads();
  __shared__ float sums[3], red[32];
  const int warp = threadIdx.x / 32;
  if (!cpu_order) {
    float hh = 0.0f, kk = 0.0f, hwk = 0.0f;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      hh = __fmaf_rn(hs[d], hs[d], hh);
      kk = __fmaf_rn(ks[d], ks[d], kk);
      hwk = __fmaf_rn(__fmul_rn(hs[d], ws[d]), ks[d], hwk);
    }
    hh = block_sum(hh, red);
    kk = block_sum(kk, red);
    hwk = block_sum(hwk, red);
    if (threadIdx.x == 0) sums[0] = hh, sums[1] = kk, sums[2] = hwk;
  } else if ((threadIdx.x & 31) == 0 && warp < 3) {  // 8 shared-memory loads issued before their 8 serial FMAs
    const float* a = warp == 1 ? ks : hs;
    const float* b = warp == 0 ? hs : ks;
    float acc = 0;
    int64_t d = 0;
    for (; d + 8 <= D; d += 8) {
      float u[8], v[8], g[8];
#pragma unroll
      for (int q = 0; q < 8; ++q) u[q] = a[d + q], v[q] = b[d + q], g[q] = warp == 2 ? ws[d + q] : 1.0f;
#pragma unroll
      for (int q = 0; q < 8; ++q) acc = warp == 2 ? __fmaf_rn(__fmul_rn(u[q], g[q]), v[q], acc) : __fmaf_rn(u[q], v[q], acc);
    }
    for (; d < D; ++d) acc = warp == 2 ? __fmaf_rn(__fmul_rn(hs[d], ws[d]), ks[d], acc) : __fmaf_rn(a[d], b[d], acc);
    sums[warp] = acc;
  }
  __syncthreads();
  const float Df = static_cast<float>(D);
  const float rstd = __fmul_rn(__fdiv_rn(1.0f, sqrtf(__fadd_rn(__fdiv_rn(sums[0], Df), eps))),
                               __fdiv_rn(1.0f, sqrtf(__fadd_rn(__fdiv_rn(sums[1], Df), eps))));
  const float dot = __fmul_rn(__fmul_rn(sums[2], rstd), dscale);
  const float mag = sqrtf(max_of(fabsf(dot), 1e-6f));
  const float g = __fdiv_rn(1.0f, 1.0f + expf_cr(-copysignf(mag, dot)));
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) h[d] = bf16_round(__fmaf_rn(g, val[d], hs[d]));
}

}  // namespace

void CudaBackend::hc_mean(const float* x, int64_t rows, int64_t hc, int64_t dim, float* out, int64_t out_ld) {
  check_sizes(rows >= 0 && hc > 0 && dim >= 0 && out_ld >= dim, "hc_mean");
  if (rows * dim == 0) return;
  impl_->bind();
  hc_mean_kernel<<<grid_for(rows * dim, 256), 256, 0, impl_->stream>>>(x, rows, hc, dim, out, out_ld);
  check_launch("hc_mean_kernel");
}

void CudaBackend::softmax_pool_v41(const float* kv, const float* score, int64_t windows, int64_t slots,
                                   int64_t channels, float* z) {
  check_sizes(windows >= 0 && slots >= 0 && channels >= 0, "softmax_pool_v41");
  if (windows * channels == 0) return;
  impl_->bind();
  softmax_pool_v41_kernel<<<grid_for(windows * channels, 256), 256, 0, impl_->stream>>>(kv, score, windows, slots,
                                                                                        channels, z);
  check_launch("softmax_pool_v41_kernel");
}

void CudaBackend::moe_route(const float* logits, int64_t n, int64_t E, const float* bias, const float* bias_vl,
                            const uint8_t* image, const RouteParams& p, int32_t* sel, float* weight, float* scores) {
  check_sizes(n >= 0 && n <= INT32_MAX && E > 0 && p.k >= 0 && p.k <= E && E <= INT32_MAX, "moe_route");
  if (n == 0) return;
  impl_->bind();
  // Shared memory: per warp (token) the scores, the (biased score, expert) row, the taken flags.
  const size_t smem = kRouteWarps * route_row_bytes(E);
  impl_->allow_smem(moe_route_kernel, smem, "cudaFuncSetAttribute(moe_route_kernel)", "cuda moe_route: ", E,
                    " experts need more shared memory than the device has");
  moe_route_kernel<<<static_cast<unsigned>((n + kRouteWarps - 1) / kRouteWarps), kRouteWarps * 32, smem,
                     impl_->stream>>>(logits, n, E, bias, bias_vl, image, p, sel, weight, scores);
  check_launch("moe_route_kernel");
}

void CudaBackend::moe_combine(const float* y, const int32_t* slot, int64_t n, int64_t k, int64_t dim,
                              const float* shared, float* out) {
  check_sizes(n >= 0 && k >= 0 && dim >= 0, "moe_combine");
  if (n * dim == 0) return;
  impl_->bind();
  moe_combine_kernel<<<grid_for(n * dim, 256), 256, 0, impl_->stream>>>(y, slot, n, k, dim, shared, out);
  check_launch("moe_combine_kernel");
}

void CudaBackend::embedding_fp8(const uint8_t* table, const uint8_t* scale, int64_t dim, const int64_t* ids, int64_t n,
                                float* out) {
  check_sizes(n >= 0 && dim >= 0 && dim % 32 == 0 && n * dim <= INT32_MAX, "embedding_fp8");
  if (n == 0 || dim == 0) return;
  impl_->bind();
  // The table is host memory (memory-mapped): the host gathers the rows' stored bytes (a copy, no
  // decoding: 1/4 of the fp32 bytes), the device dequantizes them. Pageable uploads are staged before
  // they return, so the gather buffers may go at once.
  const int64_t sdim = dim / 32;
  std::vector<uint8_t> q(static_cast<size_t>(n * dim)), s(static_cast<size_t>(n * sdim));
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(q.data() + i * dim, table + ids[i] * dim, static_cast<size_t>(dim));
    std::memcpy(s.data() + i * sdim, scale + ids[i] * sdim, static_cast<size_t>(sdim));
  }
  auto* qd = static_cast<uint8_t*>(impl_->workspace(q.size() + s.size()));
  uint8_t* sd = qd + q.size();  // byte arrays: no alignment needed
  upload(qd, q.data(), q.size());
  upload(sd, s.data(), s.size());
  dequant_rows_kernel<<<static_cast<unsigned>((n * dim + 255) / 256), 256, 0, impl_->stream>>>(
      qd, sd, nullptr, static_cast<int>(n * dim), static_cast<int>(dim), out);
  check_launch("dequant_rows_kernel");
}

void CudaBackend::embedding_fp8_on_device(const uint8_t* table, const uint8_t* scale, int64_t dim, const int64_t* ids,
                                          int64_t n, float* out) {
  check_sizes(n >= 0 && dim >= 0 && dim % 32 == 0 && n * dim <= INT32_MAX, "embedding_fp8_on_device");
  if (n == 0 || dim == 0) return;
  impl_->bind();
  dequant_rows_kernel<<<static_cast<unsigned>((n * dim + 255) / 256), 256, 0, impl_->stream>>>(
      table, scale, ids, static_cast<int>(n * dim), static_cast<int>(dim), out);
  check_launch("dequant_rows_kernel");
}

void CudaBackend::engram_gate(float* x, const float* kv, const float* qk, const uint8_t* image, int64_t n, int64_t hc,
                              int64_t dim, float eps) {
  check_sizes(n >= 0 && hc > 0 && dim > 0 && n * hc <= INT32_MAX, "engram_gate");
  if (n == 0) return;
  impl_->bind();
  const float dscale = static_cast<float>(std::pow(static_cast<double>(dim), -0.5));
  const size_t smem = static_cast<size_t>(3 * dim) * sizeof(float);
  impl_->allow_smem(engram_gate_kernel, smem, "cudaFuncSetAttribute(engram_gate_kernel)", "cuda engram_gate: dim ",
                    dim, " needs more shared memory than the device has");
  engram_gate_kernel<<<static_cast<unsigned>(n * hc), kGateThreads, smem, impl_->stream>>>(x, kv, qk, image, hc, dim,
                                                                                         eps, dscale, impl_->exact_gemm);
  check_launch("engram_gate_kernel");
}

}  // namespace deepinfer::cuda
