// The device index top-k (kernels/index_topk.h) against the CPU backend's index_select, exactly (the
// selection is a set of columns: no tolerance). Fresh random rows every run, output poisoned. The rows
// cover each path: fp32 scores (no tie at the m-th value: the radix select alone), bf16-rounded scores
// and a few levels (ties straddle it: the nth_element replay for n < 64 m, the heap_select replay
// above), -inf from the mask and NaN, visible < ranked, topk > ranked and 0.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "backends/cuda/kernels/index_topk.h"
#include "core/dtype.h"
#include "kernel_test_util.h"
#include "ops/ops.h"

namespace deepinfer {
namespace {

using ktest::DevBuf;

class IndexTopkTest : public ktest::KernelTest {
 protected:
  enum class Dist { kFp32, kBf16, kLevels, kMaskedNan };

  std::vector<float> row_values(int64_t n, Dist d) {
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v) {
      switch (d) {
        case Dist::kFp32: x = g(rng_); break;
        case Dist::kBf16: x = round_to_bf16(std::fabs(g(rng_)) * 3.0f); break;  // scores are relu'd sums
        case Dist::kLevels: x = static_cast<float>(rng_() % 5); break;
        case Dist::kMaskedNan: {
          const unsigned r = rng_() % 100;
          x = r == 0 ? std::numeric_limits<float>::quiet_NaN()
              : r < 20 ? -std::numeric_limits<float>::infinity()
                       : round_to_bf16(g(rng_));
          break;
        }
      }
    }
    return v;
  }

  // index_select's result with ties broken by the lowest column (TopkTies::kLowestColumn).
  static void lowest_column_reference(const std::vector<float>& scores, const std::vector<uint8_t>* mask, int64_t ld,
                                      const std::vector<int32_t>& ranked, const std::vector<int32_t>& visible,
                                      const std::vector<int32_t>& topk, int64_t K, std::vector<int32_t>& out) {
    const int64_t T = static_cast<int64_t>(ranked.size());
    out.assign(T * K, -1);
    for (int64_t t = 0; t < T; ++t) {
      const int64_t n = ranked[t], m = std::min<int64_t>(topk[t], n);
      std::vector<std::pair<float, int32_t>> q;
      for (int64_t w = 0; w < n; ++w)
        q.push_back({mask && !(*mask)[t * ld + w] ? -std::numeric_limits<float>::infinity() : scores[t * ld + w],
                     static_cast<int32_t>(w)});
      auto before = [](const std::pair<float, int32_t>& x, const std::pair<float, int32_t>& y) {
        const bool xn = std::isnan(x.first), yn = std::isnan(y.first);
        if (xn != yn) return xn;
        if (!xn && x.first != y.first) return x.first > y.first;
        return x.second < y.second;
      };
      std::sort(q.begin(), q.end(), before);
      std::vector<int32_t> cols;
      for (int64_t j = 0; j < m; ++j) cols.push_back(q[j].second);
      std::sort(cols.begin(), cols.end());
      for (int64_t j = 0; j < m; ++j) out[t * K + j] = cols[j] < visible[t] ? cols[j] : -1;
    }
  }

