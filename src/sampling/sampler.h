// Turns one row of logits into one token: logit bias, min_tokens, penalties, (grammar mask),
// temperature, min-p, top-k, top-p, then a Gumbel-max draw with counter-based noise.
// Everything is row-local with a fixed order of operations, so results never depend on the batch.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "deepinfer/outputs.h"
#include "deepinfer/sampling_params.h"
#include "ops/token_draw.h"

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

// The row's sampling as the backends' draw_tokens takes it (ops/token_draw.h): its parameters, noise key,
// and the entries of the tokens the bias, min_tokens and the penalties touch (appended to `adjust`; the
// row's adjust_begin / adjust_end name them). The caller sets the row's mask. sample() is ops::draw_row
// of these, so a row drawn on the device from them is the row the host would draw.
ops::DrawRow draw_params(const SampleInput& in, int64_t vocab, std::vector<ops::DrawAdjust>& adjust);

// log-softmax of a raw row at `token`, plus the top-n entries (token first, then ranked). NaN in the row
// is an error, as in sample().
PositionLogprobs position_logprobs(std::span<const float> logits, int32_t token, int top_n);

}  // namespace deepinfer::sampling
