// Weight tiles for the CPU GEMMs: 8 weight rows interleaved (tile[c][l] = w[l, c]) so that one vector
// holds the same input channel of 8 outputs; each output keeps its own sequential summation order.
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace deepinfer::cpu {

typedef float v8 __attribute__((vector_size(32)));

// tile[c][l] = w[l, c] for the nj (<= 8) rows of w (row length k): 8 weight rows interleaved so that
// one vector holds the same column of 8 outputs. 8x8 blocks are transposed in registers.
inline void pack_tile(const float* w, int64_t nj, int64_t k, v8* tile) {
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

}  // namespace deepinfer::cpu
