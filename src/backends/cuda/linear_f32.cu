// fp32 linear in the CPU backend's summation order, for every m (so batch invariant, and bitwise equal
// to cpu::CpuBackend::linear): output (i, j) keeps 8 partial sums, channel c going into sum c % 8 as a
// fused multiply-add (the CPU's vectorized loop contracts to vfmadd), combined as
// ((s0 + s4) + (s1 + s5)) + ((s2 + s6) + (s3 + s7)). A block computes 8 rows x 32 outputs through
// shared-memory tiles of 32 channels. Slow at decode (one serial chain per output); the backend takes it
// where the CPU's bits or batch invariance are asked for (DEEPINFER_FP8_GEMM=exact, batch-invariant).
#include <cuda_runtime.h>

#include "backends/cuda/linear_f32.h"
#include "core/error.h"

namespace deepinfer::cuda {
namespace {

constexpr int kRows = 8, kCols = 32, kChunk = 32;
__global__ void linear_cpu_order_kernel(const float* __restrict__ x, int64_t ldx, int m, int k,
                                        const float* __restrict__ w, int n, float* __restrict__ y, int64_t ldy) {
  __shared__ float xs[kRows][kChunk + 1], ws[kCols][kChunk + 1];
  const int tj = threadIdx.x % kCols, ti = threadIdx.x / kCols;
  const int j = blockIdx.x * kCols + tj, i = blockIdx.y * kRows + ti;
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int c0 = 0; c0 < k; c0 += kChunk) {
    for (int e = threadIdx.x; e < kCols * kChunk; e += blockDim.x) {
      const int jj = e / kChunk, cc = e % kChunk, gj = blockIdx.x * kCols + jj, gc = c0 + cc;
      ws[jj][cc] = gj < n && gc < k ? w[static_cast<size_t>(gj) * k + gc] : 0.0f;
    }
    {
      const int ii = threadIdx.x / kChunk, cc = threadIdx.x % kChunk, gi = blockIdx.y * kRows + ii, gc = c0 + cc;
      xs[ii][cc] = gi < m && gc < k ? x[gi * ldx + gc] : 0.0f;
    }
    __syncthreads();
    const int len = min(kChunk, k - c0);  // padded channels are not added (the CPU has none)
    if (len == kChunk) {
#pragma unroll
      for (int cc = 0; cc < kChunk; ++cc) s[cc & 7] = fmaf(xs[ti][cc], ws[tj][cc], s[cc & 7]);
    } else {
      for (int cc = 0; cc < len; ++cc) s[cc & 7] = fmaf(xs[ti][cc], ws[tj][cc], s[cc & 7]);
    }
    __syncthreads();
  }
  if (i < m && j < n) y[i * ldy + j] = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

}  // namespace

void linear_cpu_order(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y, void* stream) {
  linear_cpu_order_strided(x, k, m, k, w, n, y, n, stream);
}

void linear_cpu_order_strided(const float* x, int64_t ldx, int64_t m, int64_t k, const float* w, int64_t n, float* y,
                              int64_t ldy, void* stream) {
  const dim3 grid(static_cast<unsigned>((n + kCols - 1) / kCols), static_cast<unsigned>((m + kRows - 1) / kRows));
  linear_cpu_order_kernel<<<grid, kRows * kCols, 0, static_cast<cudaStream_t>(stream)>>>(
      x, ldx, static_cast<int>(m), static_cast<int>(k), w, static_cast<int>(n), y, ldy);
  const cudaError_t e = cudaGetLastError();
  check(e == cudaSuccess, "cuda: linear launch failed: ", cudaGetErrorString(e));
}

}  // namespace deepinfer::cuda
