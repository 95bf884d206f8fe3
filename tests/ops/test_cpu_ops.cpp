// The CPU backend's ops against direct restatements of the spec's formulas (§2, §3.2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "backends/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "core/error.h"
#include "op_test_util.h"
#include "ops/ops.h"

namespace deepinfer {
namespace {

using testing::be;
using testing::randn;

TEST(CpuOps, LinearMatchesDoublePrecision) {
  const int64_t m = 7, k = 300, n = 37;
  auto x = randn(m * k, 1), w = randn(n * k, 2);
  std::vector<float> y(m * n, NAN);
  be().linear(x.data(), m, k, w.data(), n, y.data());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0;
      for (int64_t c = 0; c < k; ++c) ref += double(x[i * k + c]) * w[j * k + c];
      EXPECT_NEAR(y[i * n + j], ref, 1e-4 * std::sqrt(double(k)));
    }
}

// linear_quant on a stored FP8 (block 32) or MXFP4 weight: each element the stored value times its
// scale, activations FP8-quantized first, K blocks of 32, bf16 out -> bitwise fake_quant_fp8 +
// linear_kblocked + round_bf16 on the dequantized weight written out by hand here.
TEST(CpuOps, LinearQuantOnStoredWeights) {
  const int64_t m = 5, k = 96, n = 40;
  auto x = randn(m * k, 5);
  std::mt19937 rng(6);
  std::vector<uint8_t> fp8(n * k), fp4(n * k / 2);
  for (auto& b : fp8) b = static_cast<uint8_t>(rng() % 256) & 0xfe;  // no NaN codes (0x7f / 0xff)
  for (auto& b : fp4) b = static_cast<uint8_t>(rng() % 256);
  std::vector<float> s8 = {0.5f, 2.0f, 0.25f, 1.0f, 4.0f, 0.125f}, s4(n * k / 32);  // [ceil(40/32), 96/32]
  for (auto& v : s4) v = std::ldexp(1.0f, static_cast<int>(rng() % 7) - 3);
  struct Case { ops::QWeight w; std::vector<float> dense; };
  std::vector<Case> cases(2);
  cases[0].w = {ops::WeightType::kFp8Block, fp8.data(), s8.data(), n, k, 32};
  cases[1].w = {ops::WeightType::kMxfp4, fp4.data(), s4.data(), n, k, 32};
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) {
      cases[0].dense.push_back(e4m3_to_float(fp8[r * k + c]) * s8[(r / 32) * 3 + c / 32]);
      const uint8_t byte = fp4[(r * k + c) / 2];
      cases[1].dense.push_back(e2m1_to_float(c % 2 ? byte >> 4 : byte & 0xf) * s4[r * (k / 32) + c / 32]);
    }
  for (const Case& cs : cases) {
    std::vector<float> xq = x, want(m * n), got(m * n, NAN), got_f32(m * n, NAN);
    be().fake_quant_fp8(xq.data(), m, k, 32);
    be().linear_kblocked(xq.data(), m, k, cs.dense.data(), n, 32, want.data());
    be().round_bf16(want.data(), m * n);
    be().linear_quant(x.data(), m, cs.w, 32, got.data());
    const ops::QWeight dense{ops::WeightType::kF32, cs.dense.data(), nullptr, n, k, 0};
    be().linear_quant(x.data(), m, dense, 32, got_f32.data());
    EXPECT_EQ(got, want) << static_cast<int>(cs.w.type);
    EXPECT_EQ(got_f32, want);
    std::vector<float> deq(n * k);
    cpu::dequantize(cs.w, deq.data());
    EXPECT_EQ(deq, cs.dense);
  }
  EXPECT_EQ(be().weight_format(ops::WeightType::kFp8Block), ops::WeightType::kF32);  // the CPU dequantizes at load
}

