// CUDA versions of the vision tower's ops (ops.h "vision tower") on the backend's stream: the GEMM
// epilogues (bias, the qkv's RoPE, residual + RMSNorm, SwiGLU), each one pass from the GEMM's fp32 output
// to bf16 activations, in the CPU reference's arithmetic (backends/cpu/cpu_vision_ops.cpp: each product
// rounded, __fmul_rn & co. here); attention on the tensor cores (kernels/vision_attention.h) at head dim
// 64, else (and under DEEPINFER_ATTENTION=exact) an fp32 kernel in the CPU's arithmetic.
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

__device__ __forceinline__ uint16_t bits_of(float bf16_value) {
  return static_cast<uint16_t>(__float_as_uint(bf16_value) >> 16);
}
__device__ __forceinline__ float widen(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }

// One thread per (row, head of q/k/v, i < dim / 2): the pair i, i + dim / 2. Rows on x (up to 2^31).
__global__ void qkv_rope_kernel(const float* __restrict__ y, const float* __restrict__ bias, int heads, int dim,
                                const float* __restrict__ cs, const float* __restrict__ sn, uint16_t* __restrict__ qkv) {
  const int half = dim / 2, e = blockIdx.y * blockDim.x + threadIdx.x;
  if (e >= 3 * heads * half) return;
  const int hh = e / half, i = e % half, c = hh * dim + i;  // c: column of x1 within the row
  const int64_t r = blockIdx.x, width = 3 * static_cast<int64_t>(heads) * dim;
  const float* yr = y + r * width;
  uint16_t* out = qkv + r * width;
  const float x1 = bf16_round(__fadd_rn(yr[c], bias ? bias[c] : 0.0f));
  const float x2 = bf16_round(__fadd_rn(yr[c + half], bias ? bias[c + half] : 0.0f));
  if (hh >= 2 * heads) {  // v: biased and rounded only
    out[c] = bits_of(x1);
    out[c + half] = bits_of(x2);
    return;
  }
  const float co = cs[r * half + i], si = sn[r * half + i];
  out[c] = bits_of(bf16_round(__fsub_rn(__fmul_rn(x1, co), __fmul_rn(x2, si))));
  out[c + half] = bits_of(bf16_round(__fadd_rn(__fmul_rn(x2, co), __fmul_rn(x1, si))));
}

// One warp per row: a and x in one pass (x written back), then h from the row's sum of squares.
__global__ void residual_rms_norm_kernel(const float* __restrict__ y, const float* __restrict__ bias, bool accumulate,
                                         uint16_t* __restrict__ x, const float* __restrict__ weight, int64_t rows,
                                         int dim, float eps, uint16_t* __restrict__ h) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  if (r >= rows) return;
  const int lane = threadIdx.x % 32;
  const float* yr = y + r * dim;
  uint16_t* xr = x + r * dim;
  float ss = 0.0f;
  for (int c = lane; c < dim; c += 32) {
    const float a = bf16_round(__fadd_rn(yr[c], bias ? bias[c] : 0.0f));
    const float v = accumulate ? bf16_round(__fadd_rn(widen(xr[c]), a)) : a;
    xr[c] = bits_of(v);
    ss = __fmaf_rn(v, v, ss);
  }
  for (int off = 16; off; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
  const float r_inv = 1.0f / sqrtf(ss / static_cast<float>(dim) + eps);
  for (int c = lane; c < dim; c += 32)  // this lane's own writes above: visible to it
    h[r * dim + c] = bits_of(bf16_round(__fmul_rn(weight[c], __fmul_rn(widen(xr[c]), r_inv))));
}

// One thread per (row, c < dim); rows on x.
__global__ void swiglu_bf16_kernel(const uint16_t* __restrict__ gu, int dim, uint16_t* __restrict__ h) {
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= dim) return;
  const int64_t r = blockIdx.x;
  const float g = widen(gu[r * 2 * dim + c]), u = widen(gu[r * 2 * dim + dim + c]);
  const float silu = bf16_round(__fdiv_rn(g, __fadd_rn(1.0f, expf_cr(-g))));
  h[r * dim + c] = bits_of(bf16_round(__fmul_rn(silu, u)));
}

