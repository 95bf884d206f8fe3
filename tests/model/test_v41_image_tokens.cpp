// DeepSeek-V4.1 image-span tokens (spec §5.3, §5.5, §5.7) on the goldens' tiny models: positions holding
// image_token_id select experts with ffn.gate.bias_vl (weights from the unbiased scores), are DEAD in the
// Engram history (they and every lookback through them hash as pad) with gate 0, and prefill, chunked
// prefill and decode agree. The goldens have no vision tower, so the tests switch image tokens on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "golden_reader.h"
#include "model/deepseek_v41/v41_model.h"
#include "v41_golden_model.h"

namespace deepinfer {
namespace {

using model::EngramHasher;

const std::string& kRoot = testing::kV41GoldenRoot;

model::V41Model& model_for(const std::string& c) {
  static std::map<std::string, std::unique_ptr<model::V41Model>> cache;
  auto& m = cache[c];
  if (!m) {
    m = testing::load_v41_golden(c);
    EXPECT_EQ(m->image_token_id(), -1) << "the goldens' config has no vision tower";
    testing::with_options(*m, [&](model::V41Options& o) { o.image_token_id = m->config().image_token_id; });
  }
  return *m;
}

// The S=64 golden prompt with two image spans: 8 tokens at 10..17 and 3 at 40..42.
std::vector<int32_t> prompt_with_images(const std::string& c, std::vector<uint8_t>* image = nullptr) {
  auto g = io::Checkpoint::open(kRoot + c + "/goldens.safetensors");
  std::vector<int32_t> ids = testing::golden_ints(g, "s64.input_ids");
  const int32_t img = static_cast<int32_t>(model_for(c).config().image_token_id);
  for (int p = 10; p < 18; ++p) ids[p] = img;
  for (int p = 40; p < 43; ++p) ids[p] = img;
  if (image) {
    image->clear();
    for (int32_t id : ids) image->push_back(id == img);
  }
  return ids;
}

std::vector<int32_t> sorted_topk(const std::vector<float>& v, int64_t k) {
  std::vector<int32_t> idx(v.size());
  for (size_t i = 0; i < v.size(); ++i) idx[i] = static_cast<int32_t>(i);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) { return v[a] > v[b]; });
  idx.resize(k);
  std::sort(idx.begin(), idx.end());
  return idx;
}

class V41Image : public ::testing::TestWithParam<std::string> {};

TEST(V41ImageConfig, ImageTokensOnlyWithVisionAndTheKey) {
  nlohmann::json j = read_json_file(kRoot + "tiny-a/config.json");
  EXPECT_FALSE(model::V41Config::from_json(j).has_vision);
  j["vision_config"] = {{"model_type", "deepseek_v41_vision"}};
  model::V41Model with(model::V41Config::from_json(j), ops::cpu_backend());
  EXPECT_EQ(with.image_token_id(), 510);
  j.erase("image_token_id");  // absent key: no image tokens
  model::V41Model without(model::V41Config::from_json(j), ops::cpu_backend());
  EXPECT_EQ(without.image_token_id(), -1);
}