// gemm_scale_bytes: FP8 block scales row-major as bytes (2^e -> e + 127), MXFP4 scales transposed to
// K-block-major, and nothing when a scale is not a power of two (the GEMM cannot take it).
TEST(CpuOps, GemmScaleBytesLayouts) {
  std::vector<float> s8 = {0.5f, 2.0f, 0.25f, 1.0f, 4.0f, std::ldexp(1.0f, -127)};  // [2, 3]
  const ops::QWeight fp8{ops::WeightType::kFp8Block, nullptr, s8.data(), 40, 96, 32};
  EXPECT_EQ(ops::gemm_scale_bytes(fp8), (std::vector<uint8_t>{126, 128, 125, 127, 129, 0}));
  std::vector<float> s4 = {1.0f, 2.0f, 4.0f, 8.0f, 0.5f, 0.25f};  // [n 2, k/32 3]
  const ops::QWeight fp4{ops::WeightType::kMxfp4, nullptr, s4.data(), 2, 96, 32};
  EXPECT_EQ(ops::gemm_scale_bytes(fp4), (std::vector<uint8_t>{127, 130, 128, 126, 129, 125}));
  s8[3] = 0.75f;
  EXPECT_TRUE(ops::gemm_scale_bytes(fp8).empty());
  s8[3] = 0.0f;
  EXPECT_TRUE(ops::gemm_scale_bytes(fp8).empty());
  EXPECT_TRUE(ops::gemm_scale_bytes({ops::WeightType::kF32, nullptr, nullptr, 2, 2, 0}).empty());
}

// moe_group against the definition: expert by expert, tokens ascending, each (token, expert) one row;
// slot lists a token's rows by ascending expert id.
TEST(CpuOps, MoeGroupOrdersRowsByExpert) {
  const int64_t n = 41, k = 6, E = 20;
  std::mt19937 rng(9);
  std::vector<int32_t> sel(n * k);
  std::vector<float> weight(n * k);
  for (int64_t t = 0; t < n; ++t) {
    std::vector<int32_t> ids(E);
    for (int32_t e = 0; e < E; ++e) ids[e] = e;
    std::shuffle(ids.begin(), ids.end(), rng);
    for (int64_t j = 0; j < k; ++j) sel[t * k + j] = ids[j], weight[t * k + j] = static_cast<float>(t * 10 + j);
  }
  std::vector<int32_t> perm(n * k, -7), slot(n * k, -7), offsets(E + 1, -7);
  std::vector<float> rw(n * k, NAN);
  be().moe_group(sel.data(), weight.data(), n, k, E, perm.data(), rw.data(), slot.data(), offsets.data());
  int64_t r = 0;
  std::vector<std::vector<std::pair<int32_t, int32_t>>> rows_of(n);  // token -> (expert, row)
  for (int32_t e = 0; e < E; ++e) {
    EXPECT_EQ(offsets[e], r) << e;
    for (int64_t t = 0; t < n; ++t)
      for (int64_t j = 0; j < k; ++j)
        if (sel[t * k + j] == e) {
          EXPECT_EQ(perm[r], t) << r;
          EXPECT_EQ(rw[r], weight[t * k + j]) << r;
          rows_of[t].push_back({e, static_cast<int32_t>(r++)});
        }
  }
  EXPECT_EQ(offsets[E], n * k);
  for (int64_t t = 0; t < n; ++t)  // rows_of[t] is in ascending expert order already
    for (int64_t j = 0; j < k; ++j) EXPECT_EQ(slot[t * k + j], rows_of[t][j].second) << t << "," << j;
  sel[5] = E;
  EXPECT_THROW(be().moe_group(sel.data(), weight.data(), n, k, E, perm.data(), rw.data(), slot.data(), offsets.data()),
               Error);
}

