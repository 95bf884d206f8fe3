// Per-sequence DeepSeek-V4 state in PagedRows over one BlockPool arena (on the model's device), and its
// rollback. Per layer: a sliding-window ring of K=V latents; for compressed layers the compressed rows
// and the compressor's carry, a ring of the last positions' kv and gate rows (copies * width each, the
// gate with the position bias added); CSA layers hold the same for the indexer's keys. Rings are
// `rollback` positions longer than the reference needs, so truncate() takes back up to `rollback` tokens
// exactly; the window ring also holds one attention round of a chunk (kRound positions: a chunk's
// rows enter the ring before they are attended, round by round). Rings are allocated at the first
// token; compressed rows grow one per completed group.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "model/causal_lm.h"
#include "model/deepseek_v4/v4_config.h"
#include "model/paged_rows.h"

namespace deepinfer::model {

class V4SequenceState final : public SequenceState {
 public:
  struct Compressor {
    PagedRows carry;  // [2 * carry, copies * width]: kv rows, then gate rows; position p at slot p % carry
    PagedRows rows;   // [groups, width]
    int64_t carry_size = 0, ratio = 0, width = 0, copies = 1;
    float* carry_kv(int64_t pos) { return carry.row_as<float>(pos % carry_size); }
    float* carry_gate(int64_t pos) { return carry.row_as<float>(carry_size + pos % carry_size); }
  };
  struct Layer {
    PagedRows window;  // ring of ring_size() positions, [.., head_dim]
    Compressor kv, index;
  };
  // Positions of a chunk attended per round (the window ring holds one round beyond the window).
  static int64_t round_tokens(const V4Config& c) { return std::max<int64_t>(c.sliding_window, 16); }

  V4SequenceState(const V4Config& config, std::shared_ptr<BlockPool> pool, int64_t rollback);
  int64_t length() const override { return length_; }
  int64_t bytes() const override { return blocks() * pool_->block_bytes(); }
  void reset() override;
  // Takes back the last length()-`length` tokens, down to the longest length reached minus max_rollback().
  void truncate(int64_t length) override;
  int64_t max_rollback() const override { return rollback_; }
  // A copy of `src` at its length: compressed rows shared (append-only, copy on write), rings copied.
  void copy_from(const SequenceState& src) override;
  void advance_to(int64_t length) {
    length_ = length;
    peak_ = std::max(peak_, length);
  }
  void start();  // allocates rings and carries at the first token
  bool started() const { return started_; }
  int64_t blocks() const;
  BlockPool& pool() const { return *pool_; }
  Layer& layer(int64_t l) { return layers_[l]; }
  int64_t ring_size() const { return ring_size_; }
  float* ring_row(int64_t l, int64_t pos) { return layers_[l].window.row_as<float>(pos % ring_size_); }

  // Pool blocks a sequence of this config holds after `tokens` tokens (exact, 0 for 0 tokens).
  static int64_t blocks_for(const V4Config& c, int64_t rollback, int64_t block_bytes, int64_t tokens);

 private:
  std::shared_ptr<BlockPool> pool_;  // declared first: outlives the rows below
  V4Config config_;
  int64_t rollback_, ring_size_;
  int64_t length_ = 0, peak_ = 0;
  bool started_ = false;
  std::vector<Layer> layers_;
};

}  // namespace deepinfer::model
