// Prompts with images (inference/image_processor.py prepare_vl_inputs; VISION.md step 6): every
// image placeholder (image_token_id) becomes the span START + (IMAGE * n_llm_w + NEWLINE) * n_llm_h + END,
// all holding image_token_id; the LLM's input rows there are the learned START/NEWLINE/END rows and the
// aligner rows in reading order, in place of the token embedding.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "vision/image_processor.h"
#include "vision/vision_tower.h"

namespace deepinfer::vision {

// token_types of the reference: -1 text, then the span's parts.
enum TokenType : int8_t { kText = -1, kImageStart = 0, kImage = 1, kImageNewline = 2, kImageEnd = 3 };

struct ImagePrompt {
  std::vector<int32_t> ids;           // the expanded prompt
  std::vector<int8_t> token_types;    // per position
  std::vector<int64_t> image_starts;  // position of each image's START
  // The input rows that replace the token embedding: row i [text_dim] is for position span_positions[i]
  // (every position with token_types >= 0, in order). Empty until filled by the vision stage.
  std::vector<int64_t> span_positions;
  std::vector<float> span_rows;
};

// Expands the prompt's placeholders with the plans of its images, in order. Errors: a placeholder count
// other than plans.size(); an expanded prompt longer than max_len (when given).
ImagePrompt expand_image_prompt(std::span<const int32_t> ids, int64_t image_token_id,
                                std::span<const ImagePlan> plans, std::optional<int64_t> max_len = std::nullopt);

// The vision encoder stage of a model: its config, image processor and tower.
class VisionStage {
 public:
  // nullptr when the model (DIR/config.json) has no vision tower; weights from DIR's safetensors.
  static std::unique_ptr<VisionStage> load(const std::string& model_dir, ops::Backend& be);
  VisionStage(const io::Checkpoint& ckpt, const VisionConfig& c, ops::Backend& be) : tower_(ckpt, c, be) {}

  const VisionConfig& config() const { return tower_.config(); }
  VisionTower& tower() { return tower_; }
  // Decodes and encodes every image (one ViT batch), expands the prompt and fills its span rows.
  // images[k] are the bytes of the k-th placeholder's image file; errors name "image k".
  ImagePrompt prepare(std::span<const int32_t> ids, std::span<const std::vector<uint8_t>> images,
                      std::optional<int64_t> max_len = std::nullopt);

 private:
  VisionTower tower_;
};

// prepare() for a model that may lack a vision stage: without one, images are an error ("the model has
// no vision tower"), and a prompt without images passes through as text.
ImagePrompt prepare_prompt(VisionStage* stage, std::span<const int32_t> ids,
                           std::span<const std::vector<uint8_t>> images, std::optional<int64_t> max_len = std::nullopt);

}  // namespace deepinfer::vision
