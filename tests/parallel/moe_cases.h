// MoE EP test helpers shared by the CPU-rank test and the NCCL one: a random (or skewed) routed
// batch, a row-independent reference expert, the single-rank MoE, and the same MoE over EP ranks.
#pragma once
#include <cmath>
#include <functional>
#include <vector>

#include "parallel/moe_dispatch.h"

namespace deepinfer::parallel::moe_cases {

// Runs fn on `ranks` ranks of some communicator (CPU threads, or one GPU each over NCCL).
using RankRunner = std::function<void(int ranks, const std::function<void(Communicator&)>& fn)>;

inline constexpr int64_t kHidden = 8;

inline uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

// Tokens of a global batch spread unevenly over ranks (rank r's share grows with r); with 3 or
// more ranks, rank ranks / 2 is idle.
inline std::vector<int64_t> token_counts(int ranks, int64_t total) {
  std::vector<int64_t> n(ranks, 0);
  const int idle = ranks >= 3 ? ranks / 2 : -1;
  int64_t weights = 0, given = 0;
  for (int r = 0; r < ranks; ++r) weights += r == idle ? 0 : r + 1;
  for (int r = 0; r < ranks; ++r) given += n[r] = r == idle ? 0 : total * (r + 1) / weights;
  n[ranks - 1] += total - given;
  return n;
}

struct Batch {  // one global batch: token rows, routing, weights
  int64_t tokens = 0, topk = 0, experts = 0;
  std::vector<float> x, w;
  std::vector<int32_t> ids;
};

// Random distinct top-k per token (some entries -1), or every token to expert 0 when skewed.
inline Batch make_batch(int64_t tokens, int64_t topk, int64_t experts, bool skewed, uint64_t seed) {
  Batch b;
  b.tokens = tokens, b.topk = topk, b.experts = experts;
  b.x.resize(tokens * kHidden);
  b.w.resize(tokens * topk);
  b.ids.resize(tokens * topk);
  for (int64_t i = 0; i < tokens * kHidden; ++i) b.x[i] = static_cast<float>(mix(seed + i) % 2001) / 1000.0f - 1.0f;
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t k = 0; k < topk; ++k) {
      b.w[t * topk + k] = static_cast<float>(mix(seed * 31 + t * topk + k) % 1000) / 997.0f;
      int32_t e = -1;
      if (skewed) {
        e = k == 0 ? 0 : -1;
      } else if (mix(seed ^ (t * 131 + k)) % 7 != 0) {  // ~1 in 7 entries unused
        for (uint64_t tries = 0;; ++tries) {
          e = static_cast<int32_t>(mix(seed + t * 977 + k * 13 + tries * 7919) % experts);
          bool dup = false;
          for (int64_t j = 0; j < k; ++j) dup |= b.ids[t * topk + j] == e;
          if (!dup) break;
        }
      }
      b.ids[t * topk + k] = e;
    }
  return b;
}

// The reference expert: row-independent, a fixed-order dot product per output, weight inside.
inline void expert_fn(int64_t e, const float* x, float rw, float* y) {
  for (int64_t i = 0; i < kHidden; ++i) {
    float acc = 0.0f;
    for (int64_t j = 0; j < kHidden; ++j) acc += static_cast<float>(mix(e * 4096 + i * 64 + j) % 200) / 100.0f * x[j];
    y[i] = std::tanh(acc) * rw;
  }
}

// Single-rank MoE as the model runs it (src/model/deepseek_v41/v41_ffn.cpp): every routed
// (token, k) through its expert, summed from 0 per token in ascending expert order (the order of
// moe_combine's slots there).
inline std::vector<float> single_rank_moe(const Batch& b, bool weight_inside) {
  std::vector<float> out(b.tokens * kHidden, 0.0f), y(kHidden);
  for (int64_t e = 0; e < b.experts; ++e)
    for (int64_t t = 0; t < b.tokens; ++t)
      for (int64_t k = 0; k < b.topk; ++k)
        if (b.ids[t * b.topk + k] == e) {
          const float w = b.w[t * b.topk + k];
          expert_fn(e, b.x.data() + t * kHidden, weight_inside ? w : 1.0f, y.data());
          for (int64_t h = 0; h < kHidden; ++h) out[t * kHidden + h] += weight_inside ? y[h] : w * y[h];
        }
  return out;
}

// Rows [first, first + n) of a [rows][width] array.
template <typename T>
inline std::vector<T> slice(const std::vector<T>& v, int64_t first, int64_t n, int64_t width) {
  return std::vector<T>(v.begin() + first * width, v.begin() + (first + n) * width);
}

// EP MoE of the same batch on `ranks` CPU ranks; returns the global output, token order.
inline std::vector<float> ep_moe(const Batch& b, int ranks, const ExpertMap& map, bool weight_inside, const RankRunner& run,
                          std::vector<int64_t>* received_per_rank = nullptr) {
  const std::vector<int64_t> counts = token_counts(ranks, b.tokens);
  std::vector<float> out(b.tokens * kHidden, -1.0f);
  if (received_per_rank) received_per_rank->assign(ranks, 0);
  run(ranks, [&](Communicator& c) {
    int64_t first = 0;
    for (int r = 0; r < c.rank(); ++r) first += counts[r];
    const int64_t n = counts[c.rank()];
    const auto x = slice(b.x, first, n, kHidden);
    const auto w = slice(b.w, first, n, b.topk);
    const auto ids = slice(b.ids, first, n, b.topk);
    std::vector<uint64_t> keys(n);
    for (int64_t t = 0; t < n; ++t) keys[t] = first + t;  // the global token index
    const DispatchPlan plan = plan_dispatch(c, map, ids.data(), n, b.topk, keys.data());
    const int64_t m = plan.num_received();
    std::vector<float> rows(m * kHidden), rw(m), y(m * kHidden);
    dispatch(c, plan, x.data(), kHidden * sizeof(float), rows.data());
    dispatch_weights(c, plan, w.data(), rw.data());
    const std::vector<int64_t> local = map.local_experts(c.rank());
    for (int64_t s = 0; s < plan.slots_per_rank; ++s)  // the grouped GEMM's place
      for (int64_t i = plan.expert_offsets[s]; i < plan.expert_offsets[s + 1]; ++i)
        expert_fn(local[s], rows.data() + i * kHidden, weight_inside ? rw[i] : 1.0f, y.data() + i * kHidden);
    std::vector<float> o(n * kHidden);
    combine(c, plan, y.data(), kHidden, weight_inside ? nullptr : w.data(), o.data());
    std::copy(o.begin(), o.end(), out.begin() + first * kHidden);
    if (received_per_rank) (*received_per_rank)[c.rank()] = m;
  });
  return out;
}

// An EPLB placement for `ranks` GPUs from the batch's own expert loads, one replica slot extra per rank.
inline ExpertMap eplb_map(const Batch& b, int ranks) {
  std::vector<float> load(b.experts, 0.0f);
  for (int32_t e : b.ids)
    if (e >= 0) load[e] += 1.0f;
  const EplbPlacement p = rebalance_experts(load.data(), 1, b.experts, b.experts + ranks, 1, 1, ranks);
  return ExpertMap::from_eplb(p, 0, ranks);
}

}  // namespace deepinfer::parallel::moe_cases
