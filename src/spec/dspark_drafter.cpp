#include <cmath>

#include "core/error.h"
#include "model/context_parallel_lm.h"
#include "model/deepseek_v41/v41_model.h"
#include "spec/drafter.h"

namespace deepinfer::spec {
namespace {

class DSparkDrafter : public Drafter {
 public:
  // cp: the engine's model is a ContextParallelLM of which m is rank 0: its states hold every rank's copy.
  DSparkDrafter(model::V41Model& m, bool cp) : m_(m), cp_(cp) {}
  int block_size() const override { return static_cast<int>(m_.config().dspark_block_size); }
  Draft draft(model::SequenceState& state, int32_t anchor) override { return std::move(draft({&state}, {anchor}).front()); }
  // One flat forward of every sequence's draft block.
  std::vector<Draft> draft(const std::vector<model::SequenceState*>& states, const std::vector<int32_t>& anchors) override {
    std::vector<model::V41SequenceState*> v41;
    for (model::SequenceState* s : states) {
      // With context parallelism rank 0 drafts alone: its state holds the whole sequence.
      v41.push_back(dynamic_cast<model::V41SequenceState*>(cp_ ? &model::ContextParallelLM::rank_state(*s, 0) : s));
      check(v41.back() != nullptr, "dspark: the sequence state is not a DeepSeek-V4.1 state");
    }
    std::vector<Draft> out;
    for (model::V41Draft& d : m_.draft(v41, anchors, {}, /*with_logits=*/false)) {
      Draft o;
      o.tokens = std::move(d.tokens);
      for (float logit : d.confidence) o.confidence.push_back(1.0 / (1.0 + std::exp(-static_cast<double>(logit))));
      out.push_back(std::move(o));
    }
    return out;
  }

 private:
  model::V41Model& m_;
  const bool cp_;
};

}  // namespace

std::unique_ptr<Drafter> make_dspark_drafter(model::CausalLM& model) {
  auto* cp = dynamic_cast<model::ContextParallelLM*>(&model);
  auto* m = dynamic_cast<model::V41Model*>(cp ? &cp->rank(0) : &model);
  if (!m || m->config().dspark_block_size <= 0 || m->config().n_mtp_layers <= 0) return nullptr;
  return std::make_unique<DSparkDrafter>(*m, cp != nullptr);
}

}  // namespace deepinfer::spec
