// DeepSeek-V4 weights as the CPU backend uses them (fp32, dequantized at load).
#pragma once
#include <cstdint>
#include <vector>

#include "model/deepseek_v4/v4_config.h"
#include "model/weight_loader.h"

namespace deepinfer::model {

using Floats = std::vector<float>;

struct HcWeights {  // one mHC site: fn [(2+hc)*hc, hc*D] (head: [hc, hc*D]), base, scale
  Floats fn, base, scale;
};

struct CompressorWeights {  // wkv/wgate [c*width, D], ape [ratio, c*width], norm [width]
  Floats wkv, wgate, ape, norm;
  int64_t width = 0, ratio = 0, copies = 1;  // copies = 2 when windows overlap (CSA)
};

struct IndexerWeights {
  Floats wq_b;          // [index_heads*index_dim, q_lora_rank]
  Floats weights_proj;  // [index_heads, D]
  CompressorWeights compressor;
};

struct ExpertWeights {  // w1 (gate) and w3 (up) [I, D], w2 (down) [D, I]
  Floats w1, w2, w3;
};

struct V4LayerWeights {
  Floats attn_norm, ffn_norm;
  HcWeights hc_attn, hc_ffn;
  Floats wq_a, q_norm, wq_b, wkv, kv_norm, wo_a, wo_b, attn_sink;
  CompressorWeights compressor;  // ratio 0 when the layer is sliding-only
  IndexerWeights indexer;        // CSA layers only
  Floats gate, gate_bias;        // gate [E, D]; bias [E] (top-k layers)
  std::vector<int32_t> tid2eid;  // [vocab, k] (hash layers)
  std::vector<ExpertWeights> experts;
  ExpertWeights shared;
};

struct V4Weights {
  Floats embed, head, norm;
  HcWeights hc_head;
  std::vector<V4LayerWeights> layers;
};

V4Weights load_v4_weights(const V4Config& c, const WeightLoader& w);

// Maps a released tensor name to the name transformers saves it under ("model.layers.0.self_attn.q_a_proj.weight").
// Routed experts are stored packed by transformers and handled by the loader itself.
std::string transformers_name(const std::string& released);

}  // namespace deepinfer::model
