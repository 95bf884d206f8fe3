// The CUDA backend's DeepSeek ops (MoE routing and combine, hc_mean, V4.1 compressor pooling, Engram),
// in cpu_deepseek_ops.cpp's operation order: sequential fp32 sums in the CPU's order, a fused
// multiply-add where GCC contracts the CPU's `acc += a * b` (x86-64-v3), the same bf16 rounding points.
// Simple kernels (one thread per output or per row), not yet tuned.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "backends/cuda/cuda_internal.cuh"
#include "backends/cuda/torch_topk_device.h"
#include "core/dtype.h"

namespace deepinfer::cuda {
namespace {

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
  for (int64_t s = 0; s < slots; ++s) den = __fadd_rn(den, expf(sc[s * channels] - mx));
  for (int64_t s = 0; s < slots; ++s) acc = __fmaf_rn(v[s * channels], __fdiv_rn(expf(sc[s * channels] - mx), den), acc);
  z[e] = bf16_round(acc);
}

// One thread per token: scores, the biased (value, expert) row, cpu::torch_topk's selection, weights.
__global__ void moe_route_kernel(const float* __restrict__ logits, int64_t n, int64_t E, const float* bias,
                                 const float* bias_vl, const uint8_t* image, ops::Backend::RouteParams p,
                                 int32_t* sel, float* weight, float* scores, float* sc_all, Elem* q_all) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= n) return;
  const float* lg = logits + t * E;
  float* sc = scores ? scores + t * E : sc_all + t * E;
  Elem* q = q_all + t * E;
  const float T = p.temperature;
  if (p.score_func == ops::Backend::ScoreFunc::kSoftmax) {
    float mx = -kInf, z = 0;
    for (int64_t e = 0; e < E; ++e) mx = max_of(mx, __fdiv_rn(lg[e], T));
    for (int64_t e = 0; e < E; ++e) z = __fadd_rn(z, sc[e] = expf(__fdiv_rn(lg[e], T) - mx));
    for (int64_t e = 0; e < E; ++e) sc[e] = __fdiv_rn(sc[e], z);
  } else {
    for (int64_t e = 0; e < E; ++e) {
      const float v = __fdiv_rn(lg[e], T);
      sc[e] = p.score_func == ops::Backend::ScoreFunc::kSigmoid ? __fdiv_rn(1.0f, 1.0f + expf(-v))
                                                                : sqrtf(v > 20.0f ? v : log1pf(expf(v)));
    }
  }
  const float* b = image && image[t] ? bias_vl : bias;
  for (int64_t e = 0; e < E; ++e) q[e] = {__fadd_rn(sc[e], b ? b[e] : 0.0f), static_cast<int32_t>(e)};
  const int64_t k = p.k;
  topk::torch_topk(q, E, k, true);
  float sum = 0;
  for (int64_t j = 0; j < k; ++j) {
    sel[t * k + j] = q[j].i;
    sum = __fadd_rn(sum, weight[t * k + j] = sc[q[j].i]);
  }
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

// One block per (token, stream): thread 0 runs the three sums in d order (as the CPU), then every
// thread applies the gate to its channels.
__global__ void engram_gate_kernel(float* x, const float* __restrict__ kv, const float* __restrict__ qk,
                                   const uint8_t* image, int64_t hc, int64_t D, float eps, float dscale) {
  const int64_t t = blockIdx.x / hc, k = blockIdx.x % hc;
  if (image && image[t]) return;  // gate 0 for image-span tokens
  float* h = x + (t * hc + k) * D;
  const float* key = kv + t * (hc + 1) * D + k * D;
  const float* val = kv + t * (hc + 1) * D + hc * D;
  const float* w = qk + k * D;
  __shared__ float gate;
  if (threadIdx.x == 0) {
    float sh = 0, sk = 0, dot = 0;
    for (int64_t d = 0; d < D; ++d) {
      sh = __fmaf_rn(h[d], h[d], sh);
      sk = __fmaf_rn(key[d], key[d], sk);
      dot = __fmaf_rn(__fmul_rn(h[d], w[d]), key[d], dot);
    }
    const float Df = static_cast<float>(D);
    const float rstd = __fmul_rn(__fdiv_rn(1.0f, sqrtf(__fadd_rn(__fdiv_rn(sh, Df), eps))),
                                 __fdiv_rn(1.0f, sqrtf(__fadd_rn(__fdiv_rn(sk, Df), eps))));
    dot = __fmul_rn(__fmul_rn(dot, rstd), dscale);
    const float mag = sqrtf(max_of(fabsf(dot), 1e-6f));
    gate = __fdiv_rn(1.0f, 1.0f + expf(-copysignf(mag, dot)));
  }
  __syncthreads();
  const float g = gate;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) h[d] = bf16_round(__fmaf_rn(g, val[d], h[d]));
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
  check_sizes(n >= 0 && E > 0 && p.k >= 0 && p.k <= E && E <= INT32_MAX, "moe_route");
  if (n == 0) return;
  impl_->bind();
  // Workspace: the (biased score, expert) rows the selection permutes, then the scores when not kept.
  char* ws = static_cast<char*>(impl_->workspace(static_cast<size_t>(n * E) * (sizeof(Elem) + sizeof(float))));
  Elem* q = reinterpret_cast<Elem*>(ws);
  float* sc = reinterpret_cast<float*>(ws + static_cast<size_t>(n * E) * sizeof(Elem));
  moe_route_kernel<<<grid_for(n, 64), 64, 0, impl_->stream>>>(logits, n, E, bias, bias_vl, image, p, sel, weight,
                                                              scores, sc, q);
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
  check_sizes(n >= 0 && dim >= 0 && dim % 32 == 0, "embedding_fp8");
  if (n == 0 || dim == 0) return;
  // The table is host memory (memory-mapped): fetch the ids (this waits for the stream), dequantize
  // the rows on the host exactly as the CPU backend does, and upload them (ordered on the stream).
  std::vector<int64_t> id(n);
  download(id.data(), ids, id.size() * sizeof(int64_t));
  std::vector<float> rows(static_cast<size_t>(n * dim));
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* w = table + id[i] * dim;
    const uint8_t* s = scale + id[i] * (dim / 32);
    for (int64_t d = 0; d < dim; ++d) rows[i * dim + d] = e4m3_to_float(w[d]) * e8m0_to_float(s[d / 32]);
  }
  upload(out, rows.data(), rows.size() * sizeof(float));  // pageable: staged before upload returns
}

void CudaBackend::engram_gate(float* x, const float* kv, const float* qk, const uint8_t* image, int64_t n, int64_t hc,
                              int64_t dim, float eps) {
  check_sizes(n >= 0 && hc > 0 && dim > 0 && n * hc <= INT32_MAX, "engram_gate");
  if (n == 0) return;
  impl_->bind();
  const float dscale = static_cast<float>(std::pow(static_cast<double>(dim), -0.5));
  engram_gate_kernel<<<static_cast<unsigned>(n * hc), 256, 0, impl_->stream>>>(x, kv, qk, image, hc, dim, eps,
                                                                              dscale);
  check_launch("engram_gate_kernel");
}

}  // namespace deepinfer::cuda
