// What the CUDA backend has beyond ops::Backend (every op there is in the op table, op_table_test.cpp):
// the bf16 GEMM against the CPU, batch invariance of the fp32 linear, the stored weight formats,
// argument checks. Fresh random inputs on every run (never zeros), poisoned (NaN) outputs so an
// unwritten element fails.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
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

// Batch invariance (DEEPINFER_BATCH_INVARIANT): a row's output is bit-identical whatever m it is computed
// in. The default takes the GEMV at m <= 8 and cuBLAS above, so it is not.
TEST_F(CudaBackendTest, LinearBatchInvariant) {
  gpu_->set_batch_invariant(true);
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

// The CUDA backend keeps FP8 blocks and MXFP4 weights stored (linear_quant dequantizes per call).
TEST_F(CudaBackendTest, WeightFormatKeepsStored) {
  EXPECT_EQ(gpu_->weight_format(ops::WeightType::kMxfp4), ops::WeightType::kMxfp4);
  EXPECT_EQ(gpu_->weight_format(ops::WeightType::kFp8Block), ops::WeightType::kFp8Block);
}

// DEEPINFER_ATTENTION picks sparse_attention_online's kernel at V4.1's shape (64 heads x 512, block 64).
// The rows are the state arena's FP8 window rows (16 KiB blocks); on a q that is NOT bf16 values the two are told apart: the
// tensor-core kernel reads it rounded to bf16 (2^-9 relative per value, ~1e-3 in the scores), the fp32
// kernel does not (~1e-5: bf16 flips of p only). On bf16 values (the model's) both are within the op
// table's bound: 3 tokens leave most SMs idle, so the tensor-core kernel splits the index list and rounds
// each split's probabilities on its own (6.7e-4 measured; 1.5e-3, sparse_attention.h).
TEST_F(CudaBackendTest, AttentionSwitch) {
  const int64_t T = 3, H = 64, D = 512, N = 200, K = 150;
  std::vector<int32_t> idx(T * K);
  for (auto& i : idx) i = static_cast<int32_t>(rng_() % N);
  std::vector<float> sink = uniform(H);
  Dev<int32_t> didx(idx);
  Dev<float> dsink(sink);
  const float scale = 4.0f / std::sqrt(static_cast<float>(D));
  const int64_t BB = 16384, rb = row_bytes(RowFormat::kFp8E8m0x32, D);
  auto run = [&](cuda::CudaBackend& be, const std::vector<float>& q, const std::vector<uint8_t>& pool) {
    std::vector<float> ref(T * H * D);
    cpu().sparse_attention_online(q.data(), T, H, D, pool.data(), BB, nullptr, idx.data(), K, K, sink.data(), scale,
                                  64, ref.data());
    Dev<float> dq(q), dout(T * H * D);
    Dev<uint8_t> dp(pool);
    be.sparse_attention_online(dq.get(), T, H, D, dp.get(), BB, nullptr, didx.get(), K, K, dsink.get(), scale, 64,
                               dout.get());
    return rel_error(dout.host(), ref);
  };
  auto q = uniform(T * H * D);
  std::vector<uint8_t> pool(paged_row_offset(N, rb, BB) + BB);
  const std::vector<float> rows = uniform(N * D);
  for (int64_t i = 0; i < N; ++i)
    quantize_row(rows.data() + i * D, D, RowFormat::kFp8E8m0x32, pool.data() + paged_row_offset(i, rb, BB));
  setenv("DEEPINFER_ATTENTION", "exact", 1);
  cuda::CudaBackend exact;
  setenv("DEEPINFER_ATTENTION", "fast", 1);
  EXPECT_THROW({ cuda::CudaBackend bad; }, Error);
  unsetenv("DEEPINFER_ATTENTION");
  const double tensor_raw = run(*gpu_, q, pool), exact_raw = run(exact, q, pool);
  for (float& x : q) x = round_to_bf16(x);
  const double tensor_bf16 = run(*gpu_, q, pool), exact_bf16 = run(exact, q, pool);
  std::printf("[ attention switch ] fp32 q: tensor %.3e exact %.3e; bf16 q: tensor %.3e exact %.3e\n",
              tensor_raw, exact_raw, tensor_bf16, exact_bf16);
  EXPECT_GT(tensor_raw, 1e-4) << "the default did not take the tensor-core kernel (seed " << seed_ << ")";
  EXPECT_LE(tensor_raw, 1e-2);
  EXPECT_LE(exact_raw, 3e-4);
  EXPECT_LE(tensor_bf16, 1.5e-3);
  EXPECT_LE(exact_bf16, 3e-4);
}

// Large and odd-sized downloads (a big batch's logits) arrive whole, and a small one after them.
TEST_F(CudaBackendTest, LargeDownloadsArriveWhole) {
  for (size_t bytes : {size_t{8} << 20, (size_t{8} << 20) + 1, size_t{41} << 20 | 12345, size_t{1000}}) {
    std::vector<uint8_t> host(bytes), back(bytes, 0);
    for (auto& b : host) b = static_cast<uint8_t>(rng_());
    void* d = gpu_->allocate(bytes);
    gpu_->upload(d, host.data(), bytes);
    gpu_->download(back.data(), d, bytes);
    gpu_->release(d);
    EXPECT_EQ(std::memcmp(host.data(), back.data(), bytes), 0) << bytes << " bytes";
  }
}

TEST_F(CudaBackendTest, BadArgumentsThrow) {
  EXPECT_THROW(gpu_->linear(nullptr, -1, 4, nullptr, 4, nullptr), Error);
  EXPECT_THROW(gpu_->fake_quant_fp8(nullptr, 1, 4, 0), Error);
  EXPECT_THROW(gpu_->rope(nullptr, 1, 1, 4, nullptr, {nullptr, 3, 1.0f}, false, false), Error);
}

}  // namespace
}  // namespace deepinfer
