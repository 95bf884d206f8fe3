// CUDA backend vs the CPU reference, op by op: fresh random inputs on every run (never zeros), poisoned
// (NaN) outputs so an unwritten element fails, fp32 ops within a relative error of 1e-5 (norm of the
// difference over norm of the reference), the fake-quant ops bit for bit.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernel_test_util.h"
#include "ops/ops.h"

namespace deepinfer {
namespace {

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// A device copy of a host vector (or an uninitialized, NaN-poisoned buffer of n elements).
template <typename T>
using Dev = ktest::DevBuf<T>;

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
    gpu_ = std::make_unique<cuda::CudaBackend>();
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    RecordProperty("seed", std::to_string(seed_));
  }
  std::vector<float> uniform(size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) {
      do x = d(rng_); while (x == 0.0f);
    }
    return v;
  }
  // Relative error ||got - ref|| / ||ref||; NaN (an unwritten or broken element) gives +inf.
  static double rel_error(const std::vector<float>& got, const std::vector<float>& ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      if (std::isnan(got[i]) != std::isnan(ref[i])) return std::numeric_limits<double>::infinity();
      if (std::isnan(ref[i])) continue;
      double d = static_cast<double>(got[i]) - ref[i];
      num += d * d;
      den += static_cast<double>(ref[i]) * ref[i];
    }
    return den == 0 ? (num == 0 ? 0 : std::numeric_limits<double>::infinity()) : std::sqrt(num / den);
  }
  void expect_close(const std::vector<float>& got, const std::vector<float>& ref, const char* what,
                    double tol = 1e-5) {
    ASSERT_EQ(got.size(), ref.size());
    double e = rel_error(got, ref);
    double max_abs = 0, ref_max = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      max_abs = std::max(max_abs, std::fabs(static_cast<double>(got[i]) - ref[i]));
      ref_max = std::max(ref_max, std::fabs(static_cast<double>(ref[i])));
    }
    std::printf("[ %-34s ] rel err %.3e  max |diff| %.3e (max |ref| %.3e)\n", what, e, max_abs, ref_max);
    EXPECT_LE(e, tol) << what << " (seed " << seed_ << ")";
  }
  ops::Backend& cpu() { return ops::cpu_backend(); }

  std::unique_ptr<cuda::CudaBackend> gpu_;
  std::mt19937 rng_;
  unsigned seed_ = 0;
};

// fp32 linear: bitwise the CPU's (same summation order and FMA use) at every m, k with and without a
// tail past the 32-channel tile, n not a multiple of the 32-output tile.
TEST_F(CudaBackendTest, LinearIsBitwiseTheCpu) {
  struct Shape { int64_t m, k, n; };
  for (Shape s : {Shape{1, 4096, 1024}, Shape{7, 300, 129}, Shape{64, 512, 640}, Shape{130, 1024, 96}, Shape{2, 4, 7},
                  Shape{9, 33, 65}}) {
    auto x = uniform(s.m * s.k), w = uniform(s.n * s.k);
    std::vector<float> ref(s.m * s.n);
    cpu().linear(x.data(), s.m, s.k, w.data(), s.n, ref.data());
    Dev<float> dx(x), dw(w), dy(s.m * s.n);
    gpu_->linear(dx.get(), s.m, s.k, dw.get(), s.n, dy.get());
    const auto got = dy.host();
    EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * 4), 0)
        << "linear " << s.m << "x" << s.k << "x" << s.n << " differs from the CPU";
  }
}

// Batch invariance: a row's output is bit-identical whatever m it is computed in.
TEST_F(CudaBackendTest, LinearBatchInvariant) {
  const int64_t k = 1000, n = 300, M = 40;
  auto x = uniform(M * k), w = uniform(n * k);
  Dev<float> dx(x), dw(w), yall(M * n);
  gpu_->linear(dx.get(), M, k, dw.get(), n, yall.get());
  const auto all = yall.host();
  for (int64_t m : {1, 3, 8, 9, 17}) {
    Dev<float> ym(m * n);
    gpu_->linear(dx.get(), m, k, dw.get(), n, ym.get());
    const auto got = ym.host();
    EXPECT_EQ(std::memcmp(got.data(), all.data(), got.size() * 4), 0) << "m " << m << " differs from m " << M;
  }
}

