// Reads the reference tensors of tests/data/goldens (see its README) for comparisons.
#pragma once
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace deepinfer::testing {

inline std::vector<int32_t> golden_ints(const io::Checkpoint& g, const std::string& name) {
  const io::TensorView& t = g.get(name);
  const auto* p = reinterpret_cast<const int32_t*>(t.data);
  return std::vector<int32_t>(p, p + t.numel());
}

inline std::vector<float> golden_floats(const io::Checkpoint& g, const std::string& name) {
  const io::TensorView& t = g.get(name);
  return g.read_f32(name, t.shape);
}

inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

}  // namespace deepinfer::testing