// Stacked weights: group(g) is matrix g (data, fp32 scales, UE8M0 bytes with the stack's stride), and
// linear_quant_grouped gives each group's rows what linear_quant on that matrix alone gives them.
TEST(CpuOps, GroupedLinearQuantIsEachGroupAlone) {
  const int64_t G = 3, n = 64, k = 128;
  std::mt19937 rng(11);
  using WT = ops::WeightType;
  for (WT type : {WT::kFp8Block, WT::kMxfp4, WT::kF32}) {
    const bool fp4 = type == WT::kMxfp4;
    const int64_t bytes = fp4 ? n * k / 2 : n * k, nscale = fp4 ? n * k / 32 : (n / 32) * (k / 32);
    std::vector<std::vector<uint8_t>> data(G), s8(G);
    std::vector<std::vector<float>> scale(G), f32(G);
    std::vector<uint8_t> all;
    std::vector<float> all_scale, all_f32;
    for (int64_t g = 0; g < G; ++g) {
      data[g].resize(bytes);
      for (auto& b : data[g]) b = static_cast<uint8_t>(rng() % 256) & (fp4 ? 0xff : 0xfe);
      scale[g].resize(nscale);
      for (auto& v : scale[g]) v = std::ldexp(1.0f, static_cast<int>(rng() % 7) - 3);
      f32[g] = randn(n * k, 20 + static_cast<uint32_t>(g));
      s8[g] = ops::gemm_scale_bytes({type, data[g].data(), scale[g].data(), n, k, 32});
      all.insert(all.end(), data[g].begin(), data[g].end());
      all_scale.insert(all_scale.end(), scale[g].begin(), scale[g].end());
      all_f32.insert(all_f32.end(), f32[g].begin(), f32[g].end());
    }
    const std::vector<uint8_t> all_s8 = ops::stack_gemm_scale_bytes(s8, type, n, k);
    ops::QWeight stack = type == WT::kF32 ? ops::QWeight{type, all_f32.data(), nullptr, n, k, 0}
                                          : ops::QWeight{type, all.data(), all_scale.data(), n, k, 32, all_s8.data()};
    stack.groups = G;
    const std::vector<int32_t> offsets = {0, 3, 3, 8};  // group 1 empty
    const int64_t m = offsets[G];
    auto x = randn(m * k, 12);
    std::vector<float> got(m * n, NAN), want(m * n, NAN);
    be().linear_quant_grouped(x.data(), m, stack, offsets.data(), 5, 32, got.data());
    for (int64_t g = 0; g < G; ++g) {
      const ops::QWeight one = type == WT::kF32 ? ops::QWeight{type, f32[g].data(), nullptr, n, k, 0}
                                                : ops::QWeight{type, data[g].data(), scale[g].data(), n, k, 32};
      const ops::QWeight view = stack.group(g);
      EXPECT_EQ(view.data, static_cast<const uint8_t*>(stack.data) + g * (type == WT::kF32 ? n * k * 4 : bytes));
      if (type != WT::kF32) {
        EXPECT_TRUE(std::equal(scale[g].begin(), scale[g].end(), view.scale));
        const int64_t ld = fp4 ? view.scale_ld : k / 32, rows = fp4 ? k / 32 : n / 32, cols = fp4 ? n : k / 32;
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(view.scale_ue8m0[i * ld + c], s8[g][i * cols + c]) << i << "," << c;
      }
      const int64_t rows = offsets[g + 1] - offsets[g];
      if (rows) be().linear_quant(x.data() + offsets[g] * k, rows, one, 32, want.data() + offsets[g] * n);
    }
    EXPECT_EQ(got, want) << static_cast<int>(type);
  }
  EXPECT_THROW(ops::QWeight{}.group(1), Error);
}