// linear_bf16 against the CPU fp32 linear of the widened bf16 inputs (bf16 products are exact in fp32,
// so only the summation order differs): the GEMV at m <= 4, cuBLAS above.
TEST_F(CudaBackendTest, LinearBf16) {
  struct Shape { int64_t m, k, n; };
  for (Shape s : {Shape{1, 4096, 1024}, Shape{2, 2056, 600}, Shape{4, 4096, 1100}, Shape{8, 2048, 263},
                  Shape{7, 8, 5}, Shape{16, 512, 96}}) {
    auto xf = uniform(s.m * s.k), wf = uniform(s.n * s.k);
    std::vector<uint16_t> xh(xf.size()), wh(wf.size());
    for (size_t i = 0; i < xf.size(); ++i) xh[i] = float_to_bf16(xf[i]), xf[i] = bf16_to_float(xh[i]);
    for (size_t i = 0; i < wf.size(); ++i) wh[i] = float_to_bf16(wf[i]), wf[i] = bf16_to_float(wh[i]);
    std::vector<float> ref(s.m * s.n);
    cpu().linear(xf.data(), s.m, s.k, wf.data(), s.n, ref.data());
    Dev<uint16_t> dx(xh), dw(wh);
    Dev<float> dy(s.m * s.n);
    gpu_->linear_bf16(dx.get(), s.m, s.k, dw.get(), s.n, dy.get());
    std::string what = "linear_bf16 " + std::to_string(s.m) + "x" + std::to_string(s.k) + "x" + std::to_string(s.n);
    expect_close(dy.host(), ref, what.c_str());
  }
}

TEST_F(CudaBackendTest, LinearKBlocked) {
  struct Shape { int64_t m, k, n, block; };
  for (Shape s : {Shape{1, 4096, 200, 128}, Shape{19, 300, 129, 128}, Shape{40, 512, 64, 32}, Shape{3, 100, 70, 7}}) {
    auto x = uniform(s.m * s.k), w = uniform(s.n * s.k);
    std::vector<float> ref(s.m * s.n);
    cpu().linear_kblocked(x.data(), s.m, s.k, w.data(), s.n, s.block, ref.data());
    Dev<float> dx(x), dw(w), dy(s.m * s.n);
    gpu_->linear_kblocked(dx.get(), s.m, s.k, dw.get(), s.n, s.block, dy.get());
    auto got = dy.host();
    std::string what = "linear_kblocked " + std::to_string(s.m) + "x" + std::to_string(s.k) + "x" +
                       std::to_string(s.n) + " b" + std::to_string(s.block);
    expect_close(got, ref, what.c_str());
    size_t same = 0;
    for (size_t i = 0; i < ref.size(); ++i) same += std::memcmp(&got[i], &ref[i], 4) == 0;
    std::printf("[ %-34s ] %zu of %zu bit-identical to the CPU\n", what.c_str(), same, ref.size());
    EXPECT_EQ(same, ref.size()) << what;
  }
}

// linear_quant with the weight kept stored on the device (FP8 block 32 / 128, MXFP4): bitwise the CPU.
TEST_F(CudaBackendTest, LinearQuantStoredWeights) {
  const int64_t m = 9, k = 256, n = 72;
  auto x = uniform(m * k);
  std::vector<uint8_t> fp8(n * k), fp4(n * k / 2);
  for (auto& b : fp8) b = static_cast<uint8_t>(rng_() % 256) & 0xfe;  // no NaN codes
  for (auto& b : fp4) b = static_cast<uint8_t>(rng_() % 256);
  EXPECT_EQ(gpu_->weight_format(ops::WeightType::kMxfp4), ops::WeightType::kMxfp4);
  for (auto [type, block] : {std::pair{ops::WeightType::kFp8Block, 32L}, std::pair{ops::WeightType::kFp8Block, 128L},
                             std::pair{ops::WeightType::kMxfp4, 32L}}) {
    const bool fp8w = type == ops::WeightType::kFp8Block;
    std::vector<float> scale(fp8w ? ((n + block - 1) / block) * (k / block) : n * k / 32);
    for (auto& v : scale) v = std::ldexp(1.0f, static_cast<int>(rng_() % 7) - 3);
    const std::vector<uint8_t>& bytes = fp8w ? fp8 : fp4;
    std::vector<float> ref(m * n);
    cpu().linear_quant(x.data(), m, {type, bytes.data(), scale.data(), n, k, block}, 32, ref.data());
    Dev<uint8_t> dq(bytes);
    Dev<float> ds(scale), dx(x), dy(m * n);
    gpu_->linear_quant(dx.get(), m, {type, dq.get(), ds.get(), n, k, block}, 32, dy.get());
    const auto got = dy.host();
    EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * 4), 0) << "type " << static_cast<int>(type) << " block " << block;
    EXPECT_EQ(dx.host(), x);  // x is not changed
  }
}