__global__ void narrow_bf16_kernel(const float* __restrict__ y, int64_t n, uint16_t* __restrict__ out) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e < n) out[e] = bits_of(bf16_round(y[e]));
}

__global__ void widen_bf16_kernel(const uint16_t* __restrict__ x, int64_t n, float* __restrict__ y) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e < n) y[e] = widen(x[e]);
}

// The exact path, one block per (token, head): scores over the token's sequence in shared memory, then P.V.
__global__ void attention_full_kernel(const uint16_t* __restrict__ q, const uint16_t* __restrict__ k,
                                      const uint16_t* __restrict__ v, int64_t ld, int64_t heads, int64_t dim,
                                      const int32_t* __restrict__ seq_begin, int64_t seqs, float scale,
                                      uint16_t* __restrict__ out) {
  extern __shared__ float p[];
  __shared__ float red[32];
  const int64_t t = blockIdx.x / heads, h = blockIdx.x % heads;
  int64_t s = 0;
  while (s < seqs && seq_begin[s + 1] <= t) ++s;
  uint16_t* o = out + (t * heads + h) * dim;
  if (s == seqs || t < seq_begin[s]) {
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) o[d] = 0;
    return;
  }
  const int64_t b = seq_begin[s], n = seq_begin[s + 1] - b;
  const uint16_t* qh = q + t * ld + h * dim;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const uint16_t* kj = k + (b + j) * ld + h * dim;
    float acc = 0.0f;
    for (int64_t d = 0; d < dim; ++d) acc += widen(qh[d]) * widen(kj[d]);
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
    for (int64_t j = 0; j < n; ++j) acc += p[j] / den * widen(v[(b + j) * ld + h * dim + d]);
    o[d] = bits_of(bf16_round(acc));
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

