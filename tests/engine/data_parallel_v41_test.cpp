// Attention DP in lock-step with MoE expert parallelism on CPU ranks, on the goldens' tiny-a V4.1
// model: N engines, each with its own requests, states and scheduler, their models exchanging
// tokens at every MoE layer. Greedy outputs (tokens and logprobs) are those of one engine for the
// same requests, with 1, 2 and 4 ranks, idle ranks, EPLB rebalancing while the engine runs, and an
// abort on one rank; the front end spreads requests over the ranks.
#include <gtest/gtest.h>

#include <map>

#include "../model/v41_golden_model.h"
#include "engine/data_parallel.h"
#include "engine/engine.h"
#include "parallel/expert_parallel.h"

namespace deepinfer::engine {
namespace {

EngineOptions opts() {
  EngineOptions o;
  o.max_num_seqs = 8;
  o.max_num_batched_tokens = 48;  // small: prompts get chunked differently on each rank
  o.max_model_len = 256;
  o.async_scheduling = false;
  return o;
}

std::vector<std::vector<int32_t>> prompts(int n) {
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p;
    for (int j = 0; j < 5 + 7 * i; ++j) p.push_back((i * 53 + j * 29 + 3) % 500);
    out.push_back(p);
  }
  return out;
}

SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.logprobs = 1;
  return p;
}

using Outputs = std::map<std::string, RequestOutput>;

Outputs drive(Engine& e, int n, const std::string& abort_id = "") {
  const auto ps = prompts(n);
  for (int i = 0; i < n; ++i) e.add_request(Prompt::from_ids(ps[i]), greedy(i == 1 && !abort_id.empty() ? 200 : 6), "r" + std::to_string(i));
  Outputs out;
  for (int step = 0; e.has_unfinished(); ++step) {
    if (step == 3 && !abort_id.empty()) e.abort(abort_id);
    for (auto& r : e.step()) out[r.request_id] = r;
  }
  return out;
}

const Outputs& single(int n) {
  static std::map<int, Outputs> cache;
  if (!cache.count(n)) {
    Engine e(testing::load_v41_golden("tiny-a"), nullptr, opts());
    cache[n] = drive(e, n);
  }
  return cache[n];
}

struct DpRun {
  std::unique_ptr<Engine> front;
  std::vector<std::shared_ptr<parallel::ExpertParallel>> ep;
};

DpRun make_dp(int ranks, bool ep, int64_t redundant = 0, int64_t interval = 0, EngineOptions o = opts()) {
  DataParallelModels m;
  m.group = std::make_shared<parallel::CpuCommGroup>(ranks);
  DpRun run;
  for (int r = 0; r < ranks; ++r) {
    m.comms.push_back(std::make_unique<parallel::CpuCommunicator>(*m.group, r));
    std::shared_ptr<parallel::ExpertParallel> e;
    if (ep) {
      parallel::ExpertParallelConfig c;
      c.num_layers = 8, c.num_experts = 8, c.redundant_experts = redundant, c.rebalance_interval = interval;
      e = std::make_shared<parallel::ExpertParallel>(*m.comms.back(), c);
      run.ep.push_back(e);
    }
    m.models.push_back(testing::load_v41_golden("tiny-a", [&](model::V41Options& o) { o.expert_parallel = e; }));
  }
  o.lockstep = ep;
  std::vector<std::unique_ptr<Engine>> others = make_rank_engines(std::move(m.models), m.group.get(), [&](auto model) {
    return std::make_unique<Engine>(std::move(model), nullptr, o);
  });
  run.front = std::move(others.front());
  others.erase(others.begin());
  run.front->set_data_parallel(std::make_unique<DataParallelGroup>(*run.front, std::move(others), std::move(m)));
  return run;
}

void expect_same(const Outputs& got, const Outputs& want, const std::string& skip = "") {
  ASSERT_EQ(got.size(), want.size());
  for (auto& [id, w] : want) {
    if (id == skip) continue;
    const RequestOutput& g = got.at(id);
    ASSERT_EQ(g.outputs.size(), 1u);
    EXPECT_EQ(g.outputs[0].token_ids, w.outputs[0].token_ids) << id;
    EXPECT_EQ(g.outputs[0].cumulative_logprob, w.outputs[0].cumulative_logprob) << id;  // bitwise logits
    EXPECT_EQ(g.outputs[0].finish_reason, "length") << id;
  }
}

TEST(DataParallelV41, LockStepWithExpertParallelEqualsOneEngine) {
  for (int ranks : {1, 2, 4}) {
    SCOPED_TRACE("ranks " + std::to_string(ranks));
    DpRun dp = make_dp(ranks, true);
    expect_same(drive(*dp.front, 6), single(6));
    for (auto& e : dp.ep) EXPECT_EQ(e->steps(), dp.ep[0]->steps()) << "every rank ran every step";
    EXPECT_GT(dp.front->stats().forward_tokens, 0);
  }
}