TEST_F(CudaBackendTest, RmsNorm) {
  for (auto [rows, dim, weighted, in_place] : {std::tuple{5L, 4096L, true, false}, std::tuple{9L, 100L, false, false},
                                               std::tuple{3L, 7168L, true, true}}) {
    auto x = uniform(rows * dim, -3.0f, 3.0f), w = uniform(dim, 0.5f, 1.5f);
    std::vector<float> ref(rows * dim);
    cpu().rms_norm(x.data(), weighted ? w.data() : nullptr, rows, dim, 1e-6f, ref.data());
    Dev<float> dx(x), dw(w), dy(rows * dim);
    float* out = in_place ? dx.get() : dy.get();
    gpu_->rms_norm(dx.get(), weighted ? dw.get() : nullptr, rows, dim, 1e-6f, out);
    expect_close(in_place ? dx.host() : dy.host(), ref, in_place ? "rms_norm in place" : "rms_norm");
  }
}

TEST_F(CudaBackendTest, Rope) {
  const int64_t rows = 6, heads = 3, dim = 192, rope_dim = 64;
  std::vector<float> inv_freq(rope_dim / 2);
  for (int64_t i = 0; i < rope_dim / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / rope_dim);
  std::vector<int64_t> pos(rows);
  std::uniform_int_distribution<int64_t> pd(0, 60000);
  for (auto& p : pos) p = pd(rng_);
  for (bool inverse : {false, true}) {
    auto x = uniform(rows * heads * dim);
    auto ref = x;
    cpu().rope(ref.data(), rows, heads, dim, pos.data(), {inv_freq.data(), rope_dim, 1.25f}, inverse);
    Dev<float> dx(x), df(inv_freq);
    Dev<int64_t> dp(pos);
    gpu_->rope(dx.get(), rows, heads, dim, dp.get(), {df.get(), rope_dim, 1.25f}, inverse);
    expect_close(dx.host(), ref, inverse ? "rope inverse" : "rope");
  }
}

TEST_F(CudaBackendTest, SparseAttention) {
  struct Case { int64_t tokens, heads, dim, pool_rows, k; };
  // dims 128..512 (steps of 128) take the vectorized kernels (tiled when heads % 8 == 0), 72 the generic one.
  for (Case c : {Case{8, 4, 512, 300, 37}, Case{4, 64, 512, 2048, 640}, Case{5, 16, 256, 500, 45},
                 Case{3, 32, 384, 200, 50}, Case{2, 8, 128, 64, 16}, Case{6, 3, 72, 100, 21}}) {
    const int64_t fresh_rows = 17;  // rows of this step, referenced as ops::fresh_row(i)
    auto q = uniform(c.tokens * c.heads * c.dim), pool = uniform(c.pool_rows * c.dim), sink = uniform(c.heads);
    auto fresh = uniform(fresh_rows * c.dim);
    std::vector<int32_t> idx(c.tokens * c.k);
    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(c.pool_rows - 1)), fid(0, fresh_rows - 1);
    std::bernoulli_distribution hole(0.2), from_fresh(0.25);
    for (auto& i : idx) i = hole(rng_) ? -1 : from_fresh(rng_) ? ops::fresh_row(fid(rng_)) : id(rng_);
    for (int64_t j = 0; j < c.k; ++j) idx[(c.tokens - 1) * c.k + j] = -1;  // one row with no valid index
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.dim)) * 4.0f;   // peaky softmax
    std::vector<float> ref(c.tokens * c.heads * c.dim);
    cpu().sparse_attention(q.data(), c.tokens, c.heads, c.dim, pool.data(), idx.data(), c.k, sink.data(), scale,
                           ref.data());
    Dev<float> dq(q), dpool(pool), dsink(sink);
    Dev<int32_t> didx(idx);
    using CB = cuda::CudaBackend;
    const char* names[] = {"", " per-head", " grouped", " tiled2", " tiled4x4"};
    for (int kind : {CB::kAttnAuto, CB::kAttnPerHead, CB::kAttnGrouped, CB::kAttnTiled2, CB::kAttnTiled4x4}) {
      Dev<float> dout(ref.size());
      gpu_->set_attention_kernel(kind);
      gpu_->sparse_attention(dq.get(), c.tokens, c.heads, c.dim, dpool.get(), didx.get(), c.k, dsink.get(), scale,
                             dout.get());
      auto got = dout.host();
      for (int64_t i = (c.tokens - 1) * c.heads * c.dim; i < static_cast<int64_t>(got.size()); ++i)
        ASSERT_EQ(got[i], 0.0f) << "a row with no valid index gives 0";
      std::string what = "sparse_attention h" + std::to_string(c.heads) + " d" + std::to_string(c.dim) + " k" +
                         std::to_string(c.k) + names[kind];
      expect_close(got, ref, what.c_str());
    }
    gpu_->set_attention_kernel(CB::kAttnAuto);
  }
}

