// Prompts with images against the reference's prepare_vl_inputs + merge_image_embeddings (tiny-vision
// goldens p1, p2): from the PNG files to the expanded ids, token types, span starts and the injected
// rows (START/NEWLINE/END exact, IMAGE rows within aligner_out's tolerance); and the bad-input errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "core/error.h"
#include "vision/image_prompt.h"
#include "vision_goldens.h"

namespace deepinfer {
namespace {

using namespace deepinfer::vision;
using testing::golden_f32;
using testing::golden_raw;

VisionStage& stage() {
  static std::unique_ptr<VisionStage> s = VisionStage::load(testing::kVisionDir, ops::cpu_backend());
  return *s;
}

std::vector<uint8_t> image_file(int k) { return testing::file_bytes(testing::image_path(k)); }

class ImagePromptCase : public ::testing::TestWithParam<std::string> {};

TEST_P(ImagePromptCase, ExpansionAndRowsEqualTheReference) {
  const std::string p = GetParam();
  const ImagePrompt got = stage().prepare(testing::collapsed_prompt(p), testing::prompt_images(p));
  EXPECT_EQ(got.ids, golden_raw<int32_t>(p + ".input_ids"));
  const std::vector<int32_t> types = golden_raw<int32_t>(p + ".token_types");
  EXPECT_EQ(std::vector<int32_t>(got.token_types.begin(), got.token_types.end()), types);
  const std::vector<int32_t> starts = golden_raw<int32_t>(p + ".image_starts");
  EXPECT_EQ(std::vector<int64_t>(starts.begin(), starts.end()), got.image_starts);
  // Rows: delimiters bit for bit, aligner rows as close as aligner_out is.
  const std::vector<float> merged = golden_f32(p + ".merged_embeds");
  const int64_t D = stage().config().text_dim;
  ASSERT_EQ(got.span_rows.size(), got.span_positions.size() * D);
  double num = 0, den = 0, mx = 0;
  for (size_t i = 0; i < got.span_positions.size(); ++i) {
    const int64_t pos = got.span_positions[i];
    ASSERT_GE(types[pos], 0);
    for (int64_t d = 0; d < D; ++d) {
      const float g = got.span_rows[i * D + d], w = merged[pos * D + d];
      if (types[pos] != kImage) {
        ASSERT_EQ(g, w) << "position " << pos;
      } else {
        num += (double(g) - w) * (double(g) - w);
        den += double(w) * w;
        mx = std::max(mx, std::fabs(double(g) - w));
      }
    }
  }
  std::printf("  %s IMAGE rows: rel_rms %.5f  max_abs %.5f\n", p.c_str(), std::sqrt(num / den), mx);
  EXPECT_LE(std::sqrt(num / den), 0.02);
  EXPECT_LE(mx, 0.06);
}

INSTANTIATE_TEST_SUITE_P(Goldens, ImagePromptCase, ::testing::Values("p1", "p2"));

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ImagePrompt, BadInputIsAClearError) {
  const std::vector<int32_t> two = {0, 5, 254, 7, 254, 9};
  const std::vector<std::vector<uint8_t>> one = {image_file(0)};
  EXPECT_EQ(error_of([&] { stage().prepare(two, one); }),
            "prompt has 2 image placeholders (token id 254) but 1 images were given");
  const std::vector<std::vector<uint8_t>> three = {image_file(0), image_file(1), image_file(2)};
  EXPECT_EQ(error_of([&] { stage().prepare(two, three); }),
            "prompt has 2 image placeholders (token id 254) but 3 images were given");
  std::vector<uint8_t> cut = image_file(1);
  cut.resize(cut.size() / 3);
  EXPECT_NE(error_of([&] { stage().prepare(two, std::vector<std::vector<uint8_t>>{image_file(0), cut}); })
                .find("image 1: corrupt or truncated PNG"),
            std::string::npos);
  const std::string gif = "GIF89a";
  EXPECT_EQ(error_of([&] {
              stage().prepare(two, std::vector<std::vector<uint8_t>>{{gif.begin(), gif.end()}, image_file(1)});
            }),
            "image 0: GIF images are not supported (PNG, JPEG and WebP are)");
  EXPECT_EQ(error_of([&] { stage().prepare(two, std::vector<std::vector<uint8_t>>{image_file(0), image_file(1)}, 30); }),
            "prompt with its image spans is 32 tokens, more than max_model_len 30");
  EXPECT_EQ(error_of([&] { prepare_prompt(nullptr, two, one); }),
            "the model has no vision tower (no vision_config in config.json) but 1 images were given");
  const ImagePrompt text = prepare_prompt(nullptr, two, {});
  EXPECT_EQ(text.ids, two);
  EXPECT_TRUE(text.span_positions.empty());
  EXPECT_EQ(VisionStage::load("tests/data/goldens/v41/tiny-a", ops::cpu_backend()), nullptr);
}

}  // namespace
}  // namespace deepinfer
