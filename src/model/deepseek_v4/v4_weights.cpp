#include "model/deepseek_v4/v4_weights.h"

#include <array>
#include <utility>

#include "core/error.h"

namespace deepinfer::model {
namespace {

HcWeights load_hc(const WeightLoader& w, const std::string& prefix, int64_t outs, int64_t width, int64_t scales,
                  const std::string& sep) {
  return {w.floats(prefix + sep + "fn", {outs, width}), w.floats(prefix + sep + "base", {outs}),
          w.floats(prefix + sep + "scale", {scales})};
}

CompressorWeights load_compressor(const WeightLoader& w, const std::string& p, int64_t D, int64_t width,
                                  int64_t ratio) {
  CompressorWeights c;
  c.width = width;
  c.ratio = ratio;
  c.copies = ratio == 4 ? 2 : 1;  // CSA's overlapping windows: two series per token
  c.wkv = w.matrix(p + ".wkv", c.copies * width, D);
  c.wgate = w.matrix(p + ".wgate", c.copies * width, D);
  c.ape = w.floats(p + ".ape", {ratio, c.copies * width});
  c.norm = w.floats(p + ".norm.weight", {width});
  return c;
}

// transformers stores routed experts packed: gate_up_proj [E, 2I, D], down_proj [E, D, I].
std::vector<ExpertWeights> load_packed_experts(const io::Checkpoint& ck, const std::string& layer, int64_t E,
                                               int64_t I, int64_t D) {
  std::vector<float> gu = ck.read_f32(layer + "mlp.experts.gate_up_proj", {E, 2 * I, D});
  std::vector<float> down = ck.read_f32(layer + "mlp.experts.down_proj", {E, D, I});
  std::vector<ExpertWeights> experts(E);
  for (int64_t e = 0; e < E; ++e) {
    const float* g = gu.data() + e * 2 * I * D;
    experts[e].w1.assign(g, g + I * D);
    experts[e].w3.assign(g + I * D, g + 2 * I * D);
    experts[e].w2.assign(down.data() + e * D * I, down.data() + (e + 1) * D * I);
  }
  return experts;
}

}  // namespace

V4Weights load_v4_weights(const V4Config& c, const WeightLoader& w) {
  const int64_t D = c.hidden_size, hc = c.hc_mult, H = c.num_heads, hd = c.head_dim;
  const int64_t I = c.moe_intermediate_size, E = c.n_routed_experts;
  V4Weights m;
  m.embed = w.matrix("embed", c.vocab_size, D);
  m.head = c.tie_word_embeddings && !w.has("head.weight") ? m.embed : w.matrix("head", c.vocab_size, D);
  m.norm = w.floats("norm.weight", {D});
  m.hc_head = load_hc(w, "hc_head", hc, hc * D, 1, "_");
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    V4LayerWeights L;
    L.attn_norm = w.floats(p + "attn_norm.weight", {D});
    L.ffn_norm = w.floats(p + "ffn_norm.weight", {D});
    L.hc_attn = load_hc(w, p + "hc_attn", (2 + hc) * hc, hc * D, 3, "_");
    L.hc_ffn = load_hc(w, p + "hc_ffn", (2 + hc) * hc, hc * D, 3, "_");
    L.wq_a = w.matrix(p + "attn.wq_a", c.q_lora_rank, D);
    L.q_norm = w.floats(p + "attn.q_norm.weight", {c.q_lora_rank});
    L.wq_b = w.matrix(p + "attn.wq_b", H * hd, c.q_lora_rank);
    L.wkv = w.matrix(p + "attn.wkv", hd, D);
    // The release spells the latent norm kv_norm; transformers-derived files spell it norm.
    const std::string kv_norm = w.has(p + "attn.kv_norm.weight") ? p + "attn.kv_norm.weight" : p + "attn.norm.weight";
    L.kv_norm = w.floats(kv_norm, {hd});
    L.wo_a = w.matrix(p + "attn.wo_a", c.o_groups * c.o_lora_rank, H * hd / c.o_groups);
    L.wo_b = w.matrix(p + "attn.wo_b", D, c.o_groups * c.o_lora_rank);
    L.attn_sink = w.floats(p + "attn.attn_sink", {H});
    if (c.compress_ratio[l] > 0) {
      L.compressor = load_compressor(w, p + "attn.compressor", D, hd, c.compress_ratio[l]);
      if (c.attention[l] == AttentionKind::kCSA) {
        L.indexer.wq_b = w.matrix(p + "attn.indexer.wq_b", c.index_n_heads * c.index_head_dim, c.q_lora_rank);
        L.indexer.weights_proj = w.matrix(p + "attn.indexer.weights_proj", c.index_n_heads, D);
        L.indexer.compressor = load_compressor(w, p + "attn.indexer.compressor", D, c.index_head_dim, 4);
      }
    }
    L.gate = w.matrix(p + "ffn.gate", E, D);
    if (c.hash_routed[l]) {
      L.tid2eid = w.ints(p + "ffn.gate.tid2eid", {c.vocab_size, c.experts_per_token});
      for (int32_t e : L.tid2eid)
        check(e >= 0 && e < E, w.checkpoint().path(), ": layer ", l, " tid2eid names expert ", e, " of ", E);
    } else {
      L.gate_bias = w.floats(p + "ffn.gate.bias", {E});
    }
    const std::string hf_layer = "model.layers." + std::to_string(l) + ".";
    const bool packed = !w.has(p + "ffn.experts.0.w1.weight") &&
                        w.checkpoint().contains(hf_layer + "mlp.experts.gate_up_proj");
    if (packed) L.experts = load_packed_experts(w.checkpoint(), hf_layer, E, I, D);
    for (int64_t e = 0; e < E && !packed; ++e) {
      const std::string x = p + "ffn.experts." + std::to_string(e) + ".";
      L.experts.push_back({w.matrix(x + "w1", I, D), w.matrix(x + "w2", D, I), w.matrix(x + "w3", I, D)});
    }
    const int64_t Is = I * c.n_shared_experts;
    L.shared = {w.matrix(p + "ffn.shared_experts.w1", Is, D), w.matrix(p + "ffn.shared_experts.w2", D, Is),
                w.matrix(p + "ffn.shared_experts.w3", Is, D)};
    m.layers.push_back(std::move(L));
  }
  return m;
}

