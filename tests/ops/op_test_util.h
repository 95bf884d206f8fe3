// Shared by the CPU op tests: the backend under test and seeded random inputs (never zeros).
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "ops/ops.h"

namespace deepinfer::testing {

inline ops::Backend& be() { return ops::cpu_backend(); }

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

}  // namespace deepinfer::testing
