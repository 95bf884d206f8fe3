// The interface the engine drives: a causal language model over flat, variable-length batches.
// The model owns no per-request memory of its own; every sequence's state lives in a
// SequenceState object created by the model and owned by the caller (the engine's state manager).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/block_pool.h"

namespace deepinfer::model {

// Per-sequence model state (V4: window rings, compressed rows, indexer keys, compressor carry).
class SequenceState {
 public:
  virtual ~SequenceState() = default;
  virtual int64_t length() const = 0;          // tokens consumed so far (next token's position)
  virtual int64_t bytes() const = 0;           // memory held now
  virtual void reset() = 0;                    // back to empty (frees memory)
};

// One flat forward: sequence s contributes tokens token_ids[seq_start[s] .. seq_start[s+1]),
// continuing states[s] from position states[s]->length(). Sequences are independent.
struct ForwardBatch {
  std::vector<int32_t> token_ids;
  std::vector<int32_t> seq_start;              // size num_sequences + 1, seq_start[0] == 0
  std::vector<SequenceState*> states;          // size num_sequences
  std::vector<int32_t> logit_rows;             // flat token indices whose logits are returned
};

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  virtual int64_t vocab_size() const = 0;
  virtual std::unique_ptr<SequenceState> new_sequence() const = 0;
  // Advances every state by its tokens and writes logits [logit_rows.size(), vocab] (row-major fp32).
  virtual void forward(const ForwardBatch& batch, std::vector<float>& logits) = 0;

  // State memory comes in fixed-size blocks of one pool (the engine sizes it by its memory budget).
  virtual int64_t state_block_bytes() const = 0;
  // Sequences created afterwards draw their blocks from `pool` (block size state_block_bytes()).
  virtual void set_state_pool(std::shared_ptr<BlockPool> pool) = 0;
  // Exactly how many blocks one sequence holds once it has consumed `tokens` tokens (monotone), so a
  // scheduler can reserve before a forward and the forward never runs out.
  virtual int64_t state_blocks_for(int64_t tokens) const = 0;
};

}  // namespace deepinfer::model

namespace deepinfer::model {

// Feeds ids[cuts[0], cuts.back()) to `state` (a fresh sequence when null) in steps [cuts[i], cuts[i+1])
// and returns the logits of every fed position: one prefill, chunks or prefix-then-decode, depending on
// the cuts. Used for scoring (the CLI) and golden checks.
std::vector<float> logits_in_steps(CausalLM& lm, const std::vector<int32_t>& ids, const std::vector<int64_t>& cuts,
                                   SequenceState* state = nullptr);

}  // namespace deepinfer::model
