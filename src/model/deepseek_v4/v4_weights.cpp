#include "model/deepseek_v4/v4_weights.h"

#include <array>
#include <cmath>
#include <utility>

#include "core/error.h"
#include "core/progress.h"

namespace deepinfer::model {
namespace {

V4Hc load_hc(ops::Backend& be, const WeightLoader& w, const std::string& prefix, int64_t outs, int64_t width,
             int64_t scales) {
  return {to_param(be, w.floats(prefix + "_fn", {outs, width})), to_param(be, w.floats(prefix + "_base", {outs})),
          to_param(be, w.floats(prefix + "_scale", {scales}))};
}

V4Compressor load_compressor(ops::Backend& be, const WeightLoader& w, const std::string& p, int64_t D, int64_t width,
                             int64_t ratio) {
  V4Compressor c;
  c.width = width;
  c.ratio = ratio;
  c.copies = ratio == 4 ? 2 : 1;  // CSA's overlapping windows: two series per token
  c.wkv = load_linear(be, w, p + ".wkv", c.copies * width, D, true);
  c.wgate = load_linear(be, w, p + ".wgate", c.copies * width, D, true);
  c.ape = to_param(be, w.floats(p + ".ape", {ratio, c.copies * width}));
  c.norm = to_param(be, w.floats(p + ".norm.weight", {width}));
  return c;
}

// transformers stores routed experts packed: gate_up_proj [E, 2I, D], down_proj [E, D, I] (float).
V4Expert load_packed_experts(ops::Backend& be, const io::Checkpoint& ck, const std::string& layer, int64_t E,
                             int64_t I, int64_t D) {
  const std::vector<float> gu = ck.read_f32(layer + "mlp.experts.gate_up_proj", {E, 2 * I, D});
  std::vector<float> w1, w3;
  for (int64_t e = 0; e < E; ++e) {
    const float* g = gu.data() + e * 2 * I * D;
    w1.insert(w1.end(), g, g + I * D);
    w3.insert(w3.end(), g + I * D, g + 2 * I * D);
  }
  auto stack = [&](std::vector<float> v, int64_t n, int64_t k) {
    QLinear L = plain_linear(be, std::move(v), n, k);
    L.q.groups = E;
    return L;
  };
  return {stack(std::move(w1), I, D), stack(ck.read_f32(layer + "mlp.experts.down_proj", {E, D, I}), D, I),
          stack(std::move(w3), I, D)};
}

std::vector<float> hadamard_matrix(int64_t dim) {
  check(dim > 0 && (dim & (dim - 1)) == 0, "v4: index_head_dim must be a power of two for the Hadamard rotation, got ",
        dim);
  std::vector<float> h(dim * dim);
  const float s = 1.0f / std::sqrt(static_cast<float>(dim));
  for (int64_t i = 0; i < dim; ++i)
    for (int64_t j = 0; j < dim; ++j) h[i * dim + j] = __builtin_popcountll(i & j) % 2 ? -s : s;
  return h;
}

}  // namespace

V4Weights load_v4_weights(const V4Config& c, const WeightLoader& w, ops::Backend& be, bool simulate) {
  const int64_t D = c.hidden_size, hc = c.hc_mult, H = c.num_heads, hd = c.head_dim;
  const int64_t I = c.moe_intermediate_size, E = c.n_routed_experts;
  auto F = [&](const std::string& name, const std::vector<int64_t>& shape) { return to_param(be, w.floats(name, shape)); };
  // A projection the reference runs quantized (when the simulation is on), and one it runs plain.
  auto Q = [&](const std::string& base, int64_t n, int64_t k) { return load_linear(be, w, base, n, k, !simulate); };
  auto P = [&](const std::string& base, int64_t n, int64_t k) { return load_linear(be, w, base, n, k, true); };
  V4Weights m;
  std::vector<float> embed = w.matrix("embed", c.vocab_size, D);
  const bool tied = c.tie_word_embeddings && !w.has("head.weight");
  m.head = tied ? plain_linear(be, embed, c.vocab_size, D) : P("head", c.vocab_size, D);
  m.embed = row_table(be, embed, c.vocab_size, D);
  m.norm = F("norm.weight", {D});
  m.hc_head = load_hc(be, w, "hc_head", hc, hc * D, 1);
  if (simulate && c.index_n_heads > 0) m.hadamard = plain_linear(be, hadamard_matrix(c.index_head_dim), c.index_head_dim, c.index_head_dim);
  Progress progress("loading DeepSeek-V4", c.num_layers, "layers");
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    V4Layer L;
    L.attn_norm = F(p + "attn_norm.weight", {D});
    L.ffn_norm = F(p + "ffn_norm.weight", {D});
    L.hc_attn = load_hc(be, w, p + "hc_attn", (2 + hc) * hc, hc * D, 3);
    L.hc_ffn = load_hc(be, w, p + "hc_ffn", (2 + hc) * hc, hc * D, 3);
    L.wq_a = Q(p + "attn.wq_a", c.q_lora_rank, D);
    L.q_norm = F(p + "attn.q_norm.weight", {c.q_lora_rank});
    L.wq_b = Q(p + "attn.wq_b", H * hd, c.q_lora_rank);
    L.wkv = Q(p + "attn.wkv", hd, D);
    // The release spells the latent norm kv_norm; transformers-derived files spell it norm.
    const std::string kv_norm = w.has(p + "attn.kv_norm.weight") ? p + "attn.kv_norm.weight" : p + "attn.norm.weight";
    L.kv_norm = F(kv_norm, {hd});
    L.wo_a = P(p + "attn.wo_a", c.o_groups * c.o_lora_rank, H * hd / c.o_groups);  // the reference runs it dequantized
    L.wo_b = Q(p + "attn.wo_b", D, c.o_groups * c.o_lora_rank);
    L.attn_sink = F(p + "attn.attn_sink", {H});
    if (c.compress_ratio[l] > 0) {
      L.compressor = load_compressor(be, w, p + "attn.compressor", D, hd, c.compress_ratio[l]);
      if (c.attention[l] == AttentionKind::kCSA) {
        L.index_wq_b = Q(p + "attn.indexer.wq_b", c.index_n_heads * c.index_head_dim, c.q_lora_rank);
        L.index_weights_proj = P(p + "attn.indexer.weights_proj", c.index_n_heads, D);
        L.index_compressor = load_compressor(be, w, p + "attn.indexer.compressor", D, c.index_head_dim, 4);
      }
    }
    L.gate = P(p + "ffn.gate", E, D);
    if (c.hash_routed[l]) {
      L.tid2eid = w.ints(p + "ffn.gate.tid2eid", {c.vocab_size, c.experts_per_token});
      for (int32_t e : L.tid2eid)
        check(e >= 0 && e < E, w.checkpoint().path(), ": layer ", l, " tid2eid names expert ", e, " of ", E);
    } else {
      L.gate_bias = F(p + "ffn.gate.bias", {E});
    }
    const std::string hf_layer = "model.layers." + std::to_string(l) + ".";
    const bool packed = !w.has(p + "ffn.experts.0.w1.weight") &&
                        w.checkpoint().contains(hf_layer + "mlp.experts.gate_up_proj");
    if (packed) {
      L.routed = load_packed_experts(be, w.checkpoint(), hf_layer, E, I, D);
    } else {
      auto names = [&](const char* proj) {
        std::vector<std::string> v;
        for (int64_t e = 0; e < E; ++e) v.push_back(p + "ffn.experts." + std::to_string(e) + "." + proj);
        return v;
      };
      L.routed = {load_stacked(be, w, names("w1"), I, D, !simulate), load_stacked(be, w, names("w2"), D, I, !simulate),
                  load_stacked(be, w, names("w3"), I, D, !simulate)};
    }
    const int64_t Is = I * c.n_shared_experts;
    L.shared = {Q(p + "ffn.shared_experts.w1", Is, D), Q(p + "ffn.shared_experts.w2", D, Is),
                Q(p + "ffn.shared_experts.w3", Is, D)};
    m.layers.push_back(std::move(L));
    progress.update(l + 1);
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
