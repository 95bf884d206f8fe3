// The vision tower's ops (ops.h "vision tower") on the CUDA backend vs the CPU reference: random
// inputs, NaN-poisoned outputs, relative error of the fp32 ops <= 1e-5 (bf16-rounded ones: 4e-3, one
// bf16 step where erf rounds differently).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "kernel_test_util.h"
#include "ops/ops.h"

namespace deepinfer {
namespace {

template <typename T>
using Dev = ktest::DevBuf<T>;

class CudaVisionOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
    gpu_ = std::make_unique<cuda::CudaBackend>();
  }
  std::vector<float> uniform(size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng_);
    return v;
  }
  void expect_close(const std::vector<float>& got, const std::vector<float>& ref, const char* what,
                    double tol = 1e-5) {
    ASSERT_EQ(got.size(), ref.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      ASSERT_FALSE(std::isnan(got[i])) << what << " element " << i << " not written";
      num += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
      den += double(ref[i]) * ref[i];
    }
    const double e = std::sqrt(num / std::max(den, 1e-30));
    std::printf("[ %-20s ] rel err %.3e\n", what, e);
    EXPECT_LE(e, tol) << what;
  }
  ops::Backend& cpu() { return ops::cpu_backend(); }

  std::unique_ptr<cuda::CudaBackend> gpu_;
  std::mt19937 rng_{14};
};

TEST_F(CudaVisionOps, VisionBiasAct) {
  const int64_t rows = 9, dim = 300;
  for (auto act : {ops::Activation::kNone, ops::Activation::kGeluErf})
    for (bool bf16 : {false, true}) {
      auto x = uniform(rows * dim, -4.0f, 4.0f), b = uniform(dim);
      auto ref = x;
      cpu().bias_act(ref.data(), rows, dim, b.data(), act, bf16);
      Dev<float> dx(x), db(b);
      gpu_->bias_act(dx.get(), rows, dim, db.get(), act, bf16);
      expect_close(dx.host(), ref, act == ops::Activation::kGeluErf ? "bias_act gelu" : "bias_act", bf16 ? 4e-3 : 1e-5);
    }
}

TEST_F(CudaVisionOps, VisionRopeHalves) {
  const int64_t rows = 11, heads = 4, dim = 64;
  auto x = uniform(rows * heads * dim), c = uniform(rows * dim / 2), s = uniform(rows * dim / 2);
  auto ref = x;
  cpu().rope_halves(ref.data(), rows, heads, dim, c.data(), s.data(), false);
  Dev<float> dx(x), dc(c), ds(s);
  gpu_->rope_halves(dx.get(), rows, heads, dim, dc.get(), ds.get(), false);
  expect_close(dx.host(), ref, "rope_halves");
}

TEST_F(CudaVisionOps, VisionAttentionFull) {
  const int64_t heads = 3, dim = 64;
  const std::vector<int32_t> begin = {0, 5, 5, 300, 301};  // an empty sequence and a one-token one
  const int64_t tokens = 303;  // the last two rows belong to no sequence: 0
  auto q = uniform(tokens * heads * dim, -2.0f, 2.0f), k = uniform(q.size(), -2.0f, 2.0f), v = uniform(q.size());
  std::vector<float> ref(q.size());
  cpu().attention_full(q.data(), k.data(), v.data(), tokens, heads, dim, begin.data(), 4, 295, 0.125f, ref.data());
  Dev<float> dq(q), dk(k), dv(v), dout(q.size());
  Dev<int32_t> db(begin);
  gpu_->attention_full(dq.get(), dk.get(), dv.get(), tokens, heads, dim, db.get(), 4, 295, 0.125f, dout.get());
  expect_close(dout.host(), ref, "attention_full");
}

}  // namespace
}  // namespace deepinfer
