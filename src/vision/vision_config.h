// The vision tower's configuration: config.json's `vision_config` (the release's spellings) or the flat
// `vision_*` keys of the reference's inference config, checked like every other config field.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace deepinfer::vision {

struct VisionConfig {
  int64_t n_layers = 0, dim = 0, n_heads = 0, inter_dim = 0;
  int64_t patch_size = 14, downsample_ratio = 3;
  double rope_theta = 10000.0;
  int64_t max_image_tokens = 1024;  // LLM positions per image span, START/END/NEWLINEs included
  int64_t min_pixels = 544 * 544;   // smaller images are planned larger
  std::optional<double> max_wh_ratio;
  int64_t text_dim = 0;        // the aligner's output width (the LLM's hidden size)
  int64_t image_token_id = -1;

  int64_t head_dim() const { return dim / n_heads; }

  // nullopt when the config has no vision tower; errors name the field.
  static std::optional<VisionConfig> from_json(const nlohmann::json& config);
  static std::optional<VisionConfig> load(const std::string& model_dir);  // DIR/config.json
};

}  // namespace deepinfer::vision
