// The CPU ops added for DeepSeek-V4.1's reference numerics, against direct restatements of the
// reference kernels (kernel_cpu.py semantics, spec §2.2, §2.3, §2.5).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/dtype.h"
#include "op_test_util.h"
#include "ops/ops.h"

namespace deepinfer {
namespace {

using testing::be;
using testing::randn;

TEST(V41Ops, RoundBf16IsRoundToNearestEven) {
  std::vector<float> x = {1.0f + std::ldexp(1.0f, -8), 1.0f + 3 * std::ldexp(1.0f, -8), -2.5f, 0.0f};
  be().round_bf16(x.data(), 4);
  EXPECT_EQ(x[0], 1.0f);                                // tie -> even
  EXPECT_EQ(x[1], 1.0f + std::ldexp(1.0f, -6));         // tie -> even (up)
  EXPECT_EQ(x[2], -2.5f);
  EXPECT_EQ(x[3], 0.0f);
}

// The state's BF16 rows hold what the model writes exactly (v41_state.h): window rows after
// fake_quant_fp8, compressed rows after fake_quant_fp4_e4m3, index keys after fake_quant_fp4, at any
// magnitude (rows scaled from 2^-140 to 2^100, blocks of zeros and single spikes included).
TEST(V41Ops, QuantizedStateRowsAreExactInBf16) {
  const int64_t rows = 24, dim = 128;
  std::vector<float> x = randn(rows * dim, 11, 1.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < dim; ++c) {
      float& v = x[r * dim + c];
      v = std::ldexp(v, static_cast<int>(-140 + 10 * r));
      if (r % 5 == 1 && c % 32 != 3) v = 0;  // spikes over zeros
    }
  for (int kind = 0; kind < 3; ++kind) {
    std::vector<float> y = x;
    be().round_bf16(y.data(), rows * dim);
    if (kind == 0) be().fake_quant_fp8(y.data(), rows, dim, 64);
    if (kind == 1) be().fake_quant_fp4_e4m3(y.data(), rows, dim, 16);
    if (kind == 2) be().fake_quant_fp4(y.data(), rows, dim, 32);
    std::vector<uint16_t> bits(y.size());
    be().copy_rows_to_bf16(y.data(), nullptr, rows, dim, bits.data(), nullptr);
    int64_t nonzero = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_EQ(bf16_to_float(bits[i]), y[i]) << "kind " << kind << " element " << i;
      nonzero += y[i] != 0;
    }
    EXPECT_GT(nonzero, rows * dim / 4) << kind;  // the check saw real values, not a flushed row
  }
  // Values that are not bf16 round to nearest even.
  const float odd = 1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20);  // just above the tie
  uint16_t b = 0;
  be().copy_rows_to_bf16(&odd, nullptr, 1, 1, &b, nullptr);
  EXPECT_EQ(bf16_to_float(b), 1.0f + std::ldexp(1.0f, -7));
}

TEST(V41Ops, Fp4WithE4m3ScalesPerBlock16) {
  auto x = randn(2 * 64, 3, 2.0f);
  x[5] = 0;  // keep a zero
  for (int i = 16; i < 32; ++i) x[i] = 0;  // an all-zero block keeps the floor scale
  auto y = x;
  be().fake_quant_fp4_e4m3(y.data(), 2, 64, 16);
  for (int64_t b = 0; b < 2 * 64; b += 16) {
    float amax = 6.0f * std::ldexp(1.0f, -9);
    for (int i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(x[b + i]));
    const float s = e4m3_to_float(float_to_e4m3(amax / 6.0f));
    for (int i = 0; i < 16; ++i) {
      const float want = e2m1_to_float(float_to_e2m1(std::clamp(x[b + i] / s, -6.0f, 6.0f))) * s;
      EXPECT_EQ(y[b + i], want) << b + i;
    }
  }
  EXPECT_EQ(y[5], 0.0f);
  for (int i = 16; i < 32; ++i) EXPECT_EQ(y[i], 0.0f);
}