// linear_plain: linear() for kF32; a bf16 weight is linear() on its widened values; stacked bf16 views.
TEST(CpuOps, LinearPlainOnFloatAndBf16Weights) {
  const int64_t m = 4, k = 64, n = 24;
  auto x = randn(m * k, 31), w = randn(2 * n * k, 32);
  std::vector<uint16_t> bits(w.size());
  for (size_t i = 0; i < w.size(); ++i) w[i] = bf16_to_float(bits[i] = float_to_bf16(w[i]));
  std::vector<float> want(m * n), got(m * n, NAN), got16(m * n, NAN);
  be().linear(x.data(), m, k, w.data() + n * k, n, want.data());
  ops::QWeight f32{ops::WeightType::kF32, w.data(), nullptr, n, k, 0}, b16{ops::WeightType::kBf16, bits.data(), nullptr, n, k, 0};
  f32.groups = b16.groups = 2;
  be().linear_plain(x.data(), m, f32.group(1), got.data());
  be().linear_plain(x.data(), m, b16.group(1), got16.data());
  EXPECT_EQ(got, want);
  EXPECT_EQ(got16, want);
  EXPECT_THROW(be().linear_plain(x.data(), m, {ops::WeightType::kFp8Block, bits.data(), nullptr, n, k, 32}, got.data()),
               Error);
}

TEST(CpuOps, SparseAttentionWithSink) {
  const int64_t T = 3, H = 2, D = 16, N = 9, K = 5;
  auto q = randn(T * H * D, 3), pool = randn(N * D, 4);
  std::vector<float> sink = {0.5f, -1.0f};
  std::vector<int32_t> idx = {0, 3, 3, -1, 8,  // duplicates attend twice; -1 is empty
                              -1, -1, -1, -1, -1, 1, 2, 4, 5, 6};
  std::vector<float> out(T * H * D, NAN);
  const float scale = 0.25f;
  be().sparse_attention(q.data(), T, H, D, pool.data(), idx.data(), K, sink.data(), scale, out.data());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      double z = std::exp(double(sink[h]));
      std::vector<double> ref(D, 0.0), e(K, 0.0);
      for (int64_t j = 0; j < K; ++j) {
        if (idx[t * K + j] < 0) continue;
        double s = 0;
        for (int64_t c = 0; c < D; ++c) s += double(q[(t * H + h) * D + c]) * pool[idx[t * K + j] * D + c];
        z += (e[j] = std::exp(scale * s));
      }
      for (int64_t j = 0; j < K; ++j)
        if (idx[t * K + j] >= 0)
          for (int64_t c = 0; c < D; ++c) ref[c] += e[j] / z * pool[idx[t * K + j] * D + c];
      for (int64_t c = 0; c < D; ++c) EXPECT_NEAR(out[(t * H + h) * D + c], ref[c], 1e-5) << t << "," << h;
    }
  for (int64_t c = 0; c < H * D; ++c) EXPECT_EQ(out[1 * H * D + c], 0.0f);  // no valid index: zero
}

TEST(CpuOps, RopeInverseUndoesRotationAndLeavesNopeChannels) {
  const int64_t rows = 4, heads = 3, dim = 24, rope_dim = 8;
  std::vector<float> inv_freq = {1.0f, 0.1f, 0.01f, 0.001f};
  ops::RopeFreqs f{inv_freq.data(), rope_dim, 1.0f};
  std::vector<int64_t> pos = {0, 5, 100, 7777};
  auto x = randn(rows * heads * dim, 5), y = x;
  be().rope(y.data(), rows, heads, dim, pos.data(), f, false, false);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h) {
      const float* a = x.data() + (r * heads + h) * dim;
      const float* b = y.data() + (r * heads + h) * dim;
      for (int64_t c = 0; c < dim - rope_dim; ++c) EXPECT_EQ(a[c], b[c]);
      // interleaved pair i turns by pos * inv_freq[i]
      const float ang = pos[r] * inv_freq[1];
      const float* ar = a + dim - rope_dim;
      EXPECT_NEAR(b[dim - rope_dim + 2], ar[2] * std::cos(ang) - ar[3] * std::sin(ang), 1e-5);
      EXPECT_NEAR(b[dim - rope_dim + 3], ar[3] * std::cos(ang) + ar[2] * std::sin(ang), 1e-5);
    }
  be().rope(y.data(), rows, heads, dim, pos.data(), f, true, false);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], 1e-5);
}

