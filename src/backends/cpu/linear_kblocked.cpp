// linear_kblocked on the CPU: the reference's block-scaled GEMM order (sequential sums within a K block,
// blocks added in order), each product rounded before it is added. This file is compiled without
// fused multiply-add contraction (CMakeLists.txt), so the result does not depend on vectorization.
#include <algorithm>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/weight_tile.h"
#include "core/thread_pool.h"

namespace deepinfer::cpu {


void CpuBackend::linear_kblocked(const float* x, int64_t m, int64_t k, const float* w, int64_t n, int64_t block,
                                 float* y) {
  // Every output keeps the reference's order (sequential within a K block, blocks added in order); the
  // speed comes from computing 8 outputs (weight rows, interleaved into a tile) x 4 x rows side by side.
  constexpr int64_t J = 8, I = 4;
  parallel_for((n + J - 1) / J, [&](int64_t t0, int64_t t1) {
    std::vector<v8> tile(k);  // tile[c][l] = w[j0 + l, c]
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t j0 = t * J, nj = std::min(J, n - j0);
      pack_tile(w + j0 * k, nj, k, tile.data());
      for (int64_t i0 = 0; i0 < m; i0 += I) {
        const int64_t ni = std::min(I, m - i0);
        v8 acc[I] = {};
        for (int64_t b = 0; b < k; b += block) {
          v8 part[I] = {};
          const int64_t e = std::min(k, b + block);
          if (ni == I) {
            for (int64_t c = b; c < e; ++c)
              for (int64_t r = 0; r < I; ++r) part[r] += x[(i0 + r) * k + c] * tile[c];
          } else {
            for (int64_t c = b; c < e; ++c)
              for (int64_t r = 0; r < ni; ++r) part[r] += x[(i0 + r) * k + c] * tile[c];
          }
          for (int64_t r = 0; r < I; ++r) acc[r] += part[r];
        }
        for (int64_t r = 0; r < ni; ++r)
          for (int64_t l = 0; l < nj; ++l) y[(i0 + r) * n + j0 + l] = acc[r][l];
      }
    }
  }, std::max<int64_t>(1, 256 / std::max<int64_t>(1, m)));
}

}  // namespace deepinfer::cpu
