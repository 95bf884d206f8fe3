// The interface the engine drives: a causal language model over flat, variable-length batches.
// The model owns no per-request memory of its own; every sequence's state lives in a
// SequenceState object created by the model and owned by the caller (the engine's state manager).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/block_pool.h"
#include "core/device.h"
#include "core/error.h"
#include "ops/token_draw.h"

namespace deepinfer::model {

// Per-sequence model state (window rings, compressed rows, indexer keys, compressor carry, ...).
class SequenceState {
 public:
  virtual ~SequenceState() = default;
  virtual int64_t length() const = 0;          // tokens consumed so far (next token's position)
  virtual int64_t bytes() const = 0;           // memory held now
  virtual void reset() = 0;                    // back to empty (frees memory)
  // Takes back tokens so that length() == `length`: the state is then exactly as it was when it last
  // had that length (rejected draft tokens). Down to the longest length reached minus max_rollback();
  // further is an error.
  virtual void truncate(int64_t length) = 0;
  virtual int64_t max_rollback() const = 0;
  // Becomes exactly `src` (a state of the same model and pool): what is append-only is shared by
  // reference (copy on write), the rest copied. Prefix caching keeps such copies of states at prefix
  // boundaries and restores new sequences from them. Models whose CausalLM::can_copy_states() is
  // false do not implement it.
  virtual void copy_from(const SequenceState&) {
    throw Error("this model's sequence states cannot be copied (it has no prefix caching)");
  }
};

// Logit rows drawn on the model's device instead of returned (CausalLM::draws_on_device): logit row
// rows[i] (an index into ForwardBatch::logit_rows) gets a token as ops' draw_tokens draws it, under
// param[i] (sampling::draw_params: temperature, min-p, top-k, top-p, noise key, its entries of `adjust`
// and its row of `masks`), and its log-probability; the forward's logits then hold only the other rows,
// in order.
struct RowDraws {
  std::vector<int32_t> rows;
  std::vector<ops::DrawRow> param;
  std::vector<ops::DrawAdjust> adjust;  // bias / min_tokens / penalty entries of every row
  std::vector<uint32_t> masks;          // allowed-token bitmasks, (vocab + 31) / 32 words a row
  std::vector<int32_t> token;           // out: a token, or ops::kDrawNaN / kDrawNone
  std::vector<float> logprob;           // out
};

// One flat forward: sequence s contributes tokens token_ids[seq_start[s] .. seq_start[s+1]) at
// positions positions[seq_start[s] ..] (consecutive, from states[s]->length()), continuing states[s].
// Sequences are independent. The engine's ModelRunner builds it; positions may be left empty (then
// they are taken from the states).
struct ForwardBatch {
  std::vector<int32_t> token_ids;
  std::vector<int32_t> seq_start;              // size num_sequences + 1, seq_start[0] == 0
  std::vector<SequenceState*> states;          // size num_sequences
  std::vector<int32_t> logit_rows;             // flat token indices whose logits are returned
  std::vector<int64_t> positions;              // one per token, or empty
  // Input rows that replace tokens' embeddings (V4.1 image spans: the aligner rows and the learned
  // delimiters): token embed_tokens[i] (a flat index into token_ids) gets row i of embed_rows
  // [embed_tokens.size(), dim] in every stream.
  std::vector<int32_t> embed_tokens;
  std::vector<float> embed_rows;
  RowDraws* draws = nullptr;                   // rows drawn on the device (null: none), filled by the forward
};

// Observation points inside a forward (tests, teacher forcing, analysis). Each is optional; the
// arrays are the flat batch's rows in batch order. A model calls the taps it has.
struct ForwardTaps {
  // streams X [rows, hc, dim] and the pre-mix [rows, hc] at each backbone layer's input (after its
  // Engram); both may be overwritten (teacher forcing).
  std::function<void(int64_t layer, std::vector<float>& X, std::vector<float>& pre_mix)> on_layer_input;
  // the final collapsed hidden state and its normalized form, [rows, dim] each
  std::function<void(const std::vector<float>& collapsed, const std::vector<float>& normed)> on_final;
  std::function<void(int64_t layer, std::vector<float>& X)> on_engram_input;  // streams before an Engram
  // Engram hash ids [tokens, n_engram_layers, cols] of one sequence's tokens from `first_pos`
  std::function<void(int64_t first_pos, const std::vector<int64_t>& ids)> on_hash_ids;
  // router scores [rows, E] before the bias, selected experts [rows, k] and their weights [rows, k]
  std::function<void(int64_t layer, const std::vector<float>& scores, const std::vector<int32_t>& experts,
                     const std::vector<float>& weights)>
      on_route;
  // named points inside a layer (V4.1: "attn_pre", "attn_in", "attn_normed", "q", "window_kv", "heads_out",
  // "attn_out", "after_attn", "ffn_pre", "ffn_in", "ffn_normed"), in the order the forward reaches them: where two
  // backends part within a layer (tests/model/test_v41_cuda.cpp)
  std::function<void(int64_t layer, const char* point, const std::vector<float>& values)> on_point;
};

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  virtual int64_t vocab_size() const = 0;
  virtual std::unique_ptr<SequenceState> new_sequence() const = 0;
  // Advances every state by its tokens and writes logits [logit_rows.size(), vocab] (row-major fp32).
  virtual void forward(const ForwardBatch& batch, std::vector<float>& logits, const ForwardTaps* taps = nullptr) = 0;

