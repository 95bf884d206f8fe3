// draw_tokens on the device (ops.h): the rows' tokens and log-probabilities are all that leave the GPU.
// The noise is core/counter_rng.h's, bit for bit; the normalizer and the double logs are the device's
// (a fixed tree per row, so every run and every batch composition gives the same bits).
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_internal.cuh"
#include "core/counter_rng.h"
#include "ops/token_draw.h"

namespace deepinfer::cuda {
namespace {

constexpr int kDrawThreads = 512;

// (value, index) of the larger value; equal values: the lower index; index < 0 is "none".
template <typename T>
__device__ void keep_better(T& v, int32_t& i, T v2, int32_t i2) {
  if (i2 >= 0 && (i < 0 || v2 > v || (v2 == v && i2 < i))) v = v2, i = i2;
}

// Block-wide keep_better over every thread's (v, i); thread 0's values are the result.
template <typename T>
__device__ void reduce_best(T& v, int32_t& i, T* sv, int32_t* si) {
  sv[threadIdx.x] = v;
  si[threadIdx.x] = i;
  __syncthreads();
  for (int s = kDrawThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) keep_better(sv[threadIdx.x], si[threadIdx.x], sv[threadIdx.x + s], si[threadIdx.x + s]);
    __syncthreads();
  }
  v = sv[0];
  i = si[0];
  __syncthreads();
}

// One block per drawn row: NaN check, the first maximum, the normalizer in double (each thread's strided
// sum, then a fixed tree), and for T > 0 Gumbel-max over (x - shift) / T, the first best index winning.
__global__ void draw_tokens_kernel(const float* __restrict__ x, int64_t vocab, const int32_t* __restrict__ rows,
                                   const float* __restrict__ temperature, const uint64_t* __restrict__ key,
                                   int32_t* __restrict__ token, float* __restrict__ logprob) {
  __shared__ double sd[kDrawThreads];
  __shared__ float sf[kDrawThreads];
  __shared__ int32_t si[kDrawThreads];
  const float* row = x + static_cast<int64_t>(rows[blockIdx.x]) * vocab;
  const float t = temperature[blockIdx.x];
  bool nan = false;
  float best = -kInf;
  int32_t at = -1;
  for (int64_t j = threadIdx.x; j < vocab; j += kDrawThreads) {
    const float v = row[j];
    if (v != v) nan = true;
    else if (v > best) best = v, at = static_cast<int32_t>(j);  // j ascends: the first maximum stays
  }
  if (__syncthreads_or(nan)) {
    if (threadIdx.x == 0) token[blockIdx.x] = ops::kDrawNaN, logprob[blockIdx.x] = __int_as_float(0x7fc00000);
    return;
  }
  reduce_best(best, at, sf, si);
  if (best == -kInf) {
    if (threadIdx.x == 0) token[blockIdx.x] = ops::kDrawNone, logprob[blockIdx.x] = -kInf;
    return;
  }
  double sum = 0;
  for (int64_t j = threadIdx.x; j < vocab; j += kDrawThreads) sum += exp(static_cast<double>(row[j]) - best);
  sd[threadIdx.x] = sum;
  __syncthreads();
  for (int s = kDrawThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sd[threadIdx.x] += sd[threadIdx.x + s];
    __syncthreads();
  }
  const double log_z = isfinite(best) ? best + log(sd[0]) : best;  // ops::log_normalizer
  if (t > 0.0f) {
    const float shift = isfinite(best / t) ? 0.0f : best;  // ops::temperature_shift
    const uint64_t k = key[blockIdx.x];
    double score_best = -static_cast<double>(kInf);
    at = -1;
    for (int64_t j = threadIdx.x; j < vocab; j += kDrawThreads) {
      const float xs = (row[j] - shift) / t;
      if (xs == -kInf) continue;
      const double score = xs - log(-log(uniform(k, static_cast<uint64_t>(j))));
      if (score > score_best) score_best = score, at = static_cast<int32_t>(j);
    }
    __syncthreads();  // sd[0] was read by every thread before the reduction reuses sd
    reduce_best(score_best, at, sd, si);
  }
  if (threadIdx.x == 0) {
    token[blockIdx.x] = at;
    logprob[blockIdx.x] = at >= 0 ? static_cast<float>(row[at] - log_z) : -kInf;
  }
}

}  // namespace

void CudaBackend::draw_tokens(const float* x, int64_t vocab, const int32_t* rows, int64_t n, const float* temperature,
                              const uint64_t* key, int32_t* token, float* logprob) {
  check_sizes(n >= 0 && vocab >= 0 && n <= INT32_MAX && vocab <= INT32_MAX, "draw_tokens");
  if (n == 0) return;
  impl_->bind();
  draw_tokens_kernel<<<static_cast<unsigned>(n), kDrawThreads, 0, impl_->stream>>>(x, vocab, rows, temperature, key,
                                                                                   token, logprob);
  check_launch("draw_tokens_kernel");
}

}  // namespace deepinfer::cuda
