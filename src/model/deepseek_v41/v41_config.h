// DeepSeek-V4.1 hyper-parameters, read from the released composite config.json (text_config +
// quantization_config) or from the flat inference/config.json spelling DeepSeek's reference reads.
// Layer roles (spec §5.1) are derived here once: which KV source / index source governs each layer.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/deepseek_v4/v4_config.h"  // RopeTable

namespace deepinfer::model {

struct V41Config {
  int64_t vocab_size = 0, dim = 0, moe_inter_dim = 0, n_layers = 0, n_mtp_layers = 0;
  int64_t n_heads = 0, head_dim = 0, rope_head_dim = 0, q_lora_rank = 0, o_groups = 0, o_lora_rank = 0;
  int64_t n_routed_experts = 0, n_shared_experts = 1, n_activated_experts = 0;
  std::string score_func = "sqrtsoftplus";
  double gate_temp = 1.0, route_scale = 1.0, swiglu_limit = 0.0, norm_eps = 1e-20;
  bool norm_topk_prob = true;
  int64_t window_size = 0;
  std::vector<int64_t> compress_ratios;  // n_layers + n_mtp_layers entries
  std::vector<int64_t> kv_source_layers, index_source_layers;
  RopeTable rope_main, rope_compress;
  int64_t index_n_heads = 0, index_head_dim = 0, index_topk = 0;
  int64_t candidate_source_layer = -1, candidate_topk_blocks = 0, candidate_block_size = 0;
  int64_t hc_mult = 4, hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;
  std::vector<int64_t> engram_layer_ids, engram_num_embeddings;
  int64_t engram_max_ngram_size = 1, engram_vocab_size = 0, engram_n_heads = 0, engram_head_dim = 0;
  int64_t engram_pad_id = 2, engram_compressed_vocab_size = 0;
  int64_t dspark_block_size = 0, dspark_noise_token_id = 0, dspark_markov_rank = 256;
  int64_t dspark_n_routed_experts = 0, dspark_n_activated_experts = 0;
  std::vector<int64_t> dspark_target_layer_ids;
  int64_t max_position_embeddings = 4096;  // the context the checkpoint was trained for
  int64_t bos_token_id = 0;
  std::vector<int64_t> eos_token_ids{1};
  int64_t image_token_id = -1;  // every position of an image span carries it (spec §5.7); -1: none
  bool has_vision = false;      // composite vision_config / flat vision_n_layers > 0
  int64_t fp8_block = 32;      // quantization_config.weight_block_size (square) and activation block
  bool experts_fp4 = true;

  // Derived roles, per backbone layer.
  std::vector<bool> is_kv_source, is_index_source;
  std::vector<int64_t> kv_source_of, index_source_of;  // governing source layer (-1 when ratio 0)
  int64_t last_kv_source = -1;

  bool has_engram(int64_t l) const;
  int64_t engram_index(int64_t l) const;  // position in engram_layer_ids, or -1
  int64_t experts_for(int64_t layer) const { return layer < n_layers ? n_routed_experts : (dspark_n_routed_experts ? dspark_n_routed_experts : n_routed_experts); }
  int64_t active_for(int64_t layer) const { return layer < n_layers ? n_activated_experts : (dspark_n_activated_experts ? dspark_n_activated_experts : n_activated_experts); }
  std::string role(int64_t l) const;  // human-readable layer role
  // Packed per-sequence state (spec §6.1): global bytes per token (compressed KV rows FP4 + E4M3 per 16,
  // index keys FP4 + UE8M0 per 32, at KV sources), and the fixed window rings (FP8 + UE8M0 per 32) of
  // every layer and DSpark stage. 890 B/token and 2,906,112 B for the release.
  double packed_bytes_per_token() const;
  int64_t packed_ring_bytes() const;

  // Either spelling (composite or flat). Every field is checked for type, range and its relations to
  // the others: a deepinfer::Error names the field, the value and what is allowed.
  static V41Config from_json(const nlohmann::json& j);
  static V41Config from_file(const std::string& path);

 private:
  static V41Config parse(const nlohmann::json& j);
};

}  // namespace deepinfer::model
