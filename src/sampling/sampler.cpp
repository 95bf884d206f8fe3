#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>

#include "core/error.h"
#include "ops/token_draw.h"

namespace deepinfer::sampling {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr const char* kNanLogits = "the model produced NaN logits";
constexpr const char* kNoToken = "no token is allowed at position ";

double log_normalizer(std::span<const float> row) { return ops::log_normalizer(row.data(), static_cast<int64_t>(row.size())); }

// Larger value first; equal values: lower token id first (deterministic ties).
struct ByValueDesc {
  const float* v;
  bool operator()(int32_t a, int32_t b) const { return v[a] > v[b] || (v[a] == v[b] && a < b); }
};

void apply_penalties(const SampleInput& in, std::vector<float>& x) {
  const SamplingParams& p = *in.params;
  if (p.repetition_penalty != 1.0f) {
    auto penalize = [&](int32_t t) {
      float& v = x[t];
      v = v > 0 ? v / p.repetition_penalty : v * p.repetition_penalty;
    };
    std::vector<bool> seen(x.size(), false);
    for (auto span : {in.prompt, in.output})
      for (int32_t t : span)
        if (!seen[t]) seen[t] = true, penalize(t);
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    std::unordered_map<int32_t, int> counts;
    for (int32_t t : in.output) ++counts[t];
    for (auto [t, c] : counts) x[t] -= p.frequency_penalty * c + p.presence_penalty;
  }
}

// Top-p: reorders idx[0, n) so that idx[0, k) is the smallest set of the highest-ranked tokens
// (ByValueDesc order) whose probability mass reaches top_p; returns k. Quickselect on the mass,
// O(n) expected instead of a full sort, and a pure function of the row (so deterministic).
size_t nucleus_size(int32_t* idx, size_t n, const float* x, float best, float top_p) {
  auto weight = [&](int32_t t) { return std::exp(static_cast<double>(x[t]) - best); };
  double z = 0;
  for (size_t i = 0; i < n; ++i) z += weight(idx[i]);
  const double target = top_p * z;
  double kept = 0;  // mass of idx[0, lo), all ranked above idx[lo, hi)
  size_t lo = 0, hi = n;
  while (hi - lo > 64) {
    size_t mid = lo + (hi - lo) / 2;
    std::nth_element(idx + lo, idx + mid, idx + hi, ByValueDesc{x});
    double m = 0;
    for (size_t i = lo; i < mid; ++i) m += weight(idx[i]);
    if (kept + m >= target) {
      hi = mid;
    } else {
      kept += m;
      lo = mid;
    }
  }
  std::sort(idx + lo, idx + hi, ByValueDesc{x});
  for (size_t i = lo; i < hi; ++i) {
    kept += weight(idx[i]);
    if (kept >= target) return i + 1;  // the token that crosses top_p stays
  }
  return hi;
}

void check_no_nan(std::span<const float> row) {
  for (float v : row) check(!std::isnan(v), kNanLogits);
}

int32_t argmax(const std::vector<float>& x) {
  return static_cast<int32_t>(std::max_element(x.begin(), x.end()) - x.begin());  // first max wins
}

}  // namespace

PositionLogprobs position_logprobs(std::span<const float> logits, int32_t token, int top_n) {
  check_no_nan(logits);  // prompt logprobs read rows that are never sampled
  double z = log_normalizer(logits);
  auto lp = [&](int32_t t) { return static_cast<float>(logits[t] - z); };
  std::vector<int32_t> idx(logits.size());
  std::iota(idx.begin(), idx.end(), 0);
  int k = std::clamp<int>(top_n, 0, static_cast<int>(idx.size()));
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), ByValueDesc{logits.data()});
  int rank = 1;  // the chosen token's rank: how many entries rank before it, plus one
  for (size_t t = 0; t < logits.size(); ++t)
    if (ByValueDesc{logits.data()}(static_cast<int32_t>(t), token)) ++rank;
  PositionLogprobs out{{token, lp(token), rank}};
  for (int i = 0; i < k; ++i)
    if (idx[i] != token) out.push_back({idx[i], lp(idx[i]), i + 1});
  return out;
}

