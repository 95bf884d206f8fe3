#include "model/deepseek_v4/v4_config.h"

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_file.h"
#include "model/config_fields.h"

namespace deepinfer::model {
namespace {

using nlohmann::json;

// Strict reads (no 128.5 -> 128, no true -> 1): integers, finite numbers, booleans, strings, lists.
template <typename T>
T read(const json& j, const char* key, std::optional<T> fallback) {
  ConfigFields f(j, "");
  if constexpr (std::is_same_v<T, int64_t>) {
    return f.integer(key, INT64_MIN, INT64_MAX, fallback);
  } else if constexpr (std::is_same_v<T, double>) {
    return f.real(key, -1e300, 1e300, fallback);
  } else if constexpr (std::is_same_v<T, bool>) {
    return f.boolean(key, fallback);
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    return f.integers(key, INT64_MIN, INT64_MAX, 1 << 12, fallback);
  } else {
    const json* v = f.find(key);
    if (!v) {
      if (!fallback) f.bad(key, "required");
      return *fallback;
    }
    try {
      return v->get<T>();
    } catch (const json::exception&) {
      f.bad(key, "has the wrong type");
    }
  }
}

template <typename T>
T required(const json& j, const char* key) { return read<T>(j, key, std::nullopt); }

template <typename T>
T optional(const json& j, const char* key, T fallback) { return read<T>(j, key, std::optional<T>(std::move(fallback))); }

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
  try {
    return parse(j);
  } catch (const json::exception& e) {  // a layout nlohmann cannot walk: still name the problem
    fail("config: ", e.what());
  }
}

V4Config V4Config::parse(const json& j) {
  check(j.is_object(), "config: the file must be a JSON object, got ", show(j));
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
  const json* eos = ConfigFields(j, "").find("eos_token_id");  // an id or a list of ids
  c.eos_token_id = eos && eos->is_array() && !eos->empty() ? read<int64_t>(json{{"eos_token_id", eos->at(0)}}, "eos_token_id", 1)
                   : eos && eos->is_array() ? 1 : optional<int64_t>(j, "eos_token_id", 1);
  c.tie_word_embeddings = optional<bool>(j, "tie_word_embeddings", false);

  // Ranges (caps keep a hostile value from allocating the machine away before any tensor is
  // checked) and relations between fields.
  ConfigFields f(j, "");
  f.integer("vocab_size", 1, 1 << 22);
  f.integer("hidden_size", 1, 1 << 16);
  f.integer("num_hidden_layers", 1, 1024);
  f.integer("num_attention_heads", 1, 1024);
  f.integer("head_dim", 2, 4096);
  f.integer("q_lora_rank", 1, 1 << 16);
  f.integer("o_groups", 1, c.num_heads);
  f.integer("o_lora_rank", 1, 1 << 16);
  f.integer("n_routed_experts", 1, 1 << 14);
  f.integer("n_shared_experts", 1, 64, 1);
  f.integer("moe_intermediate_size", 1, 1 << 18);
  f.integer("num_experts_per_tok", 1, c.n_routed_experts);
  f.real("routed_scaling_factor", 0, 1e6, 1.0, true);
  f.real("swiglu_limit", 0, 1e9, 0.0);
  c.max_position_embeddings = f.integer("max_position_embeddings", 1, int64_t{1} << 24, 4096);
  f.integer("sliding_window", 1, std::min<int64_t>(1 << 16, c.max_position_embeddings));
  f.integer("index_n_heads", 0, 1024, 0);
  f.integer("index_head_dim", 0, 4096, 0);
  f.integer("index_topk", 0, int64_t{1} << 24, 0);
  f.integer("hc_mult", 1, 16, 4);
  f.integer("hc_sinkhorn_iters", 1, 1000, 20);
  f.real("hc_eps", 0, 1, 1e-6, true);
  f.real("rms_norm_eps", 0, 1, 1e-6, true);
  f.integer("bos_token_id", 0, c.vocab_size - 1, 0);
  if (f.find("eos_token_id") && f.find("eos_token_id")->is_array()) f.integers("eos_token_id", 0, c.vocab_size - 1, 16);
  else f.integer("eos_token_id", 0, c.vocab_size - 1, 1);
  f.choice("hidden_act", {"silu"});
  f.choice("topk_method", {"noaux_tc"});
  if (f.boolean("attention_bias", false)) f.bad("attention_bias", "not supported (must be false)");
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
    check(method == "fp8", "config: quantization_config.quant_method = \"", method, "\": not supported (supported: fp8)");
    std::string fmt = optional<std::string>(q, "fmt", "e4m3");
    check(fmt == "e4m3", "config: quantization_config.fmt '", fmt, "' is not supported (expected e4m3)");
    std::string scale_fmt = optional<std::string>(q, "scale_fmt", "ue8m0");
    check(scale_fmt == "ue8m0", "config: quantization_config.scale_fmt '", scale_fmt, "' is not supported");
    QuantConfig qc;
    auto block = optional<std::vector<int64_t>>(q, "weight_block_size", {128, 128});
    // (shown only when wrong: the key may be absent, and a const operator[] on an absent key is undefined)
    if (!(block.size() == 2 && block[0] > 0 && block[1] > 0 && block[0] <= 4096 && block[1] <= 4096))
      fail("config: quantization_config.weight_block_size = ", show(q.value("weight_block_size", json())),
           ": must be [n, k] with n and k in [1, 4096]");
    qc.block_n = block[0];
    qc.block_k = block[1];
    std::string expert_dtype = optional<std::string>(j, "expert_dtype", optional<std::string>(q, "expert_dtype", "fp8"));
    check(expert_dtype == "fp4" || expert_dtype == "fp8", "config: expert_dtype '", expert_dtype,
          "' is not supported (fp4 or fp8)");
    qc.experts_fp4 = expert_dtype == "fp4";
    c.quant = qc;
  }