TEST(CpuOps, HyperConnectionCombIsDoublyStochastic) {
  const int64_t rows = 3, hc = 4, dim = 8, outs = (2 + hc) * hc;
  auto x = randn(rows * hc * dim, 6), fn = randn(outs * hc * dim, 7, 0.2f), base = randn(outs, 8);
  std::vector<float> scale = {0.7f, 1.1f, 0.9f}, pre(rows * hc), post(rows * hc), comb(rows * hc * hc);
  be().hc_weights(x.data(), rows, hc, dim, fn.data(), base.data(), scale.data(), 1e-6f, 1e-6f, 20, pre.data(),
                  post.data(), comb.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < hc; ++i) {
      EXPECT_GT(pre[r * hc + i], 0.0f);
      EXPECT_LT(post[r * hc + i], 2.0f);
      float row = 0, col = 0;
      for (int64_t j = 0; j < hc; ++j) {
        row += comb[(r * hc + i) * hc + j];
        col += comb[(r * hc + j) * hc + i];
      }
      EXPECT_NEAR(row, 1.0f, 1e-3);
      EXPECT_NEAR(col, 1.0f, 1e-5);  // the last Sinkhorn step normalizes columns
    }
  }
}

TEST(CpuOps, FakeQuantFp8MatchesTheFormula) {
  std::vector<float> x = {0.1f, -3.0f, 200.0f, 1e-3f, 7.0f, -0.5f, 0.0f, 12.345f};
  auto y = x;
  be().fake_quant_fp8(y.data(), 1, 8, 4);  // blocks of 4: amax 200 and 12.345
  for (int b = 0; b < 2; ++b) {
    float amax = 0;
    for (int i = 0; i < 4; ++i) amax = std::max(amax, std::fabs(x[b * 4 + i]));
    float s = std::exp2(std::ceil(std::log2(amax / 448.0f)));
    for (int i = 0; i < 4; ++i) EXPECT_EQ(y[b * 4 + i], e4m3_to_float(float_to_e4m3(x[b * 4 + i] / s)) * s);
  }
  EXPECT_EQ(y[2], 192.0f);  // 200 / 0.5 = 400 lies halfway between 384 and 416: ties to the even 384
}

TEST(CpuOps, FakeQuantFp4RoundsToTheGrid) {
  std::vector<float> x = {6.0f, 0.25f, 0.75f, -2.5f, 5.0f, 1.25f, -0.1f, 3.5f};
  auto y = x;
  be().fake_quant_fp4(y.data(), 1, 8, 8);  // amax 6 -> scale 1
  std::vector<float> expected = {6.0f, 0.0f, 1.0f, -2.0f, 4.0f, 1.0f, -0.0f, 4.0f};  // ties to even
  EXPECT_EQ(y, expected);
}

TEST(CpuOps, SoftmaxPoolIgnoresMinusInfinitySlots) {
  const float ninf = -INFINITY;
  std::vector<float> kv = {1, 10, 2, 20, 3, 30}, gate = {0, ninf, std::log(3.0f), 0, ninf, 0};
  std::vector<float> z(2);
  be().softmax_pool(kv.data(), gate.data(), 1, 3, 2, z.data());
  EXPECT_NEAR(z[0], (1 * 1 + 2 * 3) / 4.0f, 1e-6);   // slots 0 and 1, weights 1:3
  EXPECT_NEAR(z[1], (20 + 30) / 2.0f, 1e-6);         // slots 1 and 2
}

TEST(CpuOps, SwigluClampsGateAndUp) {
  std::vector<float> g = {20.0f, -1.0f}, u = {-50.0f, 2.0f}, h(2), s = {2.0f};
  be().swiglu(g.data(), u.data(), 1, 2, 10.0f, s.data(), h.data(), false);
  EXPECT_NEAR(h[0], 10.0f / (1 + std::exp(-10.0f)) * -10.0f * 2.0f, 1e-4);
  EXPECT_NEAR(h[1], -1.0f / (1 + std::exp(1.0f)) * 2.0f * 2.0f, 1e-6);
}

}  // namespace
}  // namespace deepinfer
