// torch.topk(largest=True) on CPU, reproduced with its tie behaviour: (value, index) pairs in index
// order, compared by value only; std::partial_sort when k * 64 <= n, else std::nth_element at k-1
// (then, when sorted, std::sort of the first k-1). Exact ties (e.g. bf16 index scores) are thereby
// broken the way the reference's libstdc++ build breaks them. Returns the first k indices.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace deepinfer::cpu {

inline std::vector<int64_t> torch_topk(const float* v, int64_t n, int64_t k, bool sorted) {
  using elem = std::pair<float, int64_t>;
  std::vector<elem> q(n);
  for (int64_t j = 0; j < n; ++j) q[j] = {v[j], j};
  auto cmp = [](const elem& x, const elem& y) {
    return (std::isnan(x.first) && !std::isnan(y.first)) || x.first > y.first;
  };
  if (k > 0 && k < n + 1) {
    if (k * 64 <= n) {
      std::partial_sort(q.begin(), q.begin() + k, q.end(), cmp);
    } else {
      std::nth_element(q.begin(), q.begin() + (k - 1), q.end(), cmp);
      if (sorted) std::sort(q.begin(), q.begin() + (k - 1), cmp);
    }
  }
  std::vector<int64_t> out(k);
  for (int64_t j = 0; j < k; ++j) out[j] = q[j].second;
  return out;
}

}  // namespace deepinfer::cpu
