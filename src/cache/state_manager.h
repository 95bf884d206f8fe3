// The state manager: owns every sequence's model state, which lives in fixed-size blocks of one
// BlockPool sized by the memory budget. The scheduler asks it to reserve a sequence's blocks before
// the sequence advances (the model says exactly how many a length takes); when the budget is spent,
// the scheduler preempts a sequence (release + recompute). Released states return their blocks to
// the pool when they are reset, and the state objects are kept for reuse (docs/engine.md).
// With prefix caching on, it also holds the prefix cache's snapshots in the same budget: they are
// evicted (least recently used first) before a reservation fails (docs/prefix_caching.md).
#pragma once
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "cache/prefix_cache.h"
#include "model/causal_lm.h"

namespace deepinfer::cache {

class StateManager {
 public:
  // Creates the pool of num_blocks blocks (<= 0: unlimited) and hands it to the model.
  StateManager(model::CausalLM& model, int64_t num_blocks);

  int64_t total_blocks() const { return total_blocks_; }
  int64_t free_blocks() const { return total_blocks_ <= 0 ? INT64_MAX : total_blocks_ - used_blocks(); }
  int64_t used_blocks() const { return used_blocks_ + cached_blocks(); }  // sequences' and snapshots'
  int64_t sequence_blocks() const { return used_blocks_; }                // reserved for live sequences
  int64_t cached_blocks() const { return prefix_ ? prefix_->blocks() : 0; }
  // blocks the pool has handed out (retiring states and prefix-cache snapshots too)
  int64_t pool_blocks() const { return pool_->used(); }
  int64_t num_states() const { return static_cast<int64_t>(seqs_.size()); }
  int64_t blocks_for(int64_t tokens) const { return model_.state_blocks_for(tokens); }
  bool can_ever_hold(int64_t tokens) const { return total_blocks_ <= 0 || blocks_for(tokens) <= total_blocks_; }

  // Makes sure sequence `id` holds blocks for `tokens` tokens; false (nothing changes but evicted
  // snapshots) if the budget cannot cover it. Creates the sequence's state on first use.
  bool reserve(int64_t id, int64_t tokens);

  // Prefix caching in blocks of block_tokens tokens (the model must be able to copy its states).
  void enable_prefix_cache(int64_t block_tokens);
  PrefixCache* prefix_cache() const { return prefix_.get(); }  // null when off
  // Keeps a snapshot of sequence id's state, whose length must be prefix.size(); false (nothing kept)
  // when the cache has one already or the budget has no room for it even after evicting older ones.
  // Both this and restore() allocate at once: call them after recycle(), with no forward in flight
  // (released states hold their blocks until then, though the budget counts them free).
  bool snapshot(int64_t id, std::span<const int32_t> prefix);
  // Sequence id's state becomes a copy of `snap`.
  void restore(int64_t id, const model::SequenceState& snap);
  int64_t evictions() const { return evictions_; }
  // Returns the sequence's blocks at once. Its state object retires: a forward in flight may
  // still use it, so it is reset (and kept for reuse) only at recycle().
  void release(int64_t id);
  // Resets retired states for reuse; call when no forward is in flight.
  void recycle();
  model::SequenceState* state(int64_t id) const;
  bool holds(int64_t id) const { return seqs_.count(id) > 0; }
  int64_t held_blocks(int64_t id) const;
  int64_t state_bytes() const;            // what the model's states hold right now

 private:
  struct Entry {
    std::unique_ptr<model::SequenceState> state;
    int64_t blocks = 0;
  };
  bool fits(int64_t more_blocks);  // within the budget, evicting snapshots if need be
  void check_recycled(const char* what) const;  // no released state still holds blocks
  const model::CausalLM& model_;
  int64_t total_blocks_;
  std::shared_ptr<BlockPool> pool_;
  int64_t used_blocks_ = 0;
  std::unordered_map<int64_t, Entry> seqs_;
  std::vector<std::unique_ptr<model::SequenceState>> retiring_, spare_;
  std::unique_ptr<PrefixCache> prefix_;
  int64_t evictions_ = 0;
};

// Blocks that fit in `bytes` given the measured bytes of one block of state (0 bytes: unlimited).
int64_t blocks_for_budget(int64_t bytes, int64_t bytes_per_block);

}  // namespace deepinfer::cache
