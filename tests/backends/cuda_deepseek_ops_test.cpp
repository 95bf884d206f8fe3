// The CUDA backend's memory, data-movement and DeepSeek ops against the CPU reference on random inputs
// (printed seed): bit for bit for data movement, selections (top-k, ties included: bf16-rounded values
// drawn from a few levels) and the ops whose fp32 order has no multiply-add; within a tolerance where
// the CPU's compiler may fuse a multiply-add differently or libm differs (exp, log1p). Outputs start
// poisoned (NaN / 0xff) so an unwritten element fails. Skips itself without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "core/dtype.h"
#include "core/error.h"
#include "ops/ops.h"

namespace deepinfer {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

class CudaDeepseekOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
    gpu_ = std::make_unique<cuda::CudaBackend>(0);
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    RecordProperty("seed", std::to_string(seed_));
  }
  void TearDown() override {
    for (void* p : owned_) gpu_->release(p);
  }
  // A device copy of h, or (poison) n bytes of 0xff.
  template <typename T>
  T* dev(const std::vector<T>& h) {
    void* p = gpu_->allocate(h.size() * sizeof(T));
    owned_.push_back(p);
    gpu_->upload(p, h.data(), h.size() * sizeof(T));
    return static_cast<T*>(p);
  }
  template <typename T>
  T* poisoned(size_t n) {
    return dev(std::vector<T>(n, poison<T>()));
  }
  template <typename T>
  static T poison() {
    T v;
    std::memset(&v, 0xff, sizeof(T));
    return v;
  }
  template <typename T>
  std::vector<T> host(const T* p, size_t n) {
    std::vector<T> h(n);
    gpu_->download(h.data(), p, n * sizeof(T));
    return h;
  }
  // Few distinct bf16 levels: many exact ties.
  std::vector<float> levels(size_t n, int distinct, float step = 0.125f) {
    std::vector<float> v(n);
    for (auto& x : v) x = round_to_bf16(static_cast<float>(static_cast<int>(rng_() % distinct) - distinct / 2) * step);
    return v;
  }
  std::vector<float> uniform(size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng_);
    return v;
  }
  int32_t below(int64_t n) { return static_cast<int32_t>(rng_() % static_cast<uint64_t>(std::max<int64_t>(n, 1))); }

  template <typename T>
  void expect_bitwise(const std::vector<T>& got, const std::vector<T>& ref, const char* what) {
    ASSERT_EQ(got.size(), ref.size());
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < ref.size(); ++i)
      if (std::memcmp(&got[i], &ref[i], sizeof(T)) != 0 && bad++ == 0) first = i;
    std::printf("[ %-28s ] %zu of %zu differ (bitwise)\n", what, bad, ref.size());
    EXPECT_EQ(bad, 0u) << what << ": first at " << first << " (seed " << seed_ << ")";
  }
  // Same non-finite elements (NaN where the CPU has NaN, the same infinities), and ||got - ref|| / ||ref|| over the finite elements <= tol.
  void expect_close(const std::vector<float>& got, const std::vector<float>& ref, const char* what, double tol) {
    ASSERT_EQ(got.size(), ref.size());
    double num = 0, den = 0;
    size_t pattern = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const bool same_nonfinite = std::isnan(ref[i]) ? std::isnan(got[i]) : got[i] == ref[i];
      if (std::isfinite(ref[i]) != std::isfinite(got[i]) || (!std::isfinite(ref[i]) && !same_nonfinite)) {
        ++pattern;
        continue;
      }
      if (!std::isfinite(ref[i])) continue;
      const double d = static_cast<double>(got[i]) - ref[i];
      num += d * d;
      den += static_cast<double>(ref[i]) * ref[i];
    }
    const double e = den == 0 ? std::sqrt(num) : std::sqrt(num / den);
    std::printf("[ %-28s ] rel err %.3e, %zu non-finite mismatches of %zu\n", what, e, pattern, ref.size());
    EXPECT_EQ(pattern, 0u) << what << " (seed " << seed_ << ")";
    EXPECT_LE(e, tol) << what << " (seed " << seed_ << ")";
  }

  ops::Backend& cpu() { return ops::cpu_backend(); }
  std::unique_ptr<cuda::CudaBackend> gpu_;
  std::vector<void*> owned_;
  std::mt19937 rng_;
  unsigned seed_ = 0;
};

