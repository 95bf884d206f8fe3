// Lossless verification of one request's chain of draft tokens (spec/engine-features.md §1.6, §2.1).
//
// Chain speculative sampling: draft x_j, drawn from the drafter's q_j, is accepted with probability
// min(1, p_j(x_j) / q_j(x_j)); at the first rejection the token is drawn from norm(max(0, p_j - q_j));
// when every draft is accepted a bonus token is drawn from p_{l+1}. p and q are the processed
// distributions (penalties, grammar mask, temperature, top-k/p) of the same positions.
//
// Randomness is counter-based: position `pos` of stream (seed, stream) uses draw_key(seed, stream, pos),
// whose per-token uniforms drive a Gumbel-max draw (as the plain sampler does) and one extra counter the
// acceptance test; so a seeded request is reproducible whatever else is in the batch.
#pragma once
#include <cstdint>
#include <functional>
#include <span>

namespace deepinfer::spec {

struct ChainResult {
  int accepted = 0;                // drafts accepted (a prefix)
  int32_t token = 0;               // the token after them: the correction or the bonus
};

struct RandomStream {
  uint64_t seed = 0, stream = 0;
  int64_t first_position = 0;      // position of the first verified row's token
};

// target: (l + 1) rows of vocab probabilities; drafts: l tokens; draft_probs: l rows (the drafter's q).
ChainResult chain_verify(std::span<const double> target, std::span<const int32_t> drafts,
                         std::span<const double> draft_probs, int64_t vocab, const RandomStream& rnd);

// A deterministic drafter (greedy, as DSpark's draft() is) has a one-hot q, for which the rule above
// reads: accept x_j with probability p_j(x_j), else draw from p_j without x_j. Drawing the target's own
// token at each position (draw(j): the plain sampler's token for row j, with the previous drafts as
// context) and accepting while it equals the draft realizes exactly that, and emits the very tokens
// decoding without drafts would: greedy and seeded sampling are unchanged by speculation.
ChainResult verify_deterministic(std::span<const int32_t> drafts, const std::function<int32_t(int)>& draw);

}  // namespace deepinfer::spec
