// DeepSeek-V4.1 feed-forward parts over a flat batch: the MoE (spec §5.5: sqrt-softplus router with
// bias / bias_vl, top-k, routed experts in token groups, shared expert) and Engram (spec §5.3).
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/deepseek_v41/v41_model.h"
#include "model/deepseek_v41/v41_step.h"

namespace deepinfer::model {

void V41Model::moe(int64_t l, Step& s, const float* x, float* out, const ForwardTaps* taps) {
  const V41Block& B = blocks_[l];
  const int64_t n = s.rows();
  const int64_t D = c_.dim, E = c_.experts_for(l), k = c_.active_for(l), I = c_.moe_inter_dim;
  for (int64_t t = 0; t < n; ++t)
    check(!s.image[t] || !B.gate_bias_vl.empty(), "v41: an image token reached layer ", l,
          " but the checkpoint has no ffn.gate.bias_vl there");
  Workspace::Scope scope(ws_);
  Tensor logits = ws_.f32({n, E}), sel = ws_.i32({n, k}), wsel = ws_.f32({n, k});
  Tensor scores = taps && taps->on_route ? ws_.f32({n, E}) : Tensor{};
  be_.linear(x, n, D, B.gate.data(), E, logits.f32());  // fp32 router
  const ops::Backend::ScoreFunc sf = c_.score_func == "softmax" ? ops::Backend::ScoreFunc::kSoftmax
                                     : c_.score_func == "sigmoid" ? ops::Backend::ScoreFunc::kSigmoid
                                                                  : ops::Backend::ScoreFunc::kSqrtSoftplus;
  const ops::Backend::RouteParams rp{sf, static_cast<float>(c_.gate_temp), k, c_.norm_topk_prob,
                                     static_cast<float>(c_.route_scale)};
  be_.moe_route(logits.f32(), n, E, B.gate_bias.data(), B.gate_bias_vl.empty() ? nullptr : B.gate_bias_vl.data(),
                s.image_d.u8(), rp, sel.i32(), wsel.f32(), scores.empty() ? nullptr : scores.f32());
  // The expert groups are formed on the host: the one read-back of the layer (the grouped GEMM that
  // takes device-side counts is the CUDA forward's).
  std::vector<int32_t> hsel(n * k);
  std::vector<float> hw(n * k);
  be_.download(hsel.data(), sel.data, hsel.size() * sizeof(int32_t));
  be_.download(hw.data(), wsel.data, hw.size() * sizeof(float));
  if (scores.data) taps->on_route(l, host(scores.f32(), n * E), hsel, hw);
  if (o_.expert_parallel && l < c_.n_layers) return moe_expert_parallel(l, x, n, hsel, hw, out);
  // Rows grouped by expert (ascending); slot[t, j] = the permuted row of token t's j-th expert in
  // expert order, so the combine adds the experts in the order the reference does.
  std::vector<int64_t> count(E + 1, 0);
  for (int32_t e : hsel) ++count[e + 1];
  std::vector<int64_t> start(count);
  for (int64_t e = 0; e < E; ++e) start[e + 1] += start[e];
  const int64_t M = start[E];
  std::vector<int32_t> perm(M), slot(n * k);
  std::vector<float> rw(M);
  std::vector<int64_t> next(start.begin(), start.end() - 1);
  std::vector<std::pair<int32_t, int64_t>> mine(k);  // (expert, j) of one token, by expert
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < k; ++j) mine[j] = {hsel[t * k + j], j};
    std::sort(mine.begin(), mine.end());
    for (int64_t j = 0; j < k; ++j) {
      const int64_t r = next[mine[j].first]++;
      perm[r] = static_cast<int32_t>(t);
      rw[r] = hw[t * k + mine[j].second];
      slot[t * k + j] = static_cast<int32_t>(r);
    }
  }
  Tensor perm_d = ws_.upload(perm, DType::I32), rw_d = ws_.upload(rw, DType::F32), slot_d = ws_.upload(slot, DType::I32);
  Tensor xs = ws_.f32({std::max<int64_t>(M, 1), D}), ys = ws_.f32({std::max<int64_t>(M, 1), D});
  be_.copy_rows(x, perm_d.i32(), M, D, xs.f32(), nullptr);
  const int64_t rows_max = std::max(n, *std::max_element(count.begin(), count.end()));
  Tensor g = ws_.f32({rows_max, I}), u = ws_.f32({rows_max, I}), h = ws_.f32({rows_max, I});
  auto expert = [&](const V41Expert& ex, const float* xin, int64_t m, const float* row_scale, float* yout) {
    expert_ffn(ex, xin, m, row_scale, yout, g.f32(), u.f32(), h.f32());
  };
  for (int64_t e = 0; e < E; ++e)
    if (const int64_t m = count[e + 1])
      expert(B.experts[e], xs.f32() + start[e] * D, m, rw_d.f32() + start[e], ys.f32() + start[e] * D);
  Tensor shared = ws_.f32({n, D});
  expert(B.shared, x, n, nullptr, shared.f32());
  be_.moe_combine(ys.f32(), slot_d.i32(), n, k, D, shared.f32(), out);
}

void V41Model::expert_ffn(const V41Expert& ex, const float* x, int64_t m, const float* row_scale, float* y, float* g,
                          float* u, float* h) {
  const int64_t I = c_.moe_inter_dim;
  lin(x, m, ex.w1, g);
  lin(x, m, ex.w3, u);
  be_.swiglu(g, u, m, I, static_cast<float>(c_.swiglu_limit), row_scale, h);
  be_.round_bf16(h, m * I);
  lin(h, m, ex.w2, y);
}

// ---------------------------------------------------------------------------------------------------
// Engram (spec §5.3)

void V41Model::engram_apply(int64_t l, Step& s, const std::vector<int64_t>& ids, float* X) {
  const V41Block& B = blocks_[l];
  const int64_t n = s.rows(), D = c_.dim, hc = c_.hc_mult, ehd = c_.engram_head_dim, C = B.e_wkv.k / ehd;
  for (int64_t row : ids)
    check(row >= 0 && row < B.e_rows, "engram: row id ", row, " outside the table of ", B.e_rows, " rows");
  Workspace::Scope scope(ws_);
  Tensor id = ws_.upload(ids, DType::I64), e = ws_.f32({n * C, ehd}), kv = ws_.f32({n, hc + 1, D});
  be_.embedding_fp8(B.e_table, B.e_scale, ehd, id.i64(), n * C, e.f32());
  lin(e.f32(), n, B.e_wkv, kv.f32());
  be_.engram_gate(X, kv.f32(), B.e_qk.data(), s.image_d.u8(), n, hc, D, static_cast<float>(c_.norm_eps));
}

}  // namespace deepinfer::model
