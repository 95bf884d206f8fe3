// linear_kblocked on the CPU: the reference's block-scaled GEMM order (sequential sums within a K block,
// blocks added in order), each product rounded before it is added. This file is compiled without
// fused multiply-add contraction (CMakeLists.txt), so the result does not depend on vectorization.
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/thread_pool.h"

namespace deepinfer::cpu {

namespace {

typedef float v8 __attribute__((vector_size(32)));

// tile[c][l] = w[l, c] for the nj (<= 8) rows of w (row length k): 8 weight rows interleaved so that
// one vector holds the same column of 8 outputs. 8x8 blocks are transposed in registers.
void pack_tile(const float* w, int64_t nj, int64_t k, v8* tile) {
  int64_t c = 0;
#ifdef __AVX2__
  if (nj == 8)
    for (; c + 8 <= k; c += 8) {
      __m256 r[8], t[8];
      for (int l = 0; l < 8; ++l) r[l] = _mm256_loadu_ps(w + l * k + c);
      for (int l = 0; l < 8; l += 2) {
        t[l] = _mm256_unpacklo_ps(r[l], r[l + 1]);
        t[l + 1] = _mm256_unpackhi_ps(r[l], r[l + 1]);
      }
      for (int l = 0; l < 8; l += 4)
        for (int h = 0; h < 2; ++h) {
          r[l + h] = _mm256_shuffle_ps(t[l + h], t[l + 2 + h], 0x44);
          r[l + 2 + h] = _mm256_shuffle_ps(t[l + h], t[l + 2 + h], 0xEE);
        }
      // r[0]: cols 0,4 of rows 0-3 | r[2]: cols 1,5 | r[1]: cols 2,6 | r[3]: cols 3,7 (rows 4-7 in r[4..7])
      const int col_of[4] = {0, 2, 1, 3};
      for (int q = 0; q < 4; ++q) {
        const __m256 lo = r[col_of[q]], hi = r[4 + col_of[q]];
        _mm256_storeu_ps(reinterpret_cast<float*>(tile + c + q), _mm256_permute2f128_ps(lo, hi, 0x20));
        _mm256_storeu_ps(reinterpret_cast<float*>(tile + c + q + 4), _mm256_permute2f128_ps(lo, hi, 0x31));
      }
    }
#endif
  for (; c < k; ++c)
    for (int64_t l = 0; l < 8; ++l) tile[c][l] = l < nj ? w[l * k + c] : 0.0f;
}

}  // namespace

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
