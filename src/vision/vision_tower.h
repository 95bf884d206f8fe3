// DeepSeek-V4.1's vision tower (inference/vision.py; VISION.md steps 4-5): the ViT (patch embedding,
// pre-norm blocks with bidirectional attention and 2-D rotate-half RoPE, final RMSNorm) and the 3x3
// aligner into the LLM's width, with the learned START/NEWLINE/END rows. Weights and activations live
// in the backend's memory; the reference's bf16 activations are mirrored by rounding after each op.
// All images of a call run as one batch (attention stays within each image).
#pragma once
#include <memory>
#include <span>
#include <vector>

#include "io/safetensors.h"
#include "ops/ops.h"
#include "vision/image_processor.h"
#include "vision/vision_config.h"

namespace deepinfer::vision {

// Per-stage captures of one batch (host copies, rows of all images in order), for tests and tools.
struct VisionTrace {
  std::vector<float> patch_embed;
  std::vector<std::vector<float>> attn_out, block_out;  // [block][rows, dim]
  std::vector<float> vit_out;
  std::vector<float> aligner_in;  // [cells, 9 * dim], spatial-major: feature = (ki * 3 + kj) * dim + c
};

// cos/sin [rows, head_dim / 2] of one image's patch grid (patches row-major), appended to cos/sin: the
// first half of each table row turns with the patch row, the second with its column;
// inv_freq = theta^(-2k / (head_dim / 2)) in fp32, as the reference.
void rope_tables(int64_t n_h, int64_t n_w, int64_t head_dim, double theta, std::vector<float>& cos,
                 std::vector<float>& sin);

class VisionTower {
 public:
  // Reads vision.*, aligner.* and image_start/image_newline/image_end (errors name the tensor).
  VisionTower(const io::Checkpoint& ckpt, const VisionConfig& c, ops::Backend& be);
  ~VisionTower();
  VisionTower(const VisionTower&) = delete;
  VisionTower& operator=(const VisionTower&) = delete;

  const VisionConfig& config() const { return c_; }
  // One aligner row per IMAGE slot of each image ([n_llm_h * n_llm_w, text_dim], host), in order.
  std::vector<std::vector<float>> encode(std::span<const ProcessedImage* const> images, VisionTrace* trace = nullptr);

  // START / NEWLINE / END rows [text_dim] (host).
  const std::vector<float>& start_row() const { return start_; }
  const std::vector<float>& newline_row() const { return newline_; }
  const std::vector<float>& end_row() const { return end_; }

 private:
  struct Weights;
  VisionConfig c_;
  ops::Backend& be_;
  std::unique_ptr<Weights> w_;
  std::vector<float> start_, newline_, end_;
};

}  // namespace deepinfer::vision
