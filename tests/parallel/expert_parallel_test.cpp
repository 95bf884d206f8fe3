// parallel::ExpertParallel on CPU ranks, without a model: one layer's exchange returns every
// (token, k) its expert's output exactly (bf16 rows), rows arrive grouped by the receiving rank's
// slots, idle ranks take part, the router's counts drive an EPLB rebalance that replicates a hot
// expert, and misuse (sizes, layer order) is an error.
#include <gtest/gtest.h>

#include <cmath>

#include "core/dtype.h"
#include "core/error.h"
#include "moe_cases.h"
#include "parallel/cpu_communicator.h"
#include "parallel/expert_parallel.h"

using namespace deepinfer;
using namespace deepinfer::parallel;
using namespace deepinfer::parallel::moe_cases;

namespace {

// A row-independent expert that stays exact in bf16: y = x * 2^(e % 4).
float expert_value(float x, int64_t e) { return x * std::ldexp(1.0f, static_cast<int>(e % 4)); }

void exchange(int ranks, int64_t redundant, bool skewed) {
  constexpr int64_t E = 16, L = 2;
  Batch b = make_batch(90, 4, E, skewed, 5);
  for (float& v : b.x) v = round_to_bf16(v);  // the model's MoE input holds bf16 values
  const std::vector<int64_t> counts = token_counts(ranks, b.tokens);
  run_cpu_ranks(ranks, [&](Communicator& c) {
    ExpertParallelConfig cfg;
    cfg.num_layers = L, cfg.num_experts = E, cfg.redundant_experts = redundant, cfg.rebalance_interval = 1;
    ExpertParallel ep(c, cfg);
    int64_t first = 0;
    for (int r = 0; r < c.rank(); ++r) first += counts[r];
    const int64_t n = counts[c.rank()];
    const auto x = slice(b.x, first, n, kHidden), w = slice(b.w, first, n, b.topk);
    const auto ids = slice(b.ids, first, n, b.topk);
    for (int step = 0; step < 3; ++step) {
      ep.begin_step();
      for (int64_t l = 0; l < L; ++l) {
        const ExpertParallel::Received r = ep.dispatch(l, x.data(), n, kHidden, ids.data(), w.data(), b.topk);
        ASSERT_EQ(r.expert.size() + 1, r.offsets.size());
        std::vector<float> y(r.rows() * kHidden);
        for (size_t s = 0; s < r.expert.size(); ++s)
          for (int64_t i = r.offsets[s]; i < r.offsets[s + 1]; ++i)
            for (int64_t h = 0; h < kHidden; ++h) y[i * kHidden + h] = expert_value(r.x[i * kHidden + h], r.expert[s]);
        std::vector<float> rows(n * b.topk * kHidden);
        ep.combine(y.data(), rows.data());
        for (int64_t t = 0; t < n; ++t)
          for (int64_t k = 0; k < b.topk; ++k) {
            const int32_t e = ids[t * b.topk + k];
            for (int64_t h = 0; h < kHidden; ++h)
              ASSERT_EQ(rows[(t * b.topk + k) * kHidden + h], e < 0 ? 0.0f : expert_value(x[t * kHidden + h], e))
                  << "rank " << c.rank() << " token " << t << " k " << k;
          }
      }
    }
    EXPECT_EQ(ep.rebalances(), 3);
    if (skewed && redundant >= ranks) {  // every token to expert 0: EPLB gives it replicas on several ranks
      EXPECT_GT(ep.map(0).logcnt[0], 1);
    }
  });
}

}  // namespace

TEST(ExpertParallel, ExchangeIsExactOverRanks) {
  for (int ranks : {1, 2, 4, 8}) {  // rank ranks / 2 idle from 3 ranks on
    SCOPED_TRACE("ranks " + std::to_string(ranks));
    exchange(ranks, 0, false);
    exchange(ranks, ranks, false);  // one redundant slot per rank, rebalanced every step
  }
  exchange(3, 2, false);  // 16 experts over 3 ranks: 2 redundant slots make 18
}

TEST(ExpertParallel, SkewedRoutingGetsReplicasOfTheHotExpert) {
  for (int ranks : {2, 4}) exchange(ranks, 2 * ranks, true);
}

TEST(ExpertParallel, SizesThatCannotBePlacedAreErrors) {
  auto message = [](int ranks, int64_t experts, int64_t redundant) {
    std::string msg;
    run_cpu_ranks(ranks, [&](Communicator& comm) {
      ExpertParallelConfig c;
      c.num_layers = 2, c.num_experts = experts, c.redundant_experts = redundant;
      try {
        ExpertParallel ep(comm, c);
      } catch (const Error& e) {
        if (comm.rank() == 0) msg = e.what();
      }
    });
    return msg;
  };
  EXPECT_NE(message(4, 6, 0).find("do not split evenly"), std::string::npos);
  EXPECT_NE(message(8, 4, 0).find("only 4 routed experts"), std::string::npos);
  EXPECT_NE(message(2, 8, 3).find("8 routed experts + 3 redundant slots do not split evenly over 2"), std::string::npos);
  EXPECT_NE(message(2, 8, -1).find(">= 0"), std::string::npos);
  EXPECT_EQ(message(2, 8, 2), "");
  EXPECT_EQ(message(3, 8, 1), "");
}

TEST(ExpertParallel, LayersOutOfOrderAreErrors) {
  run_cpu_ranks(1, [&](Communicator& comm) {
    ExpertParallelConfig c;
    c.num_layers = 2, c.num_experts = 2;
    ExpertParallel ep(comm, c);
    ep.begin_step();
    const std::vector<float> x(4, 1.0f), w(2, 0.5f);
    const std::vector<int32_t> ids = {0, 1};
    EXPECT_THROW(ep.dispatch(1, x.data(), 2, 2, ids.data(), w.data(), 1), Error);  // layer 0 comes first
    const auto r = ep.dispatch(0, x.data(), 2, 2, ids.data(), w.data(), 1);
    EXPECT_EQ(r.rows(), 2);
    EXPECT_EQ(r.weight, w);
    EXPECT_THROW(ep.dispatch(0, x.data(), 2, 2, ids.data(), w.data(), 1), Error);  // no combine yet
    EXPECT_THROW(ep.begin_step(), Error);                                          // mid-layer
    std::vector<float> back(4);
    ep.combine(r.x.data(), back.data());
    EXPECT_EQ(back, x);
    EXPECT_EQ(ep.next_layer(), 1);
  });
}
