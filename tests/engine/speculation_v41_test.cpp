// DSpark speculative decoding on a real DeepSeek-V4.1 graph: the goldens' tiny-b model (its own DSpark
// head, random weights). Greedy and seeded outputs with speculation on — fixed count and confidence
// scheduled over the step cost measured at start-up — are token for token those with it off, for the
// goldens' greedy prompt alone and for a batch of mixed requests (every verification rolls the state
// back with truncate, so any inexact rollback would show up as a different token).
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "../model/golden_reader.h"
#include "../model/v41_golden_model.h"
#include "engine/engine.h"

namespace deepinfer::engine {
namespace {

EngineOptions opts(bool speculative, bool confidence) {
  EngineOptions o;
  o.max_num_seqs = 8;
  o.max_num_batched_tokens = 96;
  o.max_model_len = 256;
  o.speculative = speculative;
  o.num_draft_tokens = 5;
  o.confidence_scheduling = confidence;
  return o;
}

// stats: the engine's counters after the run, when given.
std::map<std::string, RequestOutput> run(EngineOptions o, const std::vector<std::vector<int32_t>>& prompts,
                                         const std::vector<SamplingParams>& params, EngineStats* stats = nullptr) {
  Engine e(testing::load_v41_golden("tiny-b"), nullptr, o);
  for (size_t i = 0; i < prompts.size(); ++i) e.add_request(Prompt::from_ids(prompts[i]), params[i], "r" + std::to_string(i));
  std::map<std::string, RequestOutput> out;
  while (e.has_unfinished())
    for (auto& r : e.step()) out[r.request_id] = r;
  if (stats) *stats = e.stats();
  return out;
}

// Equal tokens, and cumulative logprobs bit for bit (rel_tol 0) or within rel_tol * (1 + |logprob|).
void expect_same(const std::map<std::string, RequestOutput>& a, const std::map<std::string, RequestOutput>& b,
                 double rel_tol = 0) {
  ASSERT_EQ(a.size(), b.size());
  for (auto& [id, x] : a) {
    ASSERT_EQ(x.outputs.size(), b.at(id).outputs.size());
    for (size_t i = 0; i < x.outputs.size(); ++i) {
      EXPECT_EQ(x.outputs[i].token_ids, b.at(id).outputs[i].token_ids) << id << " sample " << i;
      const double lp = x.outputs[i].cumulative_logprob, other = b.at(id).outputs[i].cumulative_logprob;
      if (rel_tol == 0) EXPECT_EQ(lp, other) << id;
      else EXPECT_NEAR(lp, other, rel_tol * (1 + std::abs(lp))) << id;
    }
  }
}

void print(const char* what, const std::map<std::string, RequestOutput>& outs) {
  SpeculativeMetrics m;
  for (auto& [id, o] : outs) add_metrics(m, o.metrics.speculative);
  std::printf("[spec v41] %s: drafted %lld verified %lld accepted %lld, tau %.3f, acceptance by position:", what,
              static_cast<long long>(m.drafted), static_cast<long long>(m.verified), static_cast<long long>(m.accepted),
              m.mean_accepted_length());
  for (double a : m.acceptance_by_position()) std::printf(" %.2f", a);
  std::printf("\n");
}

TEST(SpeculationV41, GreedyGoldenPromptIsUnchanged) {
  io::Checkpoint g = io::Checkpoint::open(testing::kV41GoldenRoot + "tiny-b/goldens.safetensors");
  const auto prompt = testing::golden_ints(g, "greedy.prompt_ids");
  const auto want = testing::golden_ints(g, "greedy.output_ids");
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = static_cast<int>(want.size());
  p.ignore_eos = true;
  auto off = run(opts(false, false), {prompt}, {p});
  auto fixed = run(opts(true, false), {prompt}, {p});
  auto conf = run(opts(true, true), {prompt}, {p});
  expect_same(off, fixed);
  expect_same(off, conf);
  const auto& got = off.at("r0").outputs[0].token_ids;
  int same = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) same += got[i] == want[i];
  std::printf("[spec v41] greedy prompt: %d/%zu tokens equal the reference's greedy run\n", same, want.size());
  print("tiny-b greedy, fixed 5", fixed);
  print("tiny-b greedy, confidence", conf);
  EXPECT_GT(fixed.at("r0").metrics.speculative.verified, 0);
}

TEST(SpeculationV41, MixedBatchIsUnchanged) {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> params;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> pr;
    for (int j = 0; j < 3 + 17 * i; ++j) pr.push_back((i * 131 + j * 37 + 11) % 384);
    prompts.push_back(pr);
    SamplingParams p;
    p.max_tokens = 12 + 2 * i;
    p.ignore_eos = true;
    if (i % 2) p.temperature = 0.8f, p.seed = 900 + i, p.top_k = 50;
    else p.temperature = 0;
    if (i == 3) p.n = 2;
    params.push_back(p);
  }
  auto off = run(opts(false, false), prompts, params);
  auto fixed = run(opts(true, false), prompts, params);
  expect_same(off, fixed);
  auto conf = run(opts(true, true), prompts, params);
  expect_same(off, conf);
  print("tiny-b batch, fixed 5", fixed);
  print("tiny-b batch, confidence", conf);
}

// Rows drawn on the model's device (device_sampling: every sample row but those asking for logprobs,
// through the backend's draw_tokens: greedy, temperature, top-k / top-p / min-p, penalties, bias,
// min_tokens) give the host sampler's tokens, beside rows that still come back as logits (logprobs), with
// and without speculation. On the CPU backend the logprobs are bit for bit too; on CUDA
// (DEEPINFER_DEVICE=cuda) the device's double normalizer may move a logprob by a float ulp.
TEST(SpeculationV41, DeviceDrawsAreTheHostSamplersTokens) {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> params;
  for (int i = 0; i < 8; ++i) {
    std::vector<int32_t> pr;
    for (int j = 0; j < 4 + 13 * i; ++j) pr.push_back((i * 71 + j * 29 + 5) % 384);
    prompts.push_back(pr);
    SamplingParams p;
    p.max_tokens = 10 + i;
    p.ignore_eos = true;
    p.temperature = i % 3 == 0 ? 0.0f : 0.9f;
    p.seed = 40 + i;
    if (i == 2) p.n = 2;
    if (i == 3) p.repetition_penalty = 1.3f;
    if (i == 4) p.top_k = 20, p.top_p = 0.9f;
    if (i == 5) p.logprobs = 2;          // on the host
    if (i == 6) p.presence_penalty = 0.5f, p.frequency_penalty = 0.3f, p.min_p = 0.05f, p.logit_bias = {{5, 3.0f}};
    if (i == 7) p.min_tokens = 6, p.ignore_eos = false, p.stop_token_ids = {pr[1]};
    params.push_back(p);
  }
  const double rel_tol = model::V41Options::from_env().device.is_cpu() ? 0 : 1e-5;
  for (bool speculative : {false, true}) {
    std::map<std::string, RequestOutput> out[2];
    EngineStats stats[2];
    for (int on = 0; on < 2; ++on) {
      EngineOptions o = opts(speculative, false);
      o.device_sampling = on;
      out[on] = run(o, prompts, params, &stats[on]);
    }
    expect_same(out[0], out[1], rel_tol);
    EXPECT_EQ(stats[0].device_drawn_rows, 0);
    EXPECT_GT(stats[1].device_drawn_rows, 80) << "speculative " << speculative;
  }
}

}  // namespace
}  // namespace deepinfer::engine
