// End to end with images on the tiny-vision goldens: the PNGs through the vision stage, their span rows put
// in place of the token embedding at the first layer's input (the ForwardTaps hook, until the forward
// takes the rows itself), then the V4.1 forward. Prefill and prefix+decode logits of p1/p2 within
// VISION.md's limits (mean |d| <= 0.05, max <= 0.5, argmax agreement >= 0.95) and the MoE routing sets
// equal except < 3% of rows (tiny router margins).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/json_file.h"
#include "model/deepseek_v41/v41_model.h"
#include "vision/image_prompt.h"
#include "vision_goldens.h"

namespace deepinfer {
namespace {

using namespace deepinfer::vision;
using testing::golden_f32;
using testing::golden_raw;

model::V41Model& lm() {
  static std::unique_ptr<model::V41Model> m = [] {
    auto m = model::V41Model::load(testing::kVisionDir, model::V41Options::from_env());
    auto strings = read_json_file(testing::kVisionDir + "/goldens.json")
                       .at("engram").at("token_strings").get<std::vector<std::string>>();
    m->set_engram_tokens(strings, strings);  // the goldens' synthetic tokenizer
    return m;
  }();
  return *m;
}

ImagePrompt prompt(const std::string& p) {
  static std::unique_ptr<VisionStage> stage = VisionStage::load(testing::kVisionDir, ops::cpu_backend());
  return stage->prepare(testing::collapsed_prompt(p), testing::prompt_images(p));
}

// Puts the span rows into every stream of the layer-0 input (image positions are DEAD for Engram, so
// its gate leaves them as embedded); `at` follows the positions over the steps of logits_in_steps.
model::ForwardTaps inject(const ImagePrompt& p, int64_t& at) {
  model::ForwardTaps taps;
  const int64_t D = lm().config().dim, hc = lm().config().hc_mult;
  taps.on_layer_input = [&p, &at, D, hc](int64_t layer, std::vector<float>& X, std::vector<float>&) {
    if (layer != 0) return;
    const int64_t rows = static_cast<int64_t>(X.size()) / (hc * D);
    for (size_t i = 0; i < p.span_positions.size(); ++i) {
      const int64_t r = p.span_positions[i] - at;
      if (r < 0 || r >= rows) continue;
      for (int64_t k = 0; k < hc; ++k) std::copy_n(p.span_rows.data() + i * D, D, X.data() + (r * hc + k) * D);
    }
    at += rows;
  };
  return taps;
}

struct Agreement {
  double mean = 0, max = 0, argmax = 0;
};

Agreement compare(const std::vector<float>& got, const std::vector<float>& want, int64_t V) {
  Agreement a;
  const int64_t S = static_cast<int64_t>(want.size()) / V;
  EXPECT_EQ(got.size(), want.size());
  int64_t same = 0;
  for (int64_t s = 0; s < S; ++s) {
    const float* g = got.data() + s * V;
    const float* w = want.data() + s * V;
    for (int64_t v = 0; v < V; ++v) {
      a.mean += std::fabs(g[v] - w[v]);
      a.max = std::max(a.max, double(std::fabs(g[v] - w[v])));
    }
    same += std::max_element(g, g + V) - g == std::max_element(w, w + V) - w;
  }
  a.mean /= double(S * V);
  a.argmax = double(same) / S;
  return a;
}

void expect_within(const Agreement& a, const std::string& what) {
  std::printf("  %-28s mean |d| %.4f  max %.4f  argmax %.3f\n", what.c_str(), a.mean, a.max, a.argmax);
  EXPECT_LE(a.mean, 0.05) << what;
  EXPECT_LE(a.max, 0.5) << what;
  EXPECT_GE(a.argmax, 0.95) << what;
}

class VisionLogits : public ::testing::TestWithParam<std::string> {};

// The span rows given in the batch (ForwardBatch::embed_tokens / embed_rows) give the same bits as
// writing them into the layer-0 streams (the hook the reference comparison below uses).
TEST_P(VisionLogits, SpanRowsInTheBatchEqualTheLayerZeroHook) {
  const ImagePrompt ip = prompt(GetParam());
  const int64_t S = static_cast<int64_t>(ip.ids.size());
  int64_t at = 0;
  const model::ForwardTaps taps = inject(ip, at);
  auto a = lm().new_sequence();
  const std::vector<float> hooked = model::logits_in_steps(lm(), ip.ids, {0, S}, a.get(), &taps);
  auto b = lm().new_sequence();
  model::ForwardBatch batch;
  batch.token_ids = ip.ids;
  batch.seq_start = {0, static_cast<int32_t>(S)};
  batch.states = {b.get()};
  for (int64_t t = 0; t < S; ++t) batch.logit_rows.push_back(static_cast<int32_t>(t));
  for (int64_t p : ip.span_positions) batch.embed_tokens.push_back(static_cast<int32_t>(p));
  batch.embed_rows = ip.span_rows;
  std::vector<float> given;
  lm().forward(batch, given);
  EXPECT_EQ(given, hooked);
  batch.embed_tokens.push_back(batch.embed_tokens.front());  // one token twice
  batch.embed_rows.resize(batch.embed_rows.size() + lm().config().dim);
  auto c = lm().new_sequence();
  batch.states = {c.get()};
  EXPECT_THROW(lm().forward(batch, given), Error);
}

TEST_P(VisionLogits, PrefillDecodeAndRoutingMatchTheReference) {
  const std::string p = GetParam();
  const ImagePrompt ip = prompt(p);
  const int64_t S = static_cast<int64_t>(ip.ids.size()), V = lm().vocab_size();
  ASSERT_EQ(lm().image_token_id(), lm().config().image_token_id) << "a vision model marks its image spans";
  int64_t at = 0;
  model::ForwardTaps taps = inject(ip, at);
  std::vector<std::vector<int32_t>> routes(lm().config().n_layers);
  taps.on_route = [&](int64_t layer, const std::vector<float>&, const std::vector<int32_t>& experts,
                      const std::vector<float>&) {
    if (layer < static_cast<int64_t>(routes.size())) routes[layer] = experts;
  };
  auto st = lm().new_sequence();
  expect_within(compare(model::logits_in_steps(lm(), ip.ids, {0, S}, st.get(), &taps),
                        golden_f32(p + ".prefill_logits"), V), p + " prefill");
  {  // the same with the reference's own span rows: the part of the difference that is the LM's
    ImagePrompt ref = ip;
    const std::vector<float> merged = golden_f32(p + ".merged_embeds");
    const int64_t D = lm().config().dim;
    for (size_t i = 0; i < ref.span_positions.size(); ++i)
      std::copy_n(merged.data() + ref.span_positions[i] * D, D, ref.span_rows.data() + i * D);
    int64_t at_ref = 0;
    const model::ForwardTaps ref_taps = inject(ref, at_ref);
    auto st_ref = lm().new_sequence();
    expect_within(compare(model::logits_in_steps(lm(), ref.ids, {0, S}, st_ref.get(), &ref_taps),
                          golden_f32(p + ".prefill_logits"), V), p + " prefill, reference rows");
  }
  int64_t flipped = 0, rows = 0;
  for (size_t l = 0; l < routes.size(); ++l) {
    const std::vector<int32_t> want = golden_raw<int32_t>(p + ".route." + std::to_string(l) + ".indices");
    const int64_t k = static_cast<int64_t>(want.size()) / S;
    ASSERT_EQ(routes[l].size(), want.size()) << "layer " << l;
    for (int64_t r = 0; r < S; ++r) {
      std::vector<int32_t> a(routes[l].begin() + r * k, routes[l].begin() + (r + 1) * k);
      std::vector<int32_t> b(want.begin() + r * k, want.begin() + (r + 1) * k);
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      flipped += a != b;
      ++rows;
    }
  }
  std::printf("  %-28s %lld of %lld rows choose other experts\n", (p + " routing").c_str(), (long long)flipped,
              (long long)rows);
  EXPECT_LT(double(flipped) / rows, 0.03);
  // Prefix prefill holding every image span, then one text token per step.
  const int64_t P = golden_raw<int32_t>(p + ".decode_prefix_len")[0];
  std::vector<int64_t> cuts = {0, P};
  for (int64_t t = P + 1; t <= S; ++t) cuts.push_back(t);
  at = 0;
  taps.on_route = nullptr;
  auto st2 = lm().new_sequence();
  const std::vector<float> dec = model::logits_in_steps(lm(), ip.ids, cuts, st2.get(), &taps);
  expect_within(compare(dec, golden_f32(p + ".decode_logits"), V), p + " prefix+decode");
  expect_within(compare(dec, golden_f32(p + ".decode_logits_indexk_fix"), V), p + " prefix+decode (key fix)");
}

INSTANTIATE_TEST_SUITE_P(Goldens, VisionLogits, ::testing::Values("p1", "p2"));

}  // namespace
}  // namespace deepinfer