  // tokens rows of width ld; row t ranks n_t columns and takes topk_t; compares CUDA with the CPU (or,
  // lowest = true, with lowest_column_reference).
  void check_rows(int64_t ld, int64_t K, const std::vector<int32_t>& ranked, const std::vector<int32_t>& topk,
                  Dist d, bool with_mask, const std::string& what, bool lowest = false) {
    const int64_t T = static_cast<int64_t>(ranked.size());
    std::vector<float> scores;
    for (int64_t t = 0; t < T; ++t) {
      const auto r = row_values(ld, d);
      scores.insert(scores.end(), r.begin(), r.end());
    }
    std::vector<uint8_t> mask(T * ld);
    for (auto& b : mask) b = rng_() % 4 != 0;
    std::vector<int32_t> visible(T);
    for (int64_t t = 0; t < T; ++t) visible[t] = t % 2 ? ranked[t] : static_cast<int32_t>(rng_() % (ranked[t] + 1));
    std::vector<int32_t> ref(T * K);
    if (lowest)
      lowest_column_reference(scores, with_mask ? &mask : nullptr, ld, ranked, visible, topk, K, ref);
    else
      ops::cpu_backend().index_select(scores.data(), with_mask ? mask.data() : nullptr, T, ld, ranked.data(),
                                      visible.data(), topk.data(), K, ref.data());
    DevBuf<float> ds(scores);
    DevBuf<uint8_t> dm(mask);
    DevBuf<int32_t> dr(ranked), dv(visible), dk(topk), dsel(T * K);
    DevBuf<uint8_t> ws(cuda::index_topk_workspace_bytes(T, ld, K));
    cuda::IndexTopkArgs a;
    a.scores = ds.get(), a.mask = with_mask ? dm.get() : nullptr, a.ld = ld;
    a.ranked = dr.get(), a.visible = dv.get(), a.topk = dk.get(), a.tokens = T, a.K = K, a.sel = dsel.get();
    a.ties = lowest ? cuda::TopkTies::kLowestColumn : cuda::TopkTies::kCpuTorch;
    cuda::index_topk(a, ws.get(), nullptr);
    const auto got = dsel.host();
    int64_t bad_rows = 0;
    for (int64_t t = 0; t < T; ++t) {
      int64_t diff = 0;
      for (int64_t j = 0; j < K; ++j) diff += got[t * K + j] != ref[t * K + j];
      if (diff) {
        if (bad_rows++ < 3)
          ADD_FAILURE() << what << ": row " << t << " (ranked " << ranked[t] << ", topk " << topk[t] << ") differs in "
                        << diff << " of " << K << " entries, seed " << seed_;
      }
    }
    std::printf("[ index_topk %s ] ld %lld K %lld, %lld rows, %lld differ\n", what.c_str(),
                static_cast<long long>(ld), static_cast<long long>(K), static_cast<long long>(T),
                static_cast<long long>(bad_rows));
  }
};

// V4.1's top-512 at widths on both sides of partial_sort's switch (m * 64 <= n).
TEST_F(IndexTopkTest, MatchesCpuAtV41Widths) {
  const int64_t K = 512;
  for (const int64_t ld : {int64_t{2000}, int64_t{8192}, int64_t{32768}, int64_t{70000}}) {
    for (const Dist d : {Dist::kFp32, Dist::kBf16, Dist::kLevels, Dist::kMaskedNan}) {
      std::vector<int32_t> ranked, topk;
      for (int t = 0; t < 6; ++t) {
        ranked.push_back(static_cast<int32_t>(t == 0 ? ld : t == 1 ? std::min<int64_t>(ld, 32767)
                                                          : t == 2 ? 300 : rng_() % (ld + 1)));
        topk.push_back(static_cast<int32_t>(t == 5 ? rng_() % (K + 1) : K));
      }
      const std::string what = "dist " + std::to_string(static_cast<int>(d));
      check_rows(ld, K, ranked, topk, d, d == Dist::kMaskedNan, what);
    }
  }
}

// Small and odd shapes: ld not a multiple of 4 (unaligned rows), topk 0, topk >= ranked, many rows
// (the persistent grid's loop).
TEST_F(IndexTopkTest, MatchesCpuOnOddShapes) {
  for (const int64_t ld : {int64_t{1}, int64_t{37}, int64_t{613}, int64_t{5001}}) {
    for (const Dist d : {Dist::kBf16, Dist::kLevels, Dist::kMaskedNan}) {
      const int64_t K = 96, T = 300;
      std::vector<int32_t> ranked(T), topk(T);
      for (int64_t t = 0; t < T; ++t) {
        ranked[t] = static_cast<int32_t>(t % 4 == 0 ? ld : rng_() % (ld + 1));
        topk[t] = static_cast<int32_t>(t % 7 == 0 ? 0 : t % 7 == 1 ? K : rng_() % (K + 1));
      }
      check_rows(ld, K, ranked, topk, d, true, "odd dist " + std::to_string(static_cast<int>(d)));
    }
  }
}

// The relaxed tie order (lowest column first) against a sort-based reference.
TEST_F(IndexTopkTest, LowestColumnTies) {
  const int64_t K = 512;
  for (const int64_t ld : {int64_t{613}, int64_t{8192}, int64_t{40000}})
    for (const Dist d : {Dist::kFp32, Dist::kBf16, Dist::kLevels, Dist::kMaskedNan}) {
      std::vector<int32_t> ranked, topk;
      for (int t = 0; t < 6; ++t) {
        ranked.push_back(static_cast<int32_t>(t == 0 ? ld : rng_() % (ld + 1)));
        topk.push_back(static_cast<int32_t>(t == 5 ? rng_() % (K + 1) : K));
      }
      check_rows(ld, K, ranked, topk, d, d == Dist::kMaskedNan, "lowest dist " + std::to_string(static_cast<int>(d)),
                 true);
    }
}

}  // namespace
}  // namespace deepinfer
