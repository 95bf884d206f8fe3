// The public C++ API (include/deepinfer/llm.h) over the test double: input order, streaming,
// validation before anything runs, and the golden tiny model through LLM(EngineConfig).
#include "deepinfer/llm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>
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

// Issue 17: a step() from another thread while generate() runs would take generate's results; it is
// refused, and the outputs generate() steps for requests it did not add are handed back.
TEST(LLM, StepFromAnotherThreadDuringGenerateIsRefusedAndNothingIsLost) {
  LLM llm(std::make_unique<testing::HashLM>(), EngineConfig{});
  const std::string side = llm.engine().add_request(Prompt::from_ids({7, 7}), greedy(4), "side");
  std::vector<Prompt> prompts;
  for (int i = 0; i < 64; ++i) prompts.push_back(Prompt::from_ids({1 + i % 9, 2, 3}));
  std::atomic<bool> started{false}, tried{false}, refused{false};
  std::vector<RequestOutput> outs;
  std::thread gen([&] {
    outs = llm.generate(prompts, {greedy(40)}, [&](const RequestOutput&) {
      started = true;
      while (!tried) std::this_thread::yield();  // generate() is mid-call while the other thread tries
    });
  });
  while (!started) std::this_thread::yield();
  try {
    llm.engine().step();
  } catch (const Error& e) {
    refused = std::string(e.what()).find("another thread") != std::string::npos;
  }
  tried = true;
  gen.join();
  EXPECT_TRUE(refused.load());
  ASSERT_EQ(outs.size(), prompts.size());
  for (auto& o : outs) EXPECT_EQ(o.outputs[0].token_ids.size(), 40u);
  std::vector<RequestOutput> later;  // the side request finished inside generate(): handed back
  for (int i = 0; i < 1000 && later.empty(); ++i)
    for (auto& o : llm.engine().step())
      if (o.request_id == side) later.push_back(o);
  ASSERT_EQ(later.size(), 1u);
  EXPECT_TRUE(later[0].finished);
  EXPECT_EQ(later[0].outputs[0].token_ids.size(), 4u);
}

TEST(LLM, ArgumentsOutOfRangeAndPastTheCheckpointContextAreErrors) {
  auto bad = [](EngineConfig c, const std::string& needle) {
    try {
      LLM llm(std::make_unique<testing::HashLM>(), c);
      ADD_FAILURE() << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  EngineConfig c;
  c.max_num_seqs = -3;
  bad(c, "max_num_seqs");
  c = {};
  c.state_memory_bytes = -2;
  bad(c, "state_memory_bytes");
  c = {};
  c.max_logprobs = -1;
  bad(c, "max_logprobs");
  c = {};
  c.model = "tests/data/goldens/v4/tiny-a";  // max_position_embeddings 1048576
  c.max_model_len = 1 << 21;
  try {
    LLM llm(c);
    ADD_FAILURE() << "max_model_len above the checkpoint accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("allow_long_max_model_len"), std::string::npos) << e.what();
  }
  c.allow_long_max_model_len = true;
  EXPECT_EQ(LLM(c).engine().options().max_model_len, 1 << 21);
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