SampleOutput drawn_sample(int32_t token, float logprob, int64_t position) {
  check(token != ops::kDrawNaN, kNanLogits);
  check(token >= 0, kNoToken, position);
  return {token, logprob, {}};
}

bool sample_is_plain_draw(const SamplingParams& p, int64_t generated, int64_t vocab) {
  if (!p.logit_bias.empty() || p.logprobs || generated < p.min_tokens) return false;
  if (p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) return false;
  if (p.temperature <= 0.0f) return true;  // greedy ignores min-p, top-k and top-p
  return p.min_p <= 0.0f && !(p.top_k > 0 && p.top_k < vocab) && p.top_p >= 1.0f;
}

SampleOutput sample(const SampleInput& in, std::vector<float>& x) {
  const SamplingParams& p = *in.params;
  const int64_t vocab = static_cast<int64_t>(in.logits.size());
  x.assign(in.logits.begin(), in.logits.end());
  check_no_nan(x);

  for (auto [t, b] : p.logit_bias)
    if (t >= 0 && t < vocab) x[t] += b;
  if (static_cast<int>(in.output.size()) < p.min_tokens) {
    for (int32_t t : in.eos_token_ids) if (t >= 0 && t < vocab) x[t] = kNegInf;
    for (int32_t t : p.stop_token_ids) if (t >= 0 && t < vocab) x[t] = kNegInf;
  }
  apply_penalties(in, x);
  if (in.allowed_bitmask)
    for (int64_t t = 0; t < vocab; ++t)
      if (!(((*in.allowed_bitmask)[t >> 5] >> (t & 31)) & 1u)) x[t] = kNegInf;

  SampleOutput out;
  float best = *std::max_element(x.begin(), x.end());
  check(best > kNegInf, kNoToken, in.position);
  if (p.temperature <= 0.0f) {
    out.token = argmax(x);
  } else {
    // Where best / T overflows (a tiny T, a bias near -FLT_MAX) the logits are shifted by best first,
    // which keeps the distribution: dividing gave ties of +inf (the first won) or no finite token
    // (token 0 came back). Elsewhere the shift is 0 and the values are x / T, as they always were.
    const float shift = ops::temperature_shift(best, p.temperature);
    for (float& v : x) v = (v - shift) / p.temperature;
    best = (best - shift) / p.temperature;
    if (p.min_p > 0.0f) {  // p_i >= min_p * p_max  <=>  l_i - l_max >= log(min_p)
      float cut = best + std::log(p.min_p);
      for (float& v : x) if (v < cut) v = kNegInf;
    }
    if ((p.top_k > 0 && p.top_k < vocab) || p.top_p < 1.0f) {
      std::vector<int32_t> idx;
      for (int32_t t = 0; t < vocab; ++t) if (x[t] > kNegInf) idx.push_back(t);
      size_t keep = idx.size();
      if (p.top_k > 0 && static_cast<size_t>(p.top_k) < keep) {
        keep = p.top_k;
        std::nth_element(idx.begin(), idx.begin() + keep, idx.end(), ByValueDesc{x.data()});
      }
      if (p.top_p < 1.0f) keep = nucleus_size(idx.data(), keep, x.data(), best, p.top_p);
      for (size_t i = keep; i < idx.size(); ++i) x[idx[i]] = kNegInf;
    }
    // Gumbel-max: argmax(l_i + G_i), G_i = -log(-log U_i), U_i keyed by (seed, stream, position, i).
    out.token = ops::gumbel_argmax(x.data(), vocab, draw_key(in.seed, in.stream, static_cast<uint64_t>(in.position)));
    check(out.token >= 0, "no token could be drawn at position ", in.position, " (infinite logits)");
  }
  if (p.logprobs) {
    out.logprobs = position_logprobs(in.logits, out.token, *p.logprobs);
    out.logprob = out.logprobs[0].logprob;
  } else {
    out.logprob = static_cast<float>(in.logits[out.token] - log_normalizer(in.logits));
  }
  return out;
}

}  // namespace deepinfer::sampling