TEST(DataParallelV41, SpeculationWithExpertParallelEqualsOneEngine) {
  // DSpark drafts on each rank alone (its layers hold all their experts); verification rides in the
  // step's one forward, so the ranks stay in lock-step; the start-up step-cost profile (confidence
  // scheduling) runs on every rank at once. Greedy speculation is lossless: one engine's outputs.
  EngineOptions o = opts();
  o.speculative = true;
  o.num_draft_tokens = 3;
  o.confidence_scheduling = true;
  for (int ranks : {2, 4}) {
    SCOPED_TRACE("ranks " + std::to_string(ranks));
    DpRun dp = make_dp(ranks, true, 0, 0, o);
    expect_same(drive(*dp.front, 6), single(6));
    EXPECT_GT(dp.front->stats().draft_tokens_verified, 0);  // (tiny-a's random draft head rejects them: rollback)
    for (auto& e : dp.ep) EXPECT_EQ(e->steps(), dp.ep[0]->steps()) << "every rank ran every step";
  }
}

TEST(DataParallelV41, AsyncSchedulingWithExpertParallelEqualsOneEngine) {
  // Each rank plans the next step while the current forward runs and keeps one forward in flight
  // between steps (an empty one when it has nothing), so the ranks' forwards pair up: with ranks
  // that go idle at different steps, two ranks idle throughout, and an abort on one rank.
  EngineOptions o = opts();
  o.async_scheduling = true;
  for (int ranks : {2, 4}) {
    SCOPED_TRACE("ranks " + std::to_string(ranks));
    DpRun dp = make_dp(ranks, true, 0, 0, o);
    expect_same(drive(*dp.front, 6), single(6));
    expect_same(drive(*dp.front, 6), single(6));  // again, with the forwards left in flight by the first run
  }
  DpRun idle = make_dp(4, true, 0, 0, o);
  expect_same(drive(*idle.front, 2), single(2));
  idle.front->step();  // nothing anywhere: every rank still launches one (empty) forward
  DpRun aborted = make_dp(2, true, 0, 0, o);
  const Outputs got = drive(*aborted.front, 4, "r1");
  expect_same(got, single(4), "r1");
  EXPECT_EQ(got.at("r1").outputs[0].finish_reason, "abort");
}

TEST(DataParallelV41, WithoutExpertParallelEachRankHoldsTheWholeModel) {
  DpRun dp = make_dp(2, false);
  expect_same(drive(*dp.front, 5), single(5));
}

TEST(DataParallelV41, IdleRanksNeverDeadlock) {
  // 4 ranks, 2 requests: two ranks run empty batches every step, and all ranks idle at the end.
  DpRun dp = make_dp(4, true);
  expect_same(drive(*dp.front, 2), single(2));
  dp.front->step();  // nothing anywhere: every rank runs an empty step
  EXPECT_FALSE(dp.front->has_unfinished());
}

TEST(DataParallelV41, FrontEndSpreadsRequestsByLoad) {
  DpRun dp = make_dp(2, true);
  const auto ps = prompts(4);
  std::vector<int> where;
  for (int i = 0; i < 4; ++i) {
    const std::string id = dp.front->add_request(Prompt::from_ids(ps[i]), greedy(6));
    where.push_back(dp.front->data_parallel()->rank_of(id));
  }
  // Loads 11, 18, 25, 32 tokens: r0 -> 0, r1 -> 1, r2 -> 0 (11 < 18), r3 -> 1 (18 < 36).
  EXPECT_EQ(where, (std::vector<int>{0, 1, 0, 1}));
  while (dp.front->has_unfinished()) dp.front->step();
  EXPECT_THROW(dp.front->add_request(Prompt::from_ids({}), greedy(2)), Error);  // rejected by the rank, nothing placed
}

TEST(DataParallelV41, EplbRebalancesWhileServingOutputsUnchanged) {
  DpRun dp = make_dp(2, true, /*redundant=*/2, /*interval=*/2);
  expect_same(drive(*dp.front, 6), single(6));
  EXPECT_GT(dp.ep[0]->rebalances(), 1);
}

TEST(DataParallelV41, AnAbortOnOneRankDoesNotStallTheOthers) {
  DpRun dp = make_dp(2, true);
  const Outputs got = drive(*dp.front, 4, "r1");  // r1 (200 tokens) is aborted at step 3
  expect_same(got, single(4), "r1");
  EXPECT_EQ(got.at("r1").outputs[0].finish_reason, "abort");
}

}  // namespace
}  // namespace deepinfer::engine
