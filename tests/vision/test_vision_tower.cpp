// DeepSeek-V4.1's ViT and aligner on DEEPINFER_DEVICE's backend (default the CPU) against the reference (tiny-vision goldens, fed the
// reference's pixel_values): every block, vit_out and aligner_out within VISION.md's tolerances
// (rel. rms <= 0.02; max |d| <= 0.1, aligner_out <= 0.06); the RoPE tables and the aligner's cell
// gather exactly; a batch of images gives each image's rows bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>

#include "vision/vision_tower.h"
#include "vision_goldens.h"

namespace deepinfer {
namespace {

using namespace deepinfer::vision;
using testing::golden_f32;
using testing::golden_raw;
using testing::vision_config;

ops::Backend& backend() { return ops::backend_for(Device::resolve("")); }

VisionTower& tower() {
  static std::unique_ptr<VisionTower> t = std::make_unique<VisionTower>(
      io::Checkpoint::open(testing::kVisionDir + "/model.safetensors"), vision_config(), backend());
  return *t;
}

ProcessedImage golden_image(int k) {
  const std::vector<int32_t> grid = golden_raw<int32_t>("img" + std::to_string(k) + ".grid");
  ProcessedImage p;
  p.n_vit_h = grid[0];
  p.n_vit_w = grid[1];
  p.plan = {grid[2], grid[3], grid[4], grid[5]};
  p.pixels = golden_f32("img" + std::to_string(k) + ".pixel_values");
  return p;
}

struct Diff {
  double rel_rms = 0, max_abs = 0;
};

Diff diff(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double num = 0, den = 0, mx = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    const double d = double(got[i]) - want[i];
    num += d * d;
    den += double(want[i]) * want[i];
    mx = std::max(mx, std::fabs(d));
  }
  return {std::sqrt(num / std::max(den, 1e-30)), mx};
}

void expect_close(const std::string& name, const std::vector<float>& got, double max_abs_limit) {
  const Diff d = diff(got, golden_f32(name));
  std::printf("  %-24s rel_rms %.5f  max_abs %.5f\n", name.c_str(), d.rel_rms, d.max_abs);
  EXPECT_LE(d.rel_rms, 0.02) << name;
  EXPECT_LE(d.max_abs, max_abs_limit) << name;
}

class VisionTowerImage : public ::testing::TestWithParam<int> {};

TEST_P(VisionTowerImage, EveryStageWithinTheTolerances) {
  const int k = GetParam();
  const std::string key = "img" + std::to_string(k);
  const ProcessedImage img = golden_image(k);
  const ProcessedImage* batch[] = {&img};
  VisionTrace trace;
  const std::vector<std::vector<float>> rows = tower().encode(batch, &trace);
  ASSERT_EQ(rows.size(), 1u);
  expect_close(key + ".patch_embed", trace.patch_embed, 0.1);
  for (size_t b = 0; b < trace.block_out.size(); ++b) {
    expect_close(key + ".vit.b" + std::to_string(b) + ".attn_out", trace.attn_out[b], 0.1);
    expect_close(key + ".vit.b" + std::to_string(b) + ".out", trace.block_out[b], 0.1);
  }
  expect_close(key + ".vit_out", trace.vit_out, 0.1);
  expect_close(key + ".aligner_out", rows[0], 0.06);
  // The gathered cells are the reference's unfold, reordered spatial-major: fed the reference's
  // vit_out they would be its aligner_in exactly; here compare them as the same values it permutes.
  const int64_t d = vision_config().dim, r2 = 9;
  const std::vector<float> want = golden_f32(key + ".aligner_in");
  ASSERT_EQ(trace.aligner_in.size(), want.size());
  std::vector<float> channel_major(want.size());
  for (size_t cell = 0; cell < want.size() / (r2 * d); ++cell)
    for (int64_t kk = 0; kk < r2; ++kk)
      for (int64_t c = 0; c < d; ++c)
        channel_major[cell * r2 * d + c * r2 + kk] = trace.aligner_in[cell * r2 * d + kk * d + c];
  expect_close(key + ".aligner_in", channel_major, 0.1);
  // Cells past the grid's bottom/right edge hold zeros exactly where the reference's do.
  const int64_t cw = (img.n_vit_w + 2) / 3;
  for (size_t cell = 0; cell < want.size() / (r2 * d); ++cell)
    for (int64_t kk = 0; kk < r2; ++kk) {
      const int64_t y = cell / cw * 3 + kk / 3, x = cell % cw * 3 + kk % 3;
      if (y < img.n_vit_h && x < img.n_vit_w) continue;
      for (int64_t c = 0; c < d; ++c) {
        EXPECT_EQ(channel_major[cell * r2 * d + c * r2 + kk], 0.0f);
        EXPECT_EQ(want[cell * r2 * d + c * r2 + kk], 0.0f);
      }
    }
}

TEST_P(VisionTowerImage, RopeTablesEqualTheReference) {
  const std::string key = "img" + std::to_string(GetParam());
  const ProcessedImage img = golden_image(GetParam());
  std::vector<float> cos, sin;
  rope_tables(img.n_vit_h, img.n_vit_w, vision_config().head_dim(), vision_config().rope_theta, cos, sin);
  EXPECT_LE(diff(cos, golden_f32(key + ".rope_cos")).max_abs, 1e-6);
  EXPECT_LE(diff(sin, golden_f32(key + ".rope_sin")).max_abs, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Goldens, VisionTowerImage, ::testing::Values(0, 1, 2));

TEST(VisionTowerBatch, EachImageOfABatchAsAlone) {
  // The CPU always sums in one order; a GPU's GEMMs pick theirs by row count unless batch-invariant.
  backend().set_batch_invariant(true);
  const ProcessedImage a = golden_image(0), b = golden_image(1), c = golden_image(2);
  const ProcessedImage* all[] = {&a, &b, &c};
  const std::vector<std::vector<float>> together = tower().encode(all);
  ASSERT_EQ(together.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const ProcessedImage* one[] = {all[i]};
    EXPECT_EQ(tower().encode(one)[0], together[i]) << i;
  }
  backend().set_batch_invariant(false);
}

}  // namespace
}  // namespace deepinfer
