#include "model/deepseek_v4/v4_config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_file.h"

namespace deepinfer::model {
namespace {

using nlohmann::json;

template <typename T>
T required(const json& j, const char* key) {
  check(j.contains(key) && !j.at(key).is_null(), "config: missing required key '", key, "'");
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    fail("config: key '", key, "' has the wrong type: ", j.at(key).dump());
  }
}

template <typename T>
T optional(const json& j, const char* key, T fallback) {
  if (!j.contains(key) || j.at(key).is_null()) return fallback;
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    fail("config: key '", key, "' has the wrong type: ", j.at(key).dump());
  }
}

// transformers' default YaRN attention factor when none is given: 0.1 ln(factor) + 1.
double default_yarn_mscale(double factor) { return factor <= 1 ? 1.0 : 0.1 * std::log(factor) + 1.0; }

RopeTable parse_rope_parameters(const json& p, const char* which, int64_t head_dim, int64_t* rope_dim) {
  RopeTable t;
  t.theta = required<double>(p, "rope_theta");
  std::string type = optional<std::string>(p, "rope_type", optional<std::string>(p, "type", "default"));
  double prf = optional<double>(p, "partial_rotary_factor", 1.0);
  int64_t dim = static_cast<int64_t>(static_cast<double>(head_dim) * prf);  // as transformers: int(head_dim * prf)
  check(*rope_dim == 0 || *rope_dim == dim, "config: rope_parameters.", which, " gives a rotary dim of ", dim,
        " but another table gives ", *rope_dim);
  *rope_dim = dim;
  if (type == "yarn") {
    t.yarn = true;
    t.factor = required<double>(p, "factor");
    t.original_max_position = required<int64_t>(p, "original_max_position_embeddings");
    t.beta_fast = optional<double>(p, "beta_fast", 32.0);
    t.beta_slow = optional<double>(p, "beta_slow", 1.0);
    t.attention_factor = optional<double>(p, "attention_factor", default_yarn_mscale(t.factor));
  } else {
    check(type == "default", "config: rope_parameters.", which, ".rope_type '", type,
          "' is not supported (expected 'default' or 'yarn')");
  }
  return t;
}

// Released schema: rope_theta for the main table, compress_rope_theta + rope_scaling (YaRN, no mscale)
// for the compressed layers' table.
void parse_released_rope(const json& j, V4Config& c) {
  c.rope_dim = required<int64_t>(j, "qk_rope_head_dim");
  c.rope_main.theta = optional<double>(j, "rope_theta", 10000.0);
  c.rope_compress.theta = optional<double>(j, "compress_rope_theta", c.rope_main.theta);
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    const json& s = j["rope_scaling"];
    std::string type = optional<std::string>(s, "rope_type", optional<std::string>(s, "type", ""));
    check(type == "yarn", "config: rope_scaling type '", type, "' is not supported (expected 'yarn')");
    RopeTable& t = c.rope_compress;
    t.yarn = true;
    t.factor = required<double>(s, "factor");
    t.original_max_position = required<int64_t>(s, "original_max_position_embeddings");
    t.beta_fast = optional<double>(s, "beta_fast", 32.0);
    t.beta_slow = optional<double>(s, "beta_slow", 1.0);
  }
}

AttentionKind kind_from_layer_type(const std::string& t) {
  if (t == "sliding_attention") return AttentionKind::kSliding;
  if (t == "compressed_sparse_attention") return AttentionKind::kCSA;
  if (t == "heavily_compressed_attention") return AttentionKind::kHCA;
  fail("config: unknown layer_types entry '", t, "'");
}

