#include "ops/token_draw.h"

#include <algorithm>

namespace deepinfer::ops {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Reorders idx[0, n) so that idx[0, k) is the shortest best-first prefix whose mass reaches top_p of
// the mass of all n; returns k. Quickselect on the mass (O(n) expected instead of a full sort); the
// masses are integers, so the prefix found does not depend on the order they were added in.
size_t nucleus_size(int32_t* idx, size_t n, const float* x, float best, float top_p) {
  uint64_t total = 0;
  for (size_t i = 0; i < n; ++i) total += draw_mass(x[idx[i]], best);
  uint64_t kept = 0;  // mass of idx[0, lo), all ranked above idx[lo, hi)
  size_t lo = 0, hi = n;
  while (hi - lo > 64) {
    const size_t mid = lo + (hi - lo) / 2;
    std::nth_element(idx + lo, idx + mid, idx + hi, ByRank{x});
    uint64_t m = 0;
    for (size_t i = lo; i < mid; ++i) m += draw_mass(x[idx[i]], best);
    if (draw_mass_reaches(kept + m, total, top_p)) {
      hi = mid;
    } else {
      kept += m;
      lo = mid;
    }
  }
  std::sort(idx + lo, idx + hi, ByRank{x});
  for (size_t i = lo; i < hi; ++i) {
    kept += draw_mass(x[idx[i]], best);
    if (draw_mass_reaches(kept, total, top_p)) return i + 1;  // the token that crosses top_p stays
  }
  return hi;
}

// Top-k, then top-p over what top-k kept: every other token becomes -inf.
void truncate(std::vector<float>& x, const DrawRow& r, float best) {
  std::vector<int32_t> idx;
  for (int32_t t = 0; t < static_cast<int32_t>(x.size()); ++t)
    if (x[t] > kNegInf) idx.push_back(t);
  size_t keep = idx.size();
  if (r.top_k > 0 && static_cast<size_t>(r.top_k) < keep) {
    keep = static_cast<size_t>(r.top_k);
    std::nth_element(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(keep), idx.end(), ByRank{x.data()});
  }
  if (r.top_p < 1.0f) keep = nucleus_size(idx.data(), keep, x.data(), best, r.top_p);
  for (size_t i = keep; i < idx.size(); ++i) x[idx[i]] = kNegInf;
}

}  // namespace

int32_t draw_row(const float* logits, int64_t vocab, const DrawRow& r, const DrawAdjust* adjust, const uint32_t* mask,
                 std::vector<float>& x) {
  x.assign(logits, logits + vocab);
  if (std::any_of(x.begin(), x.end(), [](float v) { return std::isnan(v); })) return kDrawNaN;
  for (int32_t e = r.adjust_begin; e < r.adjust_end; ++e)
    if (adjust[e].token >= 0 && adjust[e].token < vocab) x[adjust[e].token] = adjust_logit(x[adjust[e].token], adjust[e], r);
  if (mask)
    for (int64_t t = 0; t < vocab; ++t)
      if (!draw_allowed(mask, t)) x[t] = kNegInf;
  const auto top = std::max_element(x.begin(), x.end());  // the first maximum
  if (top == x.end() || !(*top > kNegInf)) return kDrawNone;
  if (r.temperature <= 0.0f) return static_cast<int32_t>(top - x.begin());
  // Where best / T overflows (a tiny T, a bias near -FLT_MAX) the logits are shifted by best first,
  // which keeps the distribution (dividing gave ties of +inf or no finite token).
  const float shift = temperature_shift(*top, r.temperature);
  const float best = (*top - shift) / r.temperature;
  for (float& v : x) v = (v - shift) / r.temperature;
  if (r.log_min_p > kNegInf) {  // p_i >= min_p * p_max  <=>  l_i - l_max >= log(min_p)
    const float cut = best + r.log_min_p;
    for (float& v : x) if (v < cut) v = kNegInf;
  }
  if (r.top_k > 0 || r.top_p < 1.0f) truncate(x, r, best);
  // Gumbel-max: argmax(l_i + G_i), G_i = -log(-log U_i), U_i keyed by (seed, stream, position, i).
  return gumbel_argmax(x.data(), vocab, r.key);
}

}  // namespace deepinfer::ops
