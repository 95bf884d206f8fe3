// Context parallelism inside one process (docs/parallelism.md): a CausalLM over cp rank models, one
// per CPU thread, each loaded with a parallel::ContextParallel over a shared in-process group. The
// engine sees one model: every forward runs on all ranks at once (rank 0 on the caller's thread),
// each rank computing its share of every sequence's tokens; a sequence's state holds each rank's
// copy (every rank keeps the whole state, so any rank could decode). Rank 0's logits are returned.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "model/causal_lm.h"
#include "parallel/context_parallel.h"
#include "parallel/cpu_communicator.h"

namespace deepinfer::model {

class ContextParallelLM final : public CausalLM {
 public:
  // load(cp): one rank's model, with `cp` in its options; called for ranks 0 .. size-1 in order.
  using LoadRank = std::function<std::unique_ptr<CausalLM>(std::shared_ptr<parallel::ContextParallel> cp)>;
  ContextParallelLM(int size, parallel::CpLayout layout, const LoadRank& load);
  ~ContextParallelLM() override;
  int size() const { return static_cast<int>(ranks_.size()); }
  CausalLM& rank(int r) { return *ranks_.at(r); }
  // Rank r's copy of a sequence state of this model (a drafter on rank 0 reads it between forwards).
  static SequenceState& rank_state(SequenceState& state, int r);

  int64_t vocab_size() const override { return ranks_[0]->vocab_size(); }
  std::unique_ptr<SequenceState> new_sequence() const override;
  // A failure on any rank (bad input, state memory) aborts the step on every rank, is rethrown
  // here, and the ranks get a fresh communicator group for the next forward.
  void forward(const ForwardBatch& batch, std::vector<float>& logits, const ForwardTaps* taps = nullptr) override;
  int64_t state_block_bytes() const override { return ranks_[0]->state_block_bytes(); }
  // Rank 0 draws from `pool`; every other rank from a pool of the same size in the same memory.
  void set_state_pool(std::shared_ptr<BlockPool> pool) override;
  int64_t state_blocks_for(int64_t tokens) const override { return ranks_[0]->state_blocks_for(tokens); }
  DeviceMemory* state_memory() const override { return ranks_[0]->state_memory(); }
  void set_batch_invariant(bool on) override;
  bool can_copy_states() const override { return ranks_[0]->can_copy_states(); }

 private:
  void connect();  // a new group and a communicator per rank

  std::vector<std::shared_ptr<parallel::ContextParallel>> cps_;
  std::vector<std::unique_ptr<CausalLM>> ranks_;
  std::unique_ptr<parallel::CpuCommGroup> group_;
  std::vector<std::unique_ptr<parallel::CpuCommunicator>> comms_;
};

}  // namespace deepinfer::model
