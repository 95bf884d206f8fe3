// The sampler on hand-made logits: each processing stage, the seeded draw's determinism and its
// distribution, logprobs, and parameter validation.
#include "sampling/sampler.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "backends/cpu/cpu_backend.h"
#include "core/counter_rng.h"
#include "core/env.h"
#include "ops/token_draw.h"
#include "core/error.h"

namespace deepinfer::sampling {
namespace {

struct Fixture {
  std::vector<float> logits;
  SamplingParams params;
  std::vector<int32_t> prompt, output, eos;
  std::vector<float> scratch;
  int32_t draw(uint64_t seed, int64_t position = 0, uint64_t stream = 0) {
    SampleInput in;
    in.logits = logits;
    in.params = &params;
    in.prompt = prompt;
    in.output = output;
    in.eos_token_ids = eos;
    in.seed = seed;
    in.stream = stream;
    in.position = position;
    return sample(in, scratch).token;
  }
  std::map<int32_t, int> histogram(int n) {
    std::map<int32_t, int> h;
    for (int s = 0; s < n; ++s) ++h[draw(s)];
    return h;
  }
};

TEST(Sampler, GreedyTakesTheLowestIndexOfTies) {
  Fixture f{{1.0f, 3.0f, 3.0f, 2.0f}};
  f.params.temperature = 0;
  EXPECT_EQ(f.draw(1), 1);
  EXPECT_EQ(f.draw(2), 1);
}

TEST(Sampler, LogitsThatOverflowAtTheTemperatureKeepTheirDistribution) {
  Fixture f{{1.0f, 3.0f, 2.0f, 3.5f, -1.0f}};
  f.params.temperature = 1e-45f;  // x / T = +inf for tokens 0-3: the first tie (token 0) won every draw
  for (uint64_t seed = 0; seed < 20; ++seed) EXPECT_EQ(f.draw(seed), 3);
  // Every logit biased near -FLT_MAX: x / T = -inf everywhere and no token was drawn (token 0 came back).
  f.params.temperature = 0.5f;
  f.params.logit_bias = {{0, -3.4e38f}, {1, -3.4e38f}, {2, -3.4e38f}, {3, -3.4e38f}, {4, -3.3e38f}};
  for (uint64_t seed = 0; seed < 20; ++seed) EXPECT_EQ(f.draw(seed), 4);
  f.params.logit_bias[4] = -3.4e38f;  // the bias absorbs the logits: five equal values, each drawn
  EXPECT_EQ(f.histogram(200).size(), 5u);
  f.params.logit_bias = {{1, 3.4e38f}, {3, 3.4e38f}};  // two tied at FLT_MAX: x / T = +inf, 1 won every draw
  auto h = f.histogram(200);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_GT(h[1], 60);
  EXPECT_GT(h[3], 60);
}

TEST(Sampler, SameCounterSameTokenAndPositionsDrawIndependently) {
  Fixture f{std::vector<float>(50, 0.0f)};  // uniform
  std::set<int32_t> seen;
  for (int pos = 0; pos < 40; ++pos) {
    int32_t t = f.draw(7, pos);
    EXPECT_EQ(t, f.draw(7, pos));
    seen.insert(t);
  }
  EXPECT_GT(seen.size(), 20u);                // positions get fresh noise
  EXPECT_NE(f.draw(7, 3, 0), f.draw(7, 3, 1) + 1000);  // streams are separate keys (smoke)
  int differ = 0;
  for (int pos = 0; pos < 40; ++pos) differ += f.draw(7, pos, 0) != f.draw(7, pos, 1);
  EXPECT_GT(differ, 30);
}

TEST(Sampler, TemperatureSamplingFollowsTheSoftmax) {
  Fixture f{{0.0f, 1.0f, 2.0f, -1.0f, 0.5f}};
  f.params.temperature = 0.8f;
  const int n = 40000;
  auto h = f.histogram(n);
  double z = 0;
  for (float v : f.logits) z += std::exp(v / 0.8);
  double chi2 = 0;
  for (int t = 0; t < 5; ++t) {
    double expect = n * std::exp(f.logits[t] / 0.8) / z;
    chi2 += (h[t] - expect) * (h[t] - expect) / expect;
  }
  EXPECT_LT(chi2, 18.5);  // 4 degrees of freedom, p ~ 0.001
}

TEST(Sampler, TopKTopPMinPKeepOnlyTheirCandidates) {
  Fixture f{{5.0f, 4.0f, 3.0f, 2.0f, 1.0f, 0.0f, 4.0f}};
  f.params.temperature = 1.0f;
  f.params.top_k = 3;  // 0, then the 4.0 tie (1 and 6: lower index first), so {0, 1, 6}
  for (auto [t, c] : f.histogram(3000)) EXPECT_TRUE(t == 0 || t == 1 || t == 6) << t;
  f.params.top_k = 0;
  f.params.top_p = 0.6f;  // p(0) ~ 0.51 < 0.6: the crossing token stays (1; its tie 6 does not)
  auto h = f.histogram(3000);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_TRUE(h.count(0) && h.count(1));
  f.params.top_p = 1.0f;
  f.params.min_p = 0.3f;  // keep p >= 0.3 p_max: logits >= 5 + ln 0.3 = 3.8
  for (auto [t, c] : f.histogram(3000)) EXPECT_TRUE(t == 0 || t == 1 || t == 6) << t;
  f.params.top_k = 1;
  f.params.min_p = 0;
  EXPECT_EQ(f.histogram(200).size(), 1u);
}

TEST(Sampler, PenaltiesBiasAndMinTokens) {
  Fixture f{{2.0f, 1.9f, -1.0f, -1.1f}};
  f.params.temperature = 0;
  EXPECT_EQ(f.draw(0), 0);
  f.prompt = {0};
  f.params.repetition_penalty = 1.1f;  // 2.0 / 1.1 < 1.9
  EXPECT_EQ(f.draw(0), 1);
  f.params.repetition_penalty = 1.0f;
  f.logits = {-1.0f, -1.05f, -5.0f, -6.0f};
  f.prompt = {0};
  f.params.repetition_penalty = 1.1f;  // negative logits are multiplied: -1.1 < -1.05
  EXPECT_EQ(f.draw(0), 1);
  f.params.repetition_penalty = 1.0f;
  f.output = {1, 1};
  f.params.frequency_penalty = 0.01f;  // 1: -1.05 - 0.02 < -1.0 (0 stays best)
  EXPECT_EQ(f.draw(0), 0);
  f.output = {0};
  f.params.frequency_penalty = 0;
  f.params.presence_penalty = 0.1f;  // 0 seen once: -1.1 < -1.05
  EXPECT_EQ(f.draw(0), 1);
  f.params.presence_penalty = 0;
  f.params.logit_bias = {{3, 10.0f}};
  EXPECT_EQ(f.draw(0), 3);
  f.eos = {3};
  f.params.min_tokens = 2;  // one token generated so far: EOS masked
  EXPECT_EQ(f.draw(0), 0);
  f.params.stop_token_ids = {0};
  EXPECT_EQ(f.draw(0), 1);
  f.output = {2, 2};  // min_tokens reached
  EXPECT_EQ(f.draw(0), 3);
}

TEST(Sampler, LogprobsAreOfTheRawDistributionWithRanks) {
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.0f};
  auto lp = position_logprobs(logits, 2, 2);
  double z = std::log(std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + std::exp(0.0));
  ASSERT_EQ(lp.size(), 2u);  // the chosen token, then top-2 without duplicating it
  EXPECT_EQ(lp[0].token_id, 2);
  EXPECT_EQ(lp[0].rank, 2);
  EXPECT_NEAR(lp[0].logprob, 2.0 - z, 1e-6);
  EXPECT_EQ(lp[1].token_id, 1);
  EXPECT_EQ(lp[1].rank, 1);
  std::vector<float> nan_row = {1.0f, NAN, 2.0f};
  EXPECT_THROW(position_logprobs(nan_row, 0, 1), Error);  // never a NaN logprob
  Fixture f{logits};
  f.params.temperature = 0;
  f.params.logprobs = 0;
  SampleInput in;
  in.logits = logits;
  in.params = &f.params;
  auto out = sample(in, f.scratch);
  EXPECT_EQ(out.token, 1);
  EXPECT_NEAR(out.logprob, 3.0 - z, 1e-6);
  ASSERT_EQ(out.logprobs.size(), 1u);
}

TEST(Sampler, NanLogitsAndFullyMaskedRowsAreErrors) {
  Fixture f{{0.0f, NAN}};
  EXPECT_THROW(f.draw(0), Error);
  Fixture g{{0.0f, 1.0f}};
  std::vector<uint32_t> none = {0};
  SampleInput in;
  in.logits = g.logits;
  in.params = &g.params;
  in.allowed_bitmask = &none;
  EXPECT_THROW(sample(in, g.scratch), Error);
}

// The rows sample_is_plain_draw admits are drawn by the backends' draw_tokens; on the CPU backend that
// gives the sampler's token and logprob bit for bit (the same shared math), for greedy rows with ties,
// temperatures whose division overflows, -inf entries, and the error rows.
TEST(Sampler, PlainRowsAreTheCpuBackendsDrawTokens) {
  cpu::CpuBackend be;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  const int64_t vocab = 1000;
  const std::vector<float> temps = {0.0f, 0.7f, 1.0f, 1.5f, 1e-40f, 0.0f, 2.0f, 0.3f};
  const int64_t R = static_cast<int64_t>(temps.size());
  std::vector<float> x(R * vocab);
  for (float& v : x) v = nd(rng);
  x[0 * vocab + 3] = x[0 * vocab + 900] = 50.0f;  // a greedy tie: the lower index
  for (int64_t v = 0; v < vocab; v += 3) x[3 * vocab + v] = -INFINITY;
  std::fill_n(x.begin() + 5 * vocab, vocab, 0.25f);  // all equal
  std::vector<int32_t> rows;
  std::vector<uint64_t> keys;
  for (int32_t r = R - 1; r >= 0; --r) rows.push_back(r), keys.push_back(draw_key(11, 2, 100 + r));
  std::vector<float> temp;
  for (int32_t r : rows) temp.push_back(temps[r]);
  std::vector<int32_t> token(R);
  std::vector<float> logprob(R);
  be.draw_tokens(x.data(), vocab, rows.data(), R, temp.data(), keys.data(), token.data(), logprob.data());
  std::vector<float> scratch;
  std::set<int32_t> seen;
  for (int64_t i = 0; i < R; ++i) {
    SamplingParams p;
    p.temperature = temp[i];
    ASSERT_TRUE(sample_is_plain_draw(p, 0, vocab));
    SampleInput in;
    in.logits = std::span<const float>(x.data() + rows[i] * vocab, vocab);
    in.params = &p;
    in.seed = 11;
    in.stream = 2;
    in.position = 100 + rows[i];
    const SampleOutput want = sample(in, scratch);
    EXPECT_EQ(token[i], want.token) << "row " << rows[i];
    EXPECT_EQ(std::bit_cast<uint32_t>(logprob[i]), std::bit_cast<uint32_t>(want.logprob)) << "row " << rows[i];
    seen.insert(want.token);
  }
  EXPECT_EQ(token[R - 1], 3);  // row 0, greedy
  EXPECT_GT(seen.size(), 4u);  // the rows drew different tokens (not one constant)

  std::vector<float> bad = {0.0f, NAN, 1.0f, -INFINITY, -INFINITY, -INFINITY};
  const std::vector<int32_t> two = {0, 1};
  const std::vector<float> t2 = {0.0f, 1.0f};
  const std::vector<uint64_t> k2 = {1, 2};
  be.draw_tokens(bad.data(), 3, two.data(), 2, t2.data(), k2.data(), token.data(), logprob.data());
  EXPECT_EQ(token[0], ops::kDrawNaN);
  EXPECT_EQ(token[1], ops::kDrawNone);
}

TEST(Sampler, PlainDrawsExcludeWhatChangesTheRow) {
  const int64_t vocab = 100;
  auto plain = [&](auto edit, int64_t generated = 5) {
    SamplingParams p;
    edit(p);
    return sample_is_plain_draw(p, generated, vocab);
  };
  EXPECT_TRUE(plain([](SamplingParams&) {}));
  EXPECT_TRUE(plain([](SamplingParams& p) { p.temperature = 0, p.top_k = 5, p.top_p = 0.5f; }));  // greedy ignores them
  EXPECT_TRUE(plain([](SamplingParams& p) { p.top_k = 100; }));  // keeps the whole vocabulary
  EXPECT_FALSE(plain([](SamplingParams& p) { p.top_k = 5; }));
  EXPECT_FALSE(plain([](SamplingParams& p) { p.top_p = 0.9f; }));
  EXPECT_FALSE(plain([](SamplingParams& p) { p.min_p = 0.1f; }));
  EXPECT_FALSE(plain([](SamplingParams& p) { p.logit_bias[3] = 1.0f; }));
  EXPECT_FALSE(plain([](SamplingParams& p) { p.repetition_penalty = 1.1f; }));
  EXPECT_FALSE(plain([](SamplingParams& p) { p.presence_penalty = 0.5f; }));
  EXPECT_FALSE(plain([](SamplingParams& p) { p.frequency_penalty = 0.5f; }));
  EXPECT_FALSE(plain([](SamplingParams& p) { p.logprobs = 0; }));
  EXPECT_FALSE(plain([](SamplingParams& p) { p.min_tokens = 6; }));
  EXPECT_TRUE(plain([](SamplingParams& p) { p.min_tokens = 5; }));
}

TEST(SamplingParams, ValidateNamesTheField) {
  auto msg = [](SamplingParams p) {
    try {
      p.validate();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  SamplingParams p;
  EXPECT_EQ(msg(p), "");
  p.n = 0;
  EXPECT_NE(msg(p).find("n must"), std::string::npos);
  p = {};
  p.max_tokens = 0;
  EXPECT_NE(msg(p).find("max_tokens"), std::string::npos);
  p = {};
  p.min_tokens = 20;
  EXPECT_NE(msg(p).find("min_tokens"), std::string::npos);
  p = {};
  p.repetition_penalty = 0;
  EXPECT_NE(msg(p).find("repetition_penalty"), std::string::npos);
  p = {};
  p.stop = {""};
  EXPECT_NE(msg(p).find("stop"), std::string::npos);
  p = {};
  p.so_args = "not json";
  EXPECT_NE(msg(p).find("so_args"), std::string::npos);
  p.so_args = R"({"schema_type": "json", "schema": {"type": "object"}})";
  EXPECT_EQ(msg(p), "");
}

TEST(Env, EveryVariableHasAMeaningAndDefaultsApply) {
  for (auto& v : env_vars()) {
    EXPECT_EQ(std::string(v.name).rfind("DEEPINFER_", 0), 0u);
    EXPECT_GT(std::string(v.meaning).size(), 10u);
  }
  EXPECT_EQ(env_int("DEEPINFER_USE_NEXTN_DECODE"), 5);
  EXPECT_EQ(env_int("DEEPINFER_YOCO_PREFILL_KEEP_TOKENS"), 140);
  setenv("DEEPINFER_ASYNC_SCHEDULING", "0", 1);
  EXPECT_FALSE(env_bool("DEEPINFER_ASYNC_SCHEDULING"));
  setenv("DEEPINFER_ASYNC_SCHEDULING", "maybe", 1);
  EXPECT_THROW(env_bool("DEEPINFER_ASYNC_SCHEDULING"), Error);
  unsetenv("DEEPINFER_ASYNC_SCHEDULING");
  EXPECT_TRUE(env_bool("DEEPINFER_ASYNC_SCHEDULING"));
  EXPECT_THROW(env_string("DEEPINFER_NOT_A_VARIABLE"), Error);
}

}  // namespace
}  // namespace deepinfer::sampling