// (a) every MoE selection: image tokens take the top-k of score + bias_vl, text tokens of score + bias;
// weights are the unbiased scores of the selected experts, normalized, times route_scale. Both biases
// must pick differently for some image and some text rows, or the test could not tell them apart.
TEST_P(V41Image, ImageTokensSelectExpertsWithBiasVl) {
  auto& m = model_for(GetParam());
  const auto& c = m.config();
  auto w = io::Checkpoint::open(kRoot + GetParam() + "/model.safetensors");
  std::vector<uint8_t> image;
  const std::vector<int32_t> ids = prompt_with_images(GetParam(), &image);
  int64_t checked = 0, vl_matters_image = 0, vl_matters_text = 0;
  model::ForwardTaps taps;
  taps.on_route = [&](int64_t l, const std::vector<float>& sc, const std::vector<int32_t>& sel,
                   const std::vector<float>& wt) {
    const std::string p = "layers." + std::to_string(l) + ".ffn.gate.";
    const int64_t E = c.experts_for(l), k = c.active_for(l);
    const auto bias = w.read_f32(p + "bias", {E}), bias_vl = w.read_f32(p + "bias_vl", {E});
    ASSERT_EQ(sc.size(), ids.size() * E);
    for (size_t t = 0; t < ids.size(); ++t) {
      std::vector<float> b(E), bv(E);
      for (int64_t e = 0; e < E; ++e) {
        b[e] = sc[t * E + e] + bias[e];
        bv[e] = sc[t * E + e] + bias_vl[e];
      }
      const bool differ = sorted_topk(b, k) != sorted_topk(bv, k);
      (image[t] ? vl_matters_image : vl_matters_text) += differ;
      std::vector<int32_t> got(sel.begin() + t * k, sel.begin() + (t + 1) * k);
      std::sort(got.begin(), got.end());
      EXPECT_EQ(got, sorted_topk(image[t] ? bv : b, k)) << "layer " << l << " position " << t;
      float sum = 0;
      for (int64_t j = 0; j < k; ++j) sum += sc[t * E + sel[t * k + j]];
      for (int64_t j = 0; j < k; ++j)
        EXPECT_FLOAT_EQ(wt[t * k + j], sc[t * E + sel[t * k + j]] / sum * static_cast<float>(c.route_scale));
      ++checked;
    }
  };
  model::ForwardBatch b;
  auto st = m.new_sequence();
  b.token_ids = ids;
  b.seq_start = {0, static_cast<int32_t>(ids.size())};
  b.states = {st.get()};
  b.logit_rows = {static_cast<int32_t>(ids.size()) - 1};
  std::vector<float> out;
  m.forward(b, out, &taps);
  EXPECT_EQ(checked, static_cast<int64_t>(ids.size()) * c.n_layers);
  std::printf("[v41-image] %s: bias_vl changes the selection of %lld image and %lld text (row, layer) pairs\n",
              GetParam().c_str(), static_cast<long long>(vl_matters_image), static_cast<long long>(vl_matters_text));
  EXPECT_GT(vl_matters_image, 0);
  EXPECT_GT(vl_matters_text, 0);
}

// (b) the hasher: a DEAD entry blocks itself and every lookback through it, so a position's ids are
// those of the tokens after the last DEAD hashed as a fresh sequence, and a DEAD position's ids are
// those of an all-pad n-gram (position 0 of a sequence holding the pad token).
TEST_P(V41Image, EngramDeadHistoryBlocksLookbacks) {
  auto& m = model_for(GetParam());
  const EngramHasher& h = *m.engram();
  const int64_t C = h.n_layers() * h.cols(), pad = h.compressed(m.config().engram_pad_id);
  std::vector<int64_t> hist;
  for (int64_t p = 0; p < 20; ++p) hist.push_back(h.compressed(37 + 11 * p));
  for (int64_t p : {4, 5, 9, 15}) hist[p] = EngramHasher::kDead;
  std::vector<int64_t> ids(hist.size() * C), one(C), all_pad(C), fresh;
  h.hash(hist, 0, static_cast<int64_t>(hist.size()), ids.data());
  h.hash({pad}, 0, 1, all_pad.data());
  int64_t last_dead = -1;
  for (int64_t p = 0; p < static_cast<int64_t>(hist.size()); ++p) {
    std::vector<int64_t> got(ids.begin() + p * C, ids.begin() + (p + 1) * C);
    if (hist[p] == EngramHasher::kDead) {
      last_dead = p;
      EXPECT_EQ(got, all_pad) << "DEAD position " << p;
      continue;
    }
    std::vector<int64_t> tail(hist.begin() + last_dead + 1, hist.begin() + p + 1);
    fresh.resize(tail.size() * C);
    h.hash(tail, 0, static_cast<int64_t>(tail.size()), fresh.data());
    EXPECT_EQ(got, std::vector<int64_t>(fresh.end() - C, fresh.end())) << "position " << p;
  }
  // teeth: without the DEAD entries position 6 (2 after a DEAD) hashes differently
  std::vector<int64_t> text = hist, text_ids(hist.size() * C);
  text[4] = text[5] = pad + 1;
  h.hash(text, 0, static_cast<int64_t>(text.size()), text_ids.data());
  EXPECT_NE(std::vector<int64_t>(ids.begin() + 6 * C, ids.begin() + 7 * C),
            std::vector<int64_t>(text_ids.begin() + 6 * C, text_ids.begin() + 7 * C));
}

