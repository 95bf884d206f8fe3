#include "model/deepseek_v41/v41_config.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_file.h"

namespace deepinfer::model {
namespace {

using nlohmann::json;

// Looks a key up under its flat (reference) name or its composite (released text_config) name.
struct Reader {
  const json& j;
  bool flat;
  const json* find(const char* flat_key, const char* hf_key) const {
    const char* key = flat ? flat_key : hf_key;
    if (j.contains(key) && !j.at(key).is_null()) return &j.at(key);
    if (j.contains(flat_key) && !j.at(flat_key).is_null()) return &j.at(flat_key);  // accept both
    return nullptr;
  }
  template <typename T>
  T req(const char* flat_key, const char* hf_key) const {
    const json* v = find(flat_key, hf_key);
    check(v != nullptr, "config: missing required key '", flat ? flat_key : hf_key, "'");
    try {
      return v->get<T>();
    } catch (const json::exception&) {
      fail("config: key '", flat ? flat_key : hf_key, "' has the wrong type: ", v->dump());
    }
  }
  template <typename T>
  T opt(const char* flat_key, const char* hf_key, T fallback) const {
    const json* v = find(flat_key, hf_key);
    if (!v) return fallback;
    try {
      return v->get<T>();
    } catch (const json::exception&) {
      fail("config: key '", flat ? flat_key : hf_key, "' has the wrong type: ", v->dump());
    }
  }
};

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
  // Composite: {"text_config": {...}, "quantization_config": {...}, "image_token_id": ...}; flat otherwise.
  const bool composite = root.contains("text_config");
  const json& t = composite ? root.at("text_config") : root;
  Reader r{t, !composite};
  V41Config c;
  c.vocab_size = r.req<int64_t>("vocab_size", "vocab_size");
  c.dim = r.req<int64_t>("dim", "hidden_size");
  c.moe_inter_dim = r.req<int64_t>("moe_inter_dim", "moe_intermediate_size");
  c.n_layers = r.req<int64_t>("n_layers", "num_hidden_layers");
  c.n_mtp_layers = r.opt<int64_t>("n_mtp_layers", "num_nextn_predict_layers", 0);
  c.n_heads = r.req<int64_t>("n_heads", "num_attention_heads");
  c.head_dim = r.req<int64_t>("head_dim", "head_dim");
  c.rope_head_dim = r.req<int64_t>("rope_head_dim", "qk_rope_head_dim");
  c.q_lora_rank = r.req<int64_t>("q_lora_rank", "q_lora_rank");
  c.o_groups = r.req<int64_t>("o_groups", "o_groups");
  c.o_lora_rank = r.req<int64_t>("o_lora_rank", "o_lora_rank");
  c.n_routed_experts = r.req<int64_t>("n_routed_experts", "n_routed_experts");
  c.n_shared_experts = r.opt<int64_t>("n_shared_experts", "n_shared_experts", 1);
  c.n_activated_experts = r.req<int64_t>("n_activated_experts", "num_experts_per_tok");
  c.score_func = r.opt<std::string>("score_func", "scoring_func", "sqrtsoftplus");
  c.gate_temp = r.opt<double>("gate_temp", "gate_temp", 1.0);
  c.norm_topk_prob = r.opt<bool>("norm_topk_prob", "norm_topk_prob", true);
  c.route_scale = r.opt<double>("route_scale", "routed_scaling_factor", 1.0);
  c.swiglu_limit = r.opt<double>("swiglu_limit", "swiglu_limit", 0.0);
  c.norm_eps = r.opt<double>("norm_eps", "rms_norm_eps", 1e-20);
  c.window_size = r.req<int64_t>("window_size", "sliding_window");
  c.compress_ratios = r.req<std::vector<int64_t>>("compress_ratios", "compress_ratios");
  c.kv_source_layers = r.req<std::vector<int64_t>>("kv_source_layers", "kv_source_layer_ids");
  c.index_source_layers = r.req<std::vector<int64_t>>("index_source_layers", "index_source_layer_ids");
  c.index_n_heads = r.req<int64_t>("index_n_heads", "index_n_heads");
  c.index_head_dim = r.req<int64_t>("index_head_dim", "index_head_dim");
  c.index_topk = r.req<int64_t>("index_topk", "index_topk");
  c.candidate_source_layer = r.opt<int64_t>("candidate_source_layer", "candidate_source_layer_id", -1);
  c.candidate_topk_blocks = r.opt<int64_t>("candidate_topk_blocks", "candidate_topk_blocks", 0);
  c.candidate_block_size = r.opt<int64_t>("candidate_block_size", "candidate_block_size", 0);
  c.hc_mult = r.opt<int64_t>("hc_mult", "hc_mult", 4);
  c.hc_sinkhorn_iters = r.opt<int64_t>("hc_sinkhorn_iters", "hc_sinkhorn_iters", 20);
  c.hc_eps = r.opt<double>("hc_eps", "hc_eps", 1e-6);
  c.engram_layer_ids = r.opt<std::vector<int64_t>>("engram_layer_ids", "engram_layer_ids", {});
  c.engram_num_embeddings = r.opt<std::vector<int64_t>>("engram_num_embeddings", "engram_num_embeddings", {});
  c.engram_max_ngram_size = r.opt<int64_t>("engram_max_ngram_size", "engram_max_ngram_size", 1);
  c.engram_vocab_size = r.opt<int64_t>("engram_vocab_size", "engram_vocab_size", 0);
  c.engram_n_heads = r.opt<int64_t>("engram_n_heads", "engram_n_heads", 0);
  c.engram_head_dim = r.opt<int64_t>("engram_head_dim", "engram_head_dim", 0);
  // transformers' class says engram_pad_id, released configs engram_pad_token_id: accept both.
  c.engram_pad_id = r.opt<int64_t>("engram_pad_id", "engram_pad_token_id", r.opt<int64_t>("engram_pad_id", "engram_pad_id", 2));
  c.engram_compressed_vocab_size = r.opt<int64_t>("engram_compressed_vocab_size", "engram_compressed_vocab_size", 0);
  c.dspark_block_size = r.opt<int64_t>("dspark_block_size", "dspark_block_size", 0);
  c.dspark_noise_token_id = r.opt<int64_t>("dspark_noise_token_id", "dspark_noise_token_id", 0);
  c.dspark_target_layer_ids = r.opt<std::vector<int64_t>>("dspark_target_layer_ids", "dspark_target_layer_ids", {});
  c.dspark_markov_rank = r.opt<int64_t>("dspark_markov_rank", "dspark_markov_rank", 256);
  c.dspark_n_routed_experts = r.opt<int64_t>("dspark_n_routed_experts", "dspark_n_routed_experts", 0);
  c.dspark_n_activated_experts = r.opt<int64_t>("dspark_n_activated_experts", "dspark_num_experts_per_tok", 0);
  c.image_token_id = composite ? root.value("image_token_id", t.value("image_token_id", int64_t{-1}))
                               : t.value("image_token_id", int64_t{-1});
  c.has_vision = composite ? root.contains("vision_config") && !root.at("vision_config").is_null()
                           : t.value("vision_n_layers", int64_t{0}) > 0;

