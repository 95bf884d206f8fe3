// The sampler on hand-made logits: each processing stage, the seeded draw's determinism and its
// distribution, logprobs, and parameter validation.
#include "sampling/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <numeric>
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

// Every row is drawn by the backends' draw_tokens from sample()'s draw_params; on the CPU backend that
// gives the sampler's token and logprob bit for bit (the same shared math): greedy ties, temperatures
// whose division overflows, -inf entries, top-k / top-p / min-p, penalties, bias, min_tokens, a grammar
// mask, and the error rows.
TEST(Sampler, EveryRowIsTheCpuBackendsDrawTokens) {
  cpu::CpuBackend be;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  const int64_t vocab = 1000, words = (vocab + 31) / 32;
  std::vector<SamplingParams> ps(14);
  ps[0].temperature = 0, ps[1].temperature = 0.7f, ps[2].temperature = 1.5f, ps[3].temperature = 1e-40f;
  ps[4].temperature = 0, ps[5].temperature = 2.0f;
  ps[6].top_k = 20, ps[7].top_p = 0.8f, ps[8].top_k = 50, ps[8].top_p = 0.5f, ps[8].min_p = 0.01f;
  ps[9].repetition_penalty = 1.3f, ps[9].presence_penalty = 0.4f, ps[9].frequency_penalty = 0.25f;
  ps[10].logit_bias = {{5, 30.0f}, {6, -2.0f}, {5000, 1.0f}}, ps[10].temperature = 0.5f;
  ps[11].min_tokens = 10, ps[11].stop_token_ids = {7}, ps[11].temperature = 0;
  ps[12].top_p = 0.95f, ps[12].temperature = 0.6f;  // + a grammar mask
  ps[13].temperature = 0.9f, ps[13].top_k = 3;      // all equal values: the ranks are the token ids
  const int64_t R = static_cast<int64_t>(ps.size());
  std::vector<float> x(R * vocab);
  for (float& v : x) v = nd(rng);
  x[0 * vocab + 3] = x[0 * vocab + 900] = 50.0f;  // a greedy tie: the lower index
  for (int64_t v = 0; v < vocab; v += 3) x[3 * vocab + v] = -INFINITY;
  std::fill_n(x.begin() + 4 * vocab, vocab, 0.25f);  // all equal
  std::fill_n(x.begin() + 13 * vocab, vocab, -0.0f);
  x[13 * vocab + 500] = 0.0f;  // -0 and +0 rank alike
  const std::vector<int32_t> prompt = {1, 2, 3, 900}, output = {2, 2, 10, 11, 7};
  const std::vector<int32_t> eos = {8};
  x[11 * vocab + 8] = x[11 * vocab + 7] = 40.0f;  // eos and the stop token lead, forbidden before min_tokens
  std::vector<uint32_t> allowed(words, 0);
  for (int64_t t = 100; t < 400; t += 7) allowed[t >> 5] |= 1u << (t & 31);
  std::vector<int32_t> rows;
  std::vector<ops::DrawRow> param;
  std::vector<ops::DrawAdjust> adjust;
  std::vector<SampleInput> ins;
  for (int32_t r = static_cast<int32_t>(R) - 1; r >= 0; --r) {  // not in row order
    SampleInput in;
    in.logits = std::span<const float>(x.data() + r * vocab, vocab);
    in.params = &ps[r];
    in.prompt = prompt;
    in.output = output;
    in.eos_token_ids = eos;
    in.seed = 11;
    in.stream = 2;
    in.position = 100 + r;
    if (r == 12) in.allowed_bitmask = &allowed;
    ops::DrawRow p = draw_params(in, vocab, adjust);
    if (r == 12) p.mask = 0;
    rows.push_back(r), param.push_back(p), ins.push_back(in);
  }
  std::vector<int32_t> token(R);
  std::vector<float> logprob(R);
  be.draw_tokens(x.data(), vocab, rows.data(), R, param.data(), adjust.data(), allowed.data(), nullptr, token.data(),
                 logprob.data());
  std::vector<float> scratch;
  std::set<int32_t> seen;
  for (int64_t i = 0; i < R; ++i) {
    const SampleOutput want = sample(ins[i], scratch);
    EXPECT_EQ(token[i], want.token) << "row " << rows[i];
    EXPECT_EQ(std::bit_cast<uint32_t>(logprob[i]), std::bit_cast<uint32_t>(want.logprob)) << "row " << rows[i];
    seen.insert(want.token);
  }
  EXPECT_EQ(token[R - 1], 3);  // row 0, greedy
  EXPECT_EQ(token[R - 1 - 10], 5);  // the +30 bias
  EXPECT_NE(token[R - 1 - 11], 8);  // eos and stop forbidden
  EXPECT_NE(token[R - 1 - 11], 7);
  EXPECT_TRUE(token[R - 1 - 12] >= 100 && token[R - 1 - 12] < 400 && (token[R - 1 - 12] - 100) % 7 == 0);
  EXPECT_LT(token[0], 3);      // row 13: the three lowest ids
  EXPECT_GT(seen.size(), 6u);  // the rows drew different tokens (not one constant)

  std::vector<float> bad = {0.0f, NAN, 1.0f, -INFINITY, -INFINITY, -INFINITY};
  const std::vector<int32_t> two = {0, 1};
  const std::vector<ops::DrawRow> p2(2);
  be.draw_tokens(bad.data(), 3, two.data(), 2, p2.data(), nullptr, nullptr, nullptr, token.data(), logprob.data());
  EXPECT_EQ(token[0], ops::kDrawNaN);
  EXPECT_EQ(token[1], ops::kDrawNone);
}

// The truncation's order: draw_rank_key sorts as the sampler ranks (value, then lower id; -0 = +0), and
// top-p's integer masses keep the same nucleus whatever order they are summed in.
TEST(Sampler, RankKeysAndMassesAreOrderFree) {
  std::mt19937 rng(3);
  std::vector<float> v(3000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(static_cast<int>(rng() % 40) - 20) * 0.5f;
  v[7] = -0.0f, v[8] = 0.0f;
  std::vector<int32_t> by_key(v.size()), by_value(v.size());
  std::iota(by_key.begin(), by_key.end(), 0);
  by_value = by_key;
  std::sort(by_key.begin(), by_key.end(), [&](int32_t a, int32_t b) {
    return ops::draw_rank_key(v[a], a) > ops::draw_rank_key(v[b], b);
  });
  std::sort(by_value.begin(), by_value.end(), [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  EXPECT_EQ(by_key, by_value);
  uint64_t forward = 0, backward = 0;
  for (size_t i = 0; i < v.size(); ++i) forward += ops::draw_mass(v[i], 10.0f), backward += ops::draw_mass(v[v.size() - 1 - i], 10.0f);
  EXPECT_EQ(forward, backward);
  EXPECT_EQ(ops::draw_mass(10.0f, 10.0f), uint64_t{1} << 32);
  EXPECT_TRUE(ops::draw_mass_reaches(50, 100, 0.5f));
  EXPECT_FALSE(ops::draw_mass_reaches(49, 100, 0.5f));
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
