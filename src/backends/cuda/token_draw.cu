// draw_tokens on the device (ops.h): the rows' tokens and log-probabilities are all that leave the GPU.
// One block per drawn row, with the row's adjusted logits in `work`. The noise is core/counter_rng.h's,
// bit for bit; top-k and top-p select by radix over ops::draw_rank_key (8 passes of 8 bits), with
// integer masses (ops::draw_mass), so the kept sets are the host's; the normalizer, exp and the double
// logs are the device's (a fixed tree per row, so every run and batch composition gives the same bits).
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

// Block-wide keep_better over every thread's (v, i); every thread gets the result.
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

// Block-wide sum in a fixed tree; every thread gets the result.
template <typename T>
__device__ T reduce_sum(T v, T* sv) {
  sv[threadIdx.x] = v;
  __syncthreads();
  for (int s = kDrawThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sv[threadIdx.x] += sv[threadIdx.x + s];
    __syncthreads();
  }
  v = sv[0];
  __syncthreads();
  return v;
}

struct Shared {
  double d[kDrawThreads];
  uint64_t u[kDrawThreads];
  float f[kDrawThreads];
  int32_t i[kDrawThreads];
  unsigned long long hist[256];
  uint64_t chosen;
  unsigned long long carry;
};

// Radix select over ops::draw_rank_key, 8 bits a pass from the top: the key K of the token that ends the
// shortest best-first run of the tokens with x > -inf and key >= floor for which reached(the run's total
// weight) holds. weight(t): the token's count (top-k) or mass (top-p), summed in shared-memory
// histograms (integers: exact in any order).
template <class Weight, class Reached>
__device__ uint64_t select_key(const float* x, int64_t vocab, uint64_t floor, Weight weight, Reached reached,
                               Shared& sh) {
  uint64_t prefix = 0, fixed = 0;  // the key bits decided so far, and which bits those are
  unsigned long long above = 0;    // weight of the tokens ranked before the prefix's bucket
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kDrawThreads) sh.hist[b] = 0;
    __syncthreads();
    for (int64_t t = threadIdx.x; t < vocab; t += kDrawThreads) {
      if (x[t] == -kInf) continue;
      const uint64_t key = ops::draw_rank_key(x[t], static_cast<int32_t>(t));
      if (key >= floor && (key & fixed) == prefix) atomicAdd(&sh.hist[(key >> shift) & 255], weight(t));
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int d = 255;
      for (; d > 0 && !reached(above + sh.hist[d]); --d) above += sh.hist[d];
      sh.chosen = static_cast<uint64_t>(d);
      sh.carry = above;
    }
    __syncthreads();
    prefix |= sh.chosen << shift;
    fixed |= uint64_t{255} << shift;
    above = sh.carry;
    __syncthreads();
  }
  return prefix;
}

// The key of the k-th best token among those with x > -inf and key >= floor.
__device__ uint64_t kth_key(const float* x, int64_t vocab, int64_t k, uint64_t floor, Shared& sh) {
  return select_key(
      x, vocab, floor, [](int64_t) { return 1ull; },
      [k](unsigned long long n) { return static_cast<int64_t>(n) >= k; }, sh);
}

// The key of the token that crosses top_p: the shortest best-first prefix of the tokens with x > -inf
// and key >= floor whose mass reaches top_p of theirs ends at it.
__device__ uint64_t nucleus_key(const float* x, int64_t vocab, float best, float top_p, uint64_t floor, Shared& sh) {
  uint64_t mine = 0;
  for (int64_t t = threadIdx.x; t < vocab; t += kDrawThreads)
    if (x[t] != -kInf && ops::draw_rank_key(x[t], static_cast<int32_t>(t)) >= floor) mine += ops::draw_mass(x[t], best);
  const uint64_t total = reduce_sum(mine, sh.u);
  return select_key(
      x, vocab, floor, [x, best](int64_t t) { return static_cast<unsigned long long>(ops::draw_mass(x[t], best)); },
      [total, top_p](unsigned long long m) { return ops::draw_mass_reaches(m, total, top_p); }, sh);
}