TEST_F(CudaDeepseekOpsTest, DeviceMemory) {
  EXPECT_EQ(gpu_->device().str(), "cuda:0");
  std::vector<uint8_t> a(1000);
  for (auto& x : a) x = static_cast<uint8_t>(rng_());
  uint8_t* p = dev(a);
  uint8_t* q = poisoned<uint8_t>(1000);
  gpu_->copy(q, p, 1000);
  gpu_->zero(q + 100, 50);
  gpu_->copy(q, p, 0);
  std::vector<uint8_t> want = a;
  std::fill_n(want.begin() + 100, 50, 0);
  expect_bitwise(host(q, 1000), want, "copy + zero");
  void* z = gpu_->allocate(0);  // a valid, releasable pointer
  EXPECT_NE(z, nullptr);
  gpu_->release(z);
  gpu_->release(nullptr);
  EXPECT_THROW(gpu_->allocate(size_t{1} << 50), Error);
  uint8_t* r = poisoned<uint8_t>(8);  // the failed allocation leaves the backend usable
  gpu_->zero(r, 8);
  expect_bitwise(host(r, 8), std::vector<uint8_t>(8, 0), "after out-of-memory");
}

TEST_F(CudaDeepseekOpsTest, DataMovement) {
  for (int64_t width : {0, 1, 33, 300}) {
    const int64_t n = 37, rows = 50;
    auto src = uniform(rows * width), dst0 = uniform(rows * width);
    std::vector<int32_t> si(n), di(rows);
    for (auto& s : si) s = rng_() % 5 == 0 ? -1 : below(rows);
    for (int64_t i = 0; i < rows; ++i) di[i] = static_cast<int32_t>(rows - 1 - i);
    std::shuffle(di.begin(), di.end(), rng_);
    for (int64_t i = 0; i < n; i += 7) di[i] = -1;
    for (int mode = 0; mode < 4; ++mode) {
      const int32_t* s_h = mode & 1 ? si.data() : nullptr;
      const int32_t* d_h = mode & 2 ? di.data() : nullptr;
      std::vector<float> ref = dst0;
      cpu().copy_rows(src.data(), s_h, n, width, ref.data(), d_h);
      float* d = dev(dst0);
      gpu_->copy_rows(dev(src), s_h ? dev(si) : nullptr, n, width, d, d_h ? dev(di) : nullptr);
      expect_bitwise(host(d, ref.size()), ref, "copy_rows");
    }
  }
  {
    const int64_t rows = 9, width = 13, sld = 20, dld = 17;
    auto src = uniform(rows * sld), dst0 = uniform(rows * dld);
    std::vector<float> ref = dst0;
    cpu().copy_2d(src.data(), sld, rows, width, ref.data(), dld);
    float* d = dev(dst0);
    gpu_->copy_2d(dev(src), sld, rows, width, d, dld);
    expect_bitwise(host(d, ref.size()), ref, "copy_2d");
  }
  for (int64_t n : {0, 1, 1000, 70001}) {
    auto x = uniform(n), y = uniform(n);
    std::vector<float> ref = x;
    cpu().scale(ref.data(), n, 0.37f);
    cpu().add(ref.data(), y.data(), n);
    float* d = dev(x);
    gpu_->scale(d, n, 0.37f);
    gpu_->add(d, dev(y), n);
    expect_bitwise(host(d, n), ref, "scale + add");
    std::vector<float> f(n, -2.5f);
    gpu_->fill(d, n, -2.5f);
    expect_bitwise(host(d, n), f, "fill");
  }
}