std::string transformers_name(const std::string& n) {
  static const std::array<std::pair<const char*, const char*>, 7> globals = {{
      {"embed.weight", "model.embed_tokens.weight"}, {"head.weight", "lm_head.weight"},
      {"norm.weight", "model.norm.weight"}, {"hc_head_fn", "model.hc_head.hc_fn"},
      {"hc_head_base", "model.hc_head.hc_base"}, {"hc_head_scale", "model.hc_head.hc_scale"},
      {"", ""}}};
  for (auto& [a, b] : globals)
    if (*a && n == a) return b;
  if (n.rfind("layers.", 0) != 0) return n;
  size_t dot = n.find('.', 7);
  std::string layer = n.substr(0, dot + 1), rest = n.substr(dot + 1);
  // Longest, most specific prefixes first.
  static const std::array<std::pair<const char*, const char*>, 33> parts = {{
      {"hc_attn_fn", "attn_hc.fn"}, {"hc_attn_base", "attn_hc.base"}, {"hc_attn_scale", "attn_hc.scale"},
      {"hc_ffn_fn", "ffn_hc.fn"}, {"hc_ffn_base", "ffn_hc.base"}, {"hc_ffn_scale", "ffn_hc.scale"},
      {"attn_norm.", "input_layernorm."}, {"ffn_norm.", "post_attention_layernorm."},
      {"attn.indexer.compressor.wkv.", "self_attn.compressor.indexer.kv_proj."},
      {"attn.indexer.compressor.wgate.", "self_attn.compressor.indexer.gate_proj."},
      {"attn.indexer.compressor.ape", "self_attn.compressor.indexer.position_bias"},
      {"attn.indexer.compressor.norm.", "self_attn.compressor.indexer.kv_norm."},
      {"attn.indexer.wq_b.", "self_attn.compressor.indexer.q_b_proj."},
      {"attn.indexer.weights_proj.", "self_attn.compressor.indexer.scorer.weights_proj."},
      {"attn.compressor.wkv.", "self_attn.compressor.kv_proj."},
      {"attn.compressor.wgate.", "self_attn.compressor.gate_proj."},
      {"attn.compressor.ape", "self_attn.compressor.position_bias"},
      {"attn.compressor.norm.", "self_attn.compressor.kv_norm."},
      {"attn.wq_a.", "self_attn.q_a_proj."}, {"attn.q_norm.", "self_attn.q_a_norm."},
      {"attn.wq_b.", "self_attn.q_b_proj."}, {"attn.wkv.", "self_attn.kv_proj."},
      {"attn.kv_norm.", "self_attn.kv_norm."}, {"attn.norm.", "self_attn.kv_norm."},
      {"attn.wo_a.", "self_attn.o_a_proj."}, {"attn.wo_b.", "self_attn.o_b_proj."},
      {"attn.attn_sink", "self_attn.sinks"},
      {"ffn.gate.bias", "mlp.gate.e_score_correction_bias"}, {"ffn.gate.", "mlp.gate."},
      {"ffn.shared_experts.w1.", "mlp.shared_experts.gate_proj."},
      {"ffn.shared_experts.w2.", "mlp.shared_experts.down_proj."},
      {"ffn.shared_experts.w3.", "mlp.shared_experts.up_proj."}, {"ffn.", "mlp."},
  }};
  for (auto& [a, b] : parts) {
    std::string_view prefix(a);
    if (rest.compare(0, prefix.size(), prefix) == 0) return "model." + layer + b + rest.substr(prefix.size());
  }
  return "model." + n;
}

}  // namespace deepinfer::model
