#include "engine/scheduler.h"

#include <algorithm>
#include <span>

namespace deepinfer::engine {

void Scheduler::add(Sequence* seq) {
  seq->status = SeqStatus::Waiting;
  waiting_.push_back(seq);
}

void Scheduler::remove(Sequence* seq) {
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), seq), waiting_.end());
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  states_.release(seq->id);
  forget_prefix(*seq);
  end_isolation(seq);
}

void Scheduler::forget_prefix(Sequence& seq) {
  seq.restore_from.reset();
  seq.snapshot_at.clear();
  seq.replay_from = 0;
}

// SWA bounded replay: the model cuts a prefill from 0 at its last replay_keep tokens (never one that asks
// for prompt logprobs). The decoder layers start at the prompt's cut however its prefill is split, and
// again there when a preempted sequence is recomputed (its decode steps ran on those rings).
void Scheduler::plan_replay(Sequence& seq) const {
  const int64_t keep = config_.replay_keep, n = seq.prompt_len();
  seq.replay_from = keep > 0 && !seq.request->params.prompt_logprobs && n > keep ? n - keep : 0;
}

void Scheduler::plan_prefix(Sequence& seq) {
  cache::PrefixCache* pc = states_.prefix_cache();
  forget_prefix(seq);
  plan_replay(seq);
  // Image rows are not in the tokens' names; prompt logprobs need every prompt position computed.
  if (!pc || !seq.request->embed_positions.empty() || seq.request->params.prompt_logprobs) return;
  const int64_t B = pc->block_tokens();
  // the last prompt token is always computed (its logits give the first sample); a cached prefix and
  // a snapshot lie at or before replay_from, the decoder layers' rows after it being computed afresh
  const int64_t limit = std::min<int64_t>(seq.prompt_len(), static_cast<int64_t>(seq.tokens.size())) - 1;
  const int64_t upto = seq.replay_from > 0 ? std::min(limit, seq.replay_from) : limit;
  std::span<const int32_t> tokens(seq.tokens);
  cache::PrefixCache::Match m = pc->match(tokens, upto);
  if (m.state) {
    seq.num_computed = m.tokens;
    seq.restore_from = std::move(m.state);
  }
  // Snapshot where an earlier prompt diverged from this one (the next prompt sharing the prefix hits
  // it) and at the prompt's last block boundary (a prompt repeated or continued hits it).
  for (int64_t at : {m.known, upto / B * B})
    if (at > m.tokens && (seq.snapshot_at.empty() || at > seq.snapshot_at.back()) && !pc->has_snapshot(tokens.first(at)))
      seq.snapshot_at.push_back(at);
  pc->remember(tokens, limit);
}

void Scheduler::end_isolation(Sequence* seq) {
  if (!seq->isolate) return;
  seq->isolate = false;
  --isolated_;
}

void Scheduler::preempt(Sequence* seq, bool isolate) {
  if (isolate && !seq->isolate) {
    seq->isolate = true;
    ++isolated_;
  }
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), seq), waiting_.end());
  states_.release(seq->id);
  seq->num_computed = 0;  // recomputed from the start (prompt + what it generated) on readmission
  forget_prefix(*seq);
  seq->draft.clear();     // drafted from the state just released
  seq->status = SeqStatus::Waiting;
  waiting_.push_front(seq);
  ++preemptions_;
}

