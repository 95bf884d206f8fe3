#include "parallel/eplb.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.h"

namespace deepinfer::parallel {

void balanced_packing(const float* weight, int64_t n, int64_t num_packs, int64_t* pack_index, int64_t* rank_in_pack) {
  check(num_packs > 0 && n % num_packs == 0, "EPLB: ", n, " items do not split evenly into ", num_packs, " packs");
  const int64_t per_pack = n / num_packs;
  if (per_pack == 1) {  // one item per pack: item i is pack i (the reference's shortcut, not a sort)
    for (int64_t i = 0; i < n; ++i) pack_index[i] = i, rank_in_pack[i] = 0;
    return;
  }
  // Heaviest first. Equal loads (the replicas of one expert always tie) come out in the order of
  // torch's default, unstable CPU sort: std::sort on (load, index) pairs comparing loads only, which
  // this does too, so ties break as the reference's do.
  std::vector<std::pair<float, int64_t>> sorted(n);
  for (int64_t i = 0; i < n; ++i) sorted[i] = {weight[i], i};
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<float> load(num_packs, 0.0f);  // fp32 sums, as the reference's tensor additions
  std::vector<int64_t> count(num_packs, 0);
  for (const auto& [item_load, item] : sorted) {
    int64_t best = -1;  // the first lightest pack with room
    for (int64_t p = 0; p < num_packs; ++p)
      if (count[p] < per_pack && (best < 0 || load[p] < load[best])) best = p;
    pack_index[item] = best;
    rank_in_pack[item] = count[best]++;
    load[best] += item_load;
  }
}

void replicate_experts(const float* weight, int64_t num_log, int64_t num_phy, int64_t* phy2log, int64_t* rank,
                       int64_t* logcnt) {
  check(num_phy >= num_log, "EPLB: ", num_phy, " physical slots cannot hold ", num_log, " experts");
  for (int64_t i = 0; i < num_log; ++i) phy2log[i] = i, rank[i] = 0, logcnt[i] = 1;
  for (int64_t i = num_log; i < num_phy; ++i) {
    int64_t best = 0;  // the first expert with the largest fp32 load per replica
    float best_load = weight[0] / static_cast<float>(logcnt[0]);
    for (int64_t j = 1; j < num_log; ++j) {
      const float l = weight[j] / static_cast<float>(logcnt[j]);
      if (l > best_load) best = j, best_load = l;
    }
    phy2log[i] = best;
    rank[i] = logcnt[best]++;
  }
}

namespace {

// inv[perm[i]] = i
std::vector<int64_t> inverse(const std::vector<int64_t>& perm) {
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
  return inv;
}

// One layer of the hierarchical policy: fills phy2log, phyrank [P] and logcnt [E].
void rebalance_layer(const float* w, int64_t E, int64_t P, int64_t G, int64_t N, int64_t M, int64_t* phy2log,
                     int64_t* phyrank, int64_t* logcnt) {
  const int64_t group_size = E / G, groups_per_node = G / N, slots_per_gpu = P / M;
  const int64_t node_experts = E / N, node_slots = P / N, node_gpus = M / N;

  // Step 1: groups -> nodes. log2mlog renumbers experts so that each node's are contiguous.
  std::vector<float> group_load(G, 0.0f);
  for (int64_t g = 0; g < G; ++g)
    for (int64_t j = 0; j < group_size; ++j) group_load[g] += w[g * group_size + j];
  std::vector<int64_t> gpack(G), grank(G);
  balanced_packing(group_load.data(), G, N, gpack.data(), grank.data());
  std::vector<int64_t> log2mlog(E);
  for (int64_t g = 0; g < G; ++g)
    for (int64_t j = 0; j < group_size; ++j)
      log2mlog[g * group_size + j] = (gpack[g] * groups_per_node + grank[g]) * group_size + j;
  const std::vector<int64_t> mlog2log = inverse(log2mlog);

  std::vector<int64_t> mlogcnt(E), pphy2mlog(P);
  std::vector<float> mlog_load(node_experts), phy_load(node_slots);
  std::vector<int64_t> phy2mlog(node_slots), rank(node_slots), pack(node_slots), rank_in_pack(node_slots);
  std::vector<int64_t> phy2pphy(node_slots);
  for (int64_t n = 0; n < N; ++n) {
    // Step 2: replicas inside the node.
    for (int64_t i = 0; i < node_experts; ++i) mlog_load[i] = w[mlog2log[n * node_experts + i]];
    int64_t* cnt = mlogcnt.data() + n * node_experts;
    replicate_experts(mlog_load.data(), node_experts, node_slots, phy2mlog.data(), rank.data(), cnt);
    // Step 3: replicas -> the node's GPUs, each replica carrying its share of the expert's load.
    for (int64_t p = 0; p < node_slots; ++p)
      phy_load[p] = mlog_load[phy2mlog[p]] / static_cast<float>(cnt[phy2mlog[p]]);
    balanced_packing(phy_load.data(), node_slots, node_gpus, pack.data(), rank_in_pack.data());
    for (int64_t p = 0; p < node_slots; ++p) phy2pphy[p] = pack[p] * slots_per_gpu + rank_in_pack[p];
    const std::vector<int64_t> pphy2phy = inverse(phy2pphy);
    for (int64_t q = 0; q < node_slots; ++q) {
      pphy2mlog[n * node_slots + q] = phy2mlog[pphy2phy[q]] + n * node_experts;
      phyrank[n * node_slots + q] = rank[pphy2phy[q]];
    }
  }
  for (int64_t q = 0; q < P; ++q) phy2log[q] = mlog2log[pphy2mlog[q]];
  for (int64_t e = 0; e < E; ++e) logcnt[e] = mlogcnt[log2mlog[e]];
}

}  // namespace

EplbPlacement rebalance_experts(const float* weight, int64_t num_layers, int64_t num_experts,
                                int64_t num_replicas, int64_t num_groups, int64_t num_nodes, int64_t num_gpus) {
  check(num_layers >= 0 && num_experts > 0, "EPLB: weight must be [layers][experts] with experts > 0, got [",
        num_layers, "][", num_experts, "]");
  check(num_groups > 0 && num_nodes > 0 && num_gpus > 0, "EPLB: num_groups, num_nodes and num_gpus must be > 0");
  for (int64_t i = 0; i < num_layers * num_experts; ++i)
    check(std::isfinite(weight[i]) && weight[i] >= 0, "EPLB: load ", weight[i], " at layer ", i / num_experts,
          ", expert ", i % num_experts, " is not a finite non-negative number");
  int64_t G = num_groups, N = num_nodes;
  if (G % N != 0) G = 1, N = 1;  // the global policy
  check(num_experts % G == 0, "EPLB: ", num_experts, " experts do not split into ", G, " groups");
  check(num_gpus % N == 0, "EPLB: ", num_gpus, " GPUs do not split over ", N, " nodes");
  check(num_replicas % num_gpus == 0, "EPLB: ", num_replicas, " replicas do not split over ", num_gpus, " GPUs");
  check(num_replicas >= num_experts, "EPLB: ", num_replicas, " replicas are fewer than the ", num_experts, " experts");

  EplbPlacement r;
  r.num_layers = num_layers, r.num_experts = num_experts, r.num_replicas = num_replicas;
  r.phy2log.resize(num_layers * num_replicas);
  r.logcnt.resize(num_layers * num_experts);
  std::vector<int64_t> phyrank(num_layers * num_replicas);
  for (int64_t l = 0; l < num_layers; ++l)
    rebalance_layer(weight + l * num_experts, num_experts, num_replicas, G, N, num_gpus,
                    r.phy2log.data() + l * num_replicas, phyrank.data() + l * num_replicas,
                    r.logcnt.data() + l * num_experts);
  r.max_replicas = num_layers ? *std::max_element(r.logcnt.begin(), r.logcnt.end()) : 0;
  r.log2phy.assign(num_layers * num_experts * r.max_replicas, -1);
  for (int64_t l = 0; l < num_layers; ++l)
    for (int64_t p = 0; p < num_replicas; ++p) {
      const int64_t e = r.phy2log[l * num_replicas + p], k = phyrank[l * num_replicas + p];
      r.log2phy[(l * num_experts + e) * r.max_replicas + k] = p;
    }
  return r;
}

}  // namespace deepinfer::parallel
