// Turns one row of logits into one token: logit bias, min_tokens, penalties, (grammar mask),
// temperature, min-p, top-k, top-p, then a Gumbel-max draw with counter-based noise.
// Everything is row-local with a fixed order of operations, so results never depend on the batch.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "deepinfer/outputs.h"
#include "deepinfer/sampling_params.h"

namespace deepinfer::sampling {

struct SampleInput {
  std::span<const float> logits;          // one row, vocab entries
  const SamplingParams* params = nullptr;
  std::span<const int32_t> prompt;        // for the repetition penalty
  std::span<const int32_t> output;        // generated so far (penalties, min_tokens)
  std::span<const int32_t> eos_token_ids; // masked while output.size() < min_tokens
  const std::vector<uint32_t>* allowed_bitmask = nullptr;  // structured output: bit v = token v allowed
  uint64_t seed = 0;
  uint64_t stream = 0;                    // the sample index within the request (n > 1)
  int64_t position = 0;                   // absolute position of the token being drawn
};

struct SampleOutput {
  int32_t token = 0;
  float logprob = 0.0f;                   // of the model's raw distribution
  PositionLogprobs logprobs;              // filled when params->logprobs is set
};

SampleOutput sample(const SampleInput& in, std::vector<float>& scratch);

// The SampleOutput of a row draw_tokens drew at `position`, or sample()'s error for the same row (its
// kDrawNaN / kDrawNone answers).
SampleOutput drawn_sample(int32_t token, float logprob, int64_t position);

// Whether sample() of a row under `p`, `generated` tokens into its output, is exactly the backends'
// draw_tokens (greedy, or Gumbel-max at p.temperature): nothing biases, penalizes or truncates the row
// and no logprobs are asked for. (A grammar mask is the caller's to exclude.) Such rows can be drawn
// on the model's device, so that only their token crosses to the host instead of their logits.
bool sample_is_plain_draw(const SamplingParams& p, int64_t generated, int64_t vocab);

// log-softmax of a raw row at `token`, plus the top-n entries (token first, then ranked). NaN in the row
// is an error, as in sample().
PositionLogprobs position_logprobs(std::span<const float> logits, int32_t token, int top_n);

}  // namespace deepinfer::sampling