void CudaBackend::linear_plain_bf16(const uint16_t* x, int64_t m, const ops::QWeight& w, float* y,
                                    uint16_t* y_bf16) {
  impl_->bind();
  check((y == nullptr) != (y_bf16 == nullptr), "linear_plain_bf16: give exactly one of y and y_bf16");
  check_sizes(m >= 0 && w.n >= 0 && w.k >= 0 && m <= INT32_MAX && w.n <= INT32_MAX && w.k <= INT32_MAX,
              "linear_plain_bf16");
  if (m == 0 || w.n == 0) return;
  if (w.type == ops::WeightType::kBf16 && !impl_->exact_gemm && !impl_->batch_invariant) {
    if (y) return linear_bf16(x, m, w.k, static_cast<const uint16_t*>(w.data), w.n, y);
    // cuBLAS rounds its fp32 sums to the bf16 output (round to nearest even).
    const float one = 1.0f, zero = 0.0f;
    const int n = static_cast<int>(w.n), k = static_cast<int>(w.k);
    return check_cublas(cublasGemmEx(impl_->blas, CUBLAS_OP_T, CUBLAS_OP_N, n, static_cast<int>(m), k, &one, w.data,
                                     CUDA_R_16BF, k, x, CUDA_R_16BF, k, &zero, y_bf16, CUDA_R_16BF, n,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                        "linear_plain_bf16 (cublasGemmEx bf16 out)");
  }
  // Float weights, exact and batch-invariant orders: linear_plain on the widened rows (it uses the
  // workspace), rounded afterwards for a bf16 output.
  struct Scratch {
    CudaBackend& be;
    float* p;
    ~Scratch() { be.release(p); }  // cudaFree waits for the ops using it
  };
  const Scratch xf{*this, static_cast<float*>(allocate(static_cast<size_t>(m * w.k) * sizeof(float)))};
  const Scratch yf{*this, y ? nullptr : static_cast<float*>(allocate(static_cast<size_t>(m * w.n) * sizeof(float)))};
  widen_bf16(x, m * w.k, xf.p);
  linear_plain(xf.p, m, w, y ? y : yf.p);
  if (y_bf16) {
    narrow_bf16_kernel<<<blocks_for(m * w.n, 256), 256, 0, impl_->stream>>>(yf.p, m * w.n, y_bf16);
    check_vision_launch("narrow_bf16_kernel");
  }
}

void CudaBackend::qkv_rope_bf16(const float* y, const float* bias, int64_t rows, int64_t heads, int64_t dim,
                                const float* cos, const float* sin, uint16_t* qkv) {
  impl_->bind();
  check_sizes(rows >= 0 && rows <= INT32_MAX && dim % 2 == 0 && 3 * heads * dim <= INT32_MAX, "qkv_rope_bf16");
  const int64_t per_row = 3 * heads * (dim / 2);
  if (rows == 0 || per_row == 0) return;
  const dim3 grid(static_cast<unsigned>(rows), blocks_for(per_row, 256));
  qkv_rope_kernel<<<grid, 256, 0, impl_->stream>>>(y, bias, static_cast<int>(heads), static_cast<int>(dim), cos, sin,
                                                   qkv);
  check_vision_launch("qkv_rope_kernel");
}

void CudaBackend::residual_rms_norm_bf16(const float* y, const float* bias, bool accumulate, uint16_t* x,
                                         const float* weight, int64_t rows, int64_t dim, float eps, uint16_t* h) {
  impl_->bind();
  check_sizes(rows >= 0 && dim > 0 && dim <= INT32_MAX, "residual_rms_norm_bf16");
  if (rows == 0) return;
  residual_rms_norm_kernel<<<blocks_for(rows, 8), 256, 0, impl_->stream>>>(y, bias, accumulate, x, weight, rows,
                                                                          static_cast<int>(dim), eps, h);
  check_vision_launch("residual_rms_norm_kernel");
}

void CudaBackend::swiglu_bf16(const uint16_t* gu, int64_t rows, int64_t dim, uint16_t* h) {
  impl_->bind();
  check_sizes(rows >= 0 && rows <= INT32_MAX && dim >= 0 && dim <= INT32_MAX, "swiglu_bf16");
  if (rows == 0 || dim == 0) return;
  const dim3 grid(static_cast<unsigned>(rows), blocks_for(dim, 256));
  swiglu_bf16_kernel<<<grid, 256, 0, impl_->stream>>>(gu, static_cast<int>(dim), h);
  check_vision_launch("swiglu_bf16_kernel");
}

void CudaBackend::widen_bf16(const uint16_t* x, int64_t n, float* y) {
  impl_->bind();
  if (n <= 0) return;
  widen_bf16_kernel<<<blocks_for(n, 256), 256, 0, impl_->stream>>>(x, n, y);
  check_vision_launch("widen_bf16_kernel");
}

void CudaBackend::attention_full(const uint16_t* q, const uint16_t* k, const uint16_t* v, int64_t ld, int64_t tokens,
                                 int64_t heads, int64_t dim, const int32_t* seq_begin, int64_t seqs, int64_t max_len,
                                 float scale, uint16_t* out) {
  impl_->bind();
  if (tokens * heads == 0) return;
  const auto st = static_cast<cudaStream_t>(stream());
  if (dim == 64 && !impl_->exact_attention) {
    // Rows in no sequence are 0 (the kernel writes only the sequences' rows).
    check_cuda(cudaMemsetAsync(out, 0, static_cast<size_t>(tokens * heads * dim) * sizeof(uint16_t), st),
               "cudaMemsetAsync (attention_full)");
    return vision_attention_bf16(q, k, v, ld, tokens, heads, seq_begin, seqs, scale, out, st);
  }
  // Shared memory holds one score row: sequences up to 12k tokens (48 KiB).
  const size_t smem = static_cast<size_t>(max_len) * sizeof(float);
  check(smem <= 48 * 1024, "attention_full: the fp32 kernel (head dim ", dim,
        ", or DEEPINFER_ATTENTION=exact) takes sequences of up to 12288 tokens, got one of ", max_len);
  attention_full_kernel<<<static_cast<unsigned>(tokens * heads), 128, smem, st>>>(q, k, v, ld, heads, dim, seq_begin,
                                                                                 seqs, scale, out);
  check_vision_launch("attention_full_kernel");
}

}  // namespace deepinfer::cuda
