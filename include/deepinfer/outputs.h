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

// Speculative decoding counters of a request (all its samples), zero when speculation is off.
struct SpeculativeMetrics {
  int64_t drafted = 0;                    // draft tokens the drafter proposed
  int64_t verified = 0;                   // of those, verified by the target model
  int64_t accepted = 0;                   // of those, accepted
  int64_t decode_steps = 0;               // decode steps; each emits its accepted drafts + 1 token
  std::vector<int64_t> verified_at, accepted_at;  // per draft position (0 = first draft)
  // tau: tokens per decode step, (accepted + decode_steps) / decode_steps (0 without steps)
  double mean_accepted_length() const {
    return decode_steps ? static_cast<double>(accepted + decode_steps) / decode_steps : 0.0;
  }
  // P(draft j accepted | drafts before j accepted), per position
  std::vector<double> acceptance_by_position() const {
    std::vector<double> a;
    for (size_t j = 0; j < verified_at.size(); ++j)
      a.push_back(verified_at[j] ? static_cast<double>(accepted_at[j]) / verified_at[j] : 0.0);
    return a;
  }
};

struct RequestMetrics {
  SpeculativeMetrics speculative;
  int64_t num_cached_tokens = 0;          // prompt tokens whose state came from the prefix cache
};

struct RequestOutput {
  std::string request_id;
  std::string prompt;
  std::vector<int32_t> prompt_token_ids;
  std::vector<PositionLogprobs> prompt_logprobs;  // first position empty (no context)
  std::vector<CompletionOutput> outputs;
  bool finished = false;
  std::string error;                      // set when the engine failed this request
  RequestMetrics metrics;
};

}  // namespace deepinfer
