// DeepSeek-V4.1's image processor against the reference's own outputs (tiny-vision goldens, VISION.md):
// decoded RGB, plan/grid, canvas and pixel values exactly; decoding of the other PNG/JPEG kinds against
// Pillow; clear errors for corrupt, truncated and unsupported files.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/json_file.h"
#include "vision/image_processor.h"
#include "vision/resample.h"
#include "vision_goldens.h"

namespace deepinfer {
namespace {

using namespace deepinfer::vision;
using testing::golden_f32;
using testing::golden_raw;
using testing::file_bytes;
using testing::vision_config;

class VisionImage : public ::testing::TestWithParam<int> {
 protected:
  std::string key() const { return "img" + std::to_string(GetParam()); }
};

TEST_P(VisionImage, DecodesThePngExactly) {
  const RgbImage img = read_image_file(testing::image_path(GetParam()));
  const auto& shape = testing::vision_goldens().get(key() + ".rgb").shape;
  EXPECT_EQ(img.height, shape[0]);
  EXPECT_EQ(img.width, shape[1]);
  EXPECT_EQ(img.rgb, golden_raw<uint8_t>(key() + ".rgb"));
}

TEST_P(VisionImage, PlanAndCanvasEqualTheReference) {
  const RgbImage img = read_image_file(testing::image_path(GetParam()));
  const VisionConfig& c = vision_config();
  const ImagePlan plan = plan_image_grid(img.width, img.height, c);
  const Canvas canvas = make_canvas(img, plan, c);
  // [n_vit_h, n_vit_w, n_llm_h, n_llm_w, best_h, best_w, resized_h, resized_w, paste_y, paste_x]
  const std::vector<int32_t> grid = {
      int32_t(plan.n_vit_h(c.patch_size)), int32_t(plan.n_vit_w(c.patch_size)), int32_t(plan.n_llm_h),
      int32_t(plan.n_llm_w), int32_t(plan.best_h), int32_t(plan.best_w), int32_t(canvas.resized_h),
      int32_t(canvas.resized_w), int32_t(canvas.paste_y), int32_t(canvas.paste_x)};
  EXPECT_EQ(grid, golden_raw<int32_t>(key() + ".grid"));
  EXPECT_EQ(plan.span_len(), int64_t(golden_raw<int32_t>(key() + ".token_types").size()));
  // Bitwise: the bicubic resampler reproduces Pillow's fixed-point arithmetic.
  EXPECT_EQ(canvas.image.rgb, golden_raw<uint8_t>(key() + ".canvas"));
}

TEST_P(VisionImage, PixelValuesOfTheCanvasAreExact) {
  const auto& shape = testing::vision_goldens().get(key() + ".canvas").shape;
  const RgbImage canvas{shape[1], shape[0], golden_raw<uint8_t>(key() + ".canvas")};
  EXPECT_EQ(pixel_values(canvas, vision_config().patch_size), golden_f32(key() + ".pixel_values"));
  const ProcessedImage p = process_image(read_image_file(testing::image_path(GetParam())), vision_config());
  EXPECT_EQ(p.pixels, golden_f32(key() + ".pixel_values"));
}

INSTANTIATE_TEST_SUITE_P(Goldens, VisionImage, ::testing::Values(0, 1, 2));

TEST(VisionPixels, LookupTableEqualsTheReference) {
  const std::vector<float> lut = golden_f32("pixel_lut");
  for (int u = 0; u < 256; ++u) EXPECT_EQ(normalized_pixel(uint8_t(u)), lut[u]) << u;
}

TEST(VisionPlan, TokenBudgetAndExtremeShapes) {
  VisionConfig c = vision_config();
  for (auto [w, h] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {5000, 3}, {3, 5000}, {4000, 3000}, {14, 14}}) {
    const ImagePlan p = plan_image_grid(w, h, c);
    EXPECT_LE(p.span_len(), c.max_image_tokens) << w << "x" << h;
    EXPECT_EQ(p.best_w % c.patch_size, 0);
    EXPECT_EQ(p.best_h % c.patch_size, 0);
  }
  c.max_image_tokens = 1024;  // the release's preprocessing; plans worked out by the reference's formulas
  c.min_pixels = 544 * 544;
  struct Case { int64_t w, h, n_llm_h, n_llm_w, best_h, best_w; };
  for (const Case& k : {Case{1920, 1080, 23, 41, 966, 1708},  // over budget: solve_resize_ratio
                        Case{300, 200, 11, 16, 448, 672},     // under min_pixels: 666x444, ceil to 14
                        Case{40, 3000, 113, 2, 4718, 70}}) {  // very tall
    const ImagePlan p = plan_image_grid(k.w, k.h, c);
    EXPECT_EQ(std::vector<int64_t>({p.n_llm_h, p.n_llm_w, p.best_h, p.best_w}),
              std::vector<int64_t>({k.n_llm_h, k.n_llm_w, k.best_h, k.best_w})) << k.w << "x" << k.h;
  }
}

// With max_wh_ratio set (the release leaves it null), a wider image is planned at that ratio and
// stretched to the canvas by a plain resize (Pillow's output written by make_images.py).
TEST(VisionPlan, MaxAspectRatioStretches) {
  VisionConfig c = vision_config();
  c.max_wh_ratio = 2.0;
  const RgbImage wide = read_image_file("tests/data/vision/wide.png");
  const ImagePlan p = plan_image_grid(wide.width, wide.height, c);
  EXPECT_EQ(std::vector<int64_t>({p.best_w, p.best_h, p.n_llm_w, p.n_llm_h}), std::vector<int64_t>({154, 70, 4, 2}));
  const Canvas canvas = make_canvas(wide, p, c);
  EXPECT_EQ(canvas.image.rgb, read_image_file("tests/data/vision/wide_canvas.png").rgb);
  EXPECT_EQ(canvas.paste_x + canvas.paste_y, 0);
}

std::string config_error(const nlohmann::json& j) {
  try {
    VisionConfig::from_json(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(VisionConfigFile, ReleasedAndFlatSpellingsAndErrors) {
  const nlohmann::json released = read_json_file(testing::kVisionDir + "/config.json");
  const VisionConfig& c = vision_config();
  EXPECT_EQ(std::vector<int64_t>({c.n_layers, c.dim, c.n_heads, c.inter_dim, c.patch_size, c.downsample_ratio,
                                  c.max_image_tokens, c.min_pixels, c.text_dim, c.image_token_id}),
            std::vector<int64_t>({2, 64, 2, 128, 14, 3, 24, 10000, 128, 254}));
  EXPECT_FALSE(c.max_wh_ratio);
  // The reference's flat inference config names the same numbers.
  const auto flat = VisionConfig::from_json(read_json_file(testing::kVisionDir + "/inference_config.json"));
  ASSERT_TRUE(flat);
  EXPECT_EQ(std::vector<int64_t>({flat->n_layers, flat->dim, flat->max_image_tokens, flat->min_pixels, flat->text_dim,
                                  flat->image_token_id}),
            std::vector<int64_t>({2, 64, 24, 10000, 128, 254}));
  nlohmann::json no_vision = released;
  no_vision.erase("vision_config");
  EXPECT_FALSE(VisionConfig::from_json(no_vision));
  nlohmann::json bad = released;
  bad["vision_config"]["num_attention_heads"] = 3;
  EXPECT_EQ(config_error(bad), "config: vision_config.num_attention_heads = 3: must divide the vision hidden size "
                               "into heads whose size is a multiple of 4 (2-D RoPE)");
  bad = released;
  bad["vision_config"]["min_pixels"] = -5;
  EXPECT_EQ(config_error(bad), "config: vision_config.min_pixels = -5: must be an integer in [0, 1099511627776]");
  bad = released;
  bad["vision_config"]["patch_size"] = 14.5;
  EXPECT_EQ(config_error(bad), "config: vision_config.patch_size = 14.5: must be an integer in [1, 1024]");
  bad = released;
  bad["vision_config"]["max_wh_ratio"] = "wide";
  EXPECT_EQ(config_error(bad), "config: vision_config.max_wh_ratio = \"wide\": must be a finite number > 0");
  bad = released;
  bad["vision_config"].erase("hidden_size");
  EXPECT_EQ(config_error(bad), "config: vision_config.hidden_size = (absent): required, an integer in [1, 65536]");
  bad = released;
  bad["image_token_id"] = 256;
  EXPECT_EQ(config_error(bad), "config: image_token_id = 256: must be an integer in [0, 255]");
}

// Pillow's bicubic resize (shrinking by up to 14x, enlarging, one axis only) bit for bit, against
// Image.resize outputs written by tests/data/vision/make_images.py.
TEST(VisionResize, BitwiseEqualToPillow) {
  const RgbImage src = read_image_file("tests/data/vision/resize_src.png");
  for (auto [w, h] : std::vector<std::pair<int64_t, int64_t>>{{13, 9}, {100, 71}, {41, 60}, {7, 29}, {3, 2}, {40, 28}}) {
    const RgbImage want =
        read_image_file("tests/data/vision/resize_" + std::to_string(w) + "x" + std::to_string(h) + ".png");
    EXPECT_EQ(resize_bicubic(src, w, h).rgb, want.rgb) << w << "x" << h;
  }
}

// Decoding other PNG kinds and JPEG against Pillow's Image.open(f).convert("RGB"), written next to them
// as plain RGB PNGs by tests/data/vision/make_images.py.
TEST(VisionDecode, OtherKindsMatchPillow) {
  for (const char* name : {"gray8.png", "gray16.png", "palette.png", "rgba.png", "interlaced.png",
                           "photo.jpg", "gray.jpg", "progressive.jpg", "lossy.webp", "lossless.webp", "alpha.webp"}) {
    const std::string base = std::string("tests/data/vision/") + name;
    const RgbImage got = read_image_file(base);
    const RgbImage want = read_image_file(base + ".rgb.png");
    EXPECT_EQ(got.width, want.width) << name;
    EXPECT_EQ(got.height, want.height) << name;
    EXPECT_EQ(got.rgb, want.rgb) << name;
  }
}

std::string decode_error(const std::vector<uint8_t>& bytes) {
  try {
    decode_image(bytes, "img");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(VisionDecode, BadFilesAreClearErrors) {
  const std::vector<uint8_t> png = file_bytes(testing::image_path(0));
  const std::vector<uint8_t> jpg = file_bytes("tests/data/vision/photo.jpg");
  EXPECT_NE(decode_error({png.begin(), png.begin() + png.size() / 2}).find("img: corrupt or truncated PNG"),
            std::string::npos);
  std::vector<uint8_t> flipped = png;
  flipped[png.size() / 2] ^= 0x55;  // a CRC / zlib error inside IDAT
  EXPECT_NE(decode_error(flipped).find("corrupt or truncated PNG"), std::string::npos);
  EXPECT_NE(decode_error({jpg.begin(), jpg.begin() + jpg.size() / 2}).find("img: corrupt or truncated JPEG"),
            std::string::npos);
  EXPECT_NE(decode_error({jpg.begin(), jpg.begin() + 20}).find("corrupt or truncated JPEG"), std::string::npos);
  const std::string gif = "GIF89a\x01\x00\x01\x00";
  EXPECT_EQ(decode_error({gif.begin(), gif.end()}), "img: GIF images are not supported (PNG, JPEG and WebP are)");
  const std::vector<uint8_t> webp = file_bytes("tests/data/vision/lossy.webp");
  EXPECT_NE(decode_error({webp.begin(), webp.begin() + webp.size() / 2}).find("img: corrupt or truncated WebP"),
            std::string::npos);
  EXPECT_NE(decode_error({webp.begin(), webp.begin() + 16}).find("corrupt or truncated WebP"), std::string::npos);
  const std::string bmp = "BM\x36\x00";
  EXPECT_EQ(decode_error({bmp.begin(), bmp.end()}), "img: BMP images are not supported (PNG, JPEG and WebP are)");
  EXPECT_EQ(decode_error({'h', 'e', 'l', 'l', 'o'}), "img: not an image file (5 bytes; PNG, JPEG and WebP are supported)");
  EXPECT_EQ(decode_error({}), "img: not an image file (0 bytes; PNG, JPEG and WebP are supported)");
  try {
    read_image_file("tests/data/vision/missing.png");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "tests/data/vision/missing.png: cannot open the image file");
  }
}

}  // namespace
}  // namespace deepinfer
