// DeepSeek-V4.1 MoE expert parallelism (spec §6.1): each rank holds the routed experts of its slots
// (parallel::ExpertParallel places them), runs its own batch (attention DP) and, at every main
// layer's MoE, sends its tokens to the ranks holding their top-k experts, runs its experts on the
// rows it receives and takes its tokens' expert outputs back. The shared expert and the combine
// stay on the token's rank, in the single-rank order (each token's experts by id), so a rank's
// logits equal those of one rank with every expert bitwise. The DSpark draft layers keep all their
// experts on every rank: a rank drafts alone, without collectives, whenever it likes.
#include <algorithm>
#include <exception>

#include "core/error.h"
#include "model/deepseek_v41/v41_model.h"
#include "model/deepseek_v41/v41_step.h"
#include "parallel/expert_parallel.h"

namespace deepinfer::model {

void V41Model::forward(const ForwardBatch& batch, std::vector<float>& logits, const ForwardTaps* taps) {
  parallel::ExpertParallel* ep = o_.expert_parallel.get();
  if (!ep) return forward_batch(batch, logits, taps);
  if (ep->begin_step()) load_held_experts();  // EPLB moved experts: load the new ones before dispatching
  try {
    if (batch.token_ids.empty()) {  // an idle rank: it still serves the other ranks' tokens
      check_batch(batch, c_.vocab_size);
      logits.clear();
      if (batch.draws) batch.draws->token.clear(), batch.draws->logprob.clear();
    } else {
      forward_batch(batch, logits, taps);
    }
    for (int64_t l = ep->next_layer(); l < c_.n_layers; ++l) moe_expert_parallel(l, nullptr, 0, {}, {}, nullptr);
  } catch (...) {
    // This rank's batch failed (bad input, state memory): the other ranks still wait in this
    // step's exchanges, so finish them with no tokens, then report the failure. When the exchange
    // itself failed (a broken group) the next collective throws too, and the first error wins.
    const std::exception_ptr failure = std::current_exception();
    try {
      for (int64_t l = ep->next_layer(); l < c_.n_layers; ++l) moe_expert_parallel(l, nullptr, 0, {}, {}, nullptr);
    } catch (...) {
    }
    std::rethrow_exception(failure);
  }
}

void V41Model::moe_expert_parallel(int64_t l, const float* x, int64_t n, const std::vector<int32_t>& sel,
                                   const std::vector<float>& weights, float* out) {
  parallel::ExpertParallel& ep = *o_.expert_parallel;
  const V41Block& B = blocks_[l];
  const int64_t D = c_.dim, k = c_.active_for(l), I = c_.moe_inter_dim;
  Workspace::Scope scope(ws_);
  const std::vector<float> hx = n ? host(x, n * D) : std::vector<float>{};
  const parallel::ExpertParallel::Received r = ep.dispatch(l, hx.data(), n, D, sel.data(), weights.data(), k);
  const int64_t M = r.rows();
  std::vector<float> y(M * D);
  try {  // a failure here must still answer the ranks waiting for these rows
    int64_t rows_max = std::max<int64_t>(n, 1);
    for (size_t s = 0; s + 1 < r.offsets.size(); ++s) rows_max = std::max(rows_max, r.offsets[s + 1] - r.offsets[s]);
    Tensor g = ws_.f32({rows_max, I}), u = ws_.f32({rows_max, I}), h = ws_.f32({rows_max, I});
    if (M > 0) {
      Tensor xs = ws_.upload(r.x, DType::F32), rw = ws_.upload(r.weight, DType::F32), ys = ws_.f32({M, D});
      for (size_t s = 0; s + 1 < r.offsets.size(); ++s)
        if (const int64_t m = r.offsets[s + 1] - r.offsets[s]) {
          const V41Expert& ex = B.experts[r.expert[s]];
          check(ex.w1.n > 0, "expert parallelism: layer ", l, " expert ", r.expert[s], " is not loaded on rank ", ep.rank());
          expert_ffn(ex, xs.f32() + r.offsets[s] * D, m, rw.f32() + r.offsets[s], ys.f32() + r.offsets[s] * D, g.f32(),
                     u.f32(), h.f32());
        }
      y = host(ys.f32(), M * D);
    }
  } catch (...) {
    std::fill(y.begin(), y.end(), 0.0f);
    std::vector<float> sink(n * k * D + 1);
    ep.combine(y.data(), sink.data());
    throw;
  }
  std::vector<float> rows(n * k * D);
  ep.combine(y.data(), rows.data());
  if (n == 0) return;
  // rows[t, j] is the output of t's j-th choice; the combine adds each token's experts by id, as
  // the single-rank path lists them.
  std::vector<int32_t> slot(n * k);
  std::vector<std::pair<int32_t, int32_t>> mine(k);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < k; ++j) mine[j] = {sel[t * k + j], static_cast<int32_t>(j)};
    std::sort(mine.begin(), mine.end());
    for (int64_t j = 0; j < k; ++j) slot[t * k + j] = static_cast<int32_t>(t * k + mine[j].second);
  }
  Tensor ys = ws_.upload(rows, DType::F32), slot_d = ws_.upload(slot, DType::I32), shared = ws_.f32({n, D});
  Tensor g = ws_.f32({n, I}), u = ws_.f32({n, I}), h = ws_.f32({n, I});
  expert_ffn(B.shared, x, n, nullptr, shared.f32(), g.f32(), u.f32(), h.f32());
  be_.moe_combine(ys.f32(), slot_d.i32(), n, k, D, shared.f32(), out);
}

}  // namespace deepinfer::model
