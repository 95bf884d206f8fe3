// DeepSeek-V4 CPU forward against transformers' reference outputs (tests/data/goldens/v4): prefill,
// decode after a prefix, chunked prefill (7), per-layer streams, greedy continuation. fp32: 1e-4.
#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "golden_reader.h"
#include "model/deepseek_v4/v4_model.h"

namespace deepinfer {
namespace {

using testing::golden_floats;
using testing::golden_ints;
using testing::max_abs_diff;

constexpr float kTolerance = 1e-4f;
const char* kGoldenRoot = "tests/data/goldens/v4/";

model::V4Model& model_for(const std::string& name) {
  static std::map<std::string, std::unique_ptr<model::V4Model>> cache;
  auto& m = cache[name];
  if (!m) m = model::V4Model::load(kGoldenRoot + name);
  return *m;
}

const io::Checkpoint& goldens_for(const std::string& name) {
  static std::map<std::string, io::Checkpoint> cache;
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, io::Checkpoint::open(kGoldenRoot + name + "/goldens.safetensors")).first;
  return it->second;
}

struct Case {
  std::string model;
  int seq_len;
};

class V4Golden : public ::testing::TestWithParam<Case> {};

TEST_P(V4Golden, PrefillDecodeAndChunkedMatchReference) {
  const Case c = GetParam();
  auto& m = model_for(c.model);
  const io::Checkpoint& g = goldens_for(c.model);
  const std::string p = "s" + std::to_string(c.seq_len) + ".";
  const std::vector<int32_t> ids = golden_ints(g, p + "input_ids");
  const int64_t S = static_cast<int64_t>(ids.size());

  EXPECT_LE(max_abs_diff(model::logits_in_steps(m, ids, {0, S}), golden_floats(g, p + "prefill_logits")), kTolerance) << "prefill";
  if (S < 5) return;  // the goldens hold decode and chunked logits for S >= 5

  const int64_t P = golden_ints(g, p + "decode_prefix_len")[0];
  std::vector<int64_t> decode_cuts{0};
  for (int64_t t = P; t < S; ++t) decode_cuts.push_back(t);
  decode_cuts.push_back(S);
  EXPECT_LE(max_abs_diff(model::logits_in_steps(m, ids, decode_cuts), golden_floats(g, p + "decode_logits")), kTolerance)
      << "decode after " << P;

  std::vector<int64_t> chunk_cuts;
  for (int64_t t = 0; t < S; t += 7) chunk_cuts.push_back(t);
  chunk_cuts.push_back(S);
  EXPECT_LE(max_abs_diff(model::logits_in_steps(m, ids, chunk_cuts), golden_floats(g, p + "chunk7_logits")), kTolerance)
      << "chunks of 7";
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const char* model : {"tiny-a", "tiny-b"})
    for (int s : {1, 5, 17, 64, 200}) cases.push_back({model, s});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Goldens, V4Golden, ::testing::ValuesIn(all_cases()), [](const auto& info) {
  std::string n = info.param.model + "_s" + std::to_string(info.param.seq_len);
  for (char& ch : n)
    if (ch == '-') ch = '_';
  return n;
});

class V4GoldenModel : public ::testing::TestWithParam<std::string> {};

TEST_P(V4GoldenModel, LayerStreamsMatchReference) {
  auto& m = model_for(GetParam());
  const io::Checkpoint& g = goldens_for(GetParam());
  const std::vector<int32_t> ids = golden_ints(g, "s64.input_ids");
  std::vector<std::vector<float>> hidden;  // the streams entering each layer, then the final normalized state
  model::ForwardTaps taps;
  taps.on_layer_input = [&](int64_t, std::vector<float>& X, std::vector<float>&) { hidden.push_back(X); };
  taps.on_final = [&](const std::vector<float>&, const std::vector<float>& normed) { hidden.push_back(normed); };
  auto state = m.new_sequence();
  model::ForwardBatch b{ids, {0, static_cast<int32_t>(ids.size())}, {state.get()}, {63}};
  std::vector<float> logits;
  m.forward(b, logits, &taps);
  const int64_t L = m.config().num_layers;
  ASSERT_EQ(static_cast<int64_t>(hidden.size()), L + 1);
  for (int64_t i = 0; i <= L; ++i)
    EXPECT_LE(max_abs_diff(hidden[i], golden_floats(g, "s64.hidden_" + std::to_string(i))), kTolerance)
        << "hidden_" << i;
}

TEST_P(V4GoldenModel, GreedyContinuationMatchesReference) {
  auto& m = model_for(GetParam());
  const io::Checkpoint& g = goldens_for(GetParam());
  std::vector<int32_t> next = golden_ints(g, "greedy.prompt_ids");
  const std::vector<int32_t> expected = golden_ints(g, "greedy.output_ids");
  auto state = m.new_sequence();
  std::vector<int32_t> out;
  std::vector<float> logits;
  while (out.size() < expected.size()) {
    model::ForwardBatch b{next, {0, static_cast<int32_t>(next.size())}, {state.get()},
                          {static_cast<int32_t>(next.size()) - 1}};
    m.forward(b, logits);
    int32_t best = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(best);
    next = {best};
  }
  EXPECT_EQ(out, expected);
}

// Any chunk size, with boundaries anywhere inside the compression groups (CSA 4, HCA 16/32) and windows.
TEST_P(V4GoldenModel, EveryChunkSizeMatchesPrefill) {
  auto& m = model_for(GetParam());
  const io::Checkpoint& g = goldens_for(GetParam());
  const std::vector<int32_t> ids = golden_ints(g, "s64.input_ids");
  const std::vector<float> expected = golden_floats(g, "s64.prefill_logits");
  for (int64_t chunk : {1, 2, 3, 5, 6, 9, 15, 16, 17, 31, 33, 63}) {
    std::vector<int64_t> cuts;
    for (int64_t t = 0; t < 64; t += chunk) cuts.push_back(t);
    cuts.push_back(64);
    EXPECT_LE(max_abs_diff(model::logits_in_steps(m, ids, cuts), expected), kTolerance) << "chunk " << chunk;
  }
}

INSTANTIATE_TEST_SUITE_P(Goldens, V4GoldenModel, ::testing::Values("tiny-a", "tiny-b"), [](const auto& info) {
  std::string n = info.param;
  n[4] = '_';
  return n;
});

}  // namespace
}  // namespace deepinfer
