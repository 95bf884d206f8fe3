// Speculative decoding in the engine loop, on the deterministic test double with an oracle drafter
// (drafts the greedy continuation, with deliberate mistakes): outputs with speculation are bitwise the
// outputs without it (greedy and seeded sampling, logprobs, stops inside accepted drafts, max_tokens,
// n > 1, preemption, chunked prefill), the counters add up, aborts keep a prefix, and misuse is refused.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "core/error.h"
#include "engine/engine.h"
#include "engine_helpers.h"
#include "test_model.h"

namespace deepinfer::engine {
namespace {

using testing::HashLM;
using testing_helpers::expect_same;
using testing_helpers::prompt_of;
using testing_helpers::run;
using testing::HashState;
using testing::LetterCodec;

// Drafts the target's greedy tokens after the anchor, but replaces token j by a wrong one when bits of
// the hash say so; confidences 0.9 / 0.4 from other bits (so confidence scheduling has work to do).
class OracleDrafter : public spec::Drafter {
 public:
  explicit OracleDrafter(int block = 4, int64_t vocab = 97) : block_(block), vocab_(vocab) {}
  int block_size() const override { return block_; }
  spec::Draft draft(model::SequenceState& state, int32_t anchor) override {
    uint64_t h = HashLM::next_hash(static_cast<HashState&>(state).hash, anchor);
    spec::Draft d;
    for (int j = 0; j < block_; ++j) {
      int32_t best = 0;
      for (int32_t v = 1; v < vocab_; ++v) if (HashLM::logit(h, v) > HashLM::logit(h, best)) best = v;
      if ((h >> 7) % 5 == 0) best = (best + 1) % vocab_;  // a wrong draft
      d.tokens.push_back(best);
      d.confidence.push_back((h >> 13) % 3 == 0 ? 0.4 : 0.9);
      h = HashLM::next_hash(h, best);
    }
    return d;
  }

