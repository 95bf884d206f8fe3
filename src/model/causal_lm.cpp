#include "model/causal_lm.h"

#include "core/error.h"

namespace deepinfer::model {

std::vector<float> logits_in_steps(CausalLM& lm, const std::vector<int32_t>& ids, const std::vector<int64_t>& cuts,
                                   SequenceState* state, const ForwardTaps* taps, const InputRows* rows) {
  check(cuts.size() >= 2 && cuts.front() >= 0 && cuts.back() <= static_cast<int64_t>(ids.size()),
        "logits_in_steps: cuts must lie within the ids");
  std::unique_ptr<SequenceState> fresh;
  if (!state) {
    fresh = lm.new_sequence();
    state = fresh.get();
  }
  std::vector<float> all, part;
  all.reserve(ids.size() * lm.vocab_size());
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    check(cuts[i] < cuts[i + 1], "logits_in_steps: cuts must be strictly ascending");
    ForwardBatch b;
    b.token_ids.assign(ids.begin() + cuts[i], ids.begin() + cuts[i + 1]);
    b.seq_start = {0, static_cast<int32_t>(b.token_ids.size())};
    b.states = {state};
    for (int32_t r = 0; r < static_cast<int32_t>(b.token_ids.size()); ++r) b.logit_rows.push_back(r);
    if (rows && !rows->positions.empty()) {  // the input rows of this step's positions
      const size_t dim = rows->rows.size() / rows->positions.size();
      for (size_t k = 0; k < rows->positions.size(); ++k)
        if (rows->positions[k] >= cuts[i] && rows->positions[k] < cuts[i + 1]) {
          b.embed_tokens.push_back(static_cast<int32_t>(rows->positions[k] - cuts[i]));
          b.embed_rows.insert(b.embed_rows.end(), rows->rows.begin() + k * dim, rows->rows.begin() + (k + 1) * dim);
        }
    }
    lm.forward(b, part, taps);
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

std::vector<int64_t> check_batch(const ForwardBatch& batch, int64_t vocab_size) {
  const int64_t num = static_cast<int64_t>(batch.states.size()), T = static_cast<int64_t>(batch.token_ids.size());
  std::vector<uint8_t> replaced(T, 0);
  for (int32_t t : batch.embed_tokens) {
    check(t >= 0 && t < T, "forward: embed_tokens entry ", t, " outside the batch of ", T, " tokens");
    check(!replaced[t]++, "forward: token ", t, " appears twice in embed_tokens");
  }
  check(static_cast<int64_t>(batch.seq_start.size()) == num + 1 && batch.seq_start.front() == 0 &&
            batch.seq_start.back() == T,
        "forward: seq_start must have one entry per sequence plus one, from 0 to the token count");
  for (int32_t id : batch.token_ids)
    check(id >= 0 && id < vocab_size, "forward: token id ", id, " is outside the vocabulary (", vocab_size, ")");
  for (int32_t r : batch.logit_rows) check(r >= 0 && r < T, "forward: logit row ", r, " is outside the batch");
  check(batch.positions.empty() || static_cast<int64_t>(batch.positions.size()) == T,
        "forward: positions must be empty or one per token");
  std::vector<int64_t> pos(T);
  for (int64_t s = 0; s < num; ++s) {
    check(batch.states[s] != nullptr, "forward: sequence ", s, " has no state");
    check(batch.seq_start[s] <= batch.seq_start[s + 1], "forward: seq_start is not ascending at sequence ", s);
    for (int64_t t = batch.seq_start[s]; t < batch.seq_start[s + 1]; ++t) {
      pos[t] = batch.states[s]->length() + t - batch.seq_start[s];
      check(batch.positions.empty() || batch.positions[t] == pos[t], "forward: token ", t, " of sequence ", s,
            " is at position ", batch.positions.empty() ? 0 : batch.positions[t], " but its state continues at ",
            pos[t]);
    }
  }
  return pos;
}

}  // namespace deepinfer::model
