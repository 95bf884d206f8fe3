// DeepSeek-V4.1 on the CUDA backend against the CPU backend, layer by layer (built with CUDA only; needs
// a GPU): the golden models' streams at every layer input, the routed experts and their weights, and the
// logits, for a prefill of 1, 5 and 64 tokens and decode steps after it. Under DEEPINFER_FP8_GEMM=exact
// DEEPINFER_ATTENTION=exact every op gives the CPU's bits but the transcendentals, so the two devices
// must pick the same experts and stay within float noise; with the tensor cores (the default) the
// logits stay within the goldens' tolerance. The first layer that departs is printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backends/cuda/cuda_backend.h"
#include "golden_reader.h"
#include "v41_golden_model.h"

namespace deepinfer::model {
namespace {

bool exact_mode() {
  const char* g = std::getenv("DEEPINFER_FP8_GEMM");
  const char* a = std::getenv("DEEPINFER_ATTENTION");
  return g && a && std::strcmp(g, "exact") == 0 && std::strcmp(a, "exact") == 0;
}

// What one forward exposes through the taps, per layer.
struct Trace {
  std::vector<std::vector<float>> streams;  // layer input X
  std::vector<std::vector<int32_t>> experts;
  std::vector<std::vector<float>> weights, scores;
  std::vector<float> logits;
  struct Point {
    int64_t layer;
    std::string name;
    std::vector<float> values;
  };
  std::vector<Point> points;  // every on_point, in the order the forward reached it
};

Trace run(V41Model& m, const std::vector<int32_t>& ids, const std::vector<int64_t>& cuts) {
  Trace t;
  const auto L = static_cast<size_t>(m.config().n_layers);
  t.streams.resize(L);
  t.experts.resize(L);
  t.weights.resize(L);
  t.scores.resize(L);
  ForwardTaps taps;
  taps.on_layer_input = [&](int64_t l, std::vector<float>& X, std::vector<float>&) {
    auto& s = t.streams[l];
    s.insert(s.end(), X.begin(), X.end());
  };
  taps.on_route = [&](int64_t l, const std::vector<float>& sc, const std::vector<int32_t>& e, const std::vector<float>& w) {
    if (l < 0 || static_cast<size_t>(l) >= L) return;
    t.scores[l].insert(t.scores[l].end(), sc.begin(), sc.end());
    t.experts[l].insert(t.experts[l].end(), e.begin(), e.end());
    t.weights[l].insert(t.weights[l].end(), w.begin(), w.end());
  };
  taps.on_point = [&](int64_t l, const char* name, const std::vector<float>& v) { t.points.push_back({l, name, v}); };
  auto st = m.new_sequence();
  t.logits = logits_in_steps(m, ids, cuts, st.get(), &taps);
  return t;
}

float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

struct Rows {
  double max = 0, mean = 0, argmax = 0;
};

Rows compare_rows(const std::vector<float>& a, const std::vector<float>& b, int64_t V) {
  Rows r;
  EXPECT_EQ(a.size(), b.size());
  const size_t n = std::min(a.size(), b.size()), rows = n / static_cast<size_t>(V);
  if (rows == 0) return r;
  for (size_t i = 0; i < n; ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    r.max = std::max(r.max, d);
    r.mean += d / static_cast<double>(n);
  }
  for (size_t row = 0; row < rows; ++row) {
    const float* x = a.data() + row * V;
    const float* y = b.data() + row * V;
    r.argmax += (std::max_element(x, x + V) - x == std::max_element(y, y + V) - y) / static_cast<double>(rows);
  }
  return r;
}

TEST(V41Cuda, LayersRoutesAndLogitsMatchTheCpuBackend) {
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  const bool exact = exact_mode();
  for (const char* name : {"tiny-a", "tiny-b"}) {
    auto cpu = testing::load_v41_golden(name, [](V41Options& o) { o.device = Device::resolve("cpu"); });
    auto gpu = testing::load_v41_golden(name, [](V41Options& o) { o.device = Device::resolve("cuda"); });
    auto g = io::Checkpoint::open(testing::kV41GoldenRoot + name + "/goldens.safetensors");
    // The goldens' own prompts of 1 and 5 tokens, then the 64-token one in one step and in decode steps.
    const auto s64 = testing::golden_ints(g, "s64.input_ids");
    const std::vector<std::pair<std::vector<int32_t>, std::vector<int64_t>>> runs = {
        {testing::golden_ints(g, "s1.input_ids"), {0, 1}},
        {testing::golden_ints(g, "s5.input_ids"), {0, 5}},
        {testing::golden_ints(g, "s5.input_ids"), {0, 1, 2, 3, 4, 5}},
        {s64, {0, 64}},
        {s64, {0, 60, 61, 62, 63, 64}}};
    for (const auto& [ids, cuts] : runs) {
      const Trace a = run(*cpu, ids, cuts), b = run(*gpu, ids, cuts);
      const std::string what = std::string(name) + " S=" + std::to_string(cuts.back()) + " in " +
                               std::to_string(cuts.size() - 1) + " steps";
      size_t flips_total = 0;
      bool departed = false;
      for (size_t l = 0; l < a.streams.size(); ++l) {
        const float ds = max_diff(a.streams[l], b.streams[l]);
        size_t flips = 0;
        for (size_t i = 0; i < std::min(a.experts[l].size(), b.experts[l].size()); ++i) flips += a.experts[l][i] != b.experts[l][i];
        flips_total += flips;
        std::printf("[v41-cuda] %s layer %zu: input max|d| %.3g, router scores %.3g, weights %.3g, experts differing %zu/%zu%s\n",
                    what.c_str(), l, ds, max_diff(a.scores[l], b.scores[l]), max_diff(a.weights[l], b.weights[l]), flips,
                    a.experts[l].size(), !departed && ds > 1e-4f ? "  <- first departure" : "");
        departed = departed || ds > 1e-4f;
      }
      // Within the first layer whose streams part (or the first layer at all if only the logits part), the
      // first observation point that differs: where to look.
      for (size_t i = 0; i < std::min(a.points.size(), b.points.size()); ++i) {
        const Trace::Point &p = a.points[i], &q = b.points[i];
        ASSERT_EQ(p.name, q.name) << what;
        const float d = max_diff(p.values, q.values);
        if (d > 0) {
          std::printf("[v41-cuda] %s: first differing point: layer %lld %s (call %zu), max|d| %.3g\n", what.c_str(),
                      static_cast<long long>(p.layer), p.name.c_str(), i, d);
          if (i > 0) std::printf("[v41-cuda] %s:   the point before it, layer %lld %s, is equal\n", what.c_str(),
                                 static_cast<long long>(a.points[i - 1].layer), a.points[i - 1].name.c_str());
          break;
        }
      }
      const Rows r = compare_rows(a.logits, b.logits, cpu->vocab_size());
      std::printf("[v41-cuda] %s: logits max|d| %.3g mean|d| %.3g argmax %.3f\n", what.c_str(), r.max, r.mean, r.argmax);
      if (exact) {  // the same bits but the transcendentals: the same experts, logits within float noise
        EXPECT_EQ(flips_total, 0u) << what;
        EXPECT_LE(r.max, 1e-3) << what;
      } else {  // the goldens' bounds: reduction order and bf16 roundings may flip an expert
        EXPECT_LE(r.mean, 0.05) << what;
        EXPECT_GE(r.argmax, 0.95) << what;
      }
    }
  }
}

}  // namespace
}  // namespace deepinfer::model