 private:
  int block_;
  int64_t vocab_;
};

EngineOptions opts(bool speculative, bool confidence = false, std::vector<double> costs = {}) {
  EngineOptions o;
  o.max_num_seqs = 16;
  o.max_num_batched_tokens = 64;
  o.max_model_len = 512;
  o.async_scheduling = true;  // speculation turns it off by itself
  o.speculative = speculative;
  o.num_draft_tokens = 4;
  o.confidence_scheduling = confidence;
  o.step_costs = std::move(costs);
  if (speculative) o.drafter = std::make_shared<OracleDrafter>();
  return o;
}

std::unique_ptr<Engine> make(EngineOptions o) {
  return std::make_unique<Engine>(std::make_unique<HashLM>(97), std::make_unique<LetterCodec>(), o);
}

// 14 requests: greedy and seeded, logprobs, penalties, n = 2, EOS and stop tokens and stop strings that
// fire inside accepted drafts, min_tokens, prompts of 1..170 tokens (chunked prefill).
std::map<std::string, RequestOutput> workload(EngineOptions o, std::vector<int32_t> eos = {}) {
  o.eos_token_ids = std::move(eos);
  auto e = make(o);
  for (int i = 0; i < 14; ++i) {
    SamplingParams p;
    p.max_tokens = 10 + 3 * i;
    if (i % 2) {
      p.temperature = 1.1f, p.top_k = 20, p.seed = 500 + i;
    } else {
      p.temperature = 0;
    }
    if (i % 3 == 0) p.logprobs = 2;
    if (i == 4) p.repetition_penalty = 1.3f, p.presence_penalty = 0.5f;
    if (i == 5) p.n = 2;
    if (i == 6) p.stop = {"q", "zz"};
    if (i == 7) p.stop_token_ids = {3, 17, 40, 55, 71};
    if (i == 8) p.min_tokens = 6, p.stop_token_ids = {3, 17, 40, 55, 71};
    if (i == 9) p.ignore_eos = true;
    e->add_request(Prompt::from_ids(prompt_of(i, 1 + i * 13)), p, "r" + std::to_string(i));
  }
  return run(*e);
}

SpeculativeMetrics total(const std::map<std::string, RequestOutput>& outs) {
  SpeculativeMetrics m;
  for (auto& [id, o] : outs) add_metrics(m, o.metrics.speculative);
  return m;
}

TEST(Speculation, FixedCountOutputsEqualPlainDecoding) {
  auto off = workload(opts(false));
  auto on = workload(opts(true));
  expect_same(off, on);
  SpeculativeMetrics m = total(on);
  EXPECT_GT(m.verified, 0);
  EXPECT_GT(m.accepted, 0);
  EXPECT_LT(m.accepted, m.verified);  // the oracle's mistakes are rejected
  EXPECT_GT(m.mean_accepted_length(), 1.1);  // half the requests sample at T = 1.1: greedy drafts match less
  EXPECT_EQ(total(off).verified, 0);
}

TEST(Speculation, ConfidenceScheduledOutputsEqualPlainDecoding) {
  auto off = workload(opts(false));
  // cheap verification (cost flat in tokens): verify nearly everything
  auto flat = workload(opts(true, true, {1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0}));
  expect_same(off, flat);
  // cost linear in tokens from the first one: only very likely drafts pay
  auto steep = workload(opts(true, true, {1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0}));
  expect_same(off, steep);
  EXPECT_GT(total(flat).verified, total(steep).verified);
}

TEST(Speculation, EosAndStopsInsideAcceptedDrafts) {
  // EOS ids that greedy continuations hit: the tokens after them in an accepted draft are dropped.
  const std::vector<int32_t> eos = {5, 29, 63};
  expect_same(workload(opts(false), eos), workload(opts(true), eos));
}

TEST(Speculation, CountersAddUp) {
  auto e = make(opts(true));
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 40;
  p.ignore_eos = true;
  e->add_request(Prompt::from_ids(prompt_of(3, 9)), p, "a");
  auto out = run(*e).at("a");
  const SpeculativeMetrics& m = out.metrics.speculative;
  ASSERT_EQ(out.outputs[0].token_ids.size(), 40u);
  EXPECT_EQ(1 + m.decode_steps + m.accepted, 40);  // the prefill's token, then accepted + 1 per decode step
  EXPECT_LE(m.verified, m.drafted);
  ASSERT_FALSE(m.verified_at.empty());
  int64_t v = 0, a = 0;
  for (size_t j = 0; j < m.verified_at.size(); ++j) {
    v += m.verified_at[j], a += m.accepted_at[j];
    if (j > 0) EXPECT_LE(m.verified_at[j], m.verified_at[j - 1]);  // prefixes
  }
  EXPECT_EQ(v, m.verified);
  EXPECT_EQ(a, m.accepted);
  for (double r : m.acceptance_by_position()) EXPECT_TRUE(r >= 0 && r <= 1);
  EXPECT_NEAR(m.mean_accepted_length(), 39.0 / m.decode_steps, 1e-12);
  EXPECT_GT(m.mean_accepted_length(), 2.0);  // greedy: the oracle's drafts are mostly right
}

TEST(Speculation, PreemptionAndSmallBudgets) {
  auto off = workload(opts(false));
  EngineOptions o = opts(true);
  o.num_state_blocks = 24;  // 16 tokens a block: a few sequences at a time, preempting
  o.max_num_batched_tokens = 20;
  auto on = workload(o);
  expect_same(off, on);
}

TEST(Speculation, AbortKeepsAPrefix) {
  auto ref = make(opts(false));
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 60;
  ref->add_request(Prompt::from_ids(prompt_of(1, 5)), p, "a");
  auto full = run(*ref).at("a").outputs[0].token_ids;
  auto e = make(opts(true));
  e->add_request(Prompt::from_ids(prompt_of(1, 5)), p, "a");
  for (int i = 0; i < 4; ++i) e->step();
  e->abort("a");
  auto got = run(*e).at("a").outputs[0];
  EXPECT_EQ(got.finish_reason, "abort");
  ASSERT_LE(got.token_ids.size(), full.size());
  EXPECT_GT(got.token_ids.size(), 4u);  // more than one token a step
  EXPECT_TRUE(std::equal(got.token_ids.begin(), got.token_ids.end(), full.begin()));
}

// LetterCodec with raw token bytes (structured output); 96 is EOS.
class LetterBytesCodec : public LetterCodec {
 public:
  std::vector<std::string> token_bytes() const override {
    std::vector<std::string> b;
    for (int32_t t = 0; t < 97; ++t) b.push_back(t == 96 ? "" : piece(t));
    return b;
  }
};

TEST(Speculation, StructuredOutputWithDrafts) {
  // A regex the oracle's greedy drafts mostly satisfy: drafts are checked against the grammar (cut at
  // the first it refuses and before one that ends it), every verified row is masked after the drafts
  // before it, and the matcher is rolled back with the state. Outputs equal plain decoding's and match.
  auto go = [](bool speculative) {
    EngineOptions o = opts(speculative);
    o.eos_token_ids = {96};
    Engine e(std::make_unique<HashLM>(97), std::make_unique<LetterBytesCodec>(), o);
    for (int i = 0; i < 6; ++i) {
      SamplingParams p;
      p.max_tokens = 80;
      if (i % 2) p.temperature = 0.7f, p.seed = 40 + i;
      else p.temperature = 0;
      p.so_args = R"({"schema_type": "regex", "schema": "[a-w]{3,40}"})";
      e.add_request(Prompt::from_ids(prompt_of(20 + i, 7 + i)), p, "s" + std::to_string(i));
    }
    return run(e);
  };
  auto off = go(false), on = go(true);
  expect_same(off, on);
  for (auto& [id, o] : on) {
    std::vector<int32_t> ids = o.outputs[0].token_ids;
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids.back(), 96) << id;  // the grammar ends only through EOS (LetterCodec renders it as text)
    ids.pop_back();
    const std::string text = LetterCodec().decode(ids, true);
    EXPECT_EQ(o.outputs[0].finish_reason, "stop") << id;
    EXPECT_GE(text.size(), 3u) << id;
    EXPECT_LE(text.size(), 40u) << id;
    for (char c : text) EXPECT_TRUE(c >= 'a' && c <= 'w') << id << ": " << text;
  }
  EXPECT_GT(total(on).accepted, 0);
}

TEST(Speculation, MisuseIsRefused) {
  EngineOptions o = opts(true);
  o.drafter = nullptr;  // HashLM has no DSpark head
  EXPECT_THROW(make(o), Error);
  o = opts(true);
  o.num_draft_tokens = 5;  // the drafter's block is 4
  EXPECT_THROW(make(o), Error);
  o = opts(true);
  o.num_draft_tokens = 0;  // the default: min(5, block size)
  EXPECT_NO_THROW(make(o));
  o = opts(true);
  o.drafter = std::make_shared<OracleDrafter>(12);
  o.num_draft_tokens = 12;  // more than the states take back (8)
  EXPECT_THROW(make(o), Error);
  EngineConfig c;
  c.speculative.num_draft_tokens = -1;
  EXPECT_THROW(resolve_options(c), Error);
}

}  // namespace
}  // namespace deepinfer::engine
