// `deepinfer encode-image`: the vision stage alone (DeepSeek-V4.1's image processor, ViT and aligner) on
// image files, as the reference's encode_image. Prints one JSON line per image (plan, grids, span
// length); --output writes the tensors (pixel_values, aligner rows) as safetensors.
//   deepinfer encode-image --model DIR --image FILE [--image FILE ...] [--output OUT.safetensors]
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "command.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "vision/image_prompt.h"

namespace {

using namespace deepinfer;

const char* kUsage =
    "usage: deepinfer encode-image --model DIR --image FILE [--image FILE ...] [--output OUT.safetensors]\n"
    "Runs the model's vision stage on each image (PNG, JPEG or WebP): prints its plan as a JSON line and, with\n"
    "--output, writes imgK.pixel_values [N, 3, p, p] and imgK.aligner_out [n_llm_h * n_llm_w, hidden] (F32).\n";

int run(const std::vector<std::string>& args) {
  std::string model, output;
  std::vector<std::string> files;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      check(i + 1 < args.size(), a, " needs a value");
      return args[++i];
    };
    if (a == "--help" || a == "-h") return std::fputs(kUsage, stdout), 0;
    else if (a == "--model") model = value();
    else if (a == "--image") files.push_back(value());
    else if (a == "--output") output = value();
    else fail("unknown option '", a, "'\n", kUsage);
  }
  check(!model.empty() && !files.empty(), "--model DIR and at least one --image FILE are required\n", kUsage);
  std::unique_ptr<vision::VisionStage> stage = vision::VisionStage::load(model, ops::cpu_backend());
  check(stage != nullptr, model, ": the model has no vision tower (no vision_config in config.json)");
  const vision::VisionConfig& c = stage->config();
  std::vector<vision::ProcessedImage> images;
  for (const std::string& f : files) images.push_back(vision::process_image(vision::read_image_file(f), c));
  std::vector<const vision::ProcessedImage*> batch;
  for (const auto& im : images) batch.push_back(&im);
  const std::vector<std::vector<float>> rows = stage->tower().encode(batch);
  std::vector<io::TensorToWrite> out;
  for (size_t k = 0; k < images.size(); ++k) {
    const vision::ProcessedImage& im = images[k];
    nlohmann::json line = {{"image", files[k]},           {"canvas_wh", {im.plan.best_w, im.plan.best_h}},
                           {"vit_grid_hw", {im.n_vit_h, im.n_vit_w}}, {"llm_grid_hw", {im.plan.n_llm_h, im.plan.n_llm_w}},
                           {"span_len", im.plan.span_len()}};
    std::printf("%s\n", line.dump().c_str());
    const std::string key = "img" + std::to_string(k);
    const int64_t p = c.patch_size, n = im.n_vit_h * im.n_vit_w, cells = im.plan.n_llm_h * im.plan.n_llm_w;
    auto bytes = [](const std::vector<float>& v) {
      return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float));
    };
    out.push_back({key + ".pixel_values", DType::F32, {n, 3, p, p}, bytes(im.pixels)});
    out.push_back({key + ".aligner_out", DType::F32, {cells, c.text_dim}, bytes(rows[k])});
  }
  if (!output.empty()) io::write_safetensors(output, out, {{"producer", "deepinfer encode-image"}});
  return 0;
}

const deepinfer::cli::CommandRegistration kEncodeImage({"encode-image", "run a model's vision stage on image files", run});

}  // namespace
