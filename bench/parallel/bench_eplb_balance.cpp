// How evenly MoE EP spreads routed rows over GPUs, V4.1-Flash shapes (384 experts, top-6): the
// imbalance of a step = rows on the busiest GPU / mean rows per GPU (the floor is 1.00; a step
// takes as long as its busiest GPU). Expert popularity is Zipf(s) over a random expert order; EPLB
// places from the counts of one window of tokens and is measured on later, fresh steps, through
// the engine's replica choice (ExpertMap::choose_slot).
//   bench_eplb_balance [tokens_per_rank_per_step=128] [steps=50]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "parallel/eplb.h"
#include "parallel/expert_map.h"

using namespace deepinfer::parallel;

namespace {

constexpr int64_t kExperts = 384, kTopk = 6;

struct Router {  // draws each token's top-k distinct experts from a Zipf(s) popularity
  std::vector<double> cdf;
  Router(double s, std::mt19937_64& rng) {
    std::vector<int64_t> order(kExperts);
    for (int64_t i = 0; i < kExperts; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<double> p(kExperts);
    for (int64_t r = 0; r < kExperts; ++r) p[order[r]] = 1.0 / std::pow(double(r + 1), s);
    cdf.resize(kExperts);
    std::partial_sum(p.begin(), p.end(), cdf.begin());
  }
  void route(std::mt19937_64& rng, int32_t* ids) const {
    std::uniform_real_distribution<double> u(0.0, cdf.back());
    for (int64_t k = 0; k < kTopk; ++k)
      for (;;) {
        const auto e = static_cast<int32_t>(std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin());
        if (std::find(ids, ids + k, e) == ids + k) {
          ids[k] = e;
          break;
        }
      }
  }
};

// Mean over steps of max/mean rows per GPU.
double imbalance(const ExpertMap& map, const Router& router, int64_t tokens_per_rank, int steps, std::mt19937_64& rng) {
  const int gpus = map.num_ranks;
  double sum = 0;
  std::vector<int32_t> ids(kTopk);
  uint64_t key = 0;
  for (int s = 0; s < steps; ++s) {
    std::vector<int64_t> rows(gpus, 0);
    for (int64_t t = 0; t < tokens_per_rank * gpus; ++t, ++key) {
      router.route(rng, ids.data());
      for (int32_t e : ids) ++rows[map.owner(map.choose_slot(e, key))];
    }
    const double mean = double(tokens_per_rank * gpus * kTopk) / gpus;
    sum += *std::max_element(rows.begin(), rows.end()) / mean;
  }
  return sum / steps;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t tokens_per_rank = argc > 1 ? std::atoll(argv[1]) : 128;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 50;
  std::printf("EP imbalance (busiest GPU rows / mean), %lld experts top-%lld, %lld tokens/rank/step, %d steps; floor 1.00\n",
              (long long)kExperts, (long long)kTopk, (long long)tokens_per_rank, steps);
  std::printf("%6s %6s | %9s | %-28s\n", "EP", "zipf s", "partition", "EPLB, redundant slots per GPU: 0 / 1 / 2 / 4");
  for (int gpus : {4, 8, 16, 64})
    for (double s : {0.0, 0.6, 1.0, 1.2}) {
      std::mt19937_64 rng(2026 + gpus * 10 + int(s * 10));
      const Router router(s, rng);
      // EPLB's statistics: expert counts of one window of 4096 tokens per rank.
      std::vector<float> load(kExperts, 0.0f);
      std::vector<int32_t> ids(kTopk);
      for (int64_t t = 0; t < 4096 * gpus; ++t) {
        router.route(rng, ids.data());
        for (int32_t e : ids) load[e] += 1.0f;
      }
      std::printf("%6d %6.1f | %9.3f |", gpus, s,
                  imbalance(ExpertMap::partition(kExperts, gpus), router, tokens_per_rank, steps, rng));
      for (int redundant : {0, 1, 2, 4}) {
        const EplbPlacement p = rebalance_experts(load.data(), 1, kExperts, kExperts + redundant * gpus, 1, 1, gpus);
        std::printf(" %6.3f", imbalance(ExpertMap::from_eplb(p, 0, gpus), router, tokens_per_rank, steps, rng));
      }
      std::printf("\n");
    }
  return 0;
}
