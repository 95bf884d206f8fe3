// MoE expert parallelism on CPU ranks: dispatch/combine round trip, EP MoE == single-rank MoE
// bitwise (plain partition and EPLB replicas), skewed routing, the replica choice.
#include <gtest/gtest.h>

#include <map>

#include "core/error.h"
#include "moe_cases.h"
#include "parallel/cpu_communicator.h"

using namespace deepinfer;
using namespace deepinfer::parallel;
using namespace deepinfer::parallel::moe_cases;

namespace {
const RankRunner cpu_ranks = [](int n, const std::function<void(Communicator&)>& fn) { run_cpu_ranks(n, fn); };
}  // namespace

TEST(MoeDispatch, RoundTripIsTheIdentity) {
  for (int ranks : {1, 2, 4, 8}) {
    SCOPED_TRACE("ranks " + std::to_string(ranks));
    const Batch b = make_batch(37, 4, 16, false, 7);
    const ExpertMap map = ExpertMap::partition(16, ranks);
    const std::vector<int64_t> counts = token_counts(ranks, b.tokens);
    run_cpu_ranks(ranks, [&](Communicator& c) {
      int64_t first = 0;
      for (int r = 0; r < c.rank(); ++r) first += counts[r];
      const int64_t n = counts[c.rank()];
      auto x = slice(b.x, first, n, kHidden);
      for (int64_t t = 0; t < n; ++t) x[t * kHidden] = static_cast<float>(c.rank() * 1000 + t);  // a tag
      const auto ids = slice(b.ids, first, n, b.topk);
      const DispatchPlan plan = plan_dispatch(c, map, ids.data(), n, b.topk);
      std::vector<float> rows(plan.num_received() * kHidden);
      dispatch(c, plan, x.data(), kHidden * sizeof(float), rows.data());
      // Every row in slot s's group is a token routed to that slot's expert, ordered by (source, token).
      const std::vector<int64_t> local = map.local_experts(c.rank());
      for (int64_t s = 0; s < plan.slots_per_rank; ++s)
        for (int64_t i = plan.expert_offsets[s]; i < plan.expert_offsets[s + 1]; ++i) {
          const int64_t tag = static_cast<int64_t>(rows[i * kHidden]), src = tag / 1000, t = tag % 1000;
          int64_t src_first = 0;
          for (int r = 0; r < src; ++r) src_first += counts[r];
          const int32_t* tid = b.ids.data() + (src_first + t) * b.topk;
          EXPECT_NE(std::find(tid, tid + b.topk, local[s]), tid + b.topk) << "slot " << s << " row " << i;
          if (i > plan.expert_offsets[s]) {
            EXPECT_LT(rows[(i - 1) * kHidden], rows[i * kHidden]);
          }
        }
      std::vector<float> back(n * b.topk * kHidden);
      combine_rows(c, plan, rows.data(), kHidden, back.data());  // the identity expert
      for (int64_t t = 0; t < n; ++t)
        for (int64_t k = 0; k < b.topk; ++k)
          for (int64_t h = 0; h < kHidden; ++h)
            ASSERT_EQ(back[(t * b.topk + k) * kHidden + h], ids[t * b.topk + k] < 0 ? 0.0f : x[t * kHidden + h]);
      // top-1 with unit weights: combine gives x back.
      std::vector<int32_t> top1(n);
      for (int64_t t = 0; t < n; ++t) top1[t] = static_cast<int32_t>((first + t) % 16);
      const DispatchPlan p1 = plan_dispatch(c, map, top1.data(), n, 1);
      std::vector<float> r1(p1.num_received() * kHidden), out(n * kHidden), ones(n, 1.0f);
      dispatch(c, p1, x.data(), kHidden * sizeof(float), r1.data());
      combine(c, p1, r1.data(), kHidden, ones.data(), out.data());
      EXPECT_EQ(out, x);
    });
  }
}

