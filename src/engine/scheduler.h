// Chooses, each step, which sequences advance by how many tokens: running sequences first (decode
// tokens and prefill chunks alike), then waiting ones in arrival order, under a token budget and a
// sequence cap. Room for state comes from the state manager; when it runs out, the lowest-priority
// running sequence is preempted (its state released, recomputed when it is admitted again).
// With prefix caching, a sequence admitted from the start begins after the longest cached prefix of
// its prompt, and its prefill chunks end where its state is to be snapshotted (plan_prefix). With SWA
// bounded replay, both lie at or before the position its decoder layers start at.
#pragma once
#include <atomic>
#include <cstdint>
#include <deque>
#include <vector>

#include "cache/state_manager.h"
#include "engine/sequence.h"

namespace deepinfer::engine {

struct SchedulerConfig {
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;
  int64_t max_model_len = 4096;
  // Batch-invariant mode: prefill chunks end at multiples of this, whatever else is scheduled,
  // so a sequence's chunking (and so its numerics) never depends on its neighbours.
  bool batch_invariant = false;
  int invariant_chunk = 256;
  // SWA bounded replay (engine/decoder_replay.h): a prefill from 0 of more tokens runs the decoder
  // layers on its last replay_keep only (0: the model does not cut).
  int64_t replay_keep = 0;
};

struct ScheduledChunk {
  Sequence* seq = nullptr;
  int64_t start = 0;                      // first position (== the state's length at launch)
  int32_t count = 0;
  bool sample = false;                    // the chunk ends at the last known token: draw the next
  std::vector<int32_t> drafts;            // draft tokens verified after the chunk's tokens (speculative)
  int32_t width() const { return count + static_cast<int32_t>(drafts.size()); }  // tokens in the forward
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, cache::StateManager& states) : config_(config), states_(states) {}

  void add(Sequence* seq);                // joins the waiting queue
  void remove(Sequence* seq);             // finished or aborted: leaves the queues, returns its state
  // preempt() from outside (a failed batch): back to the front of the waiting queue.
  void preempt(Sequence* seq, bool isolate = false);
  void end_isolation(Sequence* seq);      // its isolated run succeeded
  std::vector<ScheduledChunk> schedule();
  // Sequences that outgrew the whole state budget in the last schedule(): the engine finishes
  // them ("length") instead of letting them wait forever.
  std::vector<Sequence*> take_out_of_room() { return std::move(out_of_room_); }

  bool empty() const { return waiting_.empty() && running_.empty(); }
  size_t num_running() const { return running_.size(); }
  size_t num_waiting() const { return waiting_.size(); }
  int64_t num_preemptions() const { return preemptions_.load(std::memory_order_relaxed); }  // any thread
  const SchedulerConfig& config() const { return config_; }

 private:
  int32_t chunk_size(const Sequence& seq, int64_t budget) const;
  // A sequence about to be admitted from position 0: the cached prefix it starts after (num_computed,
  // restore_from) and where it is snapshotted (snapshot_at); undone by forget_prefix if not admitted.
  void plan_prefix(Sequence& seq);
  void plan_replay(Sequence& seq) const;  // Sequence::replay_from (engine/decoder_replay.h)
  static void forget_prefix(Sequence& seq);

  SchedulerConfig config_;
  cache::StateManager& states_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;        // priority order: earlier = admitted earlier
  std::atomic<int64_t> preemptions_{0};
  int isolated_ = 0;                      // sequences with isolate set
  std::vector<Sequence*> out_of_room_;
};

}  // namespace deepinfer::engine
