// How many draft tokens of each request to verify this step (DSpark, spec/engine-features.md §1.4).
//
// Confidence scheduling is the paper's Algorithm 1 with its early stop: prefix survival
// a_{r,j} = c_{r,1} * ... * c_{r,j}; candidates (r, j) walked in order of a descending, ties broken by
// (j, r) ascending (a key that never depends on a value); each one extends request r's prefix by one
// token if that raises expected tokens per second  (R + sum of admitted a) * SPS(T + admitted), else the
// walk stops. Why this is lossless: c_{r,j} depends on draft token x_{r,j-1} (the Markov feature), so
// a_{r,j+1} depends on x_{r,j}. The walk decides on (r, j) before it sees any later candidate of r
// (a_{r,j+1} <= a_{r,j} and the tie key puts j first), and every decision before that one looks only at
// a's that come earlier in the order, none of which depends on x_{r,j}. So whether x_{r,j} is verified
// never depends on x_{r,j} itself (non-anticipating), and chain verification of any such prefix keeps
// the target distribution. A search over all prefixes without the early stop would look at
// a_{r,j+1} while deciding on x_{r,j}, and is not lossless (the paper's Appendix A; tests/spec).
#pragma once
#include <cstdint>
#include <vector>

#include "spec/step_cost.h"

namespace deepinfer::spec {

struct VerifyRequest {
  std::vector<double> confidence;  // c_{r,1..m}: P(draft j survives | drafts < j survived), in [0, 1]
  int max_tokens = 0;              // most drafts it may verify (drafts on hand, output and context room)
};

struct VerifyPlan {
  std::vector<int> lengths;        // draft tokens to verify per request
  int64_t draft_tokens = 0;        // sum of lengths
  double expected_tokens = 0;      // R + sum of admitted survival products (bonus tokens included)
};

// base_tokens: the step's tokens without drafts (prefill chunks and decode tokens, T); sampling: the
// rows that draw a token this step (R, at least the requests); budget: most draft tokens in all.
VerifyPlan schedule_by_confidence(const std::vector<VerifyRequest>& requests, int64_t base_tokens, int64_t sampling,
                                  int64_t budget, const StepCostTable& cost);

// Every request verifies min(k, its max_tokens) drafts, in request order, while the budget lasts.
VerifyPlan schedule_fixed(const std::vector<VerifyRequest>& requests, int k, int64_t budget);

}  // namespace deepinfer::spec
