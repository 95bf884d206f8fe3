// MoE expert parallelism as the one object a model's MoE layers call (spec §6.1, §6.3): where each
// layer's routed experts live over the EP ranks, the dispatch / combine of one layer's tokens, the
// router's expert-load counters and the run-time EPLB rebalance. The model keeps the expert math
// (its grouped GEMMs over the slot groups dispatch returns); this object holds the communication.
//
// Every rank runs the same layers in the same order, once per step (an idle rank with zero
// tokens), so the collectives line up: begin_step, then for each EP layer dispatch + combine.
// Rows travel as bf16 (the model's MoE input and expert outputs hold bf16 values), so the
// exchange is exact and EP logits equal one rank's bitwise.
#pragma once
#include <cstdint>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/expert_map.h"
#include "parallel/moe_dispatch.h"

namespace deepinfer::parallel {

struct ExpertParallelConfig {
  int64_t num_layers = 0;          // EP layers (the model's MoE layers 0 .. num_layers-1)
  int64_t num_experts = 0;         // routed experts per layer
  int64_t redundant_experts = 0;   // extra physical slots over all ranks (experts + these split over the ranks)
  int64_t rebalance_interval = 0;  // steps between EPLB rebalances from the counted loads (0: never)
};

class ExpertParallel {
 public:
  // Checks the sizes (experts split over the ranks, no more ranks than experts) and places the
  // experts: the plain partition, or with redundant slots EPLB's placement of uniform loads.
  ExpertParallel(Communicator& comm, const ExpertParallelConfig& config);

  Communicator& comm() const { return comm_; }
  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  const ExpertParallelConfig& config() const { return config_; }
  const ExpertMap& map(int64_t layer) const { return maps_.at(layer); }
  // The logical experts whose weights this rank needs at `layer` (ascending, each once).
  std::vector<int64_t> held_experts(int64_t layer) const;

  // Start of a step (collective). Every rebalance_interval steps: all-gathers the counted loads,
  // runs EPLB and installs the new placement; returns true when the placement changed (the model
  // then loads the experts it now holds and frees the others before it dispatches).
  bool begin_step();
  int64_t steps() const { return steps_; }
  int64_t rebalances() const { return rebalances_; }
  // Tokens routed to each logical expert since the last rebalance, summed over this rank's
  // tokens: [num_layers][num_experts].
  const std::vector<int64_t>& local_load() const { return load_; }

  // One EP layer's tokens -> the ranks holding their experts (collective). x: [n][hidden] bf16
  // values; topk_ids / topk_weights: [n][topk]. Layers come in order 0, 1, ... each step.
  struct Received {
    std::vector<float> x;              // [rows][hidden], grouped by local slot
    std::vector<float> weight;         // [rows] each row's routing weight
    std::vector<int64_t> offsets;      // [slots + 1]: slot s's rows are [offsets[s], offsets[s+1])
    std::vector<int64_t> expert;       // [slots]: the logical expert of each local slot
    int64_t rows() const { return offsets.empty() ? 0 : offsets.back(); }
  };
  Received dispatch(int64_t layer, const float* x, int64_t n, int64_t hidden, const int32_t* topk_ids,
                    const float* topk_weights, int64_t topk);
  // The experts' outputs y [received rows][hidden] (bf16 values) back to their tokens (collective):
  // rows [n][topk][hidden], each (token, k)'s expert output, zeros where not routed.
  void combine(const float* y, float* rows);
  // The layer the next dispatch must be for, and whether a dispatch waits for its combine.
  int64_t next_layer() const { return next_layer_; }
  bool in_layer() const { return pending_; }

 private:
  void place(const std::vector<float>& weight);  // EPLB over [layers][experts] loads

  Communicator& comm_;
  ExpertParallelConfig config_;
  int64_t slots_per_rank_ = 0;
  std::vector<ExpertMap> maps_;
  std::vector<int64_t> load_;
  int64_t steps_ = 0, rebalances_ = 0, next_layer_ = 0, hidden_ = 0;
  bool pending_ = false;
  DispatchPlan plan_;
};

}  // namespace deepinfer::parallel
