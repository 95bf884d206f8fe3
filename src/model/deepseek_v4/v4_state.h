// Per-sequence DeepSeek-V4 state, held in blocks of one BlockPool: per layer a sliding-window ring
// of K=V latents, and for compressed layers the compressed rows plus the compressor's carry (tokens
// of the unfinished group, and for CSA the previous group's first-series halves). CSA layers hold
// the same for the indexer's keys. Fixed-size parts (ring, carry) are allocated at the first token;
// compressed rows grow one per completed group.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "model/causal_lm.h"
#include "model/deepseek_v4/v4_config.h"
#include "model/paged_rows.h"

namespace deepinfer::model {

struct CompressorState {
  PagedRows pending_kv, pending_gate;  // [ratio, copies*width]: the unfinished group, gate with ape added
  PagedRows prev_kv, prev_gate;        // CSA: previous complete group's series A [ratio, width]
  PagedRows rows;                      // compressed rows [groups, width]
  int64_t pending = 0;
  bool has_prev = false;
};

struct V4LayerState {
  PagedRows window;  // ring [sliding_window, head_dim]; slot = position % sliding_window
  CompressorState kv, index;
};

class V4SequenceState final : public SequenceState {
 public:
  V4SequenceState(const V4Config& config, std::shared_ptr<BlockPool> pool);
  int64_t length() const override { return length_; }
  int64_t bytes() const override;
  void reset() override;
  // V4's compressor carry keeps no history yet: only a truncate to the current length is possible.
  void truncate(int64_t length) override;
  int64_t max_rollback() const override { return 0; }
  V4LayerState& layer(int64_t l) { return layers_[l]; }
  void advance(int64_t tokens) { length_ += tokens; }
  // Allocates the fixed-size parts (rings, carries) before the first token.
  void ensure_allocated();

  // Pool blocks a sequence of this config holds after `tokens` tokens (what ensure_allocated and the
  // compressors take), so a caller can reserve exactly before a forward.
  static int64_t blocks_for(const V4Config& config, int64_t block_bytes, int64_t tokens);

 private:
  V4Config config_;
  std::shared_ptr<BlockPool> pool_;  // kept alive while any state uses it
  int64_t length_ = 0;
  bool allocated_ = false;
  std::vector<V4LayerState> layers_;
};

}  // namespace deepinfer::model
