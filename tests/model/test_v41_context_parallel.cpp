// DeepSeek-V4.1 with balanced context parallelism on CPU ranks (threads): every rank is given the
// same batches and computes its share of each sequence's tokens (zigzag or round-robin), exchanging
// the window KV and compressor rows. Every logit row, prefill (whole and chunked, with SWA bounded
// replay) and decode, equals the single-rank model's bitwise on every rank, with rank boundaries
// inside compressor groups and inside the sliding window.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <thread>

#include "core/error.h"
#include "model/context_parallel_lm.h"
#include "model/deepseek_v41/v41_model.h"
#include "parallel/context_parallel.h"
#include "parallel/cpu_communicator.h"
#include "parallel/expert_parallel.h"
#include "v41_golden_model.h"

namespace deepinfer {
namespace {

using parallel::CpLayout;

int32_t token(int64_t seq, int64_t pos, int64_t vocab) { return static_cast<int32_t>((seq * 131 + pos * 37 + 11) % vocab); }

// steps[k][q]: how many tokens sequence q takes in forward k (0: none). Returns the logits of every
// row of every forward (last_only: of each sequence's last row, as an engine asks), concatenated.
// first_seq: the sequences are first_seq, first_seq + 1, ... (their tokens depend on it).
std::vector<float> run(model::CausalLM& m, const std::vector<std::vector<int64_t>>& steps, bool last_only,
                       int64_t first_seq = 0) {
  std::vector<std::unique_ptr<model::SequenceState>> st;
  for (size_t q = 0; q < steps[0].size(); ++q) st.push_back(m.new_sequence());
  std::vector<float> all;
  for (const auto& step : steps) {
    model::ForwardBatch b;
    b.seq_start = {0};
    for (size_t q = 0; q < step.size(); ++q) {
      const int64_t from = st[q]->length();
      for (int64_t p = from; p < from + step[q]; ++p) {
        if (!last_only || p + 1 == from + step[q]) b.logit_rows.push_back(static_cast<int32_t>(b.token_ids.size()));
        b.token_ids.push_back(token(first_seq + static_cast<int64_t>(q), p, m.vocab_size()));
      }
      b.seq_start.push_back(static_cast<int32_t>(b.token_ids.size()));
      b.states.push_back(st[q].get());
    }
    std::vector<float> logits;
    m.forward(b, logits);
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

// SWA bounded replay; the tests then ask for each sequence's last row only (else nothing is cut).
void compact_replay(model::V41Options& o) {
  o.replay_compact = true;
  o.replay_keep = 12;  // the window (8) plus the DSpark block (4): the smallest allowed
}

// Every rank's logits for `steps` with context parallelism over `ranks` ranks.
std::vector<std::vector<float>> run_cp(int ranks, CpLayout layout, const std::vector<std::vector<int64_t>>& steps,
                                       bool replay = false) {
  std::vector<std::vector<float>> out(ranks);
  parallel::run_cpu_ranks(ranks, [&](parallel::Communicator& comm) {
    auto m = testing::load_v41_golden("tiny-a", [&](model::V41Options& o) {
      o.context_parallel = std::make_shared<parallel::ContextParallel>(comm, layout);
      if (replay) compact_replay(o);
    });
    out[comm.rank()] = run(*m, steps, replay);
  });
  return out;
}

std::vector<float> run_one(const std::vector<std::vector<int64_t>>& steps, bool replay = false) {
  auto m = testing::load_v41_golden("tiny-a", [&](model::V41Options& o) {
    if (replay) compact_replay(o);
  });
  return run(*m, steps, replay);
}

void expect_equal_on_every_rank(const std::vector<std::vector<int64_t>>& steps, bool replay = false) {
  const std::vector<float> want = run_one(steps, replay);
  ASSERT_FALSE(want.empty());
  for (CpLayout layout : {CpLayout::kZigzag, CpLayout::kRoundRobin})
    for (int ranks : {1, 2, 4}) {
      SCOPED_TRACE("ranks " + std::to_string(ranks) + (layout == CpLayout::kZigzag ? " zigzag" : " round-robin"));
      const auto got = run_cp(ranks, layout, steps, replay);
      for (int r = 0; r < ranks; ++r) EXPECT_EQ(got[r], want) << "rank " << r;  // bitwise
    }
}

TEST(CpLayout, ZigzagOwnsMirroredBlocks) {
  // 16 tokens on 2 ranks: blocks of 4; rank 0 owns blocks 0 and 3, rank 1 blocks 1 and 2.
  std::vector<int> want = {0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0};
  for (int64_t i = 0; i < 16; ++i) EXPECT_EQ(parallel::cp_owner(CpLayout::kZigzag, i, 16, 2), want[i]) << i;
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(parallel::cp_owner(CpLayout::kRoundRobin, i, 10, 4), i % 4);
  // Uneven lengths: blocks differ by at most one token, so each rank's share by at most two.
  for (int ranks : {2, 3, 4, 8})
    for (int64_t n = 1; n < 70; ++n) {
      std::vector<int64_t> count(ranks, 0);
      int last = 0;
      for (int64_t i = 0; i < n; ++i) {
        const int r = parallel::cp_owner(CpLayout::kZigzag, i, n, ranks);
        ASSERT_TRUE(r >= 0 && r < ranks);
        ++count[r];
        if (i == 0 && n >= 2 * ranks) EXPECT_EQ(r, 0);
        last = r;
      }
      EXPECT_EQ(last, 0) << "the last block is rank 0's";
      if (n >= 2 * ranks)
        EXPECT_LE(*std::max_element(count.begin(), count.end()) - *std::min_element(count.begin(), count.end()), 2);
    }
  EXPECT_THROW(parallel::parse_cp_layout("ring"), Error);
  EXPECT_EQ(parallel::parse_cp_layout("round_robin"), CpLayout::kRoundRobin);
}

TEST(CpWindowExchange, TheWindowBeforeEachBlockAndTheRingTail) {
  // 16 tokens, zigzag on 2 ranks (rank 0: rows 0-3 and 12-15, rank 1: 4-11), window 4: rank 0's row
  // 12 reads 9..11, rank 1's row 4 reads 1..3; nothing else crosses.
  std::vector<int32_t> owner;
  for (int64_t i = 0; i < 16; ++i) owner.push_back(parallel::cp_owner(CpLayout::kZigzag, i, 16, 2));
  const parallel::RowExchange r0 = parallel::window_exchange(owner, {0, 16}, {0}, 4, 0, 2);
  const parallel::RowExchange r1 = parallel::window_exchange(owner, {0, 16}, {0}, 4, 1, 2);
  EXPECT_EQ(r0.recv[1], (std::vector<int32_t>{9, 10, 11}));
  EXPECT_EQ(r1.recv[0], (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(r0.send[1], (std::vector<int32_t>{1, 2, 3}));  // as rank 0 numbers its rows
  EXPECT_EQ(r1.send[0], (std::vector<int32_t>{5, 6, 7}));  // rows 9..11 are rank 1's 5th..7th
  EXPECT_TRUE(r0.recv[0].empty() && r0.send[0].empty() && r1.recv[1].empty());
  // The ring keeps the last 5 rows (11..15): every rank gets them too.
  EXPECT_EQ(parallel::window_exchange(owner, {0, 16}, {5}, 4, 1, 2).recv[0], (std::vector<int32_t>{1, 2, 3, 12, 13, 14, 15}));
  EXPECT_EQ(parallel::window_exchange(owner, {0, 16}, {5}, 0, 0, 2).recv[1], (std::vector<int32_t>{11}));  // ring only
  // Two sequences, round-robin, window 2: a row is read by the next row of its own sequence only.
  const std::vector<int32_t> rr = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1};
  EXPECT_EQ(parallel::window_exchange(rr, {0, 6, 12}, {0, 0}, 2, 0, 2).recv[1], (std::vector<int32_t>{1, 3, 7, 9}));
  // A peer's send list is this rank's receive list, for any layout.
  for (int ranks : {2, 3, 4}) {
    std::vector<int32_t> o;
    for (int64_t i = 0; i < 37; ++i) o.push_back(parallel::cp_owner(CpLayout::kZigzag, i, 37, ranks));
    for (int64_t i = 0; i < 11; ++i) o.push_back(parallel::cp_owner(CpLayout::kRoundRobin, i, 11, ranks));
    std::vector<parallel::RowExchange> x;
    for (int r = 0; r < ranks; ++r) x.push_back(parallel::window_exchange(o, {0, 37, 48}, {12, 3}, 8, r, ranks));
    for (int r = 0; r < ranks; ++r)
      for (int p = 0; p < ranks; ++p) {
        ASSERT_EQ(x[p].send[r].size(), x[r].recv[p].size());
        for (size_t k = 0; k < x[r].recv[p].size(); ++k) EXPECT_EQ(o[x[r].recv[p][k]], p);
      }
  }
  EXPECT_THROW(parallel::window_exchange(owner, {0, 15}, {0}, 4, 0, 2), Error);
}

TEST(V41ContextParallel, WindowExchangeSendsOnlyTheWindowAndTheRingTail) {
  // 100 tokens, zigzag on 2 ranks (rank 0: rows 0-24 and 75-99), window 8: at each layer rank 0
  // receives only the 7 rows before row 75 (its ring tail is its own), not rank 1's 50 rows.
  std::vector<int64_t> received(2);
  int64_t layers = 0;
  parallel::run_cpu_ranks(2, [&](parallel::Communicator& comm) {
    auto cp = std::make_shared<parallel::ContextParallel>(comm);
    auto m = testing::load_v41_golden("tiny-a", [&](model::V41Options& o) { o.context_parallel = cp; });
    run(*m, {{100}}, true);
    received[comm.rank()] = cp->rows_received();
    layers = m->config().n_layers;
  });
  ASSERT_EQ(testing::load_v41_golden("tiny-a")->config().window_size, 8);
  EXPECT_EQ(received[0], 7 * layers);
  EXPECT_GT(received[1], 0);
  EXPECT_LT(received[1], 50 * layers / 2);
}

TEST(V41ContextParallel, PrefillThenDecodeBitwise) {
  // Four prompts (1 to 37 tokens: shorter than the ranks, past the window of 8, many ratio-2
  // groups), then three decode steps, which leave most ranks without a row.
  const std::vector<int64_t> prompts = {1, 7, 19, 37};
  // Zigzag on 2 ranks cuts 37 tokens at 9, 18, 27: the ratio-2 group (8, 9) lies on two ranks. On 4
  // ranks 19 tokens come in blocks of 2 or 3, shorter than the window, and the group (6, 7) is split.
  EXPECT_NE(parallel::cp_owner(CpLayout::kZigzag, 8, 37, 2), parallel::cp_owner(CpLayout::kZigzag, 9, 37, 2));
  EXPECT_NE(parallel::cp_owner(CpLayout::kZigzag, 6, 19, 4), parallel::cp_owner(CpLayout::kZigzag, 7, 19, 4));
  std::vector<std::vector<int64_t>> steps = {prompts};
  for (int k = 0; k < 3; ++k) steps.push_back(std::vector<int64_t>(prompts.size(), 1));
  expect_equal_on_every_rank(steps);
}

TEST(V41ContextParallel, ChunkedPrefillContinuesAcrossRanks) {
  // Chunks of 13 and 11 after 5 tokens: each chunk starts mid-group and mid-window, reading the
  // carry and the rings that the previous (split) chunk left in every rank's state.
  expect_equal_on_every_rank({{5, 3}, {13, 0}, {11, 9}, {1, 1}});
}

TEST(V41ContextParallel, BoundedReplayKeepsTheTail) {
  // 40 tokens with SWA bounded replay (keep 12): the layers after the last KV source run on the
  // tail only, which lies on some of the ranks.
  expect_equal_on_every_rank({{40, 25}, {1, 1}}, true);
}

// One sequence's tokens, logits of the last row.
model::ForwardBatch one_sequence(model::SequenceState& st, std::vector<int32_t> ids) {
  model::ForwardBatch b;
  b.token_ids = std::move(ids);
  b.seq_start = {0, static_cast<int32_t>(b.token_ids.size())};
  b.states = {&st};
  b.logit_rows = {b.seq_start[1] - 1};
  return b;
}

// The engine's view: one CausalLM over the ranks' models (each rank on its own thread).
std::unique_ptr<model::ContextParallelLM> cp_model(int ranks) {
  return std::make_unique<model::ContextParallelLM>(ranks, CpLayout::kZigzag, [&](auto cp) {
    return testing::load_v41_golden("tiny-a", [&](model::V41Options& o) { o.context_parallel = cp; });
  });
}

TEST(V41ContextParallel, OneModelOverTheRanks) {
  const std::vector<std::vector<int64_t>> steps = {{23, 6}, {1, 1}, {1, 1}};
  auto m = cp_model(4);
  EXPECT_EQ(run(*m, steps, false), run_one(steps));  // through the CausalLM interface
}

// dp groups of cp ranks, a ContextParallelLM each (on a thread of its own), with expert parallelism
// over all dp * cp ranks (DP group d's CP rank c is EP rank d * cp + c). Group d runs steps_of[d]
// (its sequences numbered after the earlier groups'), or body(d, model) when given.
struct CpEpRun {
  std::vector<std::vector<float>> logits;  // per DP group
  std::vector<std::shared_ptr<parallel::ExpertParallel>> ep;
  std::vector<int64_t> loaded;             // per EP rank: routed experts held at layer 0
};
using GroupBody = std::function<std::vector<float>(int d, model::CausalLM& m)>;
CpEpRun run_cp_ep(int dp, int cp, CpLayout layout, const std::vector<std::vector<std::vector<int64_t>>>& steps_of,
                  int64_t redundant = 0, int64_t interval = 0, const GroupBody& body = {}) {
  parallel::CpuCommGroup world(dp * cp);
  std::vector<std::unique_ptr<parallel::CpuCommunicator>> comms;
  CpEpRun out;
  for (int r = 0; r < dp * cp; ++r) {
    comms.push_back(std::make_unique<parallel::CpuCommunicator>(world, r));
    parallel::ExpertParallelConfig ec;
    ec.num_layers = 8, ec.num_experts = 8, ec.redundant_experts = redundant, ec.rebalance_interval = interval;
    out.ep.push_back(std::make_shared<parallel::ExpertParallel>(*comms.back(), ec));
  }
  out.logits.resize(dp);
  out.loaded.resize(dp * cp);
  std::vector<std::string> errors(dp);
  std::vector<std::thread> groups;
  for (int d = 0; d < dp; ++d)
    groups.emplace_back([&, d] {
      try {
        model::ContextParallelLM m(cp, layout, [&](auto c) {
          auto r = testing::load_v41_golden("tiny-a", [&](model::V41Options& o) {
            o.context_parallel = c;
            o.expert_parallel = out.ep[d * cp + c->rank()];
          });
          out.loaded[d * cp + c->rank()] = r->loaded_experts(0);
          return r;
        });
        int64_t first = 0;
        for (int e = 0; e < d; ++e) first += static_cast<int64_t>(steps_of[e][0].size());
        out.logits[d] = body ? body(d, m) : run(m, steps_of[d], false, first);
      } catch (const std::exception& e) {
        errors[d] = e.what();
        world.abort(e.what());
      }
    });
  for (auto& t : groups) t.join();
  for (int d = 0; d < dp; ++d) EXPECT_EQ(errors[d], "") << "DP group " << d;
  return out;
}

TEST(V41ContextParallel, WithExpertParallelBitwise) {
  // cp 2 with EP over the 2 CP ranks, and dp 2 x cp 2 with EP over 4: each CP rank's rows go through
  // the EP exchange at every MoE layer; a decode row lives on one CP rank, so the others exchange
  // zero rows. Every logit row equals one rank's (holding every expert) bitwise.
  const std::vector<std::vector<int64_t>> all = {{1, 7, 19, 37}, {1, 1, 1, 1}, {1, 1, 1, 1}};
  const std::vector<std::vector<int64_t>> first = {{1, 7}, {1, 1}, {1, 1}}, second = {{19, 37}, {1, 1}, {1, 1}};
  std::vector<float> want_first = run_one(first), want_second;
  {
    auto m = testing::load_v41_golden("tiny-a");
    want_second = run(*m, second, false, 2);
  }
  for (CpLayout layout : {CpLayout::kZigzag, CpLayout::kRoundRobin}) {
    SCOPED_TRACE(layout == CpLayout::kZigzag ? "zigzag" : "round-robin");
    const CpEpRun one = run_cp_ep(1, 2, layout, {all});
    EXPECT_EQ(one.logits[0], run_one(all));
    EXPECT_EQ(one.loaded, (std::vector<int64_t>{4, 4})) << "each rank holds only its experts";
    const CpEpRun two = run_cp_ep(2, 2, layout, {first, second});
    EXPECT_EQ(two.logits[0], want_first);
    EXPECT_EQ(two.logits[1], want_second);
    EXPECT_EQ(two.loaded, (std::vector<int64_t>{2, 2, 2, 2}));
    for (const auto& e : two.ep) EXPECT_EQ(e->steps(), 3) << "every rank ran every forward";
  }
}

TEST(V41ContextParallel, WithExpertParallelIdleGroupAndEplb) {
  // dp 2 x cp 2: group 1 has no sequences (every rank of it runs empty forwards and serves the other
  // group's tokens); one redundant slot per rank, rebalanced every forward: experts move, logits don't.
  const std::vector<std::vector<int64_t>> steps = {{13, 9}, {1, 1}, {1, 1}};
  const std::vector<std::vector<int64_t>> idle = {{}, {}, {}};
  const CpEpRun got = run_cp_ep(2, 2, CpLayout::kZigzag, {steps, idle}, /*redundant=*/4, /*interval=*/1);
  EXPECT_EQ(got.logits[0], run_one(steps));
  EXPECT_TRUE(got.logits[1].empty());
  for (const auto& e : got.ep) EXPECT_EQ(e->rebalances(), 3);
}

TEST(V41ContextParallel, WithExpertParallelAFailedGroupDoesNotStallTheOther) {
  // dp 2 x cp 2 with EP: group 1's second forward has a token outside the vocabulary. Its ranks
  // finish that step's EP exchanges with zero rows and throw; group 0's logits are unaffected, and
  // group 1 keeps stepping (idle), as a DP engine rank does after a failed batch.
  const std::vector<std::vector<int64_t>> steps = {{13, 9}, {1, 1}, {1, 1}, {1, 1}};
  const CpEpRun got = run_cp_ep(2, 2, CpLayout::kZigzag, {steps, {}}, 0, 0, [&](int d, model::CausalLM& m) {
    if (d == 0) return run(m, steps, false);
    std::vector<float> logits = run(m, {{6}}, false, 2);
    std::unique_ptr<model::SequenceState> st = m.new_sequence();
    std::vector<float> ignored;
    EXPECT_THROW(m.forward(one_sequence(*st, {1, static_cast<int32_t>(m.vocab_size())}), ignored), Error);
    run(m, {{}, {}}, false);
    return logits;
  });
  EXPECT_EQ(got.logits[0], run_one(steps));
  EXPECT_FALSE(got.logits[1].empty());
}

// A rank's model that fails its next forward when armed, before any exchange (as a bad batch would).
class FailingRank final : public model::CausalLM {
 public:
  explicit FailingRank(std::unique_ptr<model::CausalLM> m) : m_(std::move(m)) {}
  bool armed = false;
  int64_t vocab_size() const override { return m_->vocab_size(); }
  std::unique_ptr<model::SequenceState> new_sequence() const override { return m_->new_sequence(); }
  void forward(const model::ForwardBatch& b, std::vector<float>& logits, const model::ForwardTaps* taps) override {
    if (armed) {
      armed = false;
      throw Error("injected failure");
    }
    m_->forward(b, logits, taps);
  }
  int64_t state_block_bytes() const override { return m_->state_block_bytes(); }
  void set_state_pool(std::shared_ptr<BlockPool> pool) override { m_->set_state_pool(std::move(pool)); }
  int64_t state_blocks_for(int64_t tokens) const override { return m_->state_blocks_for(tokens); }

 private:
  std::unique_ptr<model::CausalLM> m_;
};

TEST(V41ContextParallel, AFailureOnOneRankStopsTheStepNotTheModel) {
  // Rank 1 fails while rank 0 waits for it in the first exchange: rank 0 fails too instead of
  // hanging, the error is rank 1's, and the next forward runs on a fresh group.
  FailingRank* rank1 = nullptr;
  model::ContextParallelLM m(2, CpLayout::kZigzag, [&](auto cp) -> std::unique_ptr<model::CausalLM> {
    auto r = std::make_unique<FailingRank>(testing::load_v41_golden("tiny-a", [&](model::V41Options& o) {
      o.context_parallel = cp;
    }));
    if (cp->rank() == 1) rank1 = r.get();
    return r;
  });
  auto forward = [&]() {
    std::unique_ptr<model::SequenceState> st = m.new_sequence();
    std::vector<float> logits;
    m.forward(one_sequence(*st, std::vector<int32_t>(12, 7)), logits);
    return logits;
  };
  const std::vector<float> want = forward();
  rank1->armed = true;
  try {
    forward();
    ADD_FAILURE() << "the injected failure did not reach the caller";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("injected failure"), std::string::npos) << e.what();
  }
  EXPECT_EQ(forward(), want);
}

TEST(V41ContextParallel, RefusesTaps) {
  parallel::run_cpu_ranks(1, [&](parallel::Communicator& comm) {
    auto m = testing::load_v41_golden("tiny-a", [&](model::V41Options& o) {
      o.context_parallel = std::make_shared<parallel::ContextParallel>(comm);
    });
    std::unique_ptr<model::SequenceState> st = m->new_sequence();
    std::vector<float> logits;
    model::ForwardTaps taps;
    EXPECT_THROW(m->forward(one_sequence(*st, {3, 4}), logits, &taps), Error);
  });
}

}  // namespace
}  // namespace deepinfer
