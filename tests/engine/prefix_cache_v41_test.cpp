// Prefix caching on a real DeepSeek-V4.1 graph (the goldens' tiny-b, SWA bounded replay off as in its
// reference): outputs with the cache are bitwise those without it (tokens, logprobs), a request whose
// prompt starts with a cached prefix prefills only its suffix, the prefix a later prompt diverges at
// is snapshotted for the next one, a tiny state budget evicts snapshots and stays correct, concurrent
// requests share one snapshot, and speculative decoding (rollback on every verification) on top of
// shared rows leaves the cached prefix intact.
#include <gtest/gtest.h>

#include "../model/v41_golden_model.h"
#include "engine/engine.h"
#include "engine_helpers.h"

namespace deepinfer::engine {
namespace {

using testing_helpers::expect_same;
using Outputs = std::map<std::string, RequestOutput>;

constexpr int64_t kBlock = 16;

EngineOptions opts(bool cache) { return testing_helpers::prefix_cache_options(cache, kBlock, 256); }

using testing_helpers::cat;
std::vector<int32_t> tokens(int seed, int len) { return testing_helpers::golden_tokens(seed, len); }
SamplingParams greedy(int max_tokens = 8) { return testing_helpers::greedy_with_logprobs(max_tokens); }

struct Driver {
  Engine engine;
  explicit Driver(EngineOptions o) : engine(testing::load_v41_golden("tiny-b"), nullptr, std::move(o)) {}
  // Runs the prompts together to the end.
  Outputs wave(const std::vector<std::vector<int32_t>>& prompts, const std::string& tag, SamplingParams p = greedy()) {
    for (size_t i = 0; i < prompts.size(); ++i) engine.add_request(Prompt::from_ids(prompts[i]), p, tag + std::to_string(i));
    return testing_helpers::run(engine);
  }
  int64_t forward_tokens() const { return engine.stats().forward_tokens; }
};

TEST(PrefixCacheV41, SecondRequestPrefillsOnlyItsSuffix) {
  const auto prefix = tokens(1, 300);
  const auto a = cat(prefix, tokens(2, 3)), b = cat(prefix, tokens(3, 9));
  Driver on(opts(true)), off(opts(false));
  ASSERT_TRUE(on.engine.prefix_caching());
  ASSERT_FALSE(off.engine.prefix_caching());
  Outputs first_on = on.wave({a}, "a"), first_off = off.wave({a}, "a");
  expect_same(first_on, first_off);
  EXPECT_EQ(first_on.at("a0").metrics.num_cached_tokens, 0);
  // a's snapshot is at the last block boundary before its last token, 302 / 16 * 16 = 288 <= 300
  const int64_t before = on.forward_tokens();
  Outputs second_on = on.wave({b}, "b"), second_off = off.wave({b}, "b");
  expect_same(second_on, second_off);
  EXPECT_EQ(second_on.at("b0").metrics.num_cached_tokens, 288);
  EXPECT_EQ(second_off.at("b0").metrics.num_cached_tokens, 0);
  // b's prefill fed 309 - 288 tokens; each of its 8 samples after the first fed one more
  EXPECT_EQ(on.forward_tokens() - before, 309 - 288 + 7);
  EXPECT_EQ(on.engine.stats().prefix_hits, 1);
  EXPECT_EQ(on.engine.stats().prefix_cached_tokens, 288);
  // the same prompt again hits its own last boundary
  Outputs again = on.wave({a}, "a");
  expect_same(again, first_off);
  EXPECT_EQ(again.at("a0").metrics.num_cached_tokens, 288);
}

TEST(PrefixCacheV41, TheNextPromptHitsWhereTwoEarlierOnesDiverged) {
  const auto shared = tokens(4, 200);  // whole blocks: 192 tokens
  const auto a = cat(shared, tokens(5, 60)), b = cat(shared, tokens(6, 50)), c = cat(shared, tokens(7, 40));
  Driver on(opts(true)), off(opts(false));
  expect_same(on.wave({a}, "a"), off.wave({a}, "a"));
  Outputs ob = on.wave({b}, "b");  // diverges from a inside block 12: snapshotted at 192
  expect_same(ob, off.wave({b}, "b"));
  EXPECT_EQ(ob.at("b0").metrics.num_cached_tokens, 0);
  Outputs oc = on.wave({c}, "c");
  expect_same(oc, off.wave({c}, "c"));
  EXPECT_EQ(oc.at("c0").metrics.num_cached_tokens, 192);
}

TEST(PrefixCacheV41, ConcurrentRequestsShareOnePrefix) {
  const auto prefix = tokens(8, 130);
  Driver on(opts(true)), off(opts(false));
  std::vector<std::vector<int32_t>> many;
  for (int i = 0; i < 5; ++i) many.push_back(cat(prefix, tokens(20 + i, 3 + i)));
  expect_same(on.wave({cat(prefix, tokens(9, 2))}, "w"), off.wave({cat(prefix, tokens(9, 2))}, "w"));
  SamplingParams seeded = greedy(6);
  seeded.temperature = 0.8f;
  seeded.seed = 7;
  seeded.n = 2;
  Outputs got = on.wave(many, "m", seeded);
  expect_same(got, off.wave(many, "m", seeded));
  for (auto& [id, o] : got) EXPECT_EQ(o.metrics.num_cached_tokens, 128) << id;
  EXPECT_GE(on.engine.stats().max_seqs_in_step, 5);
}

TEST(PrefixCacheV41, TinyBudgetEvictsSnapshotsAndStaysCorrect) {
  // room for about three sequences' states: one running, two snapshots; a third snapshot, or the running
  // request growing, evicts the least recently used one
  Driver probe(opts(true));
  const int64_t per_seq = probe.engine.model().state_blocks_for(220);
  EngineOptions o = opts(true);
  o.num_state_blocks = 3 * per_seq;
  o.max_num_seqs = 1;
  EngineOptions o_off = o;
  o_off.prefix_caching = false;
  Driver on(o), off(o_off);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(cat(tokens(30 + i / 2, 180), tokens(40 + i, 5)));
  for (int round = 0; round < 2; ++round) {
    const std::string tag = "r" + std::to_string(round) + "_";
    expect_same(on.wave(prompts, tag), off.wave(prompts, tag));
  }
  const EngineStats st = on.engine.stats();
  EXPECT_GT(st.prefix_snapshots, 0);
  EXPECT_GT(st.prefix_evictions, 0);
  EXPECT_GT(st.prefix_hits, 0);
  EXPECT_LE(st.prefix_cached_blocks, o.num_state_blocks);
  // idle: no sequence holds state; the pool holds the snapshots' blocks and nothing else
  EXPECT_EQ(st.state_blocks_reserved, 0);
  EXPECT_EQ(st.live_states, 0);
  EXPECT_GT(st.state_blocks_allocated, 0);
  EXPECT_LE(st.state_blocks_allocated, st.prefix_cached_blocks);
}

TEST(PrefixCacheV41, SpeculationAndRollbackLeaveSharedRowsIntact) {
  EngineOptions spec = opts(true);
  spec.speculative = true;
  spec.num_draft_tokens = 5;
  Driver on(spec), off(opts(false));
  const auto prefix = tokens(50, 140);
  std::vector<std::vector<int32_t>> prompts = {cat(prefix, tokens(51, 4)), cat(prefix, tokens(52, 6)),
                                               cat(prefix, tokens(53, 5))};
  Outputs want = off.wave(prompts, "s", greedy(24));
  Outputs first = on.wave({prompts[0]}, "s", greedy(24));
  expect_same(first, Outputs{{"s0", want.at("s0")}});
  // the other two decode (drafts verified, rejected ones rolled back) on rows shared with the snapshot
  on.engine.add_request(Prompt::from_ids(prompts[1]), greedy(24), "s1");
  on.engine.add_request(Prompt::from_ids(prompts[2]), greedy(24), "s2");
  Outputs rest = testing_helpers::run(on.engine);
  rest["s0"] = first.at("s0");
  expect_same(rest, want);
  EXPECT_EQ(rest.at("s1").metrics.num_cached_tokens, 128);
  EXPECT_GT(rest.at("s1").metrics.speculative.verified, 0);
  // and the snapshot still gives the first prompt's exact output
  Outputs again = on.wave({prompts[0]}, "s", greedy(24));
  expect_same(again, Outputs{{"s0", want.at("s0")}});
  EXPECT_EQ(again.at("s0").metrics.num_cached_tokens, 128);
}

// The bug the CI soak found (docs/prefix_caching.md, "Released states and snapshots"): a sequence
// aborted while the forward that reaches another one's snapshot point is in flight still holds its
// pool blocks until the engine recycles it, though the budget already counts them free; the snapshot
// taken after that forward must not allocate before they are back. A budget with room for exactly both
// sequences makes the snapshot's allocation fail ("state memory exhausted" from step()) when it does.
TEST(PrefixCacheV41, SnapshotAfterAnAbortAllocatesOnlyOnceTheAbortedStateIsReturned) {
  EngineOptions o = opts(true);
  ASSERT_TRUE(o.async_scheduling);  // step 2's abort lands while the forward reaching the snapshot runs
  o.max_num_batched_tokens = 64;
  Driver probe(o);
  const auto& model = probe.engine.model();
  // b: 40 prompt tokens, prompt logprobs (it neither uses nor fills the cache), then one decode token;
  // a: 33 prompt tokens, snapshotted at 32 (its last block boundary before its last token)
  o.num_state_blocks = model.state_blocks_for(41) + model.state_blocks_for(32);
  const auto a = tokens(70, 33), b = tokens(71, 40);
  SamplingParams pb = greedy(4);
  pb.prompt_logprobs = 1;
  for (bool cache : {true, false}) {
    o.prefix_caching = cache;
    Driver d(o);
    d.engine.add_request(Prompt::from_ids(b), pb, "b");
    d.engine.add_request(Prompt::from_ids(a), greedy(4), "a");
    Outputs got;
    // step 1 runs b[0,40) + a[0,24) and launches b's token 41 + a[24,32) ahead (async scheduling)
    for (auto& out : d.engine.step()) got[out.request_id] = out;
    d.engine.abort("b");
    // step 2 releases b, waits for that forward, snapshots a at 32, then finishes a
    while (d.engine.has_unfinished())
      for (auto& out : d.engine.step()) got[out.request_id] = out;
    ASSERT_EQ(got.at("b").outputs[0].finish_reason, "abort");
    Outputs alone = Driver(opts(false)).wave({a}, "a", greedy(4));
    expect_same(Outputs{{"a0", got.at("a")}}, alone);
    if (cache) {
      EXPECT_EQ(d.engine.stats().prefix_snapshots, 1);
      Outputs hit = d.wave({a}, "a", greedy(4));  // and the snapshot is exact
      expect_same(hit, alone);
      EXPECT_EQ(hit.at("a0").metrics.num_cached_tokens, 32);
    }
  }
}

TEST(PrefixCacheV41, PromptLogprobsRequestsComputeTheirWholePrompt) {
  const auto prefix = tokens(60, 100);
  Driver on(opts(true)), off(opts(false));
  on.wave({cat(prefix, tokens(61, 3))}, "w");
  SamplingParams p = greedy(2);
  p.prompt_logprobs = 2;
  Outputs got = on.wave({cat(prefix, tokens(62, 3))}, "p", p);
  Outputs want = off.wave({cat(prefix, tokens(62, 3))}, "p", p);
  expect_same(got, want);
  EXPECT_EQ(got.at("p0").metrics.num_cached_tokens, 0);
  ASSERT_EQ(got.at("p0").prompt_logprobs.size(), want.at("p0").prompt_logprobs.size());
}

TEST(PrefixCacheV41, BatchInvariantModeNeedsBlocksOnItsChunkGrid) {
  EngineOptions o = opts(true);
  o.batch_invariant = true;  // chunks end at multiples of 64
  EXPECT_THROW(Driver{o}, Error);
  o.prefix_block_tokens = 128;
  Driver ok(o);
  EXPECT_TRUE(ok.engine.prefix_caching());
}

}  // namespace
}  // namespace deepinfer::engine
