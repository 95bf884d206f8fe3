#include "engine/decoder_replay.h"

#include "core/error.h"
#ifdef DEEPINFER_HAVE_MODEL_LOADER
#include "model/deepseek_v41/v41_model.h"
#include "model/deepseek_v41/v41_state.h"
#endif

namespace deepinfer::engine {

int64_t decoder_replay_keep(const model::CausalLM& m) {
#ifdef DEEPINFER_HAVE_MODEL_LOADER
  if (const auto* v41 = dynamic_cast<const model::V41Model*>(&m))
    if (v41->options().replay_compact && v41->config().last_kv_source >= 0) return v41->options().replay_keep;
#endif
  (void)m;
  return 0;
}

void start_decoder_window(const model::CausalLM& m, model::SequenceState& state, int64_t from) {
#ifdef DEEPINFER_HAVE_MODEL_LOADER
  const auto* v41 = dynamic_cast<const model::V41Model*>(&m);
  auto* st = dynamic_cast<model::V41SequenceState*>(&state);
  check(v41 != nullptr && st != nullptr, "start_decoder_window: not a DeepSeek-V4.1 model and state");
  check(from >= st->length(), "start_decoder_window: position ", from, " lies before the state's length ", st->length());
  const model::V41Config& c = v41->config();
  // the same rings the model's own cut starts (the decoder layers, then the DSpark stages)
  for (int64_t r = c.last_kv_source + 1; r < c.n_layers + c.n_mtp_layers; ++r) st->ring_from[r] = from;
#else
  (void)m, (void)state, (void)from;
  fail("start_decoder_window: built without the model library");
#endif
}

}  // namespace deepinfer::engine
