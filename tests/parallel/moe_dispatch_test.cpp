// MoE expert parallelism on CPU ranks: dispatch/combine round trip, EP MoE == single-rank MoE
// bitwise (plain partition and EPLB replicas), skewed routing, the replica choice.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <mutex>

#include "core/error.h"
#include "parallel/cpu_communicator.h"
#include "parallel/moe_dispatch.h"

using namespace deepinfer;
using namespace deepinfer::parallel;

namespace {

constexpr int64_t kHidden = 8;

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

// Tokens of a global batch spread unevenly over ranks (rank r's share grows with r); with 3 or
// more ranks, rank ranks / 2 is idle.
std::vector<int64_t> token_counts(int ranks, int64_t total) {
  std::vector<int64_t> n(ranks, 0);
  const int idle = ranks >= 3 ? ranks / 2 : -1;
  int64_t weights = 0, given = 0;
  for (int r = 0; r < ranks; ++r) weights += r == idle ? 0 : r + 1;
  for (int r = 0; r < ranks; ++r) given += n[r] = r == idle ? 0 : total * (r + 1) / weights;
  n[ranks - 1] += total - given;
  return n;
}

struct Batch {  // one global batch: token rows, routing, weights
  int64_t tokens = 0, topk = 0, experts = 0;
  std::vector<float> x, w;
  std::vector<int32_t> ids;
};

// Random distinct top-k per token (some entries -1), or every token to expert 0 when skewed.
Batch make_batch(int64_t tokens, int64_t topk, int64_t experts, bool skewed, uint64_t seed) {
  Batch b;
  b.tokens = tokens, b.topk = topk, b.experts = experts;
  b.x.resize(tokens * kHidden);
  b.w.resize(tokens * topk);
  b.ids.resize(tokens * topk);
  for (int64_t i = 0; i < tokens * kHidden; ++i) b.x[i] = static_cast<float>(mix(seed + i) % 2001) / 1000.0f - 1.0f;
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t k = 0; k < topk; ++k) {
      b.w[t * topk + k] = static_cast<float>(mix(seed * 31 + t * topk + k) % 1000) / 997.0f;
      int32_t e = -1;
      if (skewed) {
        e = k == 0 ? 0 : -1;
      } else if (mix(seed ^ (t * 131 + k)) % 7 != 0) {  // ~1 in 7 entries unused
        for (uint64_t tries = 0;; ++tries) {
          e = static_cast<int32_t>(mix(seed + t * 977 + k * 13 + tries * 7919) % experts);
          bool dup = false;
          for (int64_t j = 0; j < k; ++j) dup |= b.ids[t * topk + j] == e;
          if (!dup) break;
        }
      }
      b.ids[t * topk + k] = e;
    }
  return b;
}

// The reference expert: row-independent, a fixed-order dot product per output, weight inside.
void expert_fn(int64_t e, const float* x, float rw, float* y) {
  for (int64_t i = 0; i < kHidden; ++i) {
    float acc = 0.0f;
    for (int64_t j = 0; j < kHidden; ++j) acc += static_cast<float>(mix(e * 4096 + i * 64 + j) % 200) / 100.0f * x[j];
    y[i] = std::tanh(acc) * rw;
  }
}

// Single-rank MoE as the model runs it: every routed (token, k) through its expert, then
// ops::Backend::moe_combine's sum, 0 + y[t, 0] + y[t, 1] + ... in top-k order.
std::vector<float> single_rank_moe(const Batch& b, bool weight_inside) {
  std::vector<float> out(b.tokens * kHidden, 0.0f), y(kHidden);
  for (int64_t t = 0; t < b.tokens; ++t)
    for (int64_t k = 0; k < b.topk; ++k) {
      const int32_t e = b.ids[t * b.topk + k];
      if (e < 0) continue;
      const float w = b.w[t * b.topk + k];
      expert_fn(e, b.x.data() + t * kHidden, weight_inside ? w : 1.0f, y.data());
      for (int64_t h = 0; h < kHidden; ++h) out[t * kHidden + h] += weight_inside ? y[h] : w * y[h];
    }
  return out;
}

