// SPS(B): steps per second of one forward of B tokens, measured on the engine's own forward at start-up
// (spec/engine-features.md §1.4). Made monotone (a bigger step never costs less) and interpolated linearly
// between the measured sizes, so the confidence scheduler sees a clean curve and not timing noise.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

namespace deepinfer::spec {

class StepCostTable {
 public:
  StepCostTable() = default;
  // seconds[i]: one forward of sizes[i] tokens (sizes ascending, >= 1). Throws on bad shapes.
  StepCostTable(std::vector<int64_t> sizes, std::vector<double> seconds);
  static StepCostTable from_sps(std::vector<int64_t> sizes, const std::vector<double>& sps);
  // Runs `forward(B)` (one step of B tokens) at B = 1, 2, 4, ... up to max_tokens (and max_tokens itself),
  // `repeats` times each after one warm-up, keeping the median.
  static StepCostTable profile(const std::function<void(int64_t)>& forward, int64_t max_tokens, int repeats = 3);

  bool empty() const { return sizes_.empty(); }
  double seconds(int64_t tokens) const;
  double sps(int64_t tokens) const { return 1.0 / seconds(tokens); }
  const std::vector<int64_t>& sizes() const { return sizes_; }
  const std::vector<double>& measured() const { return seconds_; }

 private:
  std::vector<int64_t> sizes_;
  std::vector<double> seconds_;  // monotone non-decreasing
};

}  // namespace deepinfer::spec
