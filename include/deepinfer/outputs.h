// What generation returns: vLLM's RequestOutput / CompletionOutput shape.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace deepinfer {

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
  int rank = 0;                           // 1 = most likely
};

// One position: the chosen token first, then the top-N (deduplicated).
using PositionLogprobs = std::vector<TokenLogprob>;

struct CompletionOutput {
  int index = 0;
  std::string text;
  std::vector<int32_t> token_ids;
  double cumulative_logprob = 0.0;
  std::vector<PositionLogprobs> logprobs;  // empty unless SamplingParams::logprobs
  std::string finish_reason;              // "stop", "length", "abort", "error" or "" while running
  std::optional<std::string> stop_string; // stop_reason when a stop string matched
  std::optional<int32_t> stop_token;      // stop_reason when a stop token (not EOS) matched
  bool finished() const { return !finish_reason.empty(); }
};

struct RequestOutput {
  std::string request_id;
  std::string prompt;
  std::vector<int32_t> prompt_token_ids;
  std::vector<PositionLogprobs> prompt_logprobs;  // first position empty (no context)
  std::vector<CompletionOutput> outputs;
  bool finished = false;
  std::string error;                      // set when the engine failed this request
};

}  // namespace deepinfer
