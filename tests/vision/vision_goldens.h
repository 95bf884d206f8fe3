// The tiny-vision goldens (tests/data/goldens/v41/tiny-vision, see VISION.md there) for the vision tests.
#pragma once
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "vision/vision_config.h"

namespace deepinfer::testing {

inline const std::string kVisionDir = "tests/data/goldens/v41/tiny-vision";

inline const io::Checkpoint& vision_goldens() {
  static const io::Checkpoint g = io::Checkpoint::open(kVisionDir + "/goldens.safetensors");
  return g;
}

inline const vision::VisionConfig& vision_config() {
  static const vision::VisionConfig c = *vision::VisionConfig::load(kVisionDir);
  return c;
}

template <typename T>
std::vector<T> golden_raw(const std::string& name) {
  const io::TensorView& t = vision_goldens().get(name);
  const auto* p = reinterpret_cast<const T*>(t.data);
  return std::vector<T>(p, p + t.numel());
}

inline std::vector<float> golden_f32(const std::string& name) {
  const io::TensorView& t = vision_goldens().get(name);
  return vision_goldens().read_f32(name, t.shape);
}

inline std::string image_path(int k) { return kVisionDir + "/image_" + std::to_string(k) + ".png"; }

inline std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// A golden prompt's ids with each image span collapsed back to its one placeholder (its START).
inline std::vector<int32_t> collapsed_prompt(const std::string& p) {
  const std::vector<int32_t> ids = golden_raw<int32_t>(p + ".input_ids"), types = golden_raw<int32_t>(p + ".token_types");
  std::vector<int32_t> out;
  for (size_t i = 0; i < ids.size(); ++i)
    if (types[i] < 1) out.push_back(ids[i]);  // text (-1) or START (0)
  return out;
}

// The image files of a golden prompt, in placeholder order.
inline std::vector<std::vector<uint8_t>> prompt_images(const std::string& p) {
  std::vector<std::vector<uint8_t>> images;
  for (int32_t k : golden_raw<int32_t>(p + ".image_index")) images.push_back(file_bytes(image_path(k)));
  return images;
}

}  // namespace deepinfer::testing