  // Relations of the RoPE tables.
  for (const RopeTable* r : {&c.rope_main, &c.rope_compress}) {
    if (!std::isfinite(r->theta) || r->theta <= 1)
      bad_field("rope_theta", std::to_string(r->theta), "must be a finite number > 1");
    if (r->yarn) {
      if (!std::isfinite(r->factor) || r->factor < 1) bad_field("rope factor", std::to_string(r->factor), "must be >= 1");
      if (r->original_max_position < 1 || r->original_max_position > (int64_t{1} << 24))
        bad_field("original_max_position_embeddings", std::to_string(r->original_max_position), "must be in [1, 16777216]");
      if (!(r->beta_fast > 0 && r->beta_slow > 0 && r->beta_slow <= r->beta_fast && std::isfinite(r->beta_fast)))
        bad_field("beta_fast / beta_slow", std::to_string(r->beta_fast) + " / " + std::to_string(r->beta_slow),
                  "must be finite with 0 < beta_slow <= beta_fast");
      if (!std::isfinite(r->attention_factor) || r->attention_factor <= 0)
        bad_field("attention_factor", std::to_string(r->attention_factor), "must be a finite number > 0");
    }
  }
  check(c.rope_dim > 0 && c.rope_dim <= c.head_dim && c.rope_dim % 2 == 0, "config: rotary dim ", c.rope_dim,
        " must be even and at most head_dim ", c.head_dim);
  check(c.num_heads % c.o_groups == 0, "config: num_attention_heads ", c.num_heads, " not divisible by o_groups ",
        c.o_groups);
  check(c.scoring_func == "sqrtsoftplus" || c.scoring_func == "softmax" || c.scoring_func == "sigmoid",
        "config: scoring_func = \"", c.scoring_func, "\": not supported (supported: sqrtsoftplus, softmax, sigmoid)");
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
