#include "vision/vision_config.h"

#include "core/json_file.h"
#include "model/config_fields.h"

namespace deepinfer::vision {

using model::ConfigFields;
using model::Key;

std::optional<VisionConfig> VisionConfig::from_json(const nlohmann::json& config) {
  const ConfigFields top(config, "");
  const nlohmann::json* nested = top.object("vision_config");
  const nlohmann::json* text = top.object("text_config");
  const ConfigFields t(text ? *text : config, text ? "text_config" : "");
  // Composite release layout: vision_config; flat reference layout: vision_* keys at the root.
  const ConfigFields v(nested ? *nested : config, nested ? "vision_config" : "");
  auto k = [&](const char* released, const char* flat) { return nested ? Key(released) : Key(flat); };
  if (!nested && v.integer("vision_n_layers", 0, 1024, 0) == 0) return std::nullopt;
  VisionConfig c;
  c.n_layers = v.integer(k("num_hidden_layers", "vision_n_layers"), 1, 1024);
  c.dim = v.integer(k("hidden_size", "vision_dim"), 1, 1 << 16);
  c.n_heads = v.integer(k("num_attention_heads", "vision_n_heads"), 1, c.dim);
  c.inter_dim = v.integer(k("intermediate_size", "vision_inter_dim"), 1, 1 << 18);
  c.patch_size = v.integer(k("patch_size", "vision_patch_size"), 1, 1024, 14);
  c.downsample_ratio = v.integer(k("downsample_ratio", "vision_downsample_ratio"), 1, 64, 3);
  c.rope_theta = v.real(k("rope_theta", "vision_rope_theta"), 0, 1e12, 10000.0, true);
  c.max_image_tokens = v.integer(k("max_image_tokens", "vision_max_n_token"), 5, 1 << 24, 1024);
  c.min_pixels = v.integer(k("min_pixels", "vision_min_pixels"), 0, int64_t{1} << 40, 544 * 544);
  if (v.has(k("max_wh_ratio", "vision_max_wh_ratio")))
    c.max_wh_ratio = v.real(k("max_wh_ratio", "vision_max_wh_ratio"), 0, 1e6, std::nullopt, true);
  if (c.dim % c.n_heads != 0 || c.head_dim() % 4 != 0)
    model::bad_field(v.name(k("num_attention_heads", "vision_n_heads")), std::to_string(c.n_heads),
                     "must divide the vision hidden size into heads whose size is a multiple of 4 (2-D RoPE)");
  c.text_dim = t.integer(Key("hidden_size", "dim"), 1, 1 << 20);
  const ConfigFields& img = text && top.has("image_token_id") ? top : t;
  const int64_t vocab = t.integer("vocab_size", 1, int64_t{1} << 31);
  c.image_token_id = img.integer("image_token_id", 0, vocab - 1);
  return c;
}

std::optional<VisionConfig> VisionConfig::load(const std::string& model_dir) {
  return parse_json_file(model_dir + "/config.json", from_json);
}

}  // namespace deepinfer::vision
