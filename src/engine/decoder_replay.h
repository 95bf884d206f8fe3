// DeepSeek-V4.1's SWA bounded replay (spec §5.9) as the scheduler and the engine see it. A prefill from
// position 0 of n > KEEP tokens runs the layers after the last KV source on [n - KEEP, n) only, their
// window rings starting at n - KEEP. The engine keeps that start for every way of reaching n — one
// chunk, several, or a prefix restored from the cache — so that they all give the same bits: a cached
// prefix and every chunk boundary lie at or before it, and the chunk that crosses it starts the decoder
// rings there (docs/prefix_caching.md, "SWA bounded replay").
#pragma once
#include <cstdint>

#include "model/causal_lm.h"

namespace deepinfer::engine {

// KEEP of a model running bounded replay (V4.1 with DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE=compact); 0
// for a model without it or with it off.
int64_t decoder_replay_keep(const model::CausalLM& m);

// Starts the window rings of the layers after the last KV source and of the DSpark stages of `state`
// at position `from`: the rows of earlier positions are never read again (a chunk running from at most
// `from` recomputes every row from there, as the one-chunk prefill does).
void start_decoder_window(const model::CausalLM& m, model::SequenceState& state, int64_t from);

}  // namespace deepinfer::engine
