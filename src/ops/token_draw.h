// The math of drawing one token from a row of logits, shared by the host sampler (sampling/sampler.cpp)
// and the backends' draw_tokens, so that a token drawn on the device is the one the host would draw.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/counter_rng.h"

namespace deepinfer::ops {

// draw_tokens' token for a row holding a NaN, and for one with no finite logit.
inline constexpr int32_t kDrawNaN = -2, kDrawNone = -1;

// log of the softmax normalizer, accumulated in double in index order (fixed reduction order).
inline double log_normalizer(const float* row, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t t = 0; t < n; ++t) m = row[t] > m ? row[t] : m;
  if (!std::isfinite(m)) return m;
  double s = 0;
  for (int64_t t = 0; t < n; ++t) s += std::exp(static_cast<double>(row[t]) - m);
  return m + std::log(s);
}

// What the logits are shifted by before dividing by temperature t: 0, or the maximum where max / t
// overflows (a tiny t), which keeps the distribution where dividing would give ties of +inf.
inline float temperature_shift(float best, float t) { return std::isfinite(best / t) ? 0.0f : best; }

// Gumbel-max over x (logits already over the temperature; -inf entries never drawn): argmax of
// x_t - log(-log U_t) with U_t = uniform(key, t), in double; the first best index wins.
inline int32_t gumbel_argmax(const float* x, int64_t n, uint64_t key) {
  double best = -std::numeric_limits<double>::infinity();
  int32_t token = kDrawNone;
  for (int64_t t = 0; t < n; ++t) {
    if (x[t] == -std::numeric_limits<float>::infinity()) continue;
    const double score = x[t] - std::log(-std::log(uniform(key, static_cast<uint64_t>(t))));
    if (score > best) best = score, token = static_cast<int32_t>(t);
  }
  return token;
}

}  // namespace deepinfer::ops
