// Drafters propose the tokens that follow a sequence's last token (its anchor) before the target model
// has seen it; the engine verifies them in its next step. The DSpark drafter runs the V4.1 checkpoint's
// draft head (spec/engine-features.md §1.2) on the sequence's state, read-only.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "model/causal_lm.h"

namespace deepinfer::spec {

struct Draft {
  std::vector<int32_t> tokens;       // for positions anchor+1, anchor+2, ...
  std::vector<double> confidence;    // c_j = P(token j survives | tokens < j survived), in [0, 1]
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual int block_size() const = 0;  // tokens per draft
  // state has consumed every token before the anchor (state.length() == anchor's position).
  virtual Draft draft(model::SequenceState& state, int32_t anchor) = 0;
  // Drafts for many sequences (distinct states); the default drafts them one by one.
  virtual std::vector<Draft> draft(const std::vector<model::SequenceState*>& states, const std::vector<int32_t>& anchors) {
    std::vector<Draft> out;
    for (size_t i = 0; i < states.size(); ++i) out.push_back(draft(*states[i], anchors[i]));
    return out;
  }
};

// The DSpark head of a DeepSeek-V4.1 model (greedy drafts, sigmoid of the confidence head's logit);
// null when the model has none.
std::unique_ptr<Drafter> make_dspark_drafter(model::CausalLM& model);

}  // namespace deepinfer::spec