// (b) through the forward: the hash ids are the hasher's over a history with DEAD at image positions,
// image rows hash as all-pad, and the Engram leaves image rows' streams bitwise unchanged (gate 0)
// while it changes every text row.
TEST_P(V41Image, EngramForwardDeadIdsAndZeroGate) {
  auto& m = model_for(GetParam());
  const EngramHasher& h = *m.engram();
  const int64_t C = h.n_layers() * h.cols(), D = m.config().dim, hc = m.config().hc_mult;
  std::vector<uint8_t> image;
  const std::vector<int32_t> ids = prompt_with_images(GetParam(), &image);
  const int64_t S = static_cast<int64_t>(ids.size());
  std::vector<int64_t> hist(S), want(S * C), all_pad(C), got;
  for (int64_t p = 0; p < S; ++p) hist[p] = image[p] ? EngramHasher::kDead : h.compressed(ids[p]);
  h.hash(hist, 0, S, want.data());
  h.hash({h.compressed(m.config().engram_pad_id)}, 0, 1, all_pad.data());
  std::map<int64_t, std::vector<float>> before, after;
  model::ForwardTaps taps;
  taps.on_hash_ids = [&](int64_t, const std::vector<int64_t>& v) { got = v; };
  taps.on_engram_input = [&](int64_t l, std::vector<float>& X) { before[l] = X; };
  taps.on_layer_input = [&](int64_t l, std::vector<float>& X, std::vector<float>&) {
    if (before.count(l)) after[l] = X;
  };
  auto st = m.new_sequence();
  model::logits_in_steps(m, ids, {0, S}, st.get(), &taps);
  EXPECT_EQ(got, want);
  for (int64_t p = 0; p < S; ++p)
    if (image[p]) {
      EXPECT_EQ(std::vector<int64_t>(got.begin() + p * C, got.begin() + (p + 1) * C), all_pad) << p;
    }
  ASSERT_EQ(before.size(), m.config().engram_layer_ids.size());
  for (const auto& [l, x0] : before) {
    const std::vector<float>& x1 = after[l];
    ASSERT_EQ(x0.size(), x1.size());
    for (int64_t p = 0; p < S; ++p) {
      const bool same = std::equal(x0.begin() + p * hc * D, x0.begin() + (p + 1) * hc * D, x1.begin() + p * hc * D);
      EXPECT_EQ(same, static_cast<bool>(image[p])) << "layer " << l << " position " << p;
    }
  }
}

// (c) prefill vs chunked (boundaries inside a span and 1-2 tokens after one, so the carried Engram
// history holds DEAD) vs decode: hash ids exactly equal, logits within the goldens' tolerances.
TEST_P(V41Image, PrefillChunkedDecodeAgree) {
  auto& m = model_for(GetParam());
  const std::vector<int32_t> ids = prompt_with_images(GetParam());
  const int64_t S = static_cast<int64_t>(ids.size()), V = m.vocab_size();
  std::vector<int64_t> hashes;
  model::ForwardTaps taps;
  taps.on_hash_ids = [&](int64_t, const std::vector<int64_t>& v) { hashes.insert(hashes.end(), v.begin(), v.end()); };
  auto run = [&](const std::vector<int64_t>& cuts) {
    hashes.clear();
    auto st = m.new_sequence();
    auto logits = model::logits_in_steps(m, ids, cuts, st.get(), &taps);
    return std::make_pair(logits, hashes);
  };
  const auto [ref, ref_hash] = run({0, S});
  std::vector<int64_t> decode_cuts = {0, 8};
  for (int64_t p = 9; p <= S; ++p) decode_cuts.push_back(p);
  const std::vector<std::pair<std::string, std::vector<int64_t>>> modes = {
      {"chunked", {0, 7, 13, 19, 41, 44, 51, S}}, {"decode", decode_cuts}};
  for (const auto& [name, cuts] : modes) {
    const auto [logits, hash] = run(cuts);
    EXPECT_EQ(hash, ref_hash) << name;
    ASSERT_EQ(logits.size(), ref.size());
    double mean = 0, mx = 0;
    int64_t agree = 0;
    for (int64_t r = 0; r < S; ++r) {
      const float* a = logits.data() + r * V;
      const float* b = ref.data() + r * V;
      for (int64_t v = 0; v < V; ++v) {
        const double d = std::fabs(static_cast<double>(a[v]) - b[v]);
        mean += d;
        mx = std::max(mx, d);
      }
      agree += (std::max_element(a, a + V) - a) == (std::max_element(b, b + V) - b);
    }
    mean /= static_cast<double>(S * V);
    std::printf("[v41-image] %s %-8s vs prefill: mean|d|=%.5f max|d|=%.5f argmax=%.3f\n", GetParam().c_str(),
                name.c_str(), mean, mx, static_cast<double>(agree) / S);
    EXPECT_LE(mean, 0.05) << name;
    EXPECT_GE(static_cast<double>(agree) / S, 0.95) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, V41Image, ::testing::Values("tiny-a", "tiny-b"));

}  // namespace
}  // namespace deepinfer
