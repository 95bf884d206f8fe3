// Prefix caching with DeepSeek-V4.1's SWA bounded replay on (engine/decoder_replay.h), on both golden
// tiny models at the smallest KEEP the model allows (window + DSpark block), where a cut prefill differs
// from a full one on tiny-a (its three decoder layers look back 3 x 8 tokens; tiny-b's one layer looks
// back 16 < 21, so there replay changes no bit). A cache hit, a cold prefill split at snapshot points
// and a prefill split by the token budget all give the bits of the one-chunk cold prefill, whose
// decoder layers start at n - KEEP: hits and chunk boundaries lie at or before it, and the chunk that
// crosses it starts the decoder rings there.
#include <gtest/gtest.h>

#include <algorithm>

#include "../model/v41_golden_model.h"
#include "engine/decoder_replay.h"
#include "engine/engine.h"
#include "engine_helpers.h"

namespace deepinfer::engine {
namespace {

using testing_helpers::expect_same;
using Outputs = std::map<std::string, RequestOutput>;

constexpr int64_t kBlock = 16;

struct Case {
  const char* name;
  int64_t keep;            // window + DSpark block: the smallest KEEP the model accepts
  bool replay_changes_bits;
};
const Case kCases[] = {{"tiny-a", 12, true}, {"tiny-b", 21, false}};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name << " KEEP=" << c.keep; }

EngineOptions opts(bool cache, int budget = 1024) { return testing_helpers::prefix_cache_options(cache, kBlock, budget); }

using testing_helpers::cat;
std::vector<int32_t> tokens(int seed, int len) { return testing_helpers::golden_tokens(seed, len); }
SamplingParams greedy(int max_tokens = 8) { return testing_helpers::greedy_with_logprobs(max_tokens); }

struct Driver {
  Engine engine;
  Driver(const Case& c, EngineOptions o, bool replay = true)
      : engine(testing::with_finest_state_blocks(testing::load_v41_golden(c.name,
                                                                          [&](model::V41Options& m) {
                                                                            m.replay_compact = replay;
                                                                            m.replay_keep = c.keep;
                                                                          })),
               nullptr, std::move(o)) {}
  Outputs wave(const std::vector<std::vector<int32_t>>& prompts, const std::string& tag, SamplingParams p = greedy()) {
    for (size_t i = 0; i < prompts.size(); ++i) engine.add_request(Prompt::from_ids(prompts[i]), p, tag + std::to_string(i));
    return testing_helpers::run(engine);
  }
};

bool same_logprobs(const Outputs& a, const Outputs& b) {
  for (auto& [id, x] : a) {
    const auto& lx = x.outputs[0].logprobs;
    const auto& ly = b.at(id).outputs[0].logprobs;
    for (size_t k = 0; k < lx.size() && k < ly.size(); ++k)
      for (size_t j = 0; j < lx[k].size() && j < ly[k].size(); ++j)
        if (lx[k][j].logprob != ly[k][j].logprob || lx[k][j].token_id != ly[k][j].token_id) return false;
  }
  return true;
}

class PrefixCacheReplay : public ::testing::TestWithParam<Case> {};

TEST_P(PrefixCacheReplay, EngineSeesTheModelsKeep) {
  Driver d(GetParam(), opts(true)), full(GetParam(), opts(true), false);
  EXPECT_EQ(decoder_replay_keep(d.engine.model()), GetParam().keep);
  EXPECT_EQ(decoder_replay_keep(full.engine.model()), 0);
}

TEST_P(PrefixCacheReplay, AHitGivesTheBitsOfTheOneChunkColdPrefill) {
  const Case& c = GetParam();
  const auto prefix = tokens(1, 300);
  const auto a = cat(prefix, tokens(2, 3)), b = cat(prefix, tokens(3, 9));
  Driver on(c, opts(true)), off(c, opts(false));
  Outputs first_on = on.wave({a}, "a"), first_off = off.wave({a}, "a");
  expect_same(first_on, first_off);  // a's prefill is split at its snapshot point
  // a was snapshotted at its last block boundary at or before its decoder start (303 - KEEP)
  Outputs second_on = on.wave({b}, "b"), second_off = off.wave({b}, "b");
  expect_same(second_on, second_off);
  const int64_t hit = (303 - c.keep) / kBlock * kBlock;
  EXPECT_EQ(second_on.at("b0").metrics.num_cached_tokens, hit);
  EXPECT_EQ(on.engine.stats().prefix_hits, 1);
  Outputs again = on.wave({a}, "a");  // a repeated hits its own snapshot
  expect_same(again, first_off);
  EXPECT_EQ(again.at("a0").metrics.num_cached_tokens, hit);
  // replay is on: where the decoder layers look back further than KEEP, a full prefill differs
  Driver full(c, opts(false), false);
  EXPECT_EQ(same_logprobs(full.wave({b}, "b"), second_off), !c.replay_changes_bits);
}

TEST_P(PrefixCacheReplay, BudgetChunksGiveTheBitsOfOneChunk) {
  const Case& c = GetParam();
  const std::vector<std::vector<int32_t>> prompts = {tokens(4, 309), tokens(5, 150), tokens(6, 200)};
  Driver one(c, opts(false)), chunked(c, opts(false, 100)), chunked_on(c, opts(true, 100));
  Outputs want = one.wave(prompts, "p");
  expect_same(chunked.wave(prompts, "p"), want);  // the chunk from 0 stops at its decoder start
  expect_same(chunked_on.wave(prompts, "p"), want);
  expect_same(chunked_on.wave(prompts, "p"), want);  // and again, from the cache
  EXPECT_EQ(chunked_on.engine.stats().prefix_hits, 3);
}

TEST_P(PrefixCacheReplay, SharedPrefixesSpeculationAndEviction) {
  const Case& c = GetParam();
  const auto prefix = tokens(7, 160);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) prompts.push_back(cat(prefix, tokens(10 + i, 20 + 7 * i)));
  Outputs want = Driver(c, opts(false)).wave(prompts, "s", greedy(16));
  EngineOptions spec = opts(true);
  spec.speculative = true;
  spec.num_draft_tokens = 4;  // drafts verified and rolled back over rows the snapshots share
  Driver on(c, spec);
  expect_same(on.wave({prompts[0]}, "s", greedy(16)), Outputs{{"s0", want.at("s0")}});
  Outputs rest = on.wave({prompts[1], prompts[2], prompts[3]}, "t", greedy(16));
  for (int i = 1; i < 4; ++i) {
    expect_same(Outputs{{"x", rest.at("t" + std::to_string(i - 1))}}, Outputs{{"x", want.at("s" + std::to_string(i))}});
    EXPECT_GT(rest.at("t" + std::to_string(i - 1)).metrics.num_cached_tokens, 0);
  }
  // room for about two sequences' states: snapshots are evicted, outputs stay exact
  Driver probe(c, opts(true));
  EngineOptions tight = opts(true);
  tight.num_state_blocks = 2 * probe.engine.model().state_blocks_for(230);
  tight.max_num_seqs = 1;
  Driver small(c, tight);
  for (int round = 0; round < 2; ++round) expect_same(small.wave(prompts, "s", greedy(16)), want);
  EXPECT_GT(small.engine.stats().prefix_hits, 0);
}

