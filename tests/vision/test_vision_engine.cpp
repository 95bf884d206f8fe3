// Prompts with images through the engine: the placeholder expands into its span, the span rows reach
// the model through the batch (in any chunking), and the first greedy token is the reference's argmax
// after the prompt; bad image input fails that request only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/json_file.h"
#include "engine/engine.h"
#include "model/deepseek_v41/v41_model.h"
#include "vision_goldens.h"

namespace deepinfer {
namespace {

using engine::Engine;
using engine::EngineOptions;

std::unique_ptr<Engine> make_engine(int max_batched_tokens) {
  auto m = model::V41Model::load(testing::kVisionDir, model::V41Options::from_env());
  auto strings = read_json_file(testing::kVisionDir + "/goldens.json")
                     .at("engram").at("token_strings").get<std::vector<std::string>>();
  m->set_engram_tokens(strings, strings);  // the goldens' synthetic tokenizer
  EngineOptions o;
  o.max_num_batched_tokens = max_batched_tokens;
  o.max_model_len = 1024;
  auto e = std::make_unique<Engine>(std::move(m), nullptr, o);
  e->set_vision(vision::VisionStage::load(testing::kVisionDir, ops::cpu_backend()));
  return e;
}

TEST(VisionEngine, ImagePromptsGenerateTheReferenceToken) {
  for (const std::string p : {"p1", "p2"}) {
    const std::vector<float> want = testing::golden_f32(p + ".prefill_logits");
    const int64_t S = static_cast<int64_t>(testing::golden_raw<int32_t>(p + ".input_ids").size());
    const int64_t V = static_cast<int64_t>(want.size()) / S;  // prefill_logits [S, vocab]
    const int32_t argmax = static_cast<int32_t>(std::max_element(want.end() - V, want.end()) - (want.end() - V));
    for (int chunk : {2048, 37}) {  // one prefill, and chunks that cut through the image spans
      auto e = make_engine(chunk);
      Prompt prompt = Prompt::from_ids(testing::collapsed_prompt(p));
      prompt.images = testing::prompt_images(p);
      SamplingParams sp;
      sp.temperature = 0;
      sp.max_tokens = 1;
      sp.ignore_eos = true;
      sp.prompt_logprobs = 0;
      e->add_request(prompt, sp, "r");
      RequestOutput out;
      while (e->has_unfinished())
        for (auto& r : e->step()) out = r;
      ASSERT_EQ(out.outputs[0].token_ids.size(), 1u) << p;
      EXPECT_EQ(out.outputs[0].token_ids[0], argmax) << p << " chunk " << chunk;
      // every prompt token's logprob against the reference's logits (the spans move all rows after them)
      const std::vector<int32_t> ids = testing::golden_raw<int32_t>(p + ".input_ids");
      ASSERT_EQ(out.prompt_logprobs.size(), ids.size());
      double mean = 0;
      for (int64_t t = 1; t < S; ++t) {
        const float* row = want.data() + (t - 1) * V;
        const float mx = *std::max_element(row, row + V);
        double z = 0;
        for (int64_t v = 0; v < V; ++v) z += std::exp(double(row[v]) - mx);
        const double ref = double(row[ids[t]]) - mx - std::log(z);
        mean += std::fabs(out.prompt_logprobs[t].front().logprob - ref) / double(S - 1);
      }
      std::printf("  %s chunk %d: prompt logprobs mean |d| %.4f vs the reference\n", p.c_str(), chunk, mean);
      EXPECT_LE(mean, 0.05) << p;
    }
  }
}

TEST(VisionEngine, BadImageInputFailsOnlyThatRequest) {
  auto e = make_engine(2048);
  Prompt two_images = Prompt::from_ids(testing::collapsed_prompt("p1"));
  Prompt missing = two_images;  // placeholders without their images
  EXPECT_THROW(e->add_request(missing, SamplingParams{}, "a"), Error);
  Prompt corrupt = two_images;
  corrupt.images = testing::prompt_images("p1");
  corrupt.images[0].resize(corrupt.images[0].size() / 2);  // a truncated file
  EXPECT_THROW(e->add_request(corrupt, SamplingParams{}, "b"), Error);
  Prompt text = Prompt::from_ids({5, 6, 7});
  text.images = testing::prompt_images("p1");  // images but no placeholder
  EXPECT_THROW(e->add_request(text, SamplingParams{}, "c"), Error);
  SamplingParams sp;
  sp.max_tokens = 2;
  e->add_request(Prompt::from_ids({5, 6, 7}), sp, "ok");  // the engine carries on
  int64_t tokens = 0;
  while (e->has_unfinished())
    for (auto& r : e->step()) tokens = static_cast<int64_t>(r.outputs[0].token_ids.size());
  EXPECT_EQ(tokens, 2);
}

}  // namespace
}  // namespace deepinfer