TEST_F(CudaBackendTest, HcWeights) {
  const int64_t rows = 5, hc = 4, dim = 256, width = hc * dim;
  for (bool head : {false, true}) {
    const int64_t outs = head ? hc : (2 + hc) * hc;
    auto x = uniform(rows * width, -2.0f, 2.0f), fn = uniform(outs * width, -0.05f, 0.05f);
    auto base = uniform(outs), scale = uniform(3, 0.5f, 2.0f);
    std::vector<float> pre(rows * hc), post(rows * hc), comb(rows * hc * hc);
    cpu().hc_weights(x.data(), rows, hc, dim, fn.data(), base.data(), scale.data(), 1e-6f, 1e-6f, 20, pre.data(),
                     head ? nullptr : post.data(), head ? nullptr : comb.data());
    Dev<float> dx(x), dfn(fn), dbase(base), dscale(scale), dpre(pre.size()), dpost(post.size()), dcomb(comb.size());
    gpu_->hc_weights(dx.get(), rows, hc, dim, dfn.get(), dbase.get(), dscale.get(), 1e-6f, 1e-6f, 20, dpre.get(),
                     head ? nullptr : dpost.get(), head ? nullptr : dcomb.get());
    expect_close(dpre.host(), pre, head ? "hc_weights head pre" : "hc_weights pre");
    if (!head) {
      expect_close(dpost.host(), post, "hc_weights post");
      expect_close(dcomb.host(), comb, "hc_weights comb (sinkhorn 20)");
    }
  }
}

TEST_F(CudaBackendTest, SoftmaxPool) {
  const int64_t windows = 6, slots = 5, channels = 300;
  auto kv = uniform(windows * slots * channels), gate = uniform(windows * slots * channels, -4.0f, 4.0f);
  std::bernoulli_distribution masked(0.3);
  for (int64_t w = 0; w < windows; ++w)
    for (int64_t s = 1; s < slots; ++s)  // slot 0 stays finite so no channel is all -inf
      for (int64_t c = 0; c < channels; ++c)
        if (masked(rng_)) gate[(w * slots + s) * channels + c] = -std::numeric_limits<float>::infinity();
  std::vector<float> ref(windows * channels);
  cpu().softmax_pool(kv.data(), gate.data(), windows, slots, channels, ref.data());
  Dev<float> dkv(kv), dgate(gate), dz(ref.size());
  gpu_->softmax_pool(dkv.get(), dgate.get(), windows, slots, channels, dz.get());
  expect_close(dz.host(), ref, "softmax_pool");
}

