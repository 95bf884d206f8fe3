// DeepSeek-V4 on the CUDA backend against the CPU backend (built with CUDA only; needs a GPU): the same
// model code on both devices, the tiny golden models' logits of a prefill, of chunked decode steps and
// of a mixed batch, within fp32 reduction-order noise; a truncate on the GPU restores the state.
#include <gtest/gtest.h>

#include <cmath>

#include "backends/cuda/cuda_backend.h"
#include "model/deepseek_v4/v4_model.h"

namespace deepinfer::model {
namespace {

constexpr float kTolerance = 2e-3f;  // fp32 sums in other orders (tiled attention, GEMMs), over a few layers

std::unique_ptr<V4Model> load_on(const std::string& name, const char* device) {
  V4LoadOptions o;
  o.device = Device::resolve(device);
  return V4Model::load("tests/data/goldens/v4/" + name, o);
}

float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

std::vector<int32_t> ids(int n, int seed) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back((i * 131 + seed * 17 + 3) % 777);
  return v;
}

TEST(V4Cuda, LogitsMatchTheCpuBackend) {
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  for (const char* name : {"tiny-a", "tiny-b"}) {
    auto cpu = load_on(name, "cpu"), gpu = load_on(name, "cuda");
    const auto toks = ids(80, 1);
    for (const std::vector<int64_t>& cuts : {std::vector<int64_t>{0, 80}, std::vector<int64_t>{0, 37, 38, 39, 45, 60, 80}}) {
      const float d = max_diff(logits_in_steps(*cpu, toks, cuts), logits_in_steps(*gpu, toks, cuts));
      std::printf("[v4-cuda] %s, %zu steps: max |dlogit| %.3g\n", name, cuts.size() - 1, d);
      EXPECT_LE(d, kTolerance) << name;
    }
  }
}

ForwardBatch make_batch(std::vector<int32_t> toks, std::vector<int32_t> starts, std::vector<SequenceState*> states,
                        std::vector<int32_t> rows) {
  ForwardBatch b;
  b.token_ids = std::move(toks);
  b.seq_start = std::move(starts);
  b.states = std::move(states);
  b.logit_rows = std::move(rows);
  return b;
}

TEST(V4Cuda, ABatchAndATruncateMatchTheCpuBackend) {
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  auto cpu = load_on("tiny-b", "cpu"), gpu = load_on("tiny-b", "cuda");
  const auto a = ids(50, 2), b = ids(9, 3);
  std::vector<std::vector<float>> out;
  for (V4Model* m : {cpu.get(), gpu.get()}) {
    auto sa = m->new_sequence(), sb = m->new_sequence();
    std::vector<int32_t> toks(a.begin(), a.begin() + 41);
    toks.insert(toks.end(), b.begin(), b.end());
    ForwardBatch first = make_batch(toks, {0, 41, 50}, {sa.get(), sb.get()}, {40, 49});
    std::vector<float> logits, all;
    m->forward(first, logits);
    all = logits;
    ForwardBatch draft = make_batch({a[41], a[42], a[43]}, {0, 3}, {sa.get()}, {2});
    m->forward(draft, logits);
    sa->truncate(42);  // keep one of the three
    ForwardBatch next = make_batch({a[42], a[43], b[0]}, {0, 2, 3}, {sa.get(), sb.get()}, {1, 2});
    m->forward(next, logits);
    all.insert(all.end(), logits.begin(), logits.end());
    out.push_back(all);
  }
  EXPECT_LE(max_diff(out[0], out[1]), kTolerance);
}

}  // namespace
}  // namespace deepinfer::model