// A preempted sequence is recomputed from 0 over its prompt and what it generated; its decoder layers
// start at its prompt's cut again (the first chunk stops there), so its later tokens are those of a run
// never preempted. Also for a prompt too short to be cut that grew past KEEP.
TEST_P(PrefixCacheReplay, PreemptedSequencesRecomputeTheirPromptsCut) {
  const Case& c = GetParam();
  const std::vector<std::vector<int32_t>> prompts = {tokens(20, 120), tokens(21, 90), tokens(22, 8), tokens(23, 100)};
  Outputs want = Driver(c, opts(false)).wave(prompts, "p", greedy(40));
  for (bool cache : {false, true}) {
    // The first budget from the longest sequence's blocks up that preempts: whether one does depends on
    // where the budget falls against the states' block boundaries.
    Driver probe(c, opts(cache));
    const int64_t longest = probe.engine.model().state_blocks_for(160), extra = probe.engine.model().state_blocks_for(40);
    int64_t preemptions = 0;
    for (int64_t budget = longest; budget <= longest + extra && preemptions == 0;
         budget += std::max<int64_t>(1, extra / 8)) {
      EngineOptions tight = opts(cache);
      tight.num_state_blocks = budget;
      Driver d(c, tight);
      expect_same(d.wave(prompts, "p", greedy(40)), want);
      preemptions = d.engine.stats().preemptions;
    }
    EXPECT_GT(preemptions, 0) << "cache " << cache;
  }
}

INSTANTIATE_TEST_SUITE_P(Goldens, PrefixCacheReplay, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name[5] == 'a' ? "TinyA" : "TinyB"); });

}  // namespace
}  // namespace deepinfer::engine