void parse_layers(const json& j, V4Config& c) {
  const int64_t L = c.num_layers;
  if (j.contains("layer_types")) {  // transformers' schema
    auto types = required<std::vector<std::string>>(j, "layer_types");
    check(static_cast<int64_t>(types.size()) == L, "config: layer_types has ", types.size(),
          " entries for num_hidden_layers ", L);
    const json& rates = j.at("compress_rates");
    for (auto& t : types) {
      AttentionKind k = kind_from_layer_type(t);
      c.attention.push_back(k);
      c.compress_ratio.push_back(k == AttentionKind::kSliding ? 0 : required<int64_t>(rates, t.c_str()));
    }
    auto mlp = optional<std::vector<std::string>>(j, "mlp_layer_types", std::vector<std::string>(L, "moe"));
    check(static_cast<int64_t>(mlp.size()) == L, "config: mlp_layer_types has ", mlp.size(), " entries for ", L,
          " layers");
    for (auto& m : mlp) {
      check(m == "moe" || m == "hash_moe", "config: unknown mlp_layer_types entry '", m, "'");
      c.hash_routed.push_back(m == "hash_moe");
    }
    return;
  }
  // Released schema: compress_ratios may be longer than the layer count (trailing MTP/draft entries).
  auto ratios = required<std::vector<int64_t>>(j, "compress_ratios");
  check(static_cast<int64_t>(ratios.size()) >= L, "config: compress_ratios has ", ratios.size(),
        " entries, fewer than num_hidden_layers ", L);
  int64_t hash_layers = optional<int64_t>(j, "num_hash_layers", 0);
  check(hash_layers >= 0 && hash_layers <= L, "config: num_hash_layers ", hash_layers, " out of range");
  for (int64_t l = 0; l < L; ++l) {
    int64_t r = ratios[l];
    check(r == 0 || r == 4 || r >= 8, "config: compress_ratios[", l, "] = ", r,
          " is not a V4 ratio (0 sliding, 4 CSA, >=8 HCA)");
    c.compress_ratio.push_back(r);
    c.attention.push_back(r == 0 ? AttentionKind::kSliding : r == 4 ? AttentionKind::kCSA : AttentionKind::kHCA);
    c.hash_routed.push_back(l < hash_layers);
  }
}

}  // namespace

