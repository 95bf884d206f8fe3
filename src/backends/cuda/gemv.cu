// Decode GEMV (see gemv.h). One block of 128 threads takes R consecutive weight rows over the whole k;
// each thread keeps kGemvUnroll x R 16-byte weight loads in flight (L1 no-allocate: the weights stream,
// x stays in L1 for the other blocks), x is read through L1 per chunk. R (1, 2 or 4) depends on n only,
// to keep >= 2 blocks per SM at small n; it does not change any output's summation order.
#include "backends/cuda/gemv.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_internal.cuh"
#include "core/error.h"

namespace deepinfer::cuda {
namespace {

constexpr int kGemvThreads = 128, kGemvWarps = kGemvThreads / 32, kGemvUnroll = 4;

__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// 16 bytes as E floats: 8 bf16 widened exactly, or 4 floats.
template <typename T>
struct Chunk;
template <>
struct Chunk<uint16_t> {
  static constexpr int E = 8;
  __device__ __forceinline__ static void unpack(uint4 u, float (&f)[E]) {
    const uint32_t s[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = __uint_as_float(s[i] << 16);               // low half = element 2i (little endian)
      f[2 * i + 1] = __uint_as_float(s[i] & 0xffff0000u);
    }
  }
};

template <>
struct Chunk<float> {
  static constexpr int E = 4;
  __device__ __forceinline__ static void unpack(uint4 u, float (&f)[E]) {
    f[0] = __uint_as_float(u.x), f[1] = __uint_as_float(u.y), f[2] = __uint_as_float(u.z), f[3] = __uint_as_float(u.w);
  }
};

// The shape of one launch: x rows x_ld chunks apart, weight rows w_ld chunks apart; weight rows
// [g * group, (g + 1) * group) read the channels [g * kv, (g + 1) * kv) of each x row (block-diagonal;
// group = n: a plain GEMV); bf16: the outputs rounded to bf16 (the reference GEMM's dtype). Split K
// (gridDim.y > 1): split s sums chunks [s * kv, (s + 1) * kv) into y + s * y_split.
struct GemvShape {
  int m;
  int64_t kv, x_ld, w_ld;
  int n, group;
  bool bf16;
  int64_t y_split;
};

// MM: the largest m this instance serves (rows i >= m are skipped, uniformly); R: weight rows per block
// (all in one group).
template <typename T, int MM, int R>
__global__ void __launch_bounds__(kGemvThreads) gemv_kernel(const T* __restrict__ x, GemvShape sh,
                                                           const T* __restrict__ w, float* __restrict__ y) {
  constexpr int E = Chunk<T>::E;
  __shared__ float red[kGemvWarps][MM * R];
  const int m = sh.m, n = sh.n;
  const int64_t kv = sh.kv;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * R;
  const int64_t k0 = static_cast<int64_t>(blockIdx.y) * kv;  // this split's first chunk
  const uint4* xv = reinterpret_cast<const uint4*>(x) + (j0 / sh.group) * kv + k0;
  y += blockIdx.y * sh.y_split;
  const uint4* wv[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {  // rows past n re-read row n - 1; their sums are dropped
    const int64_t j = j0 + r < n ? j0 + r : n - 1;
    wv[r] = reinterpret_cast<const uint4*>(w) + j * sh.w_ld + k0;
  }
  float acc[MM][R];
#pragma unroll
  for (int i = 0; i < MM; ++i)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[i][r] = 0.0f;

  // One chunk c of every row: acc[i][r] += x[i, c] . w[r, c], elements in order.
  auto step = [&](int64_t c, const uint4 (&wc)[R]) {
    float wf[R][E];
#pragma unroll
    for (int r = 0; r < R; ++r) Chunk<T>::unpack(wc[r], wf[r]);
#pragma unroll
    for (int i = 0; i < MM; ++i) {
      if (i < m) {
        float xf[E];
        Chunk<T>::unpack(__ldg(xv + i * sh.x_ld + c), xf);
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
          for (int e = 0; e < E; ++e) acc[i][r] = fmaf(xf[e], wf[r][e], acc[i][r]);
      }
    }
  };

  int64_t c = threadIdx.x;
  for (; c + (kGemvUnroll - 1) * kGemvThreads < kv; c += kGemvUnroll * kGemvThreads) {
    uint4 wc[kGemvUnroll][R];
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r) wc[u][r] = ld_stream(wv[r] + c + u * kGemvThreads);
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u) step(c + u * kGemvThreads, wc[u]);
  }
  for (; c < kv; c += kGemvThreads) {
    uint4 wc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) wc[r] = ld_stream(wv[r] + c);
    step(c, wc);
  }

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int i = 0; i < MM; ++i)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float v = acc[i][r];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      if (lane == 0) red[warp][i * R + r] = v;
    }
  __syncthreads();
  if (threadIdx.x < MM * R) {
    const int i = threadIdx.x / R, r = threadIdx.x % R;
    if (i < m && j0 + r < n) {
      float s = red[0][threadIdx.x];
#pragma unroll
      for (int q = 1; q < kGemvWarps; ++q) s += red[q][threadIdx.x];
      y[static_cast<int64_t>(i) * n + j0 + r] = sh.bf16 ? bf16_round(s) : s;
    }
  }
}

