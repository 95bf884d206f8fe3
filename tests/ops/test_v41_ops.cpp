// The CPU ops added for DeepSeek-V4.1's reference numerics, against direct restatements of the
// reference kernels (kernel_cpu.py semantics, spec §2.2, §2.3, §2.5).
#include <gtest/gtest.h>

#include <algorithm>
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

// The state's packed rows (core/row_format.h, v41_state.h) hold exactly what the reference's
// quantization points give: quantize_rows then decoding is bitwise fake_quant_fp8 / _fp4_e4m3 / _fp4 of
// the row, at any magnitude (rows scaled from 2^-140 to 2^90, blocks of zeros and single spikes
// included), and the values are exact in bf16 (the reference's cache dtype). Rows written through
// indices into blocks that rows do not tile (paged_row_offset). Quantizing a fake-quantized FP8 row
// again gives the same values (the model's fresh window rows rely on it).
TEST(V41Ops, PackedStateRowsDecodeToTheReferenceQuantization) {
  const int64_t rows = 24, dim = 128, block_bytes = 1000;
  std::vector<float> x = randn(rows * dim, 11, 1.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < dim; ++c) {
      float& v = x[r * dim + c];
      v = std::ldexp(v, static_cast<int>(-140 + 10 * r));
      if (r % 5 == 1 && c % 32 != 3) v = 0;  // spikes over zeros
    }
  be().round_bf16(x.data(), rows * dim);
  std::vector<int32_t> dst(rows);
  for (int64_t r = 0; r < rows; ++r) dst[r] = static_cast<int32_t>((r * 7) % rows);
  for (RowFormat f : {RowFormat::kFp8E8m0x32, RowFormat::kFp4E4m3x16, RowFormat::kFp4E8m0x32}) {
    std::vector<float> want = x;
    if (f == RowFormat::kFp8E8m0x32) be().fake_quant_fp8(want.data(), rows, dim, 32);
    if (f == RowFormat::kFp4E4m3x16) be().fake_quant_fp4_e4m3(want.data(), rows, dim, 16);
    if (f == RowFormat::kFp4E8m0x32) be().fake_quant_fp4(want.data(), rows, dim, 32);
    const int64_t rb = row_bytes(f, dim);
    std::vector<uint8_t> arena(paged_row_offset(rows, rb, block_bytes) + block_bytes);
    be().quantize_rows(x.data(), nullptr, rows, dim, f, arena.data(), block_bytes, dst.data());
    std::vector<float> got(dim);
    int64_t nonzero = 0;
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(arena.data() + paged_row_offset(dst[r], rb, block_bytes), dim, f, got.data());
      for (int64_t c = 0; c < dim; ++c) {
        const float w = want[r * dim + c];
        ASSERT_EQ(got[c], w) << row_format_name(f) << " row " << r << " element " << c;
        ASSERT_EQ(round_to_bf16(w), w) << row_format_name(f) << " row " << r << " element " << c;
        nonzero += w != 0;
      }
    }
    EXPECT_GT(nonzero, rows * dim / 4) << row_format_name(f);  // the check saw real values, not a flushed row
    if (f != RowFormat::kFp8E8m0x32) continue;
    std::vector<uint8_t> again(rows * rb);
    be().quantize_rows(want.data(), nullptr, rows, dim, f, again.data(), 0, nullptr);
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(again.data() + r * rb, dim, f, got.data());
      EXPECT_EQ(got, std::vector<float>(want.begin() + r * dim, want.begin() + (r + 1) * dim)) << "requantized row " << r;
    }
  }
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

// Double-precision softmax with the sink in the denominator, probabilities unrounded; cols [k, dim] the
// decoded row of each index column (valid where idx >= 0).
std::vector<double> attention_ref(const std::vector<float>& q, const std::vector<float>& cols,
                                  const std::vector<int32_t>& idx, float sink, float scale, int64_t dim) {
  double m = -1e300;
  std::vector<double> s(idx.size());
  for (size_t j = 0; j < idx.size(); ++j) {
    if (idx[j] < 0) continue;
    double d = 0;
    for (int64_t c = 0; c < dim; ++c) d += static_cast<double>(q[c]) * cols[j * dim + c];
    s[j] = d * scale;
    m = std::max(m, s[j]);
  }
  double z = std::exp(sink - m);
  std::vector<double> o(dim, 0.0);
  for (size_t j = 0; j < idx.size(); ++j) {
    if (idx[j] < 0) continue;
    const double p = std::exp(s[j] - m);
    z += p;
    for (int64_t c = 0; c < dim; ++c) o[c] += p * cols[j * dim + c];
  }
  for (double& v : o) v /= z;
  return o;
}