TEST_F(CudaBackendTest, HcCollapseAndExpand) {
  const int64_t rows = 9, hc = 4, dim = 333;
  auto x = uniform(rows * hc * dim, -3.0f, 3.0f), mix = uniform(rows * hc), sub = uniform(rows * dim, -3.0f, 3.0f);
  auto post = uniform(rows * hc), comb = uniform(rows * hc * hc);
  Dev<float> dx(x), dmix(mix), dsub(sub), dpost(post), dcomb(comb);
  for (bool bf16 : {false, true}) {
    // fp32: CUDA may fuse a product and its sum (ulp-level); bf16 out: such an ulp can flip one rounding
    // (2^-8 relative), which is why the bf16 bound is the bf16 step.
    const double tol = bf16 ? 8e-3 : 1e-5;
    std::vector<float> y(rows * dim), out(rows * hc * dim);
    cpu().hc_collapse(x.data(), mix.data(), rows, hc, dim, bf16, y.data());
    cpu().hc_expand(x.data(), sub.data(), post.data(), comb.data(), rows, hc, dim, bf16, out.data());
    Dev<float> dy(y.size()), dout(out.size());
    gpu_->hc_collapse(dx.get(), dmix.get(), rows, hc, dim, bf16, dy.get());
    gpu_->hc_expand(dx.get(), dsub.get(), dpost.get(), dcomb.get(), rows, hc, dim, bf16, dout.get());
    expect_close(dy.host(), y, bf16 ? "hc_collapse bf16" : "hc_collapse", tol);
    expect_close(dout.host(), out, bf16 ? "hc_expand bf16" : "hc_expand", tol);
  }
}

TEST_F(CudaBackendTest, Swiglu) {
  const int64_t rows = 7, dim = 1000;
  for (float limit : {0.0f, 2.5f})
    for (bool scaled : {false, true}) {
      auto g = uniform(rows * dim, -6.0f, 6.0f), u = uniform(rows * dim, -6.0f, 6.0f), rs = uniform(rows, 0.1f, 2.0f);
      std::vector<float> ref(rows * dim);
      cpu().swiglu(g.data(), u.data(), rows, dim, limit, scaled ? rs.data() : nullptr, ref.data());
      Dev<float> dg(g), du(u), drs(rs), dh(ref.size());
      gpu_->swiglu(dg.get(), du.get(), rows, dim, limit, scaled ? drs.get() : nullptr, dh.get());
      expect_close(dh.host(), ref, limit > 0 ? "swiglu limit 2.5" : "swiglu");
    }
}

// Values spread over many binades per block (so scales, normals and e4m3/e2m1 subnormals all occur).
std::vector<float> quant_input(std::mt19937& rng, int64_t rows, int64_t dim) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> ed(-30, 20), wide(-12, 0);
  std::vector<float> v(rows * dim);
  int e = 0;
  for (int64_t i = 0; i < rows * dim; ++i) {
    if (i % 32 == 0) e = ed(rng);
    float x;
    do x = nd(rng); while (x == 0.0f);
    v[i] = std::ldexp(x, e + wide(rng));
  }
  return v;
}

void expect_bits_equal(const std::vector<float>& got, const std::vector<float>& ref, const char* what) {
  ASSERT_EQ(got.size(), ref.size());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &ref[i], 4);
    if (a != b && !bad++) first = i;
  }
  std::printf("[ %-34s ] %zu of %zu elements differ in bits\n", what, bad, ref.size());
  EXPECT_EQ(bad, 0u) << what << ": first at " << first << ": " << got[first] << " vs " << ref[first];
}

TEST_F(CudaBackendTest, FakeQuantFp8) {
  for (auto [rows, dim, block] : {std::tuple{7L, 1000L, 128L}, std::tuple{33L, 4096L, 128L}, std::tuple{3L, 50L, 32L}}) {
    auto x = quant_input(rng_, rows, dim);
    auto ref = x;
    cpu().fake_quant_fp8(ref.data(), rows, dim, block);
    Dev<float> dx(x);
    gpu_->fake_quant_fp8(dx.get(), rows, dim, block);
    expect_bits_equal(dx.host(), ref, "fake_quant_fp8");
  }
}

TEST_F(CudaBackendTest, FakeQuantFp4) {
  for (auto [rows, dim, block] : {std::tuple{7L, 1000L, 32L}, std::tuple{33L, 4096L, 32L}, std::tuple{3L, 50L, 16L}}) {
    auto x = quant_input(rng_, rows, dim);
    auto ref = x;
    cpu().fake_quant_fp4(ref.data(), rows, dim, block);
    Dev<float> dx(x);
    gpu_->fake_quant_fp4(dx.get(), rows, dim, block);
    expect_bits_equal(dx.host(), ref, "fake_quant_fp4");
  }
}