TEST_F(CudaDeepseekOpsTest, Argmax) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t n : {1, 7, 300, 129280}) {
    const int64_t rows = 6;
    auto x = levels(rows * n, 5);  // ties: the first maximum must win
    if (n > 1) {
      x[1 * n + n / 2] = nan;  // a NaN inside a row is never the answer
      x[2 * n] = nan;          // a NaN first is (nothing compares above it)
      std::fill_n(x.begin() + 3 * n, n, -kInf);
      x[4 * n + n - 1] = kInf;
    }
    std::vector<int32_t> ref(rows);
    cpu().argmax(x.data(), rows, n, ref.data());
    int32_t* d = poisoned<int32_t>(rows);
    gpu_->argmax(dev(x), rows, n, d);
    expect_bitwise(host(d, rows), ref, "argmax");
  }
}

TEST_F(CudaDeepseekOpsTest, HcMeanAndPooling) {
  const int64_t rows = 19, hc = 4, dim = 300, ld = 310;
  auto x = uniform(rows * hc * dim, -3, 3);
  std::vector<float> ref(rows * ld, 0.0f);
  cpu().hc_mean(x.data(), rows, hc, dim, ref.data(), ld);
  float* d = dev(std::vector<float>(rows * ld, 0.0f));
  gpu_->hc_mean(dev(x), rows, hc, dim, d, ld);
  expect_bitwise(host(d, ref.size()), ref, "hc_mean");

  for (int64_t slots : {1, 8, 128}) {
    const int64_t windows = 11, channels = 130;
    auto kv = uniform(windows * slots * channels), score = uniform(windows * slots * channels, -4, 4);
    for (size_t i = 0; i < score.size(); i += 3) score[i] = -kInf;  // masked slots (weight 0)
    std::vector<float> z(windows * channels);
    cpu().softmax_pool_v41(kv.data(), score.data(), windows, slots, channels, z.data());
    float* dz = poisoned<float>(z.size());
    gpu_->softmax_pool_v41(dev(kv), dev(score), windows, slots, channels, dz);
    expect_close(host(dz, z.size()), z, "softmax_pool_v41", 4e-3);  // bf16 outputs: 1-ulp flips
  }
}

TEST_F(CudaDeepseekOpsTest, MoeRoute) {
  using SF = ops::Backend::ScoreFunc;
  struct Case { int64_t E, k; SF f; bool normalize, bias, image; };
  for (Case c : {Case{256, 8, SF::kSqrtSoftplus, true, true, true}, Case{384, 6, SF::kSigmoid, true, true, false},
                 Case{64, 64, SF::kSoftmax, false, false, false}, Case{16, 1, SF::kSoftmax, true, true, false},
                 Case{72, 6, SF::kSoftmax, true, false, true}}) {
    const int64_t n = 200;
    auto logits = levels(n * c.E, 9, 0.5f);
    auto bias = levels(c.E, 3, 0.25f), bias_vl = levels(c.E, 3, 0.25f);
    std::vector<uint8_t> image(n);
    for (auto& b : image) b = rng_() % 3 == 0;
    const ops::Backend::RouteParams p{c.f, 1.5f, c.k, c.normalize, 2.5f};
    std::vector<int32_t> sel(n * c.k);
    std::vector<float> w(n * c.k), sc(n * c.E);
    cpu().moe_route(logits.data(), n, c.E, c.bias ? bias.data() : nullptr, bias_vl.data(),
                    c.image ? image.data() : nullptr, p, sel.data(), w.data(), sc.data());
    int32_t* dsel = poisoned<int32_t>(sel.size());
    float* dw = poisoned<float>(w.size());
    float* dsc = poisoned<float>(sc.size());
    gpu_->moe_route(dev(logits), n, c.E, c.bias ? dev(bias) : nullptr, dev(bias_vl), c.image ? dev(image) : nullptr,
                    p, dsel, dw, dsc);
    expect_bitwise(host(dsel, sel.size()), sel, "moe_route selection");
    expect_close(host(dw, w.size()), w, "moe_route weights", 1e-6);
    expect_close(host(dsc, sc.size()), sc, "moe_route scores", 1e-6);
    // Without the scores output the selection is the same.
    int32_t* dsel2 = poisoned<int32_t>(sel.size());
    gpu_->moe_route(dev(logits), n, c.E, c.bias ? dev(bias) : nullptr, dev(bias_vl), c.image ? dev(image) : nullptr,
                    p, dsel2, dw, nullptr);
    expect_bitwise(host(dsel2, sel.size()), sel, "moe_route selection, no scores");
  }
}

