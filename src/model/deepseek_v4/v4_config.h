// DeepSeek-V4 hyper-parameters, read from either config.json schema: the released one
// (compress_ratios, num_hash_layers, qk_rope_head_dim, rope_scaling) or transformers'
// (layer_types, compress_rates, mlp_layer_types, rope_parameters with main/compress).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace deepinfer::model {

// One RoPE frequency table ("main" for sliding-only layers, "compress" for CSA/HCA layers).
struct RopeTable {
  double theta = 10000.0;
  bool yarn = false;
  double factor = 1.0;              // YaRN: frequency division for the slow pairs
  int64_t original_max_position = 0;
  double beta_fast = 32.0, beta_slow = 1.0;
  double attention_factor = 1.0;    // multiplies cos/sin (transformers' YaRN mscale; 1 in the release)
};

// Weight quantization of a released checkpoint (absent for float checkpoints such as the goldens).
struct QuantConfig {
  int64_t block_n = 128, block_k = 128;  // FP8 weight scale blocks
  bool experts_fp4 = false;              // routed experts as MXFP4 (expert_dtype fp4)
};

enum class AttentionKind { kSliding, kCSA, kHCA };

struct V4Config {
  int64_t vocab_size = 0, hidden_size = 0, num_layers = 0;
  int64_t num_heads = 0, head_dim = 0, rope_dim = 0;
  int64_t q_lora_rank = 0, o_groups = 0, o_lora_rank = 0;
  int64_t n_routed_experts = 0, n_shared_experts = 1, experts_per_token = 0, moe_intermediate_size = 0;
  std::string scoring_func = "sqrtsoftplus";
  double routed_scaling_factor = 1.0;
  bool norm_topk_prob = true;
  double swiglu_limit = 0.0;  // 0 = no clamp
  std::vector<AttentionKind> attention;  // per layer
  std::vector<int64_t> compress_ratio;   // per layer: 0 (sliding only) or the CSA/HCA ratio
  std::vector<bool> hash_routed;         // per layer: tid2eid routing
  int64_t sliding_window = 0;
  int64_t index_n_heads = 0, index_head_dim = 0, index_topk = 0;
  RopeTable rope_main, rope_compress;
  int64_t hc_mult = 4, hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6, rms_norm_eps = 1e-6;
  std::optional<QuantConfig> quant;
  int64_t bos_token_id = 0, eos_token_id = 1;
  int64_t max_position_embeddings = 4096;  // the context the checkpoint was trained for
  bool tie_word_embeddings = false;

  // Parses and validates; every unknown or inconsistent value is a deepinfer::Error naming the key.
  static V4Config from_json(const nlohmann::json& j);
  static V4Config from_file(const std::string& path);
  const RopeTable& rope_for_layer(int64_t layer) const {
    return compress_ratio[layer] == 0 ? rope_main : rope_compress;
  }

 private:
  static V4Config parse(const nlohmann::json& j);
};

}  // namespace deepinfer::model
