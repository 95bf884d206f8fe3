#include "parallel/expert_map.h"

#include "core/error.h"

namespace deepinfer::parallel {

ExpertMap ExpertMap::partition(int64_t num_experts, int num_ranks) {
  check(num_ranks > 0 && num_experts > 0 && num_experts % num_ranks == 0, "expert parallelism: ", num_experts,
        " experts do not split evenly over ", num_ranks, " ranks");
  ExpertMap m;
  m.num_ranks = num_ranks, m.num_experts = num_experts, m.slots_per_rank = num_experts / num_ranks;
  m.max_replicas = 1;
  m.phy2log.resize(num_experts);
  m.log2phy.resize(num_experts);
  m.logcnt.assign(num_experts, 1);
  for (int64_t e = 0; e < num_experts; ++e) m.phy2log[e] = m.log2phy[e] = e;
  return m;
}

ExpertMap ExpertMap::from_eplb(const EplbPlacement& p, int64_t layer, int num_ranks) {
  check(layer >= 0 && layer < p.num_layers, "expert parallelism: layer ", layer, " is outside the EPLB placement's ",
        p.num_layers, " layers");
  check(num_ranks > 0 && p.num_replicas % num_ranks == 0, "expert parallelism: ", p.num_replicas,
        " EPLB replicas do not split evenly over ", num_ranks, " ranks");
  ExpertMap m;
  m.num_ranks = num_ranks, m.num_experts = p.num_experts, m.slots_per_rank = p.num_replicas / num_ranks;
  m.max_replicas = p.max_replicas;
  const auto row = [](const std::vector<int64_t>& v, int64_t i, int64_t n) {
    return std::vector<int64_t>(v.begin() + i * n, v.begin() + (i + 1) * n);
  };
  m.phy2log = row(p.phy2log, layer, p.num_replicas);
  m.log2phy = row(p.log2phy, layer, p.num_experts * p.max_replicas);
  m.logcnt = row(p.logcnt, layer, p.num_experts);
  return m;
}

std::vector<int64_t> ExpertMap::local_experts(int rank) const {
  check(rank >= 0 && rank < num_ranks, "expert parallelism: rank ", rank, " is outside ", num_ranks, " ranks");
  return std::vector<int64_t>(phy2log.begin() + rank * slots_per_rank, phy2log.begin() + (rank + 1) * slots_per_rank);
}

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

int64_t ExpertMap::choose_slot(int64_t logical, uint64_t token_key) const {
  check(logical >= 0 && logical < num_experts, "expert parallelism: expert id ", logical, " is outside [0, ",
        num_experts, ")");
  const int64_t* replicas = log2phy.data() + logical * max_replicas;
  const int64_t count = logcnt[logical];
  if (count == 1) return replicas[0];
  return replicas[splitmix64(token_key ^ splitmix64(static_cast<uint64_t>(logical))) % count];
}

}  // namespace deepinfer::parallel
