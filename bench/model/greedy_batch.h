// The flat batches the V4.1 model benchmarks feed the forward: one prefill of fresh sequences, then
// greedy decode steps of one token per sequence.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "model/causal_lm.h"

namespace deepinfer::bench {

// A prefill batch of `seqs` new sequences (kept in `states`) of `prompt` tokens token(s, i) each, with the
// logits of each prompt's last token.
inline model::ForwardBatch prompt_batch(model::CausalLM& m, int64_t seqs, int64_t prompt,
                                        std::vector<std::unique_ptr<model::SequenceState>>& states,
                                        const std::function<int32_t(int64_t, int64_t)>& token) {
  model::ForwardBatch b;
  b.seq_start = {0};
  for (int64_t s = 0; s < seqs; ++s) {
    states.push_back(m.new_sequence());
    for (int64_t i = 0; i < prompt; ++i) b.token_ids.push_back(token(s, i));
    b.seq_start.push_back(static_cast<int32_t>(b.token_ids.size()));
    b.logit_rows.push_back(static_cast<int32_t>(b.token_ids.size()) - 1);
    b.states.push_back(states.back().get());
  }
  return b;
}

// Every logit row of b drawn greedily on the model's device (as the engine's device sampling does),
// into `draws`; off: b's logits come back and are read on the host.
inline void draw_all_rows(model::ForwardBatch& b, model::RowDraws& draws, bool on) {
  b.draws = nullptr;
  if (!on) return;
  const size_t n = b.logit_rows.size();
  draws.rows.resize(n);
  for (size_t i = 0; i < n; ++i) draws.rows[i] = static_cast<int32_t>(i);
  draws.param.assign(n, ops::DrawRow{});  // temperature 0: the first maximum
  b.draws = &draws;
}

// Turns b into the next decode step: each sequence's greedy token from its row of the last logits (or
// from the tokens b's last forward drew on the device).
inline void next_greedy_step(const std::vector<float>& logits, int64_t vocab, model::ForwardBatch& b) {
  const int64_t seqs = static_cast<int64_t>(b.states.size());
  const model::RowDraws* drawn = b.draws;
  b.token_ids.clear();
  b.seq_start = {0};
  b.logit_rows.clear();
  for (int64_t s = 0; s < seqs; ++s) {
    const float* row = logits.data() + s * vocab;
    b.token_ids.push_back(drawn ? drawn->token[s] : static_cast<int32_t>(std::max_element(row, row + vocab) - row));
    b.seq_start.push_back(static_cast<int32_t>(s + 1));
    b.logit_rows.push_back(static_cast<int32_t>(s));
  }
}

}  // namespace deepinfer::bench
