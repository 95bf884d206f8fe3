// The model runner: turns one step's scheduled chunks into the model's flat ForwardBatch — token ids,
// positions, sequence boundaries, each sequence's state — and runs the forward. The scheduler decides
// what advances; the runner says where it lands (positions come from the schedule, and the model
// checks them against its states); the model never re-derives them.
#pragma once
#include <vector>

#include "cache/state_manager.h"
#include "engine/scheduler.h"
#include "model/causal_lm.h"

namespace deepinfer::engine {

class ModelRunner {
 public:
  ModelRunner(model::CausalLM& model, cache::StateManager& states) : model_(model), states_(states) {}

  // Sequence boundaries of the chunks (seq_start); the caller adds the logit rows it wants.
  static void layout(const std::vector<ScheduledChunk>& chunks, model::ForwardBatch& batch);
  // Token ids, positions and states of the chunks: called at launch, when the tokens sampled by the
  // previous step are known. Throws when a chunk's state is not where the chunk starts.
  void fill(const std::vector<ScheduledChunk>& chunks, model::ForwardBatch& batch) const;
  void run(const model::ForwardBatch& batch, std::vector<float>& logits) const { model_.forward(batch, logits); }

 private:
  model::CausalLM& model_;
  cache::StateManager& states_;
};

}  // namespace deepinfer::engine
