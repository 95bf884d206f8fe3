#include "vision/image_prompt.h"

#include <algorithm>

#include "core/error.h"

namespace deepinfer::vision {

ImagePrompt expand_image_prompt(std::span<const int32_t> ids, int64_t image_token_id,
                                std::span<const ImagePlan> plans, std::optional<int64_t> max_len) {
  const auto placeholders = std::count(ids.begin(), ids.end(), static_cast<int32_t>(image_token_id));
  check(placeholders == static_cast<int64_t>(plans.size()), "prompt has ", placeholders,
        " image placeholders (token id ", image_token_id, ") but ", plans.size(), " images were given");
  ImagePrompt p;
  size_t next = 0;
  for (int32_t id : ids) {
    if (id != image_token_id) {
      p.ids.push_back(id);
      p.token_types.push_back(kText);
      continue;
    }
    const ImagePlan& plan = plans[next++];
    p.image_starts.push_back(static_cast<int64_t>(p.ids.size()));
    p.token_types.push_back(kImageStart);
    for (int64_t r = 0; r < plan.n_llm_h; ++r) {
      p.token_types.insert(p.token_types.end(), plan.n_llm_w, kImage);
      p.token_types.push_back(kImageNewline);
    }
    p.token_types.push_back(kImageEnd);
    p.ids.resize(p.token_types.size(), static_cast<int32_t>(image_token_id));
  }
  if (max_len)
    check(static_cast<int64_t>(p.ids.size()) <= *max_len, "prompt with its image spans is ", p.ids.size(),
          " tokens, more than max_model_len ", *max_len);
  for (size_t i = 0; i < p.token_types.size(); ++i)
    if (p.token_types[i] != kText) p.span_positions.push_back(static_cast<int64_t>(i));
  return p;
}

std::unique_ptr<VisionStage> VisionStage::load(const std::string& model_dir, ops::Backend& be) {
  const std::optional<VisionConfig> c = VisionConfig::load(model_dir);
  if (!c) return nullptr;
  return std::make_unique<VisionStage>(io::Checkpoint::open(model_dir), *c, be);
}

ImagePrompt VisionStage::prepare(std::span<const int32_t> ids, std::span<const std::vector<uint8_t>> images,
                                 std::optional<int64_t> max_len) {
  const VisionConfig& c = config();
  std::vector<ProcessedImage> processed;
  std::vector<ImagePlan> plans;
  for (size_t k = 0; k < images.size(); ++k) {
    processed.push_back(process_image(decode_image(images[k], "image " + std::to_string(k)), c));
    plans.push_back(processed.back().plan);
  }
  ImagePrompt p = expand_image_prompt(ids, c.image_token_id, plans, max_len);  // count checked before the ViT
  std::vector<const ProcessedImage*> batch;
  for (const ProcessedImage& im : processed) batch.push_back(&im);
  const std::vector<std::vector<float>> rows = tower_.encode(batch);
  const int64_t D = c.text_dim;
  p.span_rows.reserve(p.span_positions.size() * D);
  size_t image = 0, row = 0;
  for (int64_t pos : p.span_positions) {
    const float* src = nullptr;
    switch (p.token_types[pos]) {
      case kImageStart: src = tower_.start_row().data(); row = 0; break;
      case kImageNewline: src = tower_.newline_row().data(); break;
      case kImageEnd: src = tower_.end_row().data(); ++image; break;
      default: src = rows[image].data() + (row++) * D; break;
    }
    p.span_rows.insert(p.span_rows.end(), src, src + D);
  }
  return p;
}

ImagePrompt prepare_prompt(VisionStage* stage, std::span<const int32_t> ids,
                           std::span<const std::vector<uint8_t>> images, std::optional<int64_t> max_len) {
  if (stage) return stage->prepare(ids, images, max_len);
  check(images.empty(), "the model has no vision tower (no vision_config in config.json) but ", images.size(),
        " images were given");
  ImagePrompt p;
  p.ids.assign(ids.begin(), ids.end());
  p.token_types.assign(ids.size(), kText);
  if (max_len)
    check(static_cast<int64_t>(p.ids.size()) <= *max_len, "prompt is ", p.ids.size(), " tokens, more than max_model_len ",
          *max_len);
  return p;
}

}  // namespace deepinfer::vision
