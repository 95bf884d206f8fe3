// CUDA versions of the vision tower's ops (ops.h "vision tower") on the backend's stream: the epilogues
// and RoPE in the CPU reference's arithmetic (backends/cpu/cpu_vision_ops.cpp); attention on the tensor
// cores (kernels/vision_attention.h) at head dim 64, else (and under DEEPINFER_ATTENTION=exact) an fp32
// kernel in the CPU's arithmetic.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_internal.cuh"
#include "backends/cuda/kernels/vision_attention.h"
#include "core/error.h"

namespace deepinfer::cuda {
namespace {

void check_vision_launch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail("CUDA ", kernel, ": ", cudaGetErrorString(e));
}

__device__ __forceinline__ float to_bf16(float x) {  // RNE, NaN kept (as core/dtype.cpp)
  uint32_t u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return x;
  u += 0x7fffu + ((u >> 16) & 1u);
  return __uint_as_float(u & 0xffff0000u);
}

__global__ void bias_act_kernel(float* x, int64_t rows, int64_t dim, const float* __restrict__ bias, int act,
                                bool bf16_out) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= rows * dim) return;
  float v = x[e] + (bias ? bias[e % dim] : 0.0f);
  if (bf16_out) v = to_bf16(v);
  if (act == static_cast<int>(ops::Activation::kGeluErf)) {
    v = 0.5f * v * (1.0f + static_cast<float>(erf(static_cast<double>(v * 0.70710678118654752f))));
    if (bf16_out) v = to_bf16(v);
  }
  x[e] = v;
}

__global__ void rope_halves_kernel(float* x, int64_t rows, int64_t heads, int64_t dim, const float* __restrict__ cs,
                                   const float* __restrict__ sn, bool bf16_out) {
  const int64_t half = dim / 2;
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;  // (row, head, i)
  if (e >= rows * heads * half) return;
  const int64_t i = e % half, rh = e / half, r = rh / heads;
  float* v = x + rh * dim;
  const float c = cs[r * half + i], s = sn[r * half + i], x1 = v[i], x2 = v[half + i];
  float a = x1 * c - x2 * s, b = x2 * c + x1 * s;
  if (bf16_out) a = to_bf16(a), b = to_bf16(b);
  v[i] = a;
  v[half + i] = b;
}

// q, k and v as bf16 bits for the tensor cores (RNE; the tower's values are bf16 already).
__global__ void pack_bf16_kernel(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                                 int64_t n, uint16_t* __restrict__ out) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= 3 * n) return;
  const float x = e < n ? q[e] : e < 2 * n ? k[e - n] : v[e - 2 * n];
  out[e] = static_cast<uint16_t>(__float_as_uint(bf16_round(x)) >> 16);
}

// The exact path, one block per (token, head): scores over the token's sequence in shared memory, then P.V.
__global__ void attention_full_kernel(const float* __restrict__ q, const float* __restrict__ k,
                                      const float* __restrict__ v, int64_t tokens, int64_t heads, int64_t dim,
                                      const int32_t* __restrict__ seq_begin, int64_t seqs, float scale,
                                      float* __restrict__ out) {
  extern __shared__ float p[];
  __shared__ float red[32];
  const int64_t t = blockIdx.x / heads, h = blockIdx.x % heads, width = heads * dim;
  int64_t s = 0;
  while (s < seqs && seq_begin[s + 1] <= t) ++s;
  float* o = out + t * width + h * dim;
  if (s == seqs || t < seq_begin[s]) {
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) o[d] = 0.0f;
    return;
  }
  const int64_t b = seq_begin[s], n = seq_begin[s + 1] - b;
  const float* qh = q + t * width + h * dim;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float* kj = k + (b + j) * width + h * dim;
    float acc = 0.0f;
    for (int64_t d = 0; d < dim; ++d) acc += qh[d] * kj[d];
    p[j] = scale * acc;
  }
  __syncthreads();
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) mx = fmaxf(mx, p[j]);
  for (int off = 16; off; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = mx;
  __syncthreads();
  mx = -INFINITY;
  for (unsigned w = 0; w < blockDim.x / 32; ++w) mx = fmaxf(mx, red[w]);
  __syncthreads();
  float den = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) den += p[j] = expf_cr(p[j] - mx);
  for (int off = 16; off; off >>= 1) den += __shfl_xor_sync(0xffffffffu, den, off);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = den;
  __syncthreads();
  den = 0.0f;
  for (unsigned w = 0; w < blockDim.x / 32; ++w) den += red[w];
  for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = 0; j < n; ++j) acc += p[j] / den * v[(b + j) * width + h * dim + d];
    o[d] = acc;
  }
}

unsigned blocks_for(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

}  // namespace

void CudaBackend::bias_act(float* x, int64_t rows, int64_t dim, const float* bias, ops::Activation act,
                           bool bf16_out) {
  if (rows * dim == 0) return;
  bias_act_kernel<<<blocks_for(rows * dim, 256), 256, 0, static_cast<cudaStream_t>(stream())>>>(
      x, rows, dim, bias, static_cast<int>(act), bf16_out);
  check_vision_launch("bias_act_kernel");
}

void CudaBackend::rope_halves(float* x, int64_t rows, int64_t heads, int64_t dim, const float* cos, const float* sin,
                              bool bf16_out) {
  const int64_t n = rows * heads * (dim / 2);
  if (n == 0) return;
  rope_halves_kernel<<<blocks_for(n, 256), 256, 0, static_cast<cudaStream_t>(stream())>>>(x, rows, heads, dim, cos,
                                                                                          sin, bf16_out);
  check_vision_launch("rope_halves_kernel");
}

void CudaBackend::attention_full(const float* q, const float* k, const float* v, int64_t tokens, int64_t heads,
                                 int64_t dim, const int32_t* seq_begin, int64_t seqs, int64_t max_len, float scale,
                                 float* out) {
  impl_->bind();
  if (tokens * heads == 0) return;
  const auto st = static_cast<cudaStream_t>(stream());
  if (dim == 64 && !impl_->exact_attention) {
    const int64_t n = tokens * heads * dim;
    auto* qkv = static_cast<uint16_t*>(impl_->workspace(static_cast<size_t>(3 * n) * sizeof(uint16_t)));
    pack_bf16_kernel<<<blocks_for(3 * n, 256), 256, 0, st>>>(q, k, v, n, qkv);
    check_vision_launch("pack_bf16_kernel");
    // Rows in no sequence are 0 (the kernel writes only the sequences' rows).
    check_cuda(cudaMemsetAsync(out, 0, static_cast<size_t>(n) * sizeof(float), st), "cudaMemsetAsync (attention_full)");
    return vision_attention_bf16(qkv, qkv + n, qkv + 2 * n, tokens, heads, seq_begin, seqs, scale, out, st);
  }
  // Shared memory holds one score row: sequences up to 12k tokens (48 KiB).
  const size_t smem = static_cast<size_t>(max_len) * sizeof(float);
  check(smem <= 48 * 1024, "attention_full: the fp32 kernel (head dim ", dim,
        ", or DEEPINFER_ATTENTION=exact) takes sequences of up to 12288 tokens, got one of ", max_len);
  attention_full_kernel<<<static_cast<unsigned>(tokens * heads), 128, smem, st>>>(q, k, v, tokens, heads, dim,
                                                                                 seq_begin, seqs, scale, out);
  check_vision_launch("attention_full_kernel");
}

}  // namespace deepinfer::cuda
