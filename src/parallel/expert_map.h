// Where one MoE layer's routed experts live over the EP ranks: physical slot p holds logical
// expert phy2log[p] and lives on rank p / slots_per_rank. Built as the plain partition (expert e
// on rank e / (E / ranks)) or from an EPLB placement (redundant replicas of the hot experts).
#pragma once
#include <cstdint>
#include <vector>

#include "parallel/eplb.h"

namespace deepinfer::parallel {

struct ExpertMap {
  int num_ranks = 1;
  int64_t num_experts = 0, slots_per_rank = 0, max_replicas = 0;
  std::vector<int64_t> phy2log;  // [num_ranks * slots_per_rank]
  std::vector<int64_t> log2phy;  // [num_experts][max_replicas], -1 padded
  std::vector<int64_t> logcnt;   // [num_experts]

  static ExpertMap partition(int64_t num_experts, int num_ranks);
  // One layer of an EPLB placement made for num_gpus == num_ranks.
  static ExpertMap from_eplb(const EplbPlacement& placement, int64_t layer, int num_ranks);

  int owner(int64_t slot) const { return static_cast<int>(slot / slots_per_rank); }
  int64_t num_slots() const { return static_cast<int64_t>(phy2log.size()); }
  // The logical expert of each of `rank`'s slots: the expert weights that rank loads.
  std::vector<int64_t> local_experts(int rank) const;
  // The physical slot that serves logical expert `logical` for one token: one of its replicas by a
  // hash of (token_key, logical) only, so a token goes to the same replica whatever batch or rank
  // it is in, and every replica gets an equal share, as EPLB's load / count assumes. (Preferring a
  // replica on the token's own rank saves traffic but skews the shares where a rank holds two
  // replicas of an expert or none: bench_eplb_balance measured 1.075 vs 1.047 worst imbalance.)
  int64_t choose_slot(int64_t logical, uint64_t token_key) const;
};

}  // namespace deepinfer::parallel
