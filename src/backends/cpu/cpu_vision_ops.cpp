// CPU reference of the vision tower's ops (DeepSeek V4.1 ViT and aligner): bias + activation, rotate-half
// RoPE from per-row tables, bidirectional attention within sequences.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "core/thread_pool.h"

namespace deepinfer::cpu {

void CpuBackend::bias_act(float* x, int64_t rows, int64_t dim, const float* bias, ops::Activation act,
                          bool bf16_out) {
  parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < dim; ++c) {
        float v = x[r * dim + c] + (bias ? bias[c] : 0.0f);
        if (bf16_out) v = round_to_bf16(v);
        if (act == ops::Activation::kGeluErf) {
          v = 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f));
          if (bf16_out) v = round_to_bf16(v);
        }
        x[r * dim + c] = v;
      }
  }, 16);
}

void CpuBackend::rope_halves(float* x, int64_t rows, int64_t heads, int64_t dim, const float* cos, const float* sin,
                             bool bf16_out) {
  const int64_t half = dim / 2;
  parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t h = 0; h < heads; ++h) {
        float* v = x + (r * heads + h) * dim;
        const float* c = cos + r * half;
        const float* s = sin + r * half;
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = v[i], x2 = v[half + i];
          float a = x1 * c[i] - x2 * s[i], b = x2 * c[i] + x1 * s[i];
          if (bf16_out) a = round_to_bf16(a), b = round_to_bf16(b);
          v[i] = a;
          v[half + i] = b;
        }
      }
  }, 16);
}

void CpuBackend::attention_full(const float* q, const float* k, const float* v, int64_t tokens, int64_t heads,
                                int64_t dim, const int32_t* seq_begin, int64_t seqs, int64_t max_len, float scale,
                                float* out) {
  // The sequence of every token, then one softmax row per (token, head) over that sequence's keys.
  std::vector<int32_t> seq_of(tokens, -1);
  for (int64_t s = 0; s < seqs; ++s)
    for (int64_t t = seq_begin[s]; t < seq_begin[s + 1]; ++t) seq_of[t] = static_cast<int32_t>(s);
  const int64_t width = heads * dim;
  parallel_for(tokens, [&](int64_t t0, int64_t t1) {
    std::vector<float> p;
    for (int64_t t = t0; t < t1; ++t) {
      float* o = out + t * width;
      std::fill(o, o + width, 0.0f);
      if (seq_of[t] < 0) continue;
      const int64_t b = seq_begin[seq_of[t]], n = seq_begin[seq_of[t] + 1] - b;
      p.resize(n);
      for (int64_t h = 0; h < heads; ++h) {
        const float* qh = q + t * width + h * dim;
        float mx = -INFINITY;
        for (int64_t j = 0; j < n; ++j) mx = std::max(mx, p[j] = scale * dot(qh, k + (b + j) * width + h * dim, dim));
        float den = 0.0f;
        for (int64_t j = 0; j < n; ++j) den += p[j] = std::exp(p[j] - mx);
        float* oh = o + h * dim;
        for (int64_t j = 0; j < n; ++j) {
          const float w = p[j] / den;
          const float* vj = v + (b + j) * width + h * dim;
          for (int64_t d = 0; d < dim; ++d) oh[d] += w * vj[d];
        }
      }
    }
  }, 4);
}

}  // namespace deepinfer::cpu
