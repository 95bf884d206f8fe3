#include "model/deepseek_v41/v41_config.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_file.h"
#include "model/config_fields.h"

namespace deepinfer::model {
namespace {

using nlohmann::json;

// Caps that keep a hostile value from allocating the machine away before any tensor is checked;
// the release (V4.1-Flash) is far inside every one.
constexpr int64_t kMaxVocab = 1 << 22, kMaxDim = 1 << 16, kMaxLayers = 1024, kMaxHeads = 1024;
constexpr int64_t kMaxExperts = 1 << 14, kMaxWindow = 1 << 16, kMaxPositions = int64_t{1} << 24;

}  // namespace

bool V41Config::has_engram(int64_t l) const { return engram_index(l) >= 0; }
int64_t V41Config::engram_index(int64_t l) const {
  auto it = std::find(engram_layer_ids.begin(), engram_layer_ids.end(), l);
  return it == engram_layer_ids.end() ? -1 : static_cast<int64_t>(it - engram_layer_ids.begin());
}

std::string V41Config::role(int64_t l) const {
  if (l >= n_layers) return "DSpark stage (SWA only)";
  std::string r;
  const int64_t ratio = compress_ratios[l];
  if (ratio == 0) r = "SWA only";
  else if (is_kv_source[l]) r = "ratio " + std::to_string(ratio) + " Full (compressor + index keys + selection)";
  else if (is_index_source[l]) r = "ratio " + std::to_string(ratio) + " Reindex (keys/KV of layer " + std::to_string(kv_source_of[l]) + ")";
  else r = "ratio " + std::to_string(ratio) + " Reuse (KV " + std::to_string(kv_source_of[l]) + ", selection " + std::to_string(index_source_of[l]) + ")";
  if (l == candidate_source_layer) r += ", candidate source";
  if (has_engram(l)) r += ", Engram";
  return r;
}

double V41Config::packed_bytes_per_token() const {
  const double ckv_row = head_dim / 2.0 + head_dim / 16.0;               // FP4 nibbles + E4M3 per 16
  const double ik_row = index_head_dim / 2.0 + index_head_dim / 32.0;   // FP4 nibbles + UE8M0 per 32
  double b = 0;
  for (int64_t s : kv_source_layers) b += (ckv_row + ik_row) / static_cast<double>(compress_ratios[s]);
  return b;
}

int64_t V41Config::packed_ring_bytes() const {
  const int64_t rings = n_layers + (dspark_block_size > 0 ? n_mtp_layers : 0);
  return rings * window_size * (head_dim + head_dim / 32);  // e4m3 + UE8M0 per 32
}

V41Config V41Config::from_json(const json& root) {
  try {
    return parse(root);
  } catch (const json::exception& e) {  // a layout nlohmann cannot walk: still name the problem
    fail("config: ", e.what());
  }
}

V41Config V41Config::parse(const json& root) {
  // Composite: {"text_config": {...}, "quantization_config": {...}, "image_token_id": ...}; flat otherwise.
  ConfigFields top(root, "");
  const bool composite = top.has("text_config");
  if (composite) top.object("text_config");
  const json& tj = composite ? root.at("text_config") : root;
  ConfigFields t(tj, composite ? "text_config" : "");
  // K(flat, hf): the field under the spelling of this layout first, the other one accepted too.
  auto K = [&](const char* flat, const char* hf) { return composite ? Key(hf, flat) : Key(flat, hf); };
  V41Config c;
  c.vocab_size = t.integer("vocab_size", 1, kMaxVocab);
  c.dim = t.integer(K("dim", "hidden_size"), 1, kMaxDim);
  c.moe_inter_dim = t.integer(K("moe_inter_dim", "moe_intermediate_size"), 1, kMaxDim * 4);
  c.n_layers = t.integer(K("n_layers", "num_hidden_layers"), 1, kMaxLayers);
  c.n_mtp_layers = t.integer(K("n_mtp_layers", "num_nextn_predict_layers"), 0, 64, 0);
  c.n_heads = t.integer(K("n_heads", "num_attention_heads"), 1, kMaxHeads);
  c.head_dim = t.integer("head_dim", 2, 4096);
  c.rope_head_dim = t.integer(K("rope_head_dim", "qk_rope_head_dim"), 2, c.head_dim - 1);
  if (c.rope_head_dim % 2) t.bad(K("rope_head_dim", "qk_rope_head_dim"), "must be even (rotary pairs)");
  c.q_lora_rank = t.integer("q_lora_rank", 1, kMaxDim);
  c.o_groups = t.integer("o_groups", 1, c.n_heads);
  if (c.n_heads % c.o_groups)
    t.bad("o_groups", "must divide " + t.name(K("n_heads", "num_attention_heads")) + " = " + std::to_string(c.n_heads));
  c.o_lora_rank = t.integer("o_lora_rank", 1, kMaxDim);
  c.n_routed_experts = t.integer("n_routed_experts", 1, kMaxExperts);
  c.n_shared_experts = t.integer("n_shared_experts", 1, 1, 1);  // the model runs exactly one shared expert
  c.n_activated_experts = t.integer(K("n_activated_experts", "num_experts_per_tok"), 1, c.n_routed_experts);
  c.score_func = t.choice(K("score_func", "scoring_func"), {"sqrtsoftplus", "softmax", "sigmoid"});
  t.choice("topk_method", {"noaux_tc"});
  t.choice("hidden_act", {"silu"});
  if (t.integer("num_key_value_heads", 1, 1, 1) != 1) t.bad("num_key_value_heads", "must be 1");
  if (t.boolean("attention_bias", false)) t.bad("attention_bias", "not supported (must be false)");
  if (t.boolean("tie_word_embeddings", false) || top.boolean("tie_word_embeddings", false))
    t.bad("tie_word_embeddings", "not supported (V4.1 has its own head.weight; must be false)");
  c.gate_temp = t.real("gate_temp", 0, 1e6, 1.0, true);
  c.norm_topk_prob = t.boolean("norm_topk_prob", true);
  c.route_scale = t.real(K("route_scale", "routed_scaling_factor"), 0, 1e6, 1.0, true);
  c.swiglu_limit = t.real("swiglu_limit", 0, 1e9, 0.0);
  c.norm_eps = t.real(K("norm_eps", "rms_norm_eps"), 0, 1, 1e-20, true);
  c.max_position_embeddings = t.integer("max_position_embeddings", 1, kMaxPositions,
                                        top.integer("max_position_embeddings", 1, kMaxPositions, 4096));
  c.window_size = t.integer(K("window_size", "sliding_window"), 1, std::min(kMaxWindow, c.max_position_embeddings));
  c.compress_ratios = t.integers("compress_ratios", 0, 1 << 12, kMaxLayers + 64);
  if (static_cast<int64_t>(c.compress_ratios.size()) < c.n_layers)
    t.bad("compress_ratios", "needs one entry per layer (" + std::to_string(c.n_layers) + ")");
  c.kv_source_layers = t.integers(K("kv_source_layers", "kv_source_layer_ids"), 0, c.n_layers - 1, c.n_layers);
  c.index_source_layers = t.integers(K("index_source_layers", "index_source_layer_ids"), 0, c.n_layers - 1, c.n_layers);
  const bool indexed = !c.index_source_layers.empty();
  c.index_n_heads = t.integer("index_n_heads", indexed ? 1 : 0, kMaxHeads, indexed ? std::nullopt : std::optional<int64_t>(0));
  c.index_head_dim = t.integer("index_head_dim", indexed ? 32 : 0, 4096, indexed ? std::nullopt : std::optional<int64_t>(0));
  if (c.index_head_dim % 32) t.bad("index_head_dim", "must be a multiple of 32 (FP4 keys with one scale per 32)");
  c.index_topk = t.integer("index_topk", indexed ? 1 : 0, kMaxPositions, indexed ? std::nullopt : std::optional<int64_t>(0));
  c.candidate_source_layer = t.integer(K("candidate_source_layer", "candidate_source_layer_id"), -1, c.n_layers - 1, -1);
  const bool candidates = c.candidate_source_layer >= 0;
  const std::optional<int64_t> unless_candidates = candidates ? std::nullopt : std::optional<int64_t>(0);
  c.candidate_topk_blocks = t.integer("candidate_topk_blocks", candidates ? 1 : 0, kMaxPositions, unless_candidates);
  c.candidate_block_size = t.integer("candidate_block_size", candidates ? 1 : 0, kMaxPositions, unless_candidates);
  c.hc_mult = t.integer("hc_mult", 1, 16, 4);
  c.hc_sinkhorn_iters = t.integer("hc_sinkhorn_iters", 1, 1000, 20);
  c.hc_eps = t.real("hc_eps", 0, 1, 1e-6, true);
  c.engram_layer_ids = t.integers("engram_layer_ids", 0, c.n_layers - 1, c.n_layers, std::vector<int64_t>{});
  const bool engram = !c.engram_layer_ids.empty();
  c.engram_num_embeddings = t.integers("engram_num_embeddings", 1, int64_t{1} << 40, c.n_layers, std::vector<int64_t>{});
  if (c.engram_num_embeddings.size() != c.engram_layer_ids.size())
    t.bad("engram_num_embeddings", "needs one entry per engram_layer_ids entry (" +
                                       std::to_string(c.engram_layer_ids.size()) + ")");
  c.engram_max_ngram_size = t.integer("engram_max_ngram_size", engram ? 2 : 1, 16, engram ? std::nullopt : std::optional<int64_t>(1));
  c.engram_vocab_size = t.integer("engram_vocab_size", 0, int64_t{1} << 40, 0);  // hash space (16M in the release)
  c.engram_n_heads = t.integer("engram_n_heads", engram ? 1 : 0, kMaxHeads, engram ? std::nullopt : std::optional<int64_t>(0));
  c.engram_head_dim = t.integer("engram_head_dim", engram ? 32 : 0, 4096, engram ? std::nullopt : std::optional<int64_t>(0));
  if (c.engram_head_dim % 32) t.bad("engram_head_dim", "must be a multiple of 32 (FP8 rows with one scale per 32)");
  // transformers' class says engram_pad_id, released configs engram_pad_token_id: accept both.
  c.engram_pad_id = t.integer(K("engram_pad_id", "engram_pad_token_id"), 0, c.vocab_size - 1, 2);
  c.engram_compressed_vocab_size = t.integer("engram_compressed_vocab_size", 0, kMaxVocab, 0);
  const bool mtp = c.n_mtp_layers > 0;
  c.dspark_block_size = t.integer("dspark_block_size", mtp ? 1 : 0, 256, mtp ? std::nullopt : std::optional<int64_t>(0));
  const bool dspark = mtp && c.dspark_block_size > 0;
  c.dspark_noise_token_id = t.integer("dspark_noise_token_id", 0, c.vocab_size - 1, 0);
  c.dspark_target_layer_ids = t.integers("dspark_target_layer_ids", 0, c.n_layers - 1, c.n_layers, std::vector<int64_t>{});
  if (dspark && c.dspark_target_layer_ids.empty())
    t.bad("dspark_target_layer_ids", "must list at least one layer when num_nextn_predict_layers > 0");
  // No draft head: its targets name nothing (the forward sized no buffer for them; SIGSEGV before).
  if (!dspark) c.dspark_target_layer_ids.clear();
  c.dspark_markov_rank = t.integer("dspark_markov_rank", 1, kMaxDim, 256);
  c.dspark_n_routed_experts = t.integer("dspark_n_routed_experts", 0, kMaxExperts, 0);
  c.dspark_n_activated_experts = t.integer(K("dspark_n_activated_experts", "dspark_num_experts_per_tok"), 0,
                                           c.experts_for(c.n_layers), 0);
  if (c.dspark_n_routed_experts > 0 && c.active_for(c.n_layers) > c.dspark_n_routed_experts)
    t.bad(K("dspark_n_activated_experts", "dspark_num_experts_per_tok"),
          "must be in [1, dspark_n_routed_experts = " + std::to_string(c.dspark_n_routed_experts) + "]");
  const ConfigFields& ids = t.has("eos_token_id") || !composite ? t : top;  // text_config, else the root
  c.bos_token_id = ids.integer("bos_token_id", 0, c.vocab_size - 1, 0);
  c.eos_token_ids = ids.find("eos_token_id") && ids.find("eos_token_id")->is_array()
                        ? ids.integers("eos_token_id", 0, c.vocab_size - 1, 16)
                        : std::vector<int64_t>{ids.integer("eos_token_id", 0, c.vocab_size - 1, 1)};
  const ConfigFields& img = composite && top.has("image_token_id") ? top : t;  // the release: at the root
  c.image_token_id = img.integer("image_token_id", -1, c.vocab_size - 1, -1);
  c.has_vision = composite ? top.has("vision_config") : t.integer("vision_n_layers", 0, kMaxLayers, 0) > 0;

  // RoPE: main table (ratio-0 layers, DSpark) without YaRN; compress table with YaRN when original_seq_len > 0.
  c.rope_main.theta = t.real("rope_theta", 1, 1e12, 10000.0);
  c.rope_compress.theta = t.real("compress_rope_theta", 1, 1e12, 160000.0);
  int64_t orig = 0;
  double factor = 1.0, beta_fast = 32.0, beta_slow = 1.0;
  const json* scaling = composite ? t.object("rope_scaling") : nullptr;
  if (scaling || !composite) {
    ConfigFields s(scaling ? *scaling : tj, scaling ? "text_config.rope_scaling" : "");
    if (scaling) s.choice(Key("rope_type", "type"), {"yarn"}, true);
    orig = s.integer(scaling ? "original_max_position_embeddings" : "original_seq_len", 0, kMaxPositions, 0);
    factor = s.real(scaling ? "factor" : "rope_factor", 1, 1e6, 1.0);
    beta_fast = s.real("beta_fast", 0, 1e6, 32.0, true);
    beta_slow = s.real("beta_slow", 0, beta_fast, 1.0, true);
  }
  if (orig > 0) {
    c.rope_compress.yarn = true;
    c.rope_compress.factor = factor;
    c.rope_compress.original_max_position = orig;
    c.rope_compress.beta_fast = beta_fast;
    c.rope_compress.beta_slow = beta_slow;
    c.rope_compress.attention_factor = 1.0;  // frequency-only YaRN, no mscale (spec §2.4)
  }

  // Quantization: the composite layout says so in quantization_config; the flat one in dtype.
  const json* qj = composite ? top.object("quantization_config") : nullptr;
  if (qj) {
    ConfigFields q(*qj, "quantization_config");
    q.choice("quant_method", {"fp8"}, true);
    q.choice("fmt", {"e4m3"});
    q.choice("scale_fmt", {"ue8m0"});
    q.choice("activation_scheme", {"dynamic"});
    auto b = q.integers("weight_block_size", 1, 4096, 2, std::vector<int64_t>{c.fp8_block, c.fp8_block});
    if (b.size() != 2 || b[0] != b[1] || (b[0] & (b[0] - 1)))
      q.bad("weight_block_size", "must be a square [b, b] with b a power of two in [1, 4096]");
    c.fp8_block = b[0];
    c.experts_fp4 = q.choice("expert_dtype", {"fp4", "fp8"}) == "fp4";
  } else if (!composite) {
    c.experts_fp4 = t.choice("expert_dtype", {"fp4", "fp8"}) == "fp4";
  }

  // Relations between fields, and the derived roles.
  const int64_t L = c.n_layers;
  auto increasing = [&](const std::vector<int64_t>& v, const char* flat, const char* hf) {
    for (size_t i = 1; i < v.size(); ++i)
      if (v[i] <= v[i - 1]) t.bad(K(flat, hf), "must list distinct layers in increasing order");
  };
  increasing(c.kv_source_layers, "kv_source_layers", "kv_source_layer_ids");
  increasing(c.index_source_layers, "index_source_layers", "index_source_layer_ids");
  increasing(c.engram_layer_ids, "engram_layer_ids", "engram_layer_ids");
  c.is_kv_source.assign(L, false);
  c.is_index_source.assign(L, false);
  c.kv_source_of.assign(L, -1);
  c.index_source_of.assign(L, -1);
  for (int64_t s : c.kv_source_layers) {
    if (c.compress_ratios[s] <= 0)
      t.bad(K("kv_source_layers", "kv_source_layer_ids"), "layer " + std::to_string(s) + " has compress ratio 0; a KV source needs a ratio > 0");
    c.is_kv_source[s] = true;
    c.last_kv_source = std::max(c.last_kv_source, s);
  }
  for (int64_t s : c.index_source_layers) {
    if (c.compress_ratios[s] <= 0)
      t.bad(K("index_source_layers", "index_source_layer_ids"), "layer " + std::to_string(s) + " has compress ratio 0; an index source needs a ratio > 0");
    c.is_index_source[s] = true;
  }
  int64_t kv = -1, ix = -1;
  for (int64_t l = 0; l < L; ++l) {
    if (c.is_kv_source[l]) kv = l;
    if (c.is_index_source[l]) ix = l;
    if (c.compress_ratios[l] == 0) continue;
    if (kv < 0 || ix < 0)
      t.bad("compress_ratios", "layer " + std::to_string(l) + " has ratio " + std::to_string(c.compress_ratios[l]) +
                                   " but no KV source and index source at or below it");
    if (c.compress_ratios[kv] != c.compress_ratios[l])
      t.bad("compress_ratios", "layer " + std::to_string(l) + " reads KV source " + std::to_string(kv) + " of another ratio");
    c.kv_source_of[l] = kv;
    c.index_source_of[l] = ix;
  }
  for (int64_t l = 0; l < L; ++l)
    if (c.is_index_source[l] && !c.is_kv_source[l] && c.kv_source_of[l] < 0)
      t.bad(K("index_source_layers", "index_source_layer_ids"), "index source " + std::to_string(l) + " has no KV source for its keys");
  if (c.candidate_source_layer >= 0 && !c.is_index_source[c.candidate_source_layer])
    t.bad(K("candidate_source_layer", "candidate_source_layer_id"), "must be one of the index source layers");
  return c;
}

V41Config V41Config::from_file(const std::string& path) { return parse_json_file(path, from_json); }

}  // namespace deepinfer::model
