#include <cmath>

#include "core/error.h"
#include "model/deepseek_v41/v41_model.h"
#include "spec/drafter.h"

namespace deepinfer::spec {
namespace {

class DSparkDrafter : public Drafter {
 public:
  explicit DSparkDrafter(model::V41Model& m) : m_(m) {}
  int block_size() const override { return static_cast<int>(m_.config().dspark_block_size); }
  Draft draft(model::SequenceState& state, int32_t anchor) override {
    auto* st = dynamic_cast<model::V41SequenceState*>(&state);
    check(st != nullptr, "dspark: the sequence state is not a DeepSeek-V4.1 state");
    model::V41Draft d = m_.draft(*st, anchor);
    Draft out;
    out.tokens = std::move(d.tokens);
    for (float logit : d.confidence) out.confidence.push_back(1.0 / (1.0 + std::exp(-static_cast<double>(logit))));
    return out;
  }

 private:
  model::V41Model& m_;
};

}  // namespace

std::unique_ptr<Drafter> make_dspark_drafter(model::CausalLM& model) {
  auto* m = dynamic_cast<model::V41Model*>(&model);
  if (!m || m->config().dspark_block_size <= 0 || m->config().n_mtp_layers <= 0) return nullptr;
  return std::make_unique<DSparkDrafter>(*m);
}

}  // namespace deepinfer::spec
