// The math of drawing one token from a row of logits, shared by the host sampler (sampling/sampler.cpp)
// and the backends' draw_tokens, so that a token drawn on the device is the one the host would draw.
//
// Order (sampling::sample): logit bias, min_tokens (eos / stop tokens forbidden), repetition penalty,
// presence / frequency penalties, the grammar's allowed-token mask, then temperature, min-p, top-k,
// top-p and a Gumbel-max draw with counter-based noise. Every step is elementwise with one rounding per
// operation, except the truncations, which are defined so that no sum depends on an order:
//  - tokens rank by value, then lower id (draw_rank_key: unique 64-bit keys);
//  - top-k keeps the top_k best ranks;
//  - top-p weighs each kept token by exp(x - best) in whole units of 2^-32 (draw_mass) and keeps the
//    shortest best-first prefix whose mass reaches top_p of the kept mass. Integer sums are exact in
//    any order, so a device summing in parallel keeps the set the host keeps.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/counter_rng.h"

namespace deepinfer::ops {

// draw_tokens' token for a row holding a NaN, and for one with no finite logit.
inline constexpr int32_t kDrawNaN = -2, kDrawNone = -1;

// One drawn row's sampling, as sampling::draw_params builds it from a request (48 bytes, no padding:
// uploaded as is).
struct DrawRow {
  uint64_t key = 0;                 // counter noise of this draw (draw_key(seed, stream, position))
  float temperature = 0;            // <= 0: the first maximum (greedy ignores min-p, top-k and top-p)
  float log_min_p = -std::numeric_limits<float>::infinity();  // std::log(min_p); -inf: no min-p
  float top_p = 1;                  // < 1: nucleus
  float repetition_penalty = 1, presence_penalty = 0, frequency_penalty = 0;
  int32_t top_k = 0;                // > 0 and below the vocabulary: keep the top_k best
  int32_t adjust_begin = 0, adjust_end = 0;  // this row's entries of the DrawAdjust list
  int32_t mask = -1;                // this row's row of allowed-token bitmasks, -1: none
};
static_assert(sizeof(DrawRow) == 48);

// A token of a row that the bias, min_tokens or a penalty touches (one entry per token and row).
struct DrawAdjust {
  enum : uint32_t { kBias = 1, kForbid = 2, kSeen = 4 };
  int32_t token = 0;
  float bias = 0;        // added when kBias
  int32_t count = 0;     // times in the output (presence / frequency penalties)
  uint32_t flags = 0;    // kForbid: -inf (before min_tokens); kSeen: in the prompt or output (repetition)
};
static_assert(sizeof(DrawAdjust) == 16);

// The adjusted logit of a token with an entry.
DEEPINFER_HOST_DEVICE inline float adjust_logit(float v, const DrawAdjust& a, const DrawRow& r) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (a.flags & DrawAdjust::kBias) v += a.bias;
  if (a.flags & DrawAdjust::kForbid) v = kNegInf;
  if ((a.flags & DrawAdjust::kSeen) && r.repetition_penalty != 1.0f)
    v = v > 0 ? v / r.repetition_penalty : v * r.repetition_penalty;
  if (a.count > 0 && (r.presence_penalty != 0.0f || r.frequency_penalty != 0.0f))
    v -= fmaf(r.frequency_penalty, static_cast<float>(a.count), r.presence_penalty);  // one rounding everywhere
  return v;
}

// Whether token t is allowed by a row of bitmask words (bit t % 32 of word t / 32).
DEEPINFER_HOST_DEVICE inline bool draw_allowed(const uint32_t* mask, int64_t t) { return (mask[t >> 5] >> (t & 31)) & 1u; }

// The rank of (value, token) as one unsigned key: larger value first, then lower token id (-0 = +0).
DEEPINFER_HOST_DEVICE inline uint64_t draw_rank_key(float v, int32_t token) {
  const float c = v == 0.0f ? 0.0f : v;
#if defined(__CUDA_ARCH__)
  const uint32_t bits = __float_as_uint(c);
#else
  uint32_t bits;
  __builtin_memcpy(&bits, &c, sizeof bits);
#endif
  const uint32_t ordered = (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
  return (static_cast<uint64_t>(ordered) << 32) | (0xffffffffu - static_cast<uint32_t>(token));
}

// Host ranking of tokens by their values in v: larger first, then lower id (the order of draw_rank_key).
struct ByRank {
  const float* v;
  bool operator()(int32_t a, int32_t b) const { return v[a] > v[b] || (v[a] == v[b] && a < b); }
};

// The top-p mass of a token: exp(x - best) (in (0, 1]) in whole units of 2^-32, rounded down. A row's
// total stays below 2^49, so sums and their doubles are exact.
DEEPINFER_HOST_DEVICE inline uint64_t draw_mass(float x, float best) {
  return static_cast<uint64_t>(exp(static_cast<double>(x) - static_cast<double>(best)) * 0x1.0p32);
}
DEEPINFER_HOST_DEVICE inline bool draw_mass_reaches(uint64_t mass, uint64_t total, float top_p) {
  return static_cast<double>(mass) >= static_cast<double>(top_p) * static_cast<double>(total);
}

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
DEEPINFER_HOST_DEVICE inline float temperature_shift(float best, float t) {
  const float q = best / t;
  return q - q == 0.0f ? 0.0f : best;  // q is finite (inf - inf and NaN - NaN are NaN)
}

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

// The host's draw of one row (the reference every backend's draw_tokens matches): the token, kDrawNaN
// for a row holding a NaN, kDrawNone when nothing can be drawn. `adjust` holds r's entries
// [adjust_begin, adjust_end) (tokens outside the vocabulary are ignored), `mask` its bitmask row or
// null. x: scratch.
int32_t draw_row(const float* logits, int64_t vocab, const DrawRow& r, const DrawAdjust* adjust, const uint32_t* mask,
                 std::vector<float>& x);

}  // namespace deepinfer::ops
