#include "model/causal_lm.h"

#include "core/error.h"

namespace deepinfer::model {

std::vector<float> logits_in_steps(CausalLM& lm, const std::vector<int32_t>& ids, const std::vector<int64_t>& cuts,
                                   SequenceState* state) {
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
    lm.forward(b, part);
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

}  // namespace deepinfer::model