TEST_F(CudaDeepseekOpsTest, MoeCombine) {
  for (bool shared : {true, false}) {
    const int64_t n = 23, k = 7, dim = 257, slots = 40;
    auto y = uniform(slots * dim), sh = uniform(n * dim);
    std::vector<int32_t> slot(n * k);
    for (auto& s : slot) s = rng_() % 4 == 0 ? -1 : below(slots);
    std::vector<float> out(n * dim);
    cpu().moe_combine(y.data(), slot.data(), n, k, dim, shared ? sh.data() : nullptr, out.data());
    float* d = poisoned<float>(out.size());
    gpu_->moe_combine(dev(y), dev(slot), n, k, dim, shared ? dev(sh) : nullptr, d);
    expect_bitwise(host(d, out.size()), out, "moe_combine");
  }
}

TEST_F(CudaDeepseekOpsTest, IndexScores) {
  const int64_t tokens = 12, heads = 16, dim = 128, nkeys = 300, ld = 260;
  auto q = uniform(tokens * heads * dim), weight = uniform(tokens * heads), keys = uniform(nkeys * dim);
  std::vector<int32_t> key_rows(nkeys * 2), key_begin(tokens), width(tokens), visible(tokens);
  for (auto& r : key_rows) r = below(nkeys);
  for (int64_t t = 0; t < tokens; ++t) {  // runs of tokens over one sequence's keys, widths incl. 0 and ld
    const int64_t seq = t / 4;
    key_begin[t] = static_cast<int32_t>(seq * 100);
    width[t] = seq == 0 ? 0 : seq == 1 ? static_cast<int32_t>(ld) : 77;
    visible[t] = std::max(0, width[t] - static_cast<int32_t>(t % 4) * 9);
  }
  std::vector<float> s(tokens * ld);
  cpu().index_scores(q.data(), weight.data(), tokens, heads, dim, keys.data(), key_rows.data(), key_begin.data(),
                     width.data(), visible.data(), ld, s.data());
  float* d = poisoned<float>(s.size());
  gpu_->index_scores(dev(q), dev(weight), tokens, heads, dim, dev(keys), dev(key_rows), dev(key_begin), dev(width),
                     dev(visible), ld, d);
  expect_close(host(d, s.size()), s, "index_scores", 1e-2);  // bf16 roundings of fp32 dots: 1-ulp flips
}

TEST_F(CudaDeepseekOpsTest, CandidateMaskAndIndexSelect) {
  for (int64_t ld : {70, 600, 4096}) {
    const int64_t tokens = 40, block = 8;
    auto s = levels(tokens * ld, 6);  // bf16 levels: ties everywhere
    for (size_t i = 0; i < s.size(); ++i)
      if (rng_() % 5 == 0) s[i] = -kInf;
    std::vector<int32_t> width(tokens), clen(tokens), ranked(tokens), visible(tokens), topk(tokens);
    const int64_t nb = (ld + block - 1) / block;
    for (int64_t t = 0; t < tokens; ++t) {
      width[t] = t == 0 ? 0 : t == 1 ? static_cast<int32_t>(ld) : below(ld + 1);
      clen[t] = t % 5 == 0 ? 0 : below(width[t] + 1);
      ranked[t] = t % 3 == 0 ? static_cast<int32_t>(nb) : below(nb + 1);
    }
    const int64_t topk_blocks = 5;
    std::vector<uint8_t> mask(tokens * ld);
    cpu().candidate_mask(s.data(), tokens, ld, width.data(), clen.data(), ranked.data(), block, topk_blocks,
                         mask.data());
    uint8_t* dm = poisoned<uint8_t>(mask.size());
    float* ds = dev(s);
    gpu_->candidate_mask(ds, tokens, ld, dev(width), dev(clen), dev(ranked), block, topk_blocks, dm);
    expect_bitwise(host(dm, mask.size()), mask, "candidate_mask");

    const int64_t K = 96;
    for (int64_t t = 0; t < tokens; ++t) {
      ranked[t] = t % 4 == 0 ? static_cast<int32_t>(ld) : below(ld + 1);
      topk[t] = t % 7 == 0 ? ranked[t] : t % 7 == 1 ? static_cast<int32_t>(K) : below(std::min<int64_t>(K, ld) + 1);
      topk[t] = std::min<int32_t>(topk[t], K);
      visible[t] = t % 2 ? ranked[t] : below(ranked[t] + 1);
    }
    for (bool with_mask : {false, true}) {
      std::vector<int32_t> sel(tokens * K);
      cpu().index_select(s.data(), with_mask ? mask.data() : nullptr, tokens, ld, ranked.data(), visible.data(),
                         topk.data(), K, sel.data());
      int32_t* dsel = poisoned<int32_t>(sel.size());
      gpu_->index_select(ds, with_mask ? dm : nullptr, tokens, ld, dev(ranked), dev(visible), dev(topk), K, dsel);
      expect_bitwise(host(dsel, sel.size()), sel, "index_select");
    }
  }
}