  // State memory comes in fixed-size blocks of one pool (the engine sizes it by its memory budget).
  virtual int64_t state_block_bytes() const = 0;
  // Sequences created afterwards draw their blocks from `pool` (block size state_block_bytes()).
  virtual void set_state_pool(std::shared_ptr<BlockPool> pool) = 0;
  // Exactly how many blocks one sequence holds once it has consumed `tokens` tokens (monotone), so a
  // scheduler can reserve before a forward and the forward never runs out.
  virtual int64_t state_blocks_for(int64_t tokens) const = 0;
  // Where the state arena must live (the model's device; null: host memory).
  virtual DeviceMemory* state_memory() const { return nullptr; }
  // Batch-invariant kernels on the model's backend (for every model on that device).
  virtual void set_batch_invariant(bool on) { (void)on; }
  // Device ms the model's device sat idle between the previous forward's end and the last forward's
  // beginning (model/idle_gap.h; -1 where unknown: the first forward, host memory).
  virtual double idle_before_last_forward_ms() { return -1; }
  // Whether forward() honours ForwardBatch::draws (else the caller samples every row on the host).
  virtual bool draws_on_device() const { return false; }
  // Whether its states implement SequenceState::copy_from (prefix caching needs it).
  virtual bool can_copy_states() const { return false; }
};

// Feeds ids[cuts[0], cuts.back()) to `state` (a fresh sequence when null) in steps [cuts[i], cuts[i+1])
// and returns the logits of every fed position: one prefill, chunks or prefix-then-decode, depending on
// the cuts. Used for scoring (the CLI) and golden checks.
// rows: input rows replacing the embeddings of some positions (image spans), [positions.size(), dim].
struct InputRows {
  std::vector<int64_t> positions;
  std::vector<float> rows;
};
std::vector<float> logits_in_steps(CausalLM& lm, const std::vector<int32_t>& ids, const std::vector<int64_t>& cuts,
                                   SequenceState* state = nullptr, const ForwardTaps* taps = nullptr,
                                   const InputRows* rows = nullptr);

// Checks a batch's shape against the model: sequence boundaries, ids inside the vocabulary, logit rows
// inside the batch, positions (when given) consecutive from each state's length. Returns the positions.
std::vector<int64_t> check_batch(const ForwardBatch& batch, int64_t vocab_size);

}  // namespace deepinfer::model