// Window rows (FP8) in the first 100 index columns, compressed rows (FP4 + E4M3) after them, both in one
// paged arena of 200-byte blocks (6 window rows of 33 bytes a block, then 11 compressed rows of 18).
TEST(V41Ops, OnlineSparseAttentionMatchesSoftmaxWithSink) {
  const int64_t dim = 32, nw = 150, nc = 60, K = 150, window = 100, bb = 200;
  const int64_t wb = row_bytes(RowFormat::kFp8E8m0x32, dim), cb = row_bytes(RowFormat::kFp4E4m3x16, dim);
  const int64_t first_c = (nw + bb / wb - 1) / (bb / wb) * (bb / cb);  // arena index of compressed row 0
  auto q = randn(dim, 6, 0.3f), wr = randn(nw * dim, 7), cr = randn(nc * dim, 8);
  std::vector<uint8_t> arena(paged_row_offset(first_c + nc, cb, bb) + bb);
  std::vector<float> wdec(nw * dim), cdec(nc * dim);
  for (int64_t r = 0; r < nw; ++r) {
    uint8_t* row = arena.data() + paged_row_offset(r, wb, bb);
    quantize_row(wr.data() + r * dim, dim, RowFormat::kFp8E8m0x32, row);
    dequantize_row(row, dim, RowFormat::kFp8E8m0x32, wdec.data() + r * dim);
  }
  for (int64_t r = 0; r < nc; ++r) {
    uint8_t* row = arena.data() + paged_row_offset(first_c + r, cb, bb);
    quantize_row(cr.data() + r * dim, dim, RowFormat::kFp4E4m3x16, row);
    dequantize_row(row, dim, RowFormat::kFp4E4m3x16, cdec.data() + r * dim);
  }
  std::vector<int32_t> idx(K);
  std::vector<float> cols(K * dim);
  for (int64_t j = 0; j < K; ++j) {
    const int64_t r = j < window ? (j * 37) % nw : (j * 13) % nc;
    idx[j] = j % 7 == 3 ? -1 : static_cast<int32_t>(j < window ? r : first_c + r);
    std::copy_n((j < window ? wdec.data() : cdec.data()) + r * dim, dim, cols.data() + j * dim);
  }
  const float sink = 0.7f, scale = 1.0f / std::sqrt(static_cast<float>(dim));
  std::vector<float> out(dim);
  be().sparse_attention_online(q.data(), 1, 1, dim, arena.data(), bb, nullptr, idx.data(), K, window, &sink, scale, 64,
                               out.data());
  auto ref = attention_ref(q, cols, idx, sink, scale, dim);
  for (int64_t c = 0; c < dim; ++c) EXPECT_NEAR(out[c], ref[c], 4e-3 * (1 + std::fabs(ref[c]))) << c;  // bf16 p
  // The same window rows read as this step's fresh rows (window rows >= 100 moved there) give the same bits.
  std::vector<uint8_t> fresh((nw - 100) * wb);
  for (int64_t r = 100; r < nw; ++r)
    std::copy_n(arena.data() + paged_row_offset(r, wb, bb), wb, fresh.data() + (r - 100) * wb);
  std::vector<float> out2(dim);
  std::vector<int32_t> idx2 = idx;
  for (int64_t j = 0; j < window; ++j)
    if (idx2[j] >= 100) idx2[j] = ops::fresh_row(idx2[j] - 100);
  be().sparse_attention_online(q.data(), 1, 1, dim, arena.data(), bb, fresh.data(), idx2.data(), K, window, &sink,
                               scale, 64, out2.data());
  EXPECT_EQ(out2, out);
  // No valid index: the sink takes everything, the output is 0.
  std::vector<int32_t> none(K, -1);
  be().sparse_attention_online(q.data(), 1, 1, dim, arena.data(), bb, nullptr, none.data(), K, window, &sink, scale, 64,
                               out.data());
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace deepinfer