TEST_F(CudaBackendTest, FakeQuantFp4E4M3) {
  for (auto [rows, dim, block] : {std::tuple{7L, 1000L, 16L}, std::tuple{33L, 512L, 16L}, std::tuple{3L, 50L, 32L}}) {
    auto x = quant_input(rng_, rows, dim);
    auto ref = x;
    cpu().fake_quant_fp4_e4m3(ref.data(), rows, dim, block);
    Dev<float> dx(x);
    gpu_->fake_quant_fp4_e4m3(dx.get(), rows, dim, block);
    expect_bits_equal(dx.host(), ref, "fake_quant_fp4_e4m3");
  }
}

TEST_F(CudaBackendTest, RoundBf16) {
  auto x = quant_input(rng_, 1, 100001);
  x[5] = std::numeric_limits<float>::quiet_NaN();
  x[6] = std::numeric_limits<float>::infinity();
  x[7] = 3.3895313892515355e38f;  // rounds up to inf
  auto ref = x;
  cpu().round_bf16(ref.data(), static_cast<int64_t>(ref.size()));
  Dev<float> dx(x);
  gpu_->round_bf16(dx.get(), static_cast<int64_t>(x.size()));
  expect_bits_equal(dx.host(), ref, "round_bf16");
}

TEST_F(CudaBackendTest, SparseAttentionOnline) {
  struct Case { int64_t tokens, heads, dim, pool_rows, k, block; };
  for (Case c : {Case{8, 4, 512, 300, 37, 16}, Case{4, 64, 512, 2048, 640, 64}, Case{6, 3, 72, 100, 21, 8}}) {
    const int64_t fresh_rows = 17;  // rows of this step, referenced as ops::fresh_row(i)
    auto q = uniform(c.tokens * c.heads * c.dim), pool = uniform(c.pool_rows * c.dim), sink = uniform(c.heads);
    auto fresh = uniform(fresh_rows * c.dim);
    std::vector<int32_t> idx(c.tokens * c.k);
    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(c.pool_rows - 1)), fid(0, fresh_rows - 1);
    std::bernoulli_distribution hole(0.2), from_fresh(0.25);
    for (auto& i : idx) i = hole(rng_) ? -1 : from_fresh(rng_) ? ops::fresh_row(fid(rng_)) : id(rng_);
    for (int64_t j = 0; j < c.k; ++j) idx[(c.tokens - 1) * c.k + j] = -1;
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.dim)) * 4.0f;
    std::vector<float> ref(c.tokens * c.heads * c.dim);
    cpu().sparse_attention_online(q.data(), c.tokens, c.heads, c.dim, pool.data(), fresh.data(), idx.data(), c.k,
                                  sink.data(), scale, c.block, ref.data());
    Dev<float> dq(q), dpool(pool), dfresh(fresh), dsink(sink), dout(ref.size());
    Dev<int32_t> didx(idx);
    gpu_->sparse_attention_online(dq.get(), c.tokens, c.heads, c.dim, dpool.get(), dfresh.get(), didx.get(), c.k,
                                  dsink.get(), scale, c.block, dout.get());
    std::string what = "sparse_attn_online d" + std::to_string(c.dim) + " k" + std::to_string(c.k);
    // This op rounds each probability to bf16 (steps of 2^-8 relative). Scores that differ from the
    // CPU's in the last fp32 bit (another dot order, CUDA's expf vs glibc's) flip a few of those
    // roundings, so the bound is looser than the 1e-5 of the pure fp32 ops (seen: 4.5e-5 at k 640).
    // Without the bf16 rounding the error would be ~1e-3.
    auto got = dout.host();
    expect_close(got, ref, what.c_str(), 3e-4);
  }
}

TEST_F(CudaBackendTest, BadArgumentsThrow) {
  EXPECT_THROW(gpu_->linear(nullptr, -1, 4, nullptr, 4, nullptr), Error);
  EXPECT_THROW(gpu_->fake_quant_fp8(nullptr, 1, 4, 0), Error);
  EXPECT_THROW(gpu_->rope(nullptr, 1, 1, 4, nullptr, {nullptr, 3, 1.0f}, false), Error);
}

}  // namespace
}  // namespace deepinfer
