// The tiny-vision goldens (tests/data/goldens/v41/tiny-vision, see VISION.md there) for the vision tests.
#pragma once
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

}  // namespace deepinfer::testing
