// Sampling parameters of one request: vLLM's names and defaults, plus seq_seed and so_args.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace deepinfer {

struct SamplingParams {
  int n = 1;                              // independent samples per prompt
  float temperature = 1.0f;               // 0: greedy
  float top_p = 1.0f;
  int top_k = 0;                          // 0 or -1: off
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;        // prompt + output tokens
  float presence_penalty = 0.0f;          // output tokens
  float frequency_penalty = 0.0f;         // output tokens
  std::map<int32_t, float> logit_bias;    // token id -> added to its logit
  std::optional<uint64_t> seed;           // seq_seed: same seed, same tokens, in any batch
  int max_tokens = 16;
  int min_tokens = 0;                     // EOS and stop_token_ids are masked until then
  std::vector<std::string> stop;          // matched in the text; excluded from it
  std::vector<int32_t> stop_token_ids;
  bool include_stop_str_in_output = false;
  bool ignore_eos = false;
  std::optional<int> logprobs;            // top-N logprobs per generated token (+ the sampled one)
  std::optional<int> prompt_logprobs;     // top-N logprobs per prompt token
  bool skip_special_tokens = true;
  bool detokenize = true;                 // false: no text (and so no stop strings)
  std::string so_args;                    // structured output: JSON {"schema_type": ..., "schema": ...}

  // Throws deepinfer::Error naming the first invalid field.
  void validate() const;
};

}  // namespace deepinfer