// Rows [first, first + n) of a [rows][width] array.
template <typename T>
std::vector<T> slice(const std::vector<T>& v, int64_t first, int64_t n, int64_t width) {
  return std::vector<T>(v.begin() + first * width, v.begin() + (first + n) * width);
}

// EP MoE of the same batch on `ranks` CPU ranks; returns the global output, token order.
std::vector<float> ep_moe(const Batch& b, int ranks, const ExpertMap& map, bool weight_inside,
                          std::vector<int64_t>* received_per_rank = nullptr) {
  const std::vector<int64_t> counts = token_counts(ranks, b.tokens);
  std::vector<float> out(b.tokens * kHidden, -1.0f);
  if (received_per_rank) received_per_rank->assign(ranks, 0);
  run_cpu_ranks(ranks, [&](Communicator& c) {
    int64_t first = 0;
    for (int r = 0; r < c.rank(); ++r) first += counts[r];
    const int64_t n = counts[c.rank()];
    const auto x = slice(b.x, first, n, kHidden);
    const auto w = slice(b.w, first, n, b.topk);
    const auto ids = slice(b.ids, first, n, b.topk);
    std::vector<uint64_t> keys(n);
    for (int64_t t = 0; t < n; ++t) keys[t] = first + t;  // the global token index
    const DispatchPlan plan = plan_dispatch(c, map, ids.data(), n, b.topk, keys.data());
    const int64_t m = plan.num_received();
    std::vector<float> rows(m * kHidden), rw(m), y(m * kHidden);
    dispatch(c, plan, x.data(), kHidden * sizeof(float), rows.data());
    dispatch_weights(c, plan, w.data(), rw.data());
    const std::vector<int64_t> local = map.local_experts(c.rank());
    for (int64_t s = 0; s < plan.slots_per_rank; ++s)  // the grouped GEMM's place
      for (int64_t i = plan.expert_offsets[s]; i < plan.expert_offsets[s + 1]; ++i)
        expert_fn(local[s], rows.data() + i * kHidden, weight_inside ? rw[i] : 1.0f, y.data() + i * kHidden);
    std::vector<float> o(n * kHidden);
    combine(c, plan, y.data(), kHidden, weight_inside ? nullptr : w.data(), o.data());
    std::copy(o.begin(), o.end(), out.begin() + first * kHidden);
    if (received_per_rank) (*received_per_rank)[c.rank()] = m;
  });
  return out;
}

// An EPLB placement for `ranks` GPUs from the batch's own expert loads, one replica slot extra per rank.
ExpertMap eplb_map(const Batch& b, int ranks) {
  std::vector<float> load(b.experts, 0.0f);
  for (int32_t e : b.ids)
    if (e >= 0) load[e] += 1.0f;
  const EplbPlacement p = rebalance_experts(load.data(), 1, b.experts, b.experts + ranks, 1, 1, ranks);
  return ExpertMap::from_eplb(p, 0, ranks);
}

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
      EXPECT_EQ(ep_moe(b, ranks, ExpertMap::partition(32, ranks), weight_inside), want);
      EXPECT_EQ(ep_moe(b, ranks, eplb_map(b, ranks), weight_inside), want) << "with EPLB replicas";
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
    EXPECT_EQ(ep_moe(b, ranks, ExpertMap::partition(16, ranks), true, &received), want);
    EXPECT_EQ(received[0], b.tokens);
    for (int r = 1; r < ranks; ++r) EXPECT_EQ(received[r], 0);
    const ExpertMap map = eplb_map(b, ranks);
    EXPECT_EQ(map.logcnt[0], ranks + 1);  // all the redundant slots go to the hot expert
    EXPECT_EQ(ep_moe(b, ranks, map, true, &received), want);
    for (int r = 0; r < ranks; ++r) EXPECT_LT(received[r], b.tokens) << "rank " << r << " got every row";
  }
}

TEST(MoeDispatch, ReplicaChoiceIsPerTokenDeterministicAndSpread) {
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
    const int64_t s = m.choose_slot(0, key, 0);
    EXPECT_EQ(s, m.choose_slot(0, key, 0));
    ++hits[s];
    EXPECT_EQ(m.choose_slot(0, key, 2), 9) << "a replica on the token's own rank";
    EXPECT_EQ(m.choose_slot(5, key, 0), m.log2phy[5 * 3]);
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
