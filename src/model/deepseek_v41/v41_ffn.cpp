// DeepSeek-V4.1 feed-forward parts over a flat batch: the MoE (spec §5.5: sqrt-softplus router with
// bias / bias_vl, top-k, routed experts in token groups, shared expert) and Engram (spec §5.3).
#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/error.h"
#include "model/deepseek_v41/v41_model.h"
#include "model/deepseek_v41/v41_step.h"

namespace deepinfer::model {

void V41Model::moe(int64_t l, Step& s, const float* x, float* out) {
  const ForwardTaps* taps = s.taps;
  const V41Block& B = blocks_[l];
  const int64_t n = s.rows();
  const int64_t D = c_.dim, E = c_.experts_for(l), k = c_.active_for(l), I = c_.moe_inter_dim;
  for (int64_t t = 0; t < n; ++t)
    check(!s.image[t] || !B.gate_bias_vl.empty(), "v41: an image token reached layer ", l,
          " but the checkpoint has no ffn.gate.bias_vl there");
  Workspace::Scope scope(ws_);
  Tensor logits = ws_.f32({n, E}), sel = ws_.i32({n, k}), wsel = ws_.f32({n, k});
  Tensor scores = taps && taps->on_route ? ws_.f32({n, E}) : Tensor{};
  prof_.section(s.dspark ? "draft_moe" : "moe_route");
  be_.linear_plain(x, n, B.gate.q, logits.f32());  // fp32 router
  const ops::Backend::ScoreFunc sf = c_.score_func == "softmax" ? ops::Backend::ScoreFunc::kSoftmax
                                     : c_.score_func == "sigmoid" ? ops::Backend::ScoreFunc::kSigmoid
                                                                  : ops::Backend::ScoreFunc::kSqrtSoftplus;
  const ops::Backend::RouteParams rp{sf, static_cast<float>(c_.gate_temp), k, c_.norm_topk_prob,
                                     static_cast<float>(c_.route_scale)};
  be_.moe_route(logits.f32(), n, E, B.gate_bias.data(), B.gate_bias_vl.empty() ? nullptr : B.gate_bias_vl.data(),
                s.image_d.u8(), rp, sel.i32(), wsel.f32(), scores.empty() ? nullptr : scores.f32());
  if (scores.data || (o_.expert_parallel && l < c_.n_layers)) {  // the routing on the host: taps, the EP exchange
    std::vector<int32_t> hsel(n * k);
    std::vector<float> hw(n * k);
    be_.download(hsel.data(), sel.data, hsel.size() * sizeof(int32_t));
    be_.download(hw.data(), wsel.data, hw.size() * sizeof(float));
    if (scores.data) taps->on_route(l, host(scores.f32(), n * E), hsel, hw);
    if (o_.expert_parallel && l < c_.n_layers) return moe_expert_parallel(l, x, n, hsel, hw, out);
  }
  // The n * k rows grouped by expert on the device; slot[t, j] = the row of token t's j-th expert by
  // id, so the combine adds the experts in the order the reference does. No expert gets more than n rows.
  const int64_t M = n * k;
  Tensor perm = ws_.i32({M}), rw = ws_.f32({M}), slot = ws_.i32({n, k}), offsets = ws_.i32({E + 1});
  be_.moe_group(sel.i32(), wsel.f32(), n, k, E, perm.i32(), rw.f32(), slot.i32(), offsets.i32());
  Tensor xs = ws_.f32({M, D}), ys = ws_.f32({M, D});
  be_.copy_rows(x, perm.i32(), M, D, xs.f32(), nullptr);
  Tensor g = ws_.f32({M, I}), u = ws_.f32({M, I}), h = ws_.f32({M, I});
  if (!s.dspark) prof_.section("moe_routed");
  expert_ffn(B.routed, xs.f32(), M, rw.f32(), ys.f32(), g.f32(), u.f32(), h.f32(), offsets.i32(), n);
  if (!s.dspark) prof_.section("moe_shared");
  Tensor shared = ws_.f32({n, D});
  expert_ffn(B.shared, x, n, nullptr, shared.f32(), g.f32(), u.f32(), h.f32());
  be_.moe_combine(ys.f32(), slot.i32(), n, k, D, shared.f32(), out);
}

void V41Model::expert_ffn(const V41Expert& ex, const float* x, int64_t m, const float* row_scale, float* y, float* g,
                          float* u, float* h, const int32_t* offsets, int64_t max_rows) {
  const int64_t I = c_.moe_inter_dim;
  auto L = [&](const float* in, const V41Linear& W, float* out) {
    if (offsets) lin_grouped(in, m, W, offsets, max_rows, out);
    else lin(in, m, W, out);
  };
  L(x, ex.w1, g);
  L(x, ex.w3, u);
  be_.swiglu(g, u, m, I, static_cast<float>(c_.swiglu_limit), row_scale, h, true);
  L(h, ex.w2, y);
}

// ---------------------------------------------------------------------------------------------------
// Engram (spec §5.3)

// The tables stay memory-mapped and are not scanned at load (the release's are ~92 GiB each): each gathered
// row is checked here instead, with the product the gather computes, so a NaN code, a NaN scale or a scale
// that overflows a value fails the requests that reach that row (the engine isolates them), never silently.
// Each table row a forward gathers is checked once (a bit per row remembers it): its e4m3 codes and UE8M0
// scales must give finite products. Byte tests decide all but the largest scales: e4m3 NaN is 0x7f / 0xff,
// a UE8M0 NaN 0xff, and only a scale of 2^120 or more can overflow 448 x scale.
void V41Model::check_engram_rows(int64_t l, const std::vector<int64_t>& ids) const {
  const V41Block& B = blocks_[l];
  const int64_t ehd = c_.engram_head_dim;
  for (int64_t row : ids) {
    check(row >= 0 && row < B.e_rows, "engram: row id ", row, " outside the table of ", B.e_rows, " rows");
    std::atomic<uint64_t>& word = B.e_checked[static_cast<size_t>(row >> 6)];
    const uint64_t bit = uint64_t{1} << (row & 63);
    if (word.load(std::memory_order_relaxed) & bit) continue;
    const uint8_t *w = B.e_table + row * ehd, *sc = B.e_scale + row * (ehd / 32);
    for (int64_t d = 0; d < ehd; ++d) {
      const uint8_t code = w[d], scale = sc[d / 32];
      const bool bad = (code & 0x7f) == 0x7f || scale == 0xff ||
                       (scale >= 247 && !std::isfinite(e4m3_to_float(code) * e8m0_to_float(scale)));
      if (bad)
        fail("engram: layer ", l, "'s table (engram.embed.weight / .scale) holds a non-finite value at row ", row,
             ", element ", d, " (code 0x", std::hex, int{code}, ", scale 0x", int{scale}, std::dec,
             "): the checkpoint is corrupt");
    }
    word.fetch_or(bit, std::memory_order_relaxed);
  }
}

void V41Model::engram_apply(int64_t l, Step& s, const std::vector<int64_t>& ids, float* X) {
  const V41Block& B = blocks_[l];
  const int64_t n = s.rows(), D = c_.dim, hc = c_.hc_mult, ehd = c_.engram_head_dim, C = B.e_wkv.k / ehd;
  check_engram_rows(l, ids);
  Workspace::Scope scope(ws_);
  Tensor e = ws_.f32({n * C, ehd}), kv = ws_.f32({n, hc + 1, D});
  if (B.e_device.data()) {  // the table on the device (codes, then scales): the ids go up, the rows are gathered there
    const auto* table = static_cast<const uint8_t*>(B.e_device.data());
    const Tensor ids_d = ws_.upload(ids, DType::I64);
    be_.embedding_fp8_on_device(table, table + B.e_rows * ehd, ehd, ids_d.i64(), n * C, e.f32());
  } else {
    be_.embedding_fp8(B.e_table, B.e_scale, ehd, ids.data(), n * C, e.f32());  // table and ids on the host
  }
  lin(e.f32(), n, B.e_wkv, kv.f32());
  be_.engram_gate(X, kv.f32(), B.e_qk.data(), s.image_d.u8(), n, hc, D, static_cast<float>(c_.norm_eps));
}

}  // namespace deepinfer::model
