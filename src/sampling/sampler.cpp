#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "ops/token_draw.h"

namespace deepinfer::sampling {
namespace {

constexpr const char* kNanLogits = "the model produced NaN logits";
constexpr const char* kNoToken = "no token is allowed at position ";

double log_normalizer(std::span<const float> row) { return ops::log_normalizer(row.data(), static_cast<int64_t>(row.size())); }

void check_no_nan(std::span<const float> row) {
  for (float v : row) check(!std::isnan(v), kNanLogits);
}

}  // namespace

PositionLogprobs position_logprobs(std::span<const float> logits, int32_t token, int top_n) {
  check_no_nan(logits);  // prompt logprobs read rows that are never sampled
  double z = log_normalizer(logits);
  auto lp = [&](int32_t t) { return static_cast<float>(logits[t] - z); };
  std::vector<int32_t> idx(logits.size());
  std::iota(idx.begin(), idx.end(), 0);
  int k = std::clamp<int>(top_n, 0, static_cast<int>(idx.size()));
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), ops::ByRank{logits.data()});
  int rank = 1;  // the chosen token's rank: how many entries rank before it, plus one
  for (size_t t = 0; t < logits.size(); ++t)
    if (ops::ByRank{logits.data()}(static_cast<int32_t>(t), token)) ++rank;
  PositionLogprobs out{{token, lp(token), rank}};
  for (int i = 0; i < k; ++i)
    if (idx[i] != token) out.push_back({idx[i], lp(idx[i]), i + 1});
  return out;
}

SampleOutput drawn_sample(int32_t token, float logprob, int64_t position) {
  check(token != ops::kDrawNaN, kNanLogits);
  check(token >= 0, kNoToken, position);
  return {token, logprob, {}};
}

ops::DrawRow draw_params(const SampleInput& in, int64_t vocab, std::vector<ops::DrawAdjust>& adjust) {
  const SamplingParams& p = *in.params;
  ops::DrawRow r;
  r.key = draw_key(in.seed, in.stream, static_cast<uint64_t>(in.position));
  r.temperature = p.temperature;
  if (p.min_p > 0.0f) r.log_min_p = std::log(p.min_p);
  r.top_p = p.top_p;
  r.top_k = p.top_k > 0 && p.top_k < vocab ? p.top_k : 0;
  r.repetition_penalty = p.repetition_penalty;
  r.presence_penalty = p.presence_penalty;
  r.frequency_penalty = p.frequency_penalty;
  // One entry per touched token, in the order tokens are first touched (a pure function of the request).
  // at[t]: token t's entry, -1 for none; kept across calls (reset for the tokens touched), so a row costs
  // its prompt and output tokens, not the vocabulary.
  thread_local std::vector<int32_t> at;
  if (static_cast<int64_t>(at.size()) < vocab) at.resize(static_cast<size_t>(vocab), -1);
  r.adjust_begin = static_cast<int32_t>(adjust.size());
  auto entry = [&](int32_t t) -> ops::DrawAdjust& {
    if (at[t] < 0) {
      at[t] = static_cast<int32_t>(adjust.size());
      adjust.push_back({});
      adjust.back().token = t;
    }
    return adjust[at[t]];
  };
  for (auto [t, b] : p.logit_bias)
    if (t >= 0 && t < vocab) entry(t).bias = b, entry(t).flags |= ops::DrawAdjust::kBias;
  if (static_cast<int64_t>(in.output.size()) < p.min_tokens) {
    for (int32_t t : in.eos_token_ids) if (t >= 0 && t < vocab) entry(t).flags |= ops::DrawAdjust::kForbid;
    for (int32_t t : p.stop_token_ids) if (t >= 0 && t < vocab) entry(t).flags |= ops::DrawAdjust::kForbid;
  }
  if (p.repetition_penalty != 1.0f)
    for (auto span : {in.prompt, in.output})
      for (int32_t t : span) if (t >= 0 && t < vocab) entry(t).flags |= ops::DrawAdjust::kSeen;
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f)
    for (int32_t t : in.output) if (t >= 0 && t < vocab) ++entry(t).count;
  r.adjust_end = static_cast<int32_t>(adjust.size());
  for (int32_t e = r.adjust_begin; e < r.adjust_end; ++e) at[adjust[e].token] = -1;
  return r;
}

SampleOutput sample(const SampleInput& in, std::vector<float>& x) {
  const SamplingParams& p = *in.params;
  const int64_t vocab = static_cast<int64_t>(in.logits.size());
  std::vector<ops::DrawAdjust> adjust;
  const ops::DrawRow r = draw_params(in, vocab, adjust);
  const uint32_t* mask = in.allowed_bitmask ? in.allowed_bitmask->data() : nullptr;
  SampleOutput out;
  out.token = ops::draw_row(in.logits.data(), vocab, r, adjust.data(), mask, x);
  check(out.token != ops::kDrawNaN, kNanLogits);
  check(out.token >= 0, kNoToken, in.position);
  if (p.logprobs) {
    out.logprobs = position_logprobs(in.logits, out.token, *p.logprobs);
    out.logprob = out.logprobs[0].logprob;
  } else {
    out.logprob = static_cast<float>(in.logits[out.token] - log_normalizer(in.logits));
  }
  return out;
}

}  // namespace deepinfer::sampling
