// CPU reference of the vision tower's ops (DeepSeek V4.1 ViT and aligner): bias + activation, the GEMM on
// bf16 activations, the qkv epilogue with rotate-half RoPE, residual + RMSNorm, SwiGLU, bidirectional
// attention within sequences. Compiled without FMA contraction (each product rounded, as CUDA's).
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "core/error.h"
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

void CpuBackend::linear_plain_bf16(const uint16_t* x, int64_t m, const ops::QWeight& w, float* y,
                                   uint16_t* y_bf16) {
  check((y == nullptr) != (y_bf16 == nullptr), "linear_plain_bf16: give exactly one of y and y_bf16");
  std::vector<float> xf(static_cast<size_t>(m * w.k)), yf(y_bf16 ? static_cast<size_t>(m * w.n) : 0);
  widen_bf16(x, m * w.k, xf.data());
  linear_plain(xf.data(), m, w, y ? y : yf.data());
  for (size_t i = 0; i < yf.size(); ++i) y_bf16[i] = float_to_bf16(yf[i]);
}

void CpuBackend::qkv_rope_bf16(const float* y, const float* bias, int64_t rows, int64_t heads, int64_t dim,
                               const float* cos, const float* sin, uint16_t* qkv) {
  const int64_t width = 3 * heads * dim, half = dim / 2;
  parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* yr = y + r * width;
      uint16_t* out = qkv + r * width;
      const float* c = cos + r * half;
      const float* s = sin + r * half;
      auto biased = [&](int64_t i) { return round_to_bf16(yr[i] + (bias ? bias[i] : 0.0f)); };
      for (int64_t i = 2 * heads * dim; i < width; ++i) out[i] = float_to_bf16(biased(i));  // v
      for (int64_t h = 0; h < 2 * heads; ++h)  // q then k heads
        for (int64_t i = 0; i < half; ++i) {
          const int64_t e = h * dim + i;
          const float x1 = biased(e), x2 = biased(e + half);
          out[e] = float_to_bf16(x1 * c[i] - x2 * s[i]);
          out[e + half] = float_to_bf16(x2 * c[i] + x1 * s[i]);
        }
    }
  }, 16);
}

void CpuBackend::residual_rms_norm_bf16(const float* y, const float* bias, bool accumulate, uint16_t* x,
                                        const float* weight, int64_t rows, int64_t dim, float eps, uint16_t* h) {
  parallel_for(rows, [&](int64_t r0, int64_t r1) {
    std::vector<float> xr(dim);
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = 0; c < dim; ++c) {
        const float a = round_to_bf16(y[r * dim + c] + (bias ? bias[c] : 0.0f));
        xr[c] = accumulate ? round_to_bf16(bf16_to_float(x[r * dim + c]) + a) : a;
        x[r * dim + c] = float_to_bf16(xr[c]);
      }
      const float r_inv = 1.0f / std::sqrt(dot(xr.data(), xr.data(), dim) / static_cast<float>(dim) + eps);
      for (int64_t c = 0; c < dim; ++c) h[r * dim + c] = float_to_bf16(weight[c] * (xr[c] * r_inv));
    }
  }, 16);
}

void CpuBackend::swiglu_bf16(const uint16_t* gu, int64_t rows, int64_t dim, uint16_t* h) {
  parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < dim; ++c) {
        const float g = bf16_to_float(gu[r * 2 * dim + c]), u = bf16_to_float(gu[r * 2 * dim + dim + c]);
        h[r * dim + c] = float_to_bf16(round_to_bf16(g / (1.0f + std::exp(-g))) * u);
      }
  }, 16);
}

void CpuBackend::attention_full(const uint16_t* q, const uint16_t* k, const uint16_t* v, int64_t ld, int64_t tokens,
                                int64_t heads, int64_t dim, const int32_t* seq_begin, int64_t seqs, int64_t max_len,
                                float scale, uint16_t* out) {
  (void)max_len;
  // The sequence of every token, then one softmax row per (token, head) over that sequence's keys.
  std::vector<int32_t> seq_of(tokens, -1);
  for (int64_t s = 0; s < seqs; ++s)
    for (int64_t t = seq_begin[s]; t < seq_begin[s + 1]; ++t) seq_of[t] = static_cast<int32_t>(s);
  const int64_t width = heads * dim;
  auto widen_rows = [&](const uint16_t* src) {  // [tokens, heads * dim] fp32
    std::vector<float> f(static_cast<size_t>(tokens * width));
    for (int64_t t = 0; t < tokens; ++t) widen_bf16(src + t * ld, width, f.data() + t * width);
    return f;
  };
  const std::vector<float> qf = widen_rows(q), kf = widen_rows(k), vf = widen_rows(v);
  parallel_for(tokens, [&](int64_t t0, int64_t t1) {
    std::vector<float> p, o(width);
    for (int64_t t = t0; t < t1; ++t) {
      std::fill(o.begin(), o.end(), 0.0f);
      if (seq_of[t] >= 0) {
        const int64_t b = seq_begin[seq_of[t]], n = seq_begin[seq_of[t] + 1] - b;
        p.resize(n);
        for (int64_t h = 0; h < heads; ++h) {
          const float* qh = qf.data() + t * width + h * dim;
          float mx = -INFINITY;
          for (int64_t j = 0; j < n; ++j)
            mx = std::max(mx, p[j] = scale * dot(qh, kf.data() + (b + j) * width + h * dim, dim));
          float den = 0.0f;
          for (int64_t j = 0; j < n; ++j) den += p[j] = std::exp(p[j] - mx);
          float* oh = o.data() + h * dim;
          for (int64_t j = 0; j < n; ++j) {
            const float w = p[j] / den;
            const float* vj = vf.data() + (b + j) * width + h * dim;
            for (int64_t d = 0; d < dim; ++d) oh[d] += w * vj[d];
          }
        }
      }
      for (int64_t i = 0; i < width; ++i) out[t * width + i] = float_to_bf16(o[i]);
    }
  }, 4);
}

void CpuBackend::widen_bf16(const uint16_t* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_float(x[i]);
}

}  // namespace deepinfer::cpu
