// The engine's bookkeeping for requests and their sequences (one per sample, n of them).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "deepinfer/outputs.h"
#include "deepinfer/sampling_params.h"
#include "engine/grammar.h"
#include "engine/text.h"

namespace deepinfer::model { class SequenceState; }

namespace deepinfer::engine {

struct Request;

enum class SeqStatus { Waiting, Running, Finished };

struct Sequence {
  int64_t id = 0;                         // engine-unique; the state manager's key
  Request* request = nullptr;
  int index = 0;                          // sample index within the request (the RNG stream)
  std::vector<int32_t> tokens;            // prompt + generated; appended when a step's results land
  int64_t num_computed = 0;               // tokens scheduled into the state (ahead of results)
  int pending = 0;                        // sampled tokens still in flight (async scheduling)
  SeqStatus status = SeqStatus::Waiting;
  bool isolate = false;                   // after a failed batch: runs alone until it succeeds
  int64_t prompt_logprobs_done = 1;       // prompt positions whose logprobs are recorded
  IncrementalText text;
  std::shared_ptr<GrammarState> grammar;  // structured output (so_args); null when unconstrained
  CompletionOutput out;                   // finish fields, logprobs, cumulative logprob
  // Speculative decoding: drafts of the tokens after tokens.back(), valid while draft_for == tokens.size().
  std::vector<int32_t> draft;
  std::vector<double> draft_confidence;
  size_t draft_for = 0;
  SpeculativeMetrics spec;
  // Prefix caching: the snapshot its state is restored from at launch (held until then, which pins it),
  // the prompt lengths where a prefill chunk ends so that the state is snapshotted there, and the
  // prompt tokens its first admission took from the cache (-1: not admitted yet).
  std::shared_ptr<const model::SequenceState> restore_from;
  std::vector<int64_t> snapshot_at;
  int64_t cached_tokens = -1;
  // SWA bounded replay (engine/decoder_replay.h): where the decoder layers of its prompt's prefill start
  // (0: nowhere cut); a cached prefix and every chunk boundary lie at or before it.
  int64_t replay_from = 0;

  int64_t prompt_len() const;
  int64_t known_len() const { return static_cast<int64_t>(tokens.size()) + pending; }
  int64_t num_output() const { return static_cast<int64_t>(tokens.size()) - prompt_len(); }
  bool finished() const { return status == SeqStatus::Finished; }
};

struct Request {
  std::string id;
  std::string prompt_text;
  std::vector<int32_t> prompt;
  std::vector<int64_t> embed_positions;  // image spans: prompt positions whose input is a row below
  std::vector<float> embed_rows;         // [embed_positions.size(), dim]
  SamplingParams params;
  uint64_t seed = 0;
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::vector<PositionLogprobs> prompt_logprobs;
  std::vector<std::shared_ptr<GrammarState>> grammars;  // one per sample, until drained into seqs
  std::string error;
  bool changed = false;                   // has news for the next step's outputs
  bool reported_final = false;

  bool finished() const {
    for (auto& s : seqs) if (!s->finished()) return false;
    return true;
  }
};

inline int64_t Sequence::prompt_len() const { return static_cast<int64_t>(request->prompt.size()); }

}  // namespace deepinfer::engine