V4Config V4Config::from_json(const json& j) {
  check(j.is_object(), "config: not a JSON object");
  std::string model_type = optional<std::string>(j, "model_type", "deepseek_v4");
  check(model_type == "deepseek_v4", "config: model_type '", model_type, "' is not deepseek_v4");
  V4Config c;
  c.vocab_size = required<int64_t>(j, "vocab_size");
  c.hidden_size = required<int64_t>(j, "hidden_size");
  c.num_layers = required<int64_t>(j, "num_hidden_layers");
  c.num_heads = required<int64_t>(j, "num_attention_heads");
  c.head_dim = required<int64_t>(j, "head_dim");
  int64_t kv_heads = optional<int64_t>(j, "num_key_value_heads", 1);
  check(kv_heads == 1, "config: num_key_value_heads must be 1 (V4 has one shared K=V latent), got ", kv_heads);
  c.q_lora_rank = required<int64_t>(j, "q_lora_rank");
  c.o_groups = required<int64_t>(j, "o_groups");
  c.o_lora_rank = required<int64_t>(j, "o_lora_rank");
  c.n_routed_experts = required<int64_t>(j, "n_routed_experts");
  c.n_shared_experts = optional<int64_t>(j, "n_shared_experts", 1);
  c.experts_per_token = required<int64_t>(j, "num_experts_per_tok");
  c.moe_intermediate_size = required<int64_t>(j, "moe_intermediate_size");
  c.scoring_func = optional<std::string>(j, "scoring_func", "sqrtsoftplus");
  c.routed_scaling_factor = optional<double>(j, "routed_scaling_factor", 1.0);
  c.norm_topk_prob = optional<bool>(j, "norm_topk_prob", true);
  c.swiglu_limit = optional<double>(j, "swiglu_limit", 0.0);
  c.sliding_window = required<int64_t>(j, "sliding_window");
  c.index_n_heads = optional<int64_t>(j, "index_n_heads", 0);
  c.index_head_dim = optional<int64_t>(j, "index_head_dim", 0);
  c.index_topk = optional<int64_t>(j, "index_topk", 0);
  c.hc_mult = optional<int64_t>(j, "hc_mult", 4);
  c.hc_sinkhorn_iters = optional<int64_t>(j, "hc_sinkhorn_iters", 20);
  c.hc_eps = optional<double>(j, "hc_eps", 1e-6);
  c.rms_norm_eps = optional<double>(j, "rms_norm_eps", 1e-6);
  c.bos_token_id = optional<int64_t>(j, "bos_token_id", 0);
  c.eos_token_id = optional<int64_t>(j, "eos_token_id", 1);
  c.tie_word_embeddings = optional<bool>(j, "tie_word_embeddings", false);

  parse_layers(j, c);
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object() && j["rope_parameters"].contains("main")) {
    const json& rp = j["rope_parameters"];
    c.rope_main = parse_rope_parameters(rp.at("main"), "main", c.head_dim, &c.rope_dim);
    check(rp.contains("compress"), "config: rope_parameters has 'main' but no 'compress'");
    c.rope_compress = parse_rope_parameters(rp.at("compress"), "compress", c.head_dim, &c.rope_dim);
    if (j.contains("qk_rope_head_dim"))
      check(j["qk_rope_head_dim"].get<int64_t>() == c.rope_dim, "config: qk_rope_head_dim ",
            j["qk_rope_head_dim"].dump(), " disagrees with rope_parameters (", c.rope_dim, ")");
  } else {
    parse_released_rope(j, c);
  }

  if (j.contains("quantization_config") && !j["quantization_config"].is_null()) {
    const json& q = j["quantization_config"];
    std::string method = optional<std::string>(q, "quant_method", "");
    check(method == "fp8", "config: quantization_config.quant_method '", method, "' is not supported (expected fp8)");
    std::string fmt = optional<std::string>(q, "fmt", "e4m3");
    check(fmt == "e4m3", "config: quantization_config.fmt '", fmt, "' is not supported (expected e4m3)");
    std::string scale_fmt = optional<std::string>(q, "scale_fmt", "ue8m0");
    check(scale_fmt == "ue8m0", "config: quantization_config.scale_fmt '", scale_fmt, "' is not supported");
    QuantConfig qc;
    auto block = optional<std::vector<int64_t>>(q, "weight_block_size", {128, 128});
    check(block.size() == 2 && block[0] > 0 && block[1] > 0, "config: weight_block_size must be [n, k]");
    qc.block_n = block[0];
    qc.block_k = block[1];
    std::string expert_dtype = optional<std::string>(j, "expert_dtype", optional<std::string>(q, "expert_dtype", "fp8"));
    check(expert_dtype == "fp4" || expert_dtype == "fp8", "config: expert_dtype '", expert_dtype,
          "' is not supported (fp4 or fp8)");
    qc.experts_fp4 = expert_dtype == "fp4";
    c.quant = qc;
  }

  // Consistency.
  check(c.vocab_size > 0 && c.hidden_size > 0 && c.num_layers > 0 && c.num_heads > 0 && c.head_dim > 0,
        "config: sizes must be positive");
  check(c.rope_dim > 0 && c.rope_dim <= c.head_dim && c.rope_dim % 2 == 0, "config: rotary dim ", c.rope_dim,
        " must be even and at most head_dim ", c.head_dim);
  check(c.num_heads % c.o_groups == 0, "config: num_attention_heads ", c.num_heads, " not divisible by o_groups ",
        c.o_groups);
  check(c.experts_per_token > 0 && c.experts_per_token <= c.n_routed_experts, "config: num_experts_per_tok ",
        c.experts_per_token, " must be in 1..n_routed_experts (", c.n_routed_experts, ")");
  check(c.scoring_func == "sqrtsoftplus" || c.scoring_func == "softmax" || c.scoring_func == "sigmoid",
        "config: scoring_func '", c.scoring_func, "' is not supported");
  check(c.sliding_window > 0, "config: sliding_window must be positive");
  check(c.hc_mult > 0 && c.hc_sinkhorn_iters > 0, "config: hc_mult and hc_sinkhorn_iters must be positive");
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (c.attention[l] == AttentionKind::kCSA) {
      check(c.index_n_heads > 0 && c.index_head_dim >= c.rope_dim && c.index_topk > 0, "config: layer ", l,
            " is CSA but index_n_heads/index_head_dim/index_topk are not set");
    }
    if (c.attention[l] == AttentionKind::kCSA && c.quant)
      check((c.index_head_dim & (c.index_head_dim - 1)) == 0, "config: index_head_dim ", c.index_head_dim,
            " must be a power of two for the quantized indexer's Hadamard rotation");
    check(c.attention[l] == AttentionKind::kSliding || c.compress_ratio[l] > 0, "config: layer ", l,
          " compresses with ratio ", c.compress_ratio[l]);
  }
  return c;
}

V4Config V4Config::from_file(const std::string& path) { return parse_json_file(path, from_json); }

}  // namespace deepinfer::model
