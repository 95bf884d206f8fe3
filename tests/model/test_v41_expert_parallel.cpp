// DeepSeek-V4.1 with MoE expert parallelism on CPU ranks (threads): each rank loads only its routed
// experts, runs its own sequences (attention DP) and exchanges tokens at every MoE layer. Every
// sequence's logits, prefill and decode, equal the single-rank model's bitwise: with the plain
// partition, with idle ranks, with EPLB's redundant replicas rebalanced every step, with a rank
// whose batch fails.
#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "core/error.h"
#include "model/deepseek_v41/v41_model.h"
#include "parallel/cpu_communicator.h"
#include "parallel/expert_parallel.h"
#include "v41_golden_model.h"

namespace deepinfer {
namespace {

constexpr int64_t kSeqs = 5, kSteps = 4;

int32_t token(int64_t seq, int64_t pos, int64_t vocab) { return static_cast<int32_t>((seq * 131 + pos * 37 + 11) % vocab); }
int64_t prompt_len(int64_t seq) { return 3 + 4 * seq; }  // 3 .. 19 tokens: some past the window

// Step 0 prefills the prompts of `seqs`, steps 1.. decode one token each; the logits of each
// sequence's last row, per step: out[seq][step].
using Logits = std::map<int64_t, std::vector<std::vector<float>>>;

void run_steps(model::V41Model& m, const std::vector<int64_t>& seqs, Logits& out, int64_t bad_seq = -1) {
  std::vector<std::unique_ptr<model::SequenceState>> st;
  for (size_t i = 0; i < seqs.size(); ++i) st.push_back(m.new_sequence());
  for (int64_t step = 0; step < kSteps; ++step) {
    model::ForwardBatch b;
    b.seq_start = {0};
    for (size_t i = 0; i < seqs.size(); ++i) {
      const int64_t q = seqs[i], from = st[i]->length(), to = step == 0 ? prompt_len(q) : from + 1;
      for (int64_t p = from; p < to; ++p) b.token_ids.push_back(token(q, p, m.vocab_size()));
      if (q == bad_seq && step == 1) b.token_ids.back() = static_cast<int32_t>(m.vocab_size());  // outside the vocabulary
      b.logit_rows.push_back(static_cast<int32_t>(b.token_ids.size()) - 1);
      b.seq_start.push_back(static_cast<int32_t>(b.token_ids.size()));
      b.states.push_back(st[i].get());
    }
    std::vector<float> logits;
    if (bad_seq >= 0 && std::find(seqs.begin(), seqs.end(), bad_seq) != seqs.end() && step == 1) {
      EXPECT_THROW(m.forward(b, logits), Error);
      return;  // this rank's sequences are lost; the other ranks go on
    }
    m.forward(b, logits);
    const int64_t V = m.vocab_size();
    for (size_t i = 0; i < seqs.size(); ++i) out[seqs[i]].emplace_back(logits.begin() + i * V, logits.begin() + (i + 1) * V);
  }
}

const Logits& single_rank(const std::string& golden) {
  static std::map<std::string, Logits> cache;
  Logits& l = cache[golden];
  if (l.empty()) {
    auto m = testing::load_v41_golden(golden);
    std::vector<int64_t> all;
    for (int64_t q = 0; q < kSeqs; ++q) all.push_back(q);
    run_steps(*m, all, l);
  }
  return l;
}

struct EpRun {
  Logits logits;
  std::vector<int64_t> loaded;      // per rank: routed experts held at layer 0
  std::vector<int64_t> rebalances;  // per rank
  bool moved = false;               // a rebalance changed some layer's placement
};

// Sequence q runs on rank q % ranks (ranks past kSeqs - 1 stay idle every step).
EpRun run_ep(const std::string& golden, int ranks, int64_t redundant = 0, int64_t interval = 0, int64_t bad_seq = -1) {
  EpRun run;
  run.loaded.resize(ranks);
  run.rebalances.resize(ranks);
  std::vector<Logits> per_rank(ranks);
  parallel::run_cpu_ranks(ranks, [&](parallel::Communicator& comm) {
    const int r = comm.rank();
    std::shared_ptr<parallel::ExpertParallel> ep;
    auto m = testing::load_v41_golden(golden, [&](model::V41Options& o) {
      parallel::ExpertParallelConfig c;
      c.num_layers = model::V41Config::from_file(testing::kV41GoldenRoot + golden + "/config.json").n_layers;
      c.num_experts = model::V41Config::from_file(testing::kV41GoldenRoot + golden + "/config.json").n_routed_experts;
      c.redundant_experts = redundant;
      c.rebalance_interval = interval;
      ep = std::make_shared<parallel::ExpertParallel>(comm, c);
      o.expert_parallel = ep;
    });
    run.loaded[r] = m->loaded_experts(0);
    std::vector<std::vector<int64_t>> placed;
    for (int64_t l = 0; l < ep->config().num_layers; ++l) placed.push_back(ep->map(l).phy2log);
    std::vector<int64_t> mine;
    for (int64_t q = r; q < kSeqs; q += ranks) mine.push_back(q);
    run_steps(*m, mine, per_rank[r], bad_seq);
    // A rank whose batch failed keeps stepping idle so the others finish.
    for (int64_t s = static_cast<int64_t>(ep->steps()); s < kSteps; ++s) {
      model::ForwardBatch idle;
      idle.seq_start = {0};
      std::vector<float> logits;
      m->forward(idle, logits);
    }
    run.rebalances[r] = ep->rebalances();
    for (int64_t l = 0; l < ep->config().num_layers; ++l)
      if (r == 0 && ep->map(l).phy2log != placed[l]) run.moved = true;
  });
  for (auto& l : per_rank) run.logits.insert(l.begin(), l.end());
  return run;
}

TEST(V41ExpertParallel, LogitsEqualOneRankBitwise) {
  const Logits& want = single_rank("tiny-a");
  for (int ranks : {1, 2, 4}) {
    SCOPED_TRACE("ranks " + std::to_string(ranks));
    const EpRun run = run_ep("tiny-a", ranks);
    EXPECT_EQ(run.logits, want);
    for (int r = 0; r < ranks; ++r) EXPECT_EQ(run.loaded[r], 8 / ranks) << "rank " << r << " loads only its experts";
  }
}

TEST(V41ExpertParallel, IdleRanksServeTheOthers) {
  // 8 ranks, 5 sequences: ranks 5..7 run empty batches every step (and hold one expert each).
  const EpRun run = run_ep("tiny-a", 8);
  EXPECT_EQ(run.logits, single_rank("tiny-a"));
}

TEST(V41ExpertParallel, EplbReplicasRebalancedEveryStep) {
  for (int ranks : {2, 4}) {
    SCOPED_TRACE("ranks " + std::to_string(ranks));
    const EpRun run = run_ep("tiny-a", ranks, /*redundant=*/ranks, /*interval=*/1);
    EXPECT_EQ(run.logits, single_rank("tiny-a"));
    EXPECT_TRUE(run.moved) << "the counted loads moved some experts";
    for (int r = 0; r < ranks; ++r) {
      EXPECT_EQ(run.rebalances[r], kSteps);
      EXPECT_LE(run.loaded[r], 8 / ranks + 1);
    }
  }
}

TEST(V41ExpertParallel, AnotherGoldenWithThreeRanks) {
  EXPECT_EQ(run_ep("tiny-b", 3).logits, single_rank("tiny-b"));  // 6 experts, top-3
}

TEST(V41ExpertParallel, AFailedBatchOnOneRankDoesNotStallTheOthers) {
  // Sequence 1 (rank 1 of 2) sends a token outside the vocabulary at step 1: rank 1's forward throws,
  // after finishing the step's exchanges with no tokens; rank 0's sequences are unaffected.
  const EpRun run = run_ep("tiny-a", 2, 0, 0, /*bad_seq=*/1);
  const Logits& want = single_rank("tiny-a");
  for (int64_t q : {0, 2, 4}) EXPECT_EQ(run.logits.at(q), want.at(q)) << "sequence " << q;
  EXPECT_EQ(run.logits.at(1).size(), 1u);  // its prefill only
}

TEST(V41ExpertParallel, AModelLoadedForOtherSizesIsAnError) {
  // (ExpertParallel's own size checks: parallel_expert_parallel_test.)
  parallel::run_cpu_ranks(2, [&](parallel::Communicator& comm) {
    parallel::ExpertParallelConfig c;
    c.num_layers = 8, c.num_experts = 16;
    auto ep = std::make_shared<parallel::ExpertParallel>(comm, c);
    EXPECT_THROW(testing::load_v41_golden("tiny-a", [&](model::V41Options& o) { o.expert_parallel = ep; }), Error);
  });
}

}  // namespace
}  // namespace deepinfer
