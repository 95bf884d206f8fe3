// fp32 linear in the CPU backend's summation order, for every m (so batch invariant, and bitwise equal
// to cpu::CpuBackend::linear): output (i, j) keeps 8 partial sums, channel c going into sum c % 8 as a
// fused multiply-add (the CPU's vectorized loop contracts to vfmadd), combined as
// ((s0 + s4) + (s1 + s5)) + ((s2 + s6) + (s3 + s7)). For m <= kChainMaxM the 8 partial sums of an
// output run on 8 lanes at once (the router gate at decode: 384 outputs would otherwise be 384 threads);
// above, a block computes 8 rows x 32 outputs through shared-memory tiles of 32 channels.
#include <cuda_runtime.h>

#include "backends/cuda/linear_f32.h"
#include "core/error.h"

namespace deepinfer::cuda {
namespace {

constexpr int kRows = 8, kCols = 32, kChunk = 32;
constexpr int kChainMaxM = 64, kChainRows = 8, kChainOutputs = 8;  // a block: 8 outputs x 8 chains, 8 rows a thread
constexpr int kChainChunk = 512, kChainPad = 8;  // channels staged per step; the pad spreads outputs over banks

// Lane c of the 8 lanes of output j sums channels c, c + 8, ... of up to 8 rows in order (the CPU's
// partial sum c % 8), reading chunks of w and x that the block stages in shared memory with coalesced
// loads; the lanes' sums meet in lane 0 of the group through shuffles, in the CPU's tree.
__global__ void __launch_bounds__(kChainOutputs * 8) linear_chains_kernel(const float* __restrict__ x, int m, int k,
                                                                        const float* __restrict__ w, int n,
                                                                        float* __restrict__ y) {
  __shared__ float ws[kChainOutputs][kChainChunk + kChainPad], xs[kChainRows][kChainChunk];
  const int c = threadIdx.x & 7, jl = threadIdx.x >> 3, j0 = blockIdx.x * kChainOutputs, j = j0 + jl;
  const int i0 = blockIdx.y * kChainRows, rows = min(kChainRows, m - i0);
  float s[kChainRows] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int c0 = 0; c0 < k; c0 += kChainChunk) {
    const int len = min(kChainChunk, k - c0);
#pragma unroll 8
    for (int e = threadIdx.x; e < kChainOutputs * kChainChunk; e += blockDim.x) {
      const int jj = e / kChainChunk, cc = e % kChainChunk;
      ws[jj][cc] = j0 + jj < n && cc < len ? w[static_cast<size_t>(j0 + jj) * k + c0 + cc] : 0.0f;
    }
#pragma unroll 8
    for (int e = threadIdx.x; e < kChainRows * kChainChunk; e += blockDim.x) {
      const int r = e / kChainChunk, cc = e % kChainChunk;
      xs[r][cc] = r < rows && cc < len ? x[static_cast<size_t>(i0 + r) * k + c0 + cc] : 0.0f;
    }
    __syncthreads();
    for (int cc = c; cc < len; cc += 8) {  // chunks start at multiples of 8: channel c0 + cc goes to sum c
      const float wv = ws[jl][cc];
#pragma unroll
      for (int r = 0; r < kChainRows; ++r) s[r] = fmaf(xs[r][cc], wv, s[r]);
    }
    __syncthreads();
  }
  const unsigned lead = threadIdx.x & ~7u;
#pragma unroll
  for (int r = 0; r < kChainRows; ++r) {
    float v[8];
#pragma unroll
    for (int q = 0; q < 8; ++q) v[q] = __shfl_sync(0xffffffffu, s[r], static_cast<int>((lead + q) & 31));
    if (c == 0 && j < n && r < rows)
      y[static_cast<size_t>(i0 + r) * n + j] = ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
  }
}

__global__ void linear_cpu_order_kernel(const float* __restrict__ x, int m, int k, const float* __restrict__ w, int n,
                                        float* __restrict__ y) {
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
      xs[ii][cc] = gi < m && gc < k ? x[static_cast<size_t>(gi) * k + gc] : 0.0f;
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
  if (i < m && j < n) y[static_cast<size_t>(i) * n + j] = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

}  // namespace

void linear_cpu_order(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  const int mi = static_cast<int>(m), ki = static_cast<int>(k), ni = static_cast<int>(n);
  if (m <= kChainMaxM) {
    const dim3 grid(static_cast<unsigned>((n + kChainOutputs - 1) / kChainOutputs),
                    static_cast<unsigned>((m + kChainRows - 1) / kChainRows));
    linear_chains_kernel<<<grid, kChainOutputs * 8, 0, st>>>(x, mi, ki, w, ni, y);
  } else {
    const dim3 grid(static_cast<unsigned>((n + kCols - 1) / kCols), static_cast<unsigned>((m + kRows - 1) / kRows));
    linear_cpu_order_kernel<<<grid, kRows * kCols, 0, st>>>(x, mi, ki, w, ni, y);
  }
  const cudaError_t e = cudaGetLastError();
  check(e == cudaSuccess, "cuda: linear launch failed: ", cudaGetErrorString(e));
}

}  // namespace deepinfer::cuda
