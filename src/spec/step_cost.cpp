#include "spec/step_cost.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace deepinfer::spec {

StepCostTable::StepCostTable(std::vector<int64_t> sizes, std::vector<double> seconds)
    : sizes_(std::move(sizes)), seconds_(std::move(seconds)) {
  check(!sizes_.empty() && sizes_.size() == seconds_.size(), "step cost table: ", sizes_.size(), " sizes and ",
        seconds_.size(), " costs");
  for (size_t i = 0; i < sizes_.size(); ++i) {
    check(sizes_[i] >= 1 && (i == 0 || sizes_[i] > sizes_[i - 1]), "step cost table: sizes must ascend from 1");
    check(seconds_[i] > 0, "step cost table: a step cost must be positive, got ", seconds_[i]);
    if (i > 0) seconds_[i] = std::max(seconds_[i], seconds_[i - 1]);  // monotone: more tokens never cost less
  }
}

StepCostTable StepCostTable::from_sps(std::vector<int64_t> sizes, const std::vector<double>& sps) {
  std::vector<double> s;
  for (double v : sps) s.push_back(1.0 / v);
  return StepCostTable(std::move(sizes), std::move(s));
}

StepCostTable StepCostTable::profile(const std::function<void(int64_t)>& forward, int64_t max_tokens, int repeats) {
  check(max_tokens >= 1 && repeats >= 1, "step cost profile: max_tokens and repeats must be positive");
  std::vector<int64_t> sizes;
  for (int64_t b = 1; b < max_tokens; b *= 2) sizes.push_back(b);
  sizes.push_back(max_tokens);
  std::vector<double> secs;
  for (int64_t b : sizes) {
    forward(b);  // warm-up
    std::vector<double> t;
    for (int r = 0; r < repeats; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      forward(b);
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    secs.push_back(std::max(t[t.size() / 2], 1e-9));
  }
  return StepCostTable(std::move(sizes), std::move(secs));
}

double StepCostTable::seconds(int64_t tokens) const {
  check(!empty(), "step cost table is empty");
  tokens = std::max<int64_t>(tokens, 1);
  if (sizes_.size() == 1) return seconds_[0] * static_cast<double>(tokens) / static_cast<double>(sizes_[0]);
  auto it = std::lower_bound(sizes_.begin(), sizes_.end(), tokens);
  size_t hi = it == sizes_.end() ? sizes_.size() - 1 : static_cast<size_t>(it - sizes_.begin());
  if (sizes_[hi] == tokens) return seconds_[hi];
  if (hi == 0) return seconds_[0];  // below the smallest size: no cheaper than it
  size_t lo = hi - 1;  // interpolate (or extrapolate past the last size along the last segment)
  double f = static_cast<double>(tokens - sizes_[lo]) / static_cast<double>(sizes_[hi] - sizes_[lo]);
  return seconds_[lo] + f * (seconds_[hi] - seconds_[lo]);
}

}  // namespace deepinfer::spec