template <typename T, int MM>
void launch_mm(const T* x, const GemvShape& sh, const T* w, float* y, cudaStream_t s, int splits) {
  // >= 2 blocks per SM (132 SMs on the H200) before taking more rows per block.
  constexpr int kMinBlocks = 264;
  const int n = sh.n;
  const bool one_group = sh.group == n;  // else a block's rows must not cross a group
  const auto grid = [&](int rows) { return dim3(static_cast<unsigned>((n + rows - 1) / rows), static_cast<unsigned>(splits)); };
  if (n >= 4 * kMinBlocks && (one_group || sh.group % 4 == 0)) {
    gemv_kernel<T, MM, 4><<<grid(4), kGemvThreads, 0, s>>>(x, sh, w, y);
  } else if (n >= 2 * kMinBlocks && (one_group || sh.group % 2 == 0)) {
    gemv_kernel<T, MM, 2><<<grid(2), kGemvThreads, 0, s>>>(x, sh, w, y);
  } else {
    gemv_kernel<T, MM, 1><<<grid(1), kGemvThreads, 0, s>>>(x, sh, w, y);
  }
}

template <typename T>
void launch(const T* x, const GemvShape& sh, const T* w, float* y, void* stream, int splits = 1) {
  auto s = static_cast<cudaStream_t>(stream);
  if (sh.m <= 1) launch_mm<T, 1>(x, sh, w, y, s, splits);
  else if (sh.m <= 2) launch_mm<T, 2>(x, sh, w, y, s, splits);
  else if (sh.m <= 4) launch_mm<T, 4>(x, sh, w, y, s, splits);
  else launch_mm<T, 8>(x, sh, w, y, s, splits);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail("CUDA error in gemv_kernel: ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}

}  // namespace

bool gemv_fits(const void* x, int64_t m, int64_t k, const void* w, int64_t n, int64_t elem_bytes) {
  const int64_t e = 16 / elem_bytes;
  return m >= 1 && m <= kGemvMaxM && k > 0 && k % e == 0 && n >= 1 && n <= INT32_MAX && k <= INT32_MAX &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

void gemv_bf16(const uint16_t* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y, void* stream) {
  const int64_t kv = k / Chunk<uint16_t>::E;
  launch<uint16_t>(x, {static_cast<int>(m), kv, kv, kv, static_cast<int>(n), static_cast<int>(n), false, 0}, w, y, stream);
}

void gemv_bf16_block_diag(const uint16_t* x, int64_t m, int64_t k, int64_t groups, const uint16_t* w, int64_t rows,
                          bool bf16_out, float* y, void* stream) {
  const int64_t kv = k / Chunk<uint16_t>::E;
  launch<uint16_t>(x, {static_cast<int>(m), kv, groups * kv, kv, static_cast<int>(groups * rows), static_cast<int>(rows),
                       bf16_out, 0},
                   w, y, stream);
}

void gemv_f32(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y, void* stream) {
  const int64_t kv = k / Chunk<float>::E;
  launch<float>(x, {static_cast<int>(m), kv, kv, kv, static_cast<int>(n), static_cast<int>(n), false, 0}, w, y, stream);
}

bool gemv_split_fits(int64_t k, int64_t splits, int64_t elem_bytes) {
  return splits >= 1 && splits <= 65535 && k % (splits * (16 / elem_bytes)) == 0;
}

void gemv_f32_split(const float* x, int64_t m, int64_t k, const float* w, int64_t n, int64_t splits, float* partial,
                    int64_t split_stride, void* stream) {
  const int64_t kv = k / Chunk<float>::E;
  launch<float>(x, {static_cast<int>(m), kv / splits, kv, kv, static_cast<int>(n), static_cast<int>(n), false, split_stride},
                w, partial, stream, static_cast<int>(splits));
}

}  // namespace deepinfer::cuda