__global__ void draw_tokens_kernel(const float* __restrict__ x, int64_t vocab, const int32_t* __restrict__ rows,
                                   const ops::DrawRow* __restrict__ param, const ops::DrawAdjust* __restrict__ adjust,
                                   const uint32_t* __restrict__ mask, float* __restrict__ work,
                                   int32_t* __restrict__ token, float* __restrict__ logprob) {
  __shared__ Shared sh;
  const float* row = x + static_cast<int64_t>(rows[blockIdx.x]) * vocab;
  float* w = work + static_cast<int64_t>(blockIdx.x) * vocab;
  const ops::DrawRow r = param[blockIdx.x];
  bool nan = false;
  float rb = -kInf;  // the raw row's maximum, for the logprob's normalizer (ops::log_normalizer)
  for (int64_t j = threadIdx.x; j < vocab; j += kDrawThreads) {
    const float v = row[j];
    if (v != v) nan = true;
    rb = v > rb ? v : rb;
    w[j] = v;
  }
  if (__syncthreads_or(nan)) {
    if (threadIdx.x == 0) token[blockIdx.x] = ops::kDrawNaN, logprob[blockIdx.x] = __int_as_float(0x7fc00000);
    return;
  }
  int32_t rb_at = static_cast<int32_t>(threadIdx.x);
  reduce_best(rb, rb_at, sh.f, sh.i);
  const bool rb_finite = rb != -kInf && rb != kInf;
  double sum = 0;
  if (rb_finite)
    for (int64_t j = threadIdx.x; j < vocab; j += kDrawThreads) sum += exp(static_cast<double>(row[j]) - rb);
  sum = reduce_sum(sum, sh.d);
  const double log_z = rb_finite ? rb + log(sum) : rb;
  for (int32_t e = r.adjust_begin + static_cast<int32_t>(threadIdx.x); e < r.adjust_end; e += kDrawThreads) {
    const ops::DrawAdjust a = adjust[e];
    if (a.token >= 0 && a.token < vocab) w[a.token] = ops::adjust_logit(w[a.token], a, r);  // one entry a token
  }
  __syncthreads();
  const uint32_t* m = r.mask >= 0 ? mask + static_cast<int64_t>(r.mask) * ((vocab + 31) / 32) : nullptr;
  float best = -kInf;
  int32_t at = -1;
  for (int64_t j = threadIdx.x; j < vocab; j += kDrawThreads) {
    float v = w[j];
    if (m && !ops::draw_allowed(m, j)) w[j] = v = -kInf;
    if (v > best) best = v, at = static_cast<int32_t>(j);  // j ascends: the first maximum stays
  }
  reduce_best(best, at, sh.f, sh.i);
  if (best == -kInf) {
    if (threadIdx.x == 0) token[blockIdx.x] = ops::kDrawNone, logprob[blockIdx.x] = -kInf;
    return;
  }
  if (r.temperature > 0.0f) {
    const float shift = ops::temperature_shift(best, r.temperature);
    const float tbest = (best - shift) / r.temperature;
    const float cut = r.log_min_p > -kInf ? tbest + r.log_min_p : -kInf;
    int64_t finite = 0;
    for (int64_t j = threadIdx.x; j < vocab; j += kDrawThreads) {
      float v = (w[j] - shift) / r.temperature;
      if (v < cut) v = -kInf;
      w[j] = v;
      finite += v != -kInf;
    }
    finite = static_cast<int64_t>(reduce_sum(static_cast<uint64_t>(finite), sh.u));
    uint64_t floor = 0;  // tokens ranked below it are cut
    if (r.top_k > 0 && r.top_k < finite) floor = kth_key(w, vocab, r.top_k, floor, sh);
    if (r.top_p < 1.0f) floor = nucleus_key(w, vocab, tbest, r.top_p, floor, sh);
    const uint64_t k = r.key;
    double score_best = -static_cast<double>(kInf);
    at = -1;
    for (int64_t j = threadIdx.x; j < vocab; j += kDrawThreads) {
      const float xs = w[j];
      if (xs == -kInf || ops::draw_rank_key(xs, static_cast<int32_t>(j)) < floor) continue;
      const double score = xs - log(-log(uniform(k, static_cast<uint64_t>(j))));
      if (score > score_best) score_best = score, at = static_cast<int32_t>(j);
    }
    reduce_best(score_best, at, sh.d, sh.i);
  }
  if (threadIdx.x == 0) {
    token[blockIdx.x] = at;
    logprob[blockIdx.x] = at >= 0 ? static_cast<float>(row[at] - log_z) : -kInf;
  }
}

}  // namespace

void CudaBackend::draw_tokens(const float* x, int64_t vocab, const int32_t* rows, int64_t n, const ops::DrawRow* param,
                              const ops::DrawAdjust* adjust, const uint32_t* mask, float* work, int32_t* token,
                              float* logprob) {
  check_sizes(n >= 0 && vocab >= 0 && n <= INT32_MAX && vocab <= INT32_MAX, "draw_tokens");
  if (n == 0) return;
  impl_->bind();
  draw_tokens_kernel<<<static_cast<unsigned>(n), kDrawThreads, 0, impl_->stream>>>(x, vocab, rows, param, adjust, mask,
                                                                                   work, token, logprob);
  check_launch("draw_tokens_kernel");
}

}  // namespace deepinfer::cuda