int32_t Scheduler::chunk_size(const Sequence& seq, int64_t budget) const {
  int64_t want = seq.known_len() - seq.num_computed;
  if (want <= 0) return 0;
  // Only an in-flight token is left to feed: skip it when that token already ends the sequence.
  const SamplingParams& p = seq.request->params;
  if (seq.pending > 0 && want == 1 &&
      (seq.num_output() + seq.pending >= p.max_tokens || seq.known_len() >= config_.max_model_len))
    return 0;
  for (int64_t at : seq.snapshot_at)  // a prefill chunk ends where the state is snapshotted
    if (at > seq.num_computed) {
      want = std::min(want, at - seq.num_computed);
      break;
    }
  if (config_.batch_invariant && want > 1) {
    int64_t c = config_.invariant_chunk;
    want = std::min<int64_t>(want, c - seq.num_computed % c);
    return want <= budget ? static_cast<int32_t>(want) : 0;  // never cut short by neighbours
  }
  int64_t count = std::min(want, budget);
  // The model cuts a chunk from 0 of more than replay_keep tokens at that chunk's own tail: such a chunk
  // ends where that cut is replay_from (the prompt's end), else at replay_from (the next chunk starts the
  // decoder window there) or, with no cut planned, after replay_keep tokens.
  const int64_t keep = config_.replay_keep, from = seq.replay_from;
  if (keep > 0 && seq.num_computed == 0 && count > keep && !seq.request->params.prompt_logprobs)
    if (from == 0 || count != from + keep) count = from == 0 ? keep : std::min(count, from);
  return static_cast<int32_t>(count);
}

std::vector<ScheduledChunk> Scheduler::schedule() {
  std::vector<ScheduledChunk> out;
  int64_t budget = config_.max_num_batched_tokens;
  auto emit = [&](Sequence* s, int32_t count) {
    bool sample = s->num_computed + count == s->known_len();
    out.push_back({s, s->num_computed, count, sample, {}});
    s->num_computed += count;
    if (sample) ++s->pending;
    budget -= count;
  };

  // A sequence whose batch failed runs alone, so a failure can be pinned on one request.
  if (isolated_ > 0) {
    std::vector<Sequence*> candidates(waiting_.begin(), waiting_.end());
    candidates.insert(candidates.end(), running_.begin(), running_.end());
    for (Sequence* s : candidates) {
      if (!s->isolate) continue;
      if (s->num_computed == 0) plan_replay(*s);
      int32_t count = chunk_size(*s, budget);
      if (count == 0 || !states_.reserve(s->id, s->num_computed + count)) break;
      if (s->status == SeqStatus::Waiting) {
        waiting_.erase(std::find(waiting_.begin(), waiting_.end(), s));
        running_.push_back(s);
        s->status = SeqStatus::Running;
      }
      emit(s, count);
      return out;
    }
  }
  // (An isolated sequence that cannot get room this step falls through to normal scheduling.)

  bool preempted = false;
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* s = running_[i];
    int32_t count = chunk_size(*s, budget);
    if (count == 0) continue;
    if (!states_.can_ever_hold(s->num_computed + count)) {
      out_of_room_.push_back(s);
      continue;
    }
    bool fits = true;
    while (!states_.reserve(s->id, s->num_computed + count)) {
      preempted = true;
      Sequence* victim = running_.back();  // lowest priority, not yet scheduled this step
      preempt(victim);
      if (victim == s) {
        fits = false;
        break;
      }
    }
    if (!fits) break;
    emit(s, count);
  }
  if (preempted) return out;  // let the preempted run first once room frees up

  while (!waiting_.empty() && budget > 0 && running_.size() < static_cast<size_t>(config_.max_num_seqs)) {
    Sequence* s = waiting_.front();
    if (s->num_computed == 0) plan_prefix(*s);
    int32_t count = chunk_size(*s, budget);
    if (count > 0 && !states_.can_ever_hold(s->num_computed + count)) {
      waiting_.pop_front();
      out_of_room_.push_back(s);
      forget_prefix(*s);
      s->num_computed = 0;
      continue;
    }
    if (count == 0 || !states_.reserve(s->id, s->num_computed + count)) {
      if (s->restore_from) s->num_computed = 0;  // planned again when it is admitted
      forget_prefix(*s);
      break;
    }
    if (s->cached_tokens < 0) s->cached_tokens = s->restore_from ? s->num_computed : 0;
    waiting_.pop_front();
    running_.push_back(s);
    s->status = SeqStatus::Running;
    emit(s, count);
  }
  return out;
}

}  // namespace deepinfer::engine