TEST(MoeDispatch, EpMoeEqualsSingleRankBitwise) {
  const Batch b = make_batch(200, 6, 32, false, 11);
  for (bool weight_inside : {true, false}) {
    const std::vector<float> want = single_rank_moe(b, weight_inside);
    for (int ranks : {1, 2, 4, 8}) {
      SCOPED_TRACE("ranks " + std::to_string(ranks) + (weight_inside ? ", weight inside" : ", weight in combine"));
      EXPECT_EQ(ep_moe(b, ranks, ExpertMap::partition(32, ranks), weight_inside, cpu_ranks), want);
      EXPECT_EQ(ep_moe(b, ranks, eplb_map(b, ranks), weight_inside, cpu_ranks), want) << "with EPLB replicas";
    }
  }
}

// Every token to expert 0: one rank gets all rows with the plain partition; EPLB spreads expert 0
// over replicas on every rank. The results stay those of one rank.
TEST(MoeDispatch, SkewedRoutingAllTokensToOneExpert) {
  const Batch b = make_batch(120, 2, 16, true, 3);
  const std::vector<float> want = single_rank_moe(b, true);
  for (int ranks : {2, 4, 8}) {
    SCOPED_TRACE("ranks " + std::to_string(ranks));
    std::vector<int64_t> received;
    EXPECT_EQ(ep_moe(b, ranks, ExpertMap::partition(16, ranks), true, cpu_ranks, &received), want);
    EXPECT_EQ(received[0], b.tokens);
    for (int r = 1; r < ranks; ++r) EXPECT_EQ(received[r], 0);
    const ExpertMap map = eplb_map(b, ranks);
    EXPECT_EQ(map.logcnt[0], ranks + 1);  // all the redundant slots go to the hot expert
    EXPECT_EQ(ep_moe(b, ranks, map, true, cpu_ranks, &received), want);
    for (int r = 0; r < ranks; ++r) EXPECT_LT(received[r], b.tokens) << "rank " << r << " got every row";
  }
}

TEST(MoeDispatch, ReplicaChoiceIsPerTokenDeterministicAndEven) {
  // Expert 0 with replicas on ranks 1, 2 and 3 (slots 4, 9, 14), four slots per rank.
  ExpertMap m;
  m.num_ranks = 4, m.num_experts = 14, m.slots_per_rank = 4, m.max_replicas = 3;
  m.phy2log.resize(16);
  m.log2phy.assign(14 * 3, -1);
  m.logcnt.assign(14, 1);
  int64_t next = 1;
  for (int64_t p = 0; p < 16; ++p) {
    if (p == 4 || p == 9 || p == 14) continue;
    m.phy2log[p] = next, m.log2phy[next * 3] = p, ++next;
  }
  for (int64_t k = 0; k < 3; ++k) m.phy2log[4 + 5 * k] = 0, m.log2phy[k] = 4 + 5 * k;
  m.logcnt[0] = 3;
  std::map<int64_t, int> hits;
  for (uint64_t key = 0; key < 3000; ++key) {
    const int64_t s = m.choose_slot(0, key);
    EXPECT_EQ(s, m.choose_slot(0, key));
    ++hits[s];
    EXPECT_EQ(m.choose_slot(5, key), m.log2phy[5 * 3]);
  }
  ASSERT_EQ(hits.size(), 3u);
  for (auto& [slot, n] : hits) EXPECT_GT(n, 800) << "slot " << slot;  // 1000 each if perfectly even
}

TEST(MoeDispatch, BadRoutingIsAnError) {
  const ExpertMap map = ExpertMap::partition(8, 2);
  EXPECT_THROW(ExpertMap::partition(9, 2), Error);
  const auto plan_on_two = [&](std::vector<int32_t> ids) {
    run_cpu_ranks(2, [&](Communicator& c) { plan_dispatch(c, map, ids.data(), 1, 2); });
  };
  EXPECT_THROW(plan_on_two({3, 3}), Error);   // the same expert twice
  EXPECT_THROW(plan_on_two({1, 8}), Error);   // no expert 8
  EXPECT_NO_THROW(plan_on_two({-1, -1}));     // an idle token
  EXPECT_THROW(run_cpu_ranks(4, [&](Communicator& c) { plan_dispatch(c, map, nullptr, 0, 2); }), Error);
}
