// Expert-parallel load balancing: DeepSeek's EPLB (github.com/deepseek-ai/EPLB, eplb.py), the same
// algorithm and the same tie-breaking, so it reproduces the reference's placements exactly
// (tests/data/eplb/). Spec: ../shared/spec/engine-features.md §6.3.
//
//   hierarchical (num_groups % num_nodes == 0): expert groups -> nodes (balanced packing), replicas
//       inside each node (greedy min-max), replicas -> the node's GPUs (balanced packing);
//   global (otherwise): the same with one group and one node.
#pragma once
#include <cstdint>
#include <vector>

namespace deepinfer::parallel {

// Per layer: which logical expert each physical slot holds, where each logical expert's replicas
// are, and how many it has. Physical slot p lives on GPU p / (num_replicas / num_gpus).
struct EplbPlacement {
  int64_t num_layers = 0, num_experts = 0, num_replicas = 0;
  int64_t max_replicas = 0;       // log2phy's last dimension: the largest logcnt over all layers
  std::vector<int64_t> phy2log;   // [num_layers][num_replicas]
  std::vector<int64_t> log2phy;   // [num_layers][num_experts][max_replicas], -1 padded
  std::vector<int64_t> logcnt;    // [num_layers][num_experts]
};

// weight: [num_layers][num_experts] loads (e.g. token counts); they are read as fp32, as the
// reference does. Throws deepinfer::Error on shapes the algorithm cannot place.
EplbPlacement rebalance_experts(const float* weight, int64_t num_layers, int64_t num_experts,
                                int64_t num_replicas, int64_t num_groups, int64_t num_nodes, int64_t num_gpus);

// The two building blocks, on one row (exposed for tests and for callers that place by hand).
// balanced_packing: n items into num_packs packs of exactly n / num_packs items each, heaviest item
// first into the lightest pack with room. Returns pack index and rank inside the pack per item.
void balanced_packing(const float* weight, int64_t n, int64_t num_packs, int64_t* pack_index, int64_t* rank_in_pack);
// replicate_experts: num_phy >= num_log slots; slot i < num_log holds expert i, each further slot
// the expert with the largest load per replica. phy2log/rank: [num_phy]; logcnt: [num_log].
void replicate_experts(const float* weight, int64_t num_log, int64_t num_phy, int64_t* phy2log, int64_t* rank,
                       int64_t* logcnt);

}  // namespace deepinfer::parallel