TEST_F(CudaDeepseekOpsTest, LookupRows) {
  const int64_t tokens = 9, k = 33, out_ld = 40, table_n = 500;
  std::vector<int32_t> in(tokens * k), table(table_n), begin(tokens);
  for (auto& t : table) t = below(1 << 20);
  for (int64_t t = 0; t < tokens; ++t) begin[t] = below(table_n - 100);
  for (auto& r : in) r = rng_() % 6 == 0 ? -1 : below(100);
  std::vector<int32_t> out(tokens * out_ld, 7);
  cpu().lookup_rows(in.data(), tokens, k, table.data(), begin.data(), out.data(), out_ld);
  int32_t* d = dev(std::vector<int32_t>(tokens * out_ld, 7));
  gpu_->lookup_rows(dev(in), tokens, k, dev(table), dev(begin), d, out_ld);
  expect_bitwise(host(d, out.size()), out, "lookup_rows");
}

TEST_F(CudaDeepseekOpsTest, EmbeddingFp8) {
  const int64_t rows = 1000, dim = 96, n = 57;
  std::vector<uint8_t> table(rows * dim), scale(rows * dim / 32);
  for (auto& b : table) b = static_cast<uint8_t>(rng_());
  for (auto& b : scale) b = static_cast<uint8_t>(110 + rng_() % 30);
  std::vector<int64_t> ids(n);
  for (auto& i : ids) i = below(rows);
  std::vector<float> out(n * dim);
  cpu().embedding_fp8(table.data(), scale.data(), dim, ids.data(), n, out.data());
  float* d = poisoned<float>(out.size());
  gpu_->embedding_fp8(table.data(), scale.data(), dim, dev(ids), n, d);
  expect_bitwise(host(d, out.size()), out, "embedding_fp8");
}

TEST_F(CudaDeepseekOpsTest, EngramGate) {
  const int64_t n = 13, hc = 4, dim = 512;
  auto x = uniform(n * hc * dim, -2, 2), kv = uniform(n * (hc + 1) * dim), qk = uniform(hc * dim);
  std::vector<uint8_t> image(n);
  for (auto& b : image) b = rng_() % 4 == 0;
  for (bool with_image : {false, true}) {
    std::vector<float> ref = x;
    cpu().engram_gate(ref.data(), kv.data(), qk.data(), with_image ? image.data() : nullptr, n, hc, dim, 1e-6f);
    float* d = dev(x);
    gpu_->engram_gate(d, dev(kv), dev(qk), with_image ? dev(image) : nullptr, n, hc, dim, 1e-6f);
    expect_close(host(d, ref.size()), ref, "engram_gate", 2e-3);  // bf16 outputs: 1-ulp flips
  }
}

}  // namespace
}  // namespace deepinfer
