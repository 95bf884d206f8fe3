// DeepSeek-V4 weights on the backend's device. Projections the reference runs quantized (act_quant +
// FP8/FP4 GEMM) are QLinear::quant when the quantization points are simulated; every other one runs
// plain (fp32, or bf16 where the backend keeps bf16 values so).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/deepseek/linear.h"
#include "model/deepseek_v4/v4_config.h"
#include "model/weight_loader.h"

namespace deepinfer::model {

struct V4Hc {  // one mHC site: fn [(2+hc)*hc, hc*D] (head: [hc, hc*D]), base, scale
  Param fn, base, scale;
};

struct V4Compressor {  // wkv/wgate [c*width, D], ape [ratio, c*width], norm [width]
  QLinear wkv, wgate;
  Param ape, norm;
  int64_t width = 0, ratio = 0, copies = 1;  // copies = 2 when windows overlap (CSA)
};

struct V4Expert {  // w1 (gate) and w3 (up) [I, D], w2 (down) [D, I]
  QLinear w1, w2, w3;
};

struct V4Layer {
  Param attn_norm, ffn_norm;
  V4Hc hc_attn, hc_ffn;
  QLinear wq_a, wq_b, wkv, wo_a, wo_b;
  Param q_norm, kv_norm, attn_sink;
  V4Compressor compressor;  // ratio 0 when the layer is sliding-only
  QLinear index_wq_b, index_weights_proj;  // CSA layers: the indexer
  V4Compressor index_compressor;
  QLinear gate;                  // [E, D], fp32 router
  Param gate_bias;               // [E] (top-k layers)
  std::vector<int32_t> tid2eid;  // [vocab, k] (hash layers; host: the token ids are)
  V4Expert routed;               // the routed experts stacked (q.groups = E)
  V4Expert shared;
};

struct V4Weights {
  RowTable embed;
  Param norm;
  QLinear head;
  V4Hc hc_head;
  std::vector<V4Layer> layers;
  QLinear hadamard;  // [index_head_dim]^2 orthonormal Walsh-Hadamard matrix (simulated indexer quantization)
};

// simulate: the reference's quantization points are reproduced (quantized projections run quantized).
V4Weights load_v4_weights(const V4Config& c, const WeightLoader& w, ops::Backend& be, bool simulate);

// Maps a released tensor name to the name transformers saves it under ("model.layers.0.self_attn.q_a_proj.weight").
// Routed experts are stored packed by transformers and handled by the loader itself.
std::string transformers_name(const std::string& released);

}  // namespace deepinfer::model
