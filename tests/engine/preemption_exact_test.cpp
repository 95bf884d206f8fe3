// Preemption by recompute is exact on real graphs (the V4 and V4.1 goldens' tiny models): seeded, sampled
// requests under a state budget that preempts them give the tokens and logprobs, bit for bit, of the same
// requests in an engine with room never to preempt, and of each request alone.
// A preempted sequence is fed again from position 0 in one prefill or in chunks, where it first ran as a
// prefill and then decode steps; the model's logits do not depend on that cut (test_v4_batching,
// test_v41_rollback_and_batching), so neither do the draws.
#include <gtest/gtest.h>

#include <algorithm>

#include "../model/v41_golden_model.h"
#include "engine/engine.h"
#include "engine_helpers.h"
#include "model/deepseek_v4/v4_model.h"

namespace deepinfer::engine {
namespace {

using testing_helpers::expect_same;
using Outputs = std::map<std::string, RequestOutput>;

constexpr int kMaxTokens = 24;
const std::vector<int> kPromptLengths = {5, 40, 70, 130, 17, 90, 3, 150};  // some prefill in several chunks

// "v4/tiny-a" or "v41/tiny-b"
std::unique_ptr<model::CausalLM> load(const std::string& name) {
  const std::string family = name.substr(0, name.find('/')), which = name.substr(name.find('/') + 1);
  if (family == "v41") return testing::load_v41_golden(which);
  return model::V4Model::load("tests/data/goldens/v4/" + which);
}

EngineOptions options(int64_t blocks, bool prefix_caching, bool invariant) {
  EngineOptions o;
  o.max_num_seqs = 8;
  o.max_num_batched_tokens = 96;
  o.max_model_len = 512;
  o.batch_invariant = invariant;
  o.num_state_blocks = blocks;
  o.prefix_caching = prefix_caching;  // blocks of 64 tokens: whole invariant chunks
  return o;
}

SamplingParams seeded(int i) {
  SamplingParams p;
  p.temperature = i % 2 ? 0.8f : 1.0f;
  p.top_k = i % 3 ? 0 : 20;
  p.seed = 1000 + i;
  p.max_tokens = kMaxTokens;
  p.ignore_eos = true;
  p.logprobs = 2;
  return p;
}

Outputs run_requests(const std::string& model, EngineOptions o, const std::vector<size_t>& which, EngineStats* stats) {
  Engine e(load(model), nullptr, std::move(o));
  for (size_t i : which)
    e.add_request(Prompt::from_ids(testing_helpers::golden_tokens(static_cast<int>(i) + 1, kPromptLengths[i])),
                  seeded(static_cast<int>(i)), "r" + std::to_string(i));
  Outputs out = testing_helpers::run(e);
  if (stats) *stats = e.stats();
  return out;
}

class PreemptionExact : public ::testing::TestWithParam<std::string> {};

// Both modes: the CPU backend sums in one order, so the default mode's chunking (cut by the neighbours'
// tokens) changes no bit either; on CUDA only batch-invariant mode holds this.
TEST_P(PreemptionExact, SeededRequestsUnderATinyBudgetMatchAnUnpressuredRunBitwise) {
  const std::string model = GetParam();
  std::vector<size_t> all(kPromptLengths.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  // A budget that growing sequences outgrow: the longest at its end with half as much again (V4.1: states grow
  // with the tokens), and no less than two 40-token sequences exactly (V4: a fixed window ring per layer, slowly
  // growing compressed rows; admitted together, they preempt each other as they grow).
  auto m = load(model);
  const int64_t budget = std::max(m->state_blocks_for(150 + kMaxTokens) * 3 / 2, 2 * m->state_blocks_for(40));
  m.reset();
  for (bool invariant : {true, false}) {
    EngineStats roomy_stats, tight_stats;
    const Outputs roomy = run_requests(model, options(0, false, invariant), all, &roomy_stats);
    ASSERT_EQ(roomy.size(), all.size());
    EXPECT_EQ(roomy_stats.preemptions, 0);
    for (const auto& [id, o] : roomy) ASSERT_EQ(o.outputs.at(0).token_ids.size(), size_t{kMaxTokens}) << id;
    for (bool cache : {false, true}) {
      const Outputs tight = run_requests(model, options(budget, cache, invariant), all, &tight_stats);
      EXPECT_GT(tight_stats.preemptions, 0) << model << " prefix caching " << cache;
      std::printf("[preemption-exact] %s batch-invariant %d prefix caching %d: %lld preemptions, %lld prefix hits\n",
                  model.c_str(), invariant, cache, static_cast<long long>(tight_stats.preemptions),
                  static_cast<long long>(tight_stats.prefix_hits));
      expect_same(tight, roomy);
    }
    // Each request alone gives the same bits too (batch composition changes nothing).
    for (size_t i : {size_t{3}, size_t{6}}) {
      const Outputs alone = run_requests(model, options(0, false, invariant), {i}, nullptr);
      expect_same(alone, {{"r" + std::to_string(i), roomy.at("r" + std::to_string(i))}});
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Goldens, PreemptionExact, ::testing::Values("v4/tiny-a", "v4/tiny-b", "v41/tiny-a", "v41/tiny-b"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '/' || c == '-') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace deepinfer::engine