// mHC collapse and expand on hand-checked numbers (hc 2, dim 2), fp32 and bf16 outputs.
TEST(V41Ops, HcCollapseAndExpand) {
  const std::vector<float> x = {1, 2, 3, 4}, mix = {0.5f, 0.25f}, sub = {10, 20}, post = {1, 2};
  const std::vector<float> comb = {1, 0, 0.5f, 1};  // comb[j, k]: stream j into stream k
  std::vector<float> y(2), out(4);
  be().hc_collapse(x.data(), mix.data(), 1, 2, 2, false, y.data());
  EXPECT_EQ(y, (std::vector<float>{0.5f * 1 + 0.25f * 3, 0.5f * 2 + 0.25f * 4}));
  be().hc_expand(x.data(), sub.data(), post.data(), comb.data(), 1, 2, 2, false, out.data());
  // out[k, d] = post[k] sub[d] + sum_j comb[j, k] x[j, d]
  EXPECT_EQ(out, (std::vector<float>{10 + 1 + 1.5f, 20 + 2 + 2, 20 + 3, 40 + 4}));
  const std::vector<float> xb = {1.00390625f, 0, 0, 0};  // 1 + 2^-8: halfway between bf16 steps
  be().hc_collapse(xb.data(), std::vector<float>{1, 0}.data(), 1, 2, 2, true, y.data());
  EXPECT_EQ(y[0], 1.0f);  // ties to even
}

TEST(V41Ops, LinearKBlockedSumsBlocksInOrder) {
  const int64_t m = 3, k = 96, n = 5;
  auto x = randn(m * k, 4), w = randn(n * k, 5);
  std::vector<float> y(m * n);
  be().linear_kblocked(x.data(), m, k, w.data(), n, 32, y.data());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0;
      for (int64_t b = 0; b < k; b += 32) {
        float part = 0;
        for (int64_t c = b; c < b + 32; ++c) part += x[i * k + c] * w[j * k + c];
        acc += part;
      }
      EXPECT_NEAR(y[i * n + j], acc, 1e-5f * (1 + std::fabs(acc)));  // FMA contraction may differ
    }
}

// Double-precision softmax with the sink in the denominator, probabilities unrounded.
std::vector<double> attention_ref(const std::vector<float>& q, const std::vector<float>& pool,
                                  const std::vector<int32_t>& idx, float sink, float scale, int64_t dim) {
  double m = -1e300;
  std::vector<double> s(idx.size());
  for (size_t j = 0; j < idx.size(); ++j) {
    if (idx[j] < 0) continue;
    double d = 0;
    for (int64_t c = 0; c < dim; ++c) d += static_cast<double>(q[c]) * pool[idx[j] * dim + c];
    s[j] = d * scale;
    m = std::max(m, s[j]);
  }
  double z = std::exp(sink - m);
  std::vector<double> o(dim, 0.0);
  for (size_t j = 0; j < idx.size(); ++j) {
    if (idx[j] < 0) continue;
    const double p = std::exp(s[j] - m);
    z += p;
    for (int64_t c = 0; c < dim; ++c) o[c] += p * pool[idx[j] * dim + c];
  }
  for (double& v : o) v /= z;
  return o;
}

TEST(V41Ops, OnlineSparseAttentionMatchesSoftmaxWithSink) {
  const int64_t dim = 32, rows = 150, K = 150;  // K > 64: three online blocks
  auto q = randn(dim, 6, 0.3f), pool = randn(rows * dim, 7);
  std::vector<uint16_t> bits(pool.size());  // the rows as the state arena holds them
  for (size_t i = 0; i < pool.size(); ++i) pool[i] = bf16_to_float(bits[i] = float_to_bf16(pool[i]));
  std::vector<int32_t> idx(K);
  for (int64_t j = 0; j < K; ++j) idx[j] = j % 7 == 3 ? -1 : static_cast<int32_t>((j * 37) % rows);
  const float sink = 0.7f, scale = 1.0f / std::sqrt(static_cast<float>(dim));
  std::vector<float> out(dim);
  be().sparse_attention_online(q.data(), 1, 1, dim, bits.data(), nullptr, idx.data(), K, &sink, scale, 64, out.data());
  auto ref = attention_ref(q, pool, idx, sink, scale, dim);
  for (int64_t c = 0; c < dim; ++c) EXPECT_NEAR(out[c], ref[c], 4e-3 * (1 + std::fabs(ref[c]))) << c;  // bf16 p
  // The same rows read as this step's fresh rows (pool rows >= 100 moved there) give the same bits.
  std::vector<uint16_t> fresh(bits.begin() + 100 * dim, bits.end());
  std::vector<float> out2(dim);
  std::vector<int32_t> idx2 = idx;
  for (auto& i : idx2)
    if (i >= 100) i = ops::fresh_row(i - 100);
  be().sparse_attention_online(q.data(), 1, 1, dim, bits.data(), fresh.data(), idx2.data(), K, &sink, scale, 64,
                               out2.data());
  EXPECT_EQ(out2, out);
  // No valid index: the sink takes everything, the output is 0.
  std::vector<int32_t> none(K, -1);
  be().sparse_attention_online(q.data(), 1, 1, dim, bits.data(), nullptr, none.data(), K, &sink, scale, 64, out.data());
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace deepinfer
