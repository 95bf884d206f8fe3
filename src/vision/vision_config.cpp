#include "vision/vision_config.h"

#include <cmath>

#include "core/error.h"
#include "core/json_file.h"

namespace deepinfer::vision {
namespace {

using nlohmann::json;

// Strict fields of one config object: "config: <path.key> = <value>: <allowed>" on anything else.
// (model/config_fields.h does the same for the text config; the vision stage does not link the model.)
class Fields {
 public:
  Fields(const json& j, std::string path) : j_(j), path_(std::move(path)) {}
  const json* find(const char* key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  [[noreturn]] void bad(const char* key, const std::string& allowed) const {
    const json* v = find(key);
    fail("config: ", path_.empty() ? "" : path_ + ".", key, " = ", v ? v->dump() : "(absent)", ": ", allowed);
  }
  int64_t integer(const char* key, int64_t lo, int64_t hi, std::optional<int64_t> fallback = std::nullopt) const {
    const json* v = find(key);
    const std::string range = "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    if (!v) {
      if (!fallback) bad(key, "required, " + range);
      return *fallback;
    }
    const bool integral = v->is_number_integer() ||
                          (v->is_number_float() && std::isfinite(v->get<double>()) &&
                           v->get<double>() == std::floor(v->get<double>()) && std::fabs(v->get<double>()) < 9e18);
    if (!integral || (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX))) bad(key, "must be " + range);
    const int64_t out = v->is_number_float() ? static_cast<int64_t>(v->get<double>()) : v->get<int64_t>();
    if (out < lo || out > hi) bad(key, "must be " + range);
    return out;
  }
  double positive(const char* key, std::optional<double> fallback) const {
    const json* v = find(key);
    if (!v && fallback) return *fallback;
    if (!v || !v->is_number() || !std::isfinite(v->get<double>()) || v->get<double>() <= 0)
      bad(key, "must be a finite number > 0");
    return v->get<double>();
  }

 private:
  const json& j_;
  std::string path_;
};

}  // namespace

std::optional<VisionConfig> VisionConfig::from_json(const json& config) {
  check(config.is_object(), "config: the file must be a JSON object");
  const Fields top(config, "");
  const json* nested = top.find("vision_config");
  const json* text = top.find("text_config");
  if (nested && !nested->is_object()) top.bad("vision_config", "must be an object");
  if (text && !text->is_object()) top.bad("text_config", "must be an object");
  const Fields t(text ? *text : config, text ? "text_config" : "");
  // Composite release layout: vision_config with HF spellings; flat reference layout: vision_* keys.
  const Fields v(nested ? *nested : config, nested ? "vision_config" : "");
  auto k = [&](const char* released, const char* flat) { return nested ? released : flat; };
  if (!nested && top.integer("vision_n_layers", 0, 1024, 0) == 0) return std::nullopt;
  VisionConfig c;
  c.n_layers = v.integer(k("num_hidden_layers", "vision_n_layers"), 1, 1024);
  c.dim = v.integer(k("hidden_size", "vision_dim"), 1, 1 << 16);
  c.n_heads = v.integer(k("num_attention_heads", "vision_n_heads"), 1, c.dim);
  c.inter_dim = v.integer(k("intermediate_size", "vision_inter_dim"), 1, 1 << 18);
  c.patch_size = v.integer(k("patch_size", "vision_patch_size"), 1, 1024, 14);
  c.downsample_ratio = v.integer(k("downsample_ratio", "vision_downsample_ratio"), 1, 64, 3);
  c.rope_theta = v.positive(k("rope_theta", "vision_rope_theta"), 10000.0);
  c.max_image_tokens = v.integer(k("max_image_tokens", "vision_max_n_token"), 5, 1 << 24, 1024);
  c.min_pixels = v.integer(k("min_pixels", "vision_min_pixels"), 0, int64_t{1} << 40, 544 * 544);
  if (v.find(k("max_wh_ratio", "vision_max_wh_ratio")))
    c.max_wh_ratio = v.positive(k("max_wh_ratio", "vision_max_wh_ratio"), std::nullopt);
  if (c.dim % c.n_heads != 0 || c.head_dim() % 4 != 0)
    v.bad(k("num_attention_heads", "vision_n_heads"),
          "must divide the vision hidden size into heads whose size is a multiple of 4 (2-D RoPE)");
  c.text_dim = t.find("dim") ? t.integer("dim", 1, 1 << 20) : t.integer("hidden_size", 1, 1 << 20);
  const int64_t vocab = t.integer("vocab_size", 1, int64_t{1} << 31);
  const Fields& img = text && top.find("image_token_id") ? top : t;
  c.image_token_id = img.integer("image_token_id", 0, vocab - 1);
  return c;
}

std::optional<VisionConfig> VisionConfig::load(const std::string& model_dir) {
  return parse_json_file(model_dir + "/config.json", from_json);
}

}  // namespace deepinfer::vision
