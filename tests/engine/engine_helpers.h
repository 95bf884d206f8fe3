// Shared by the engine tests: prompts, running an engine to the end, bitwise comparison of outputs.
#pragma once
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace deepinfer::engine::testing_helpers {

inline std::vector<int32_t> prompt_of(int seed, int len) {
  std::mt19937 g(seed);
  std::vector<int32_t> p(len);
  for (auto& t : p) t = static_cast<int32_t>(g() % 89);
  return p;
}

// prompt_of inside the V4.1 golden models' vocabularies, clear of their special ids
inline std::vector<int32_t> golden_tokens(int seed, int len) {
  std::vector<int32_t> p = prompt_of(seed, len);
  for (auto& t : p) t += 3;
  return p;
}

inline std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

inline SamplingParams greedy_with_logprobs(int max_tokens = 8) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.logprobs = 3;
  return p;
}

// The prefix-cache tests' engine: eight sequences, prompts up to 1024 tokens, cache blocks of `block`.
inline EngineOptions prefix_cache_options(bool cache, int64_t block, int budget) {
  EngineOptions o;
  o.max_num_seqs = 8;
  o.max_num_batched_tokens = budget;
  o.max_model_len = 1024;
  o.prefix_caching = cache;
  o.prefix_block_tokens = block;
  return o;
}

inline std::map<std::string, RequestOutput> run(Engine& e) {
  std::map<std::string, RequestOutput> out;
  while (e.has_unfinished())
    for (auto& o : e.step()) out[o.request_id] = o;
  return out;
}

// Tokens, text, finish fields, cumulative logprob and logprobs, bitwise.
inline void expect_same(const std::map<std::string, RequestOutput>& a, const std::map<std::string, RequestOutput>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (auto& [id, x] : a) {
    const RequestOutput& y = b.at(id);
    ASSERT_EQ(x.outputs.size(), y.outputs.size()) << id;
    for (size_t i = 0; i < x.outputs.size(); ++i) {
      EXPECT_EQ(x.outputs[i].token_ids, y.outputs[i].token_ids) << id;
      EXPECT_EQ(x.outputs[i].text, y.outputs[i].text) << id;
      EXPECT_EQ(x.outputs[i].finish_reason, y.outputs[i].finish_reason) << id;
      EXPECT_EQ(x.outputs[i].stop_string, y.outputs[i].stop_string) << id;
      EXPECT_EQ(x.outputs[i].stop_token, y.outputs[i].stop_token) << id;
      EXPECT_EQ(x.outputs[i].cumulative_logprob, y.outputs[i].cumulative_logprob) << id;  // bitwise
      ASSERT_EQ(x.outputs[i].logprobs.size(), y.outputs[i].logprobs.size()) << id;
      for (size_t k = 0; k < x.outputs[i].logprobs.size(); ++k) {
        ASSERT_EQ(x.outputs[i].logprobs[k].size(), y.outputs[i].logprobs[k].size()) << id;
        for (size_t j = 0; j < x.outputs[i].logprobs[k].size(); ++j)
          EXPECT_EQ(x.outputs[i].logprobs[k][j].logprob, y.outputs[i].logprobs[k][j].logprob) << id;
      }
    }
  }
}

}  // namespace deepinfer::engine::testing_helpers
