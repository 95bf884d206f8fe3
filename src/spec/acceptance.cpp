#include "spec/acceptance.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/counter_rng.h"

namespace deepinfer::spec {
namespace {

constexpr uint64_t kAcceptCounter = ~0ULL;  // not a token index: the acceptance uniform of a position

// Gumbel-max draw from unnormalized non-negative weights w (argmax log w_v - log(-log U_v)).
int32_t gumbel_draw(std::span<const double> w, uint64_t key) {
  int32_t best = -1;
  double best_score = -std::numeric_limits<double>::infinity();
  for (size_t v = 0; v < w.size(); ++v) {
    if (!(w[v] > 0)) continue;
    double score = std::log(w[v]) - std::log(-std::log(uniform(key, v)));
    if (score > best_score) best_score = score, best = static_cast<int32_t>(v);
  }
  check(best >= 0, "speculative verification: a distribution with no mass");
  return best;
}

}  // namespace

ChainResult chain_verify(std::span<const double> target, std::span<const int32_t> drafts,
                         std::span<const double> draft_probs, int64_t vocab, const RandomStream& rnd) {
  const size_t l = drafts.size();
  check(target.size() == (l + 1) * vocab && draft_probs.size() == l * vocab, "chain_verify: ", target.size(),
        " target and ", draft_probs.size(), " draft probabilities for ", l, " drafts of vocab ", vocab);
  std::vector<double> residual(vocab);
  for (size_t j = 0; j <= l; ++j) {
    const uint64_t key = draw_key(rnd.seed, rnd.stream, static_cast<uint64_t>(rnd.first_position + j));
    std::span<const double> p = target.subspan(j * vocab, vocab);
    if (j == l) return {static_cast<int>(l), gumbel_draw(p, key)};  // all accepted: the bonus token
    const int32_t x = drafts[j];
    check(x >= 0 && x < vocab, "chain_verify: draft token ", x, " is outside the vocabulary");
    std::span<const double> q = draft_probs.subspan(j * vocab, vocab);
    // accept iff u * q(x) < p(x), i.e. with probability min(1, p(x) / q(x)); q(x) = 0 never accepts
    if (q[x] > 0 && uniform(key, kAcceptCounter) * q[x] < p[x]) continue;
    double mass = 0;
    for (int64_t v = 0; v < vocab; ++v) mass += residual[v] = std::max(0.0, p[v] - q[v]);
    // residual mass ~0 (p == q up to rounding): p itself is the right distribution
    return {static_cast<int>(j), gumbel_draw(mass > 1e-12 ? std::span<const double>(residual) : p, key)};
  }
  return {};  // unreachable
}

ChainResult verify_deterministic(std::span<const int32_t> drafts, const std::function<int32_t(int)>& draw) {
  for (size_t j = 0;; ++j) {
    const int32_t t = draw(static_cast<int>(j));
    if (j == drafts.size() || t != drafts[j]) return {static_cast<int>(j), t};
  }
}

}  // namespace deepinfer::spec
