// The public C++ API (include/deepinfer/llm.h) over the test double: input order, streaming,
// validation before anything runs, and the golden tiny model through LLM(EngineConfig).
#include "deepinfer/llm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>

#include "core/error.h"
#include "engine/engine.h"
#include "io/safetensors.h"
#include "test_model.h"

namespace deepinfer {
namespace {

SamplingParams greedy(int n) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = n;
  return p;
}

TEST(LLM, GenerateKeepsInputOrderAndStreamsCumulativeOutputs) {
  LLM llm(std::make_unique<testing::HashLM>(), std::make_unique<testing::LetterCodec>(), EngineConfig{});
  std::vector<Prompt> prompts = {Prompt::from_ids({1, 2, 3}), Prompt::from_ids({4}), Prompt::from_ids({5, 6})};
  std::vector<SamplingParams> params = {greedy(9), greedy(2), greedy(5)};
  std::map<std::string, std::vector<size_t>> lengths;
  int finals = 0;
  auto outs = llm.generate(prompts, params, [&](const RequestOutput& o) {
    lengths[o.request_id].push_back(o.outputs[0].token_ids.size());
    finals += o.finished;
  });
  ASSERT_EQ(outs.size(), 3u);
  EXPECT_EQ(finals, 3);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(outs[i].prompt_token_ids, prompts[i].token_ids);
    EXPECT_EQ(outs[i].outputs[0].token_ids.size(), static_cast<size_t>(params[i].max_tokens));
    EXPECT_EQ(outs[i].outputs[0].text.empty(), false);
    auto& l = lengths[outs[i].request_id];
    EXPECT_TRUE(std::is_sorted(l.begin(), l.end()));  // cumulative, growing
    EXPECT_EQ(l.back(), static_cast<size_t>(params[i].max_tokens));
  }
}

TEST(LLM, InvalidInputFailsBeforeAnythingRuns) {
  auto model = std::make_unique<testing::HashLM>();
  auto* raw = model.get();
  LLM llm(std::move(model), EngineConfig{});
  SamplingParams bad = greedy(3);
  bad.top_k = -5;
  EXPECT_THROW(llm.generate({Prompt::from_ids({1})}, {bad}), Error);
  EXPECT_THROW(llm.generate({Prompt::from_ids({1}), Prompt::from_ids({})}, {greedy(3)}), Error);
  EXPECT_THROW(llm.generate({Prompt::from_ids({1}), Prompt::from_ids({2})}, {greedy(3), greedy(3), greedy(3)}), Error);
  EXPECT_EQ(raw->forwards.load(), 0);  // nothing half-ran
  EXPECT_FALSE(llm.engine().has_unfinished());
  EXPECT_EQ(llm.generate({Prompt::from_ids({1})}, {greedy(3)})[0].outputs[0].token_ids.size(), 3u);
}

TEST(LLM, GoldenTinyModelGreedyThroughTheEngine) {
  const std::string dir = "tests/data/goldens/v4/tiny-a";
  if (!std::filesystem::exists(dir + "/model.safetensors")) GTEST_SKIP() << "golden model missing";
  auto g = io::SafetensorsFile::open(dir + "/goldens.safetensors");
  auto ids = [&](const char* name) {
    const auto& t = g->tensors().at(name);
    std::vector<int32_t> v(t.numel());
    if (t.dtype == DType::I64)
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>(reinterpret_cast<const int64_t*>(t.data)[i]);
    else
      std::memcpy(v.data(), t.data, v.size() * 4);
    return v;
  };
  auto prompt = ids("greedy.prompt_ids"), expect = ids("greedy.output_ids");
  EngineConfig c;
  c.model = dir;
  LLM llm(c);
  SamplingParams p = greedy(static_cast<int>(expect.size()));
  p.ignore_eos = true;
  SamplingParams other;
  other.seed = 3;
  other.max_tokens = 11;
  auto outs = llm.generate({Prompt::from_ids({9, 8, 7}), Prompt::from_ids(prompt), Prompt::from_ids({1, 2})},
                           {other, p, other});
  EXPECT_EQ(outs[1].outputs[0].token_ids, expect);
}

}  // namespace
}  // namespace deepinfer
