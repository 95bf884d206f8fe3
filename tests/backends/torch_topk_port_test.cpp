// The CUDA backend's port of torch_topk (backends/cuda/torch_topk_device.h), run on the host, against
// the CPU's std::partial_sort / nth_element / sort version: identical index lists, in order, on rows
// full of exact ties (a few distinct values), with -inf, +inf and NaN, for both algorithm paths
// (k * 64 <= n and not), sorted and unsorted, k from 1 to n.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/torch_topk.h"
#include "backends/cuda/torch_topk_device.h"

namespace deepinfer {
namespace {

std::vector<int64_t> port_topk(const std::vector<float>& v, int64_t k, bool sorted) {
  std::vector<cuda::topk::Elem> q(v.size());
  for (size_t j = 0; j < v.size(); ++j) q[j] = {v[j], static_cast<int32_t>(j)};
  cuda::topk::torch_topk(q.data(), static_cast<int64_t>(v.size()), k, sorted);
  std::vector<int64_t> out(k);
  for (int64_t j = 0; j < k; ++j) out[j] = q[j].i;
  return out;
}

TEST(TorchTopkPort, MatchesCpuOnTiesAndSpecialValues) {
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  int64_t cases = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % (iter % 4 == 0 ? 3000 : 200));
    const int distinct = 1 + static_cast<int>(rng() % 8);  // few values: many exact ties
    std::vector<float> v(n);
    for (auto& x : v) {
      const unsigned r = rng() % 100;
      x = r < 3 ? -inf : r < 4 ? inf : (r < 5 && iter % 3 == 0) ? nan : static_cast<float>(rng() % distinct) * 0.25f;
    }
    for (int64_t k : {int64_t{1}, n, 1 + static_cast<int64_t>(rng() % n), std::max<int64_t>(1, n / 64),
                      std::max<int64_t>(1, n / 64 + 1)}) {
      for (bool sorted : {true, false}) {
        ASSERT_EQ(port_topk(v, k, sorted), cpu::torch_topk(v.data(), n, k, sorted))
            << "n " << n << " k " << k << " sorted " << sorted << " seed " << seed;
        ++cases;
      }
    }
  }
  std::printf("[ torch_topk port ] %lld cases identical (seed %u)\n", static_cast<long long>(cases), seed);
}

TEST(TorchTopkPort, SortMatchesStdSort) {
  std::mt19937 rng(7);
  for (int iter = 0; iter < 2000; ++iter) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 1500);
    std::vector<cuda::topk::Elem> a(n);
    for (int64_t j = 0; j < n; ++j) a[j] = {static_cast<float>(rng() % (1 + iter % 5)), static_cast<int32_t>(j)};
    std::vector<cuda::topk::Elem> b = a;
    cuda::topk::sort(a.data(), a.data() + n);
    std::sort(b.begin(), b.end(), [](const auto& x, const auto& y) { return x.v > y.v; });
    for (int64_t j = 0; j < n; ++j) ASSERT_EQ(a[j].i, b[j].i) << "n " << n << " at " << j;
  }
}

}  // namespace
}  // namespace deepinfer