  // RoPE: main table (ratio-0 layers, DSpark) without YaRN; compress table with YaRN when original_seq_len > 0.
  c.rope_main.theta = r.opt<double>("rope_theta", "rope_theta", 10000.0);
  c.rope_compress.theta = r.opt<double>("compress_rope_theta", "compress_rope_theta", 160000.0);
  int64_t orig = 0;
  double factor = 1.0, beta_fast = 32.0, beta_slow = 1.0;
  if (composite) {
    if (t.contains("rope_scaling") && t.at("rope_scaling").is_object()) {
      const json& s = t.at("rope_scaling");
      orig = s.value("original_max_position_embeddings", int64_t{0});
      factor = s.value("factor", 1.0);
      beta_fast = s.value("beta_fast", 32.0);
      beta_slow = s.value("beta_slow", 1.0);
    }
  } else {
    orig = t.value("original_seq_len", int64_t{0});
    factor = t.value("rope_factor", 1.0);
    beta_fast = t.value("beta_fast", 32.0);
    beta_slow = t.value("beta_slow", 1.0);
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
  if (composite && root.contains("quantization_config")) {
    const json& q = root.at("quantization_config");
    if (q.contains("weight_block_size")) {
      auto b = q.at("weight_block_size").get<std::vector<int64_t>>();
      check(b.size() == 2 && b[0] == b[1], "config: quantization_config.weight_block_size must be square");
      c.fp8_block = b[0];
    }
    c.experts_fp4 = q.value("expert_dtype", std::string("fp4")) == "fp4";
  } else if (!composite) {
    c.experts_fp4 = t.value("expert_dtype", std::string("fp4")) == "fp4";
  }

  // Validation and derived roles.
  const int64_t L = c.n_layers;
  check(L > 0 && c.dim > 0 && c.head_dim > c.rope_head_dim && c.rope_head_dim % 2 == 0, "config: bad shapes");
  check(static_cast<int64_t>(c.compress_ratios.size()) >= L, "config: compress_ratios has ",
        c.compress_ratios.size(), " entries for ", L, " layers");
  check(c.n_heads % c.o_groups == 0, "config: n_heads must be a multiple of o_groups");
  check(c.engram_num_embeddings.size() == c.engram_layer_ids.size(),
        "config: engram_num_embeddings needs one entry per engram layer");
  c.is_kv_source.assign(L, false);
  c.is_index_source.assign(L, false);
  c.kv_source_of.assign(L, -1);
  c.index_source_of.assign(L, -1);
  for (int64_t s : c.kv_source_layers) {
    check(s >= 0 && s < L && c.compress_ratios[s] > 0, "config: kv source layer ", s, " must have a ratio > 0");
    c.is_kv_source[s] = true;
    c.last_kv_source = std::max(c.last_kv_source, s);
  }
  for (int64_t s : c.index_source_layers) {
    check(s >= 0 && s < L && c.compress_ratios[s] > 0, "config: index source layer ", s, " must have a ratio > 0");
    c.is_index_source[s] = true;
  }
  int64_t kv = -1, ix = -1;
  for (int64_t l = 0; l < L; ++l) {
    if (c.is_kv_source[l]) kv = l;
    if (c.is_index_source[l]) ix = l;
    if (c.compress_ratios[l] == 0) continue;
    check(kv >= 0 && ix >= 0, "config: layer ", l, " has ratio ", c.compress_ratios[l],
          " but no KV / index source at or below it");
    check(c.compress_ratios[kv] == c.compress_ratios[l], "config: layer ", l, " reads KV source ", kv,
          " of another ratio");
    c.kv_source_of[l] = kv;
    c.index_source_of[l] = ix;
  }
  for (int64_t l = 0; l < L; ++l)
    if (c.is_index_source[l]) check(c.is_kv_source[l] || c.kv_source_of[l] >= 0, "config: index source ", l, " has no keys");
  if (c.candidate_source_layer >= 0)
    check(c.candidate_source_layer < L && c.is_index_source[c.candidate_source_layer] && c.candidate_block_size > 0 &&
              c.candidate_topk_blocks > 0,
          "config: candidate_source_layer must be an index source with candidate_topk_blocks/block_size > 0");
  for (int64_t t2 : c.dspark_target_layer_ids) check(t2 >= 0 && t2 < L, "config: dspark target ", t2, " out of range");
  return c;
}

V41Config V41Config::from_file(const std::string& path) { return parse_json_file(path, from_json); }

}  // namespace deepinfer::model
