// DeepSeek-V4.1 feed-forward parts over a flat batch: the MoE (spec §5.5: sqrt-softplus router with
// bias / bias_vl, top-k, routed experts in token groups, shared expert) and Engram (spec §5.3).
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/dtype.h"
#include "core/error.h"
#include "model/deepseek_v41/v41_model.h"
#include "model/deepseek_v41/v41_step.h"
#include "model/deepseek_v41/v41_topk.h"

namespace deepinfer::model {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }  // torch's threshold 20
float rb(float x) { return round_to_bf16(x); }

}  // namespace

void V41Model::moe(int64_t l, Step& s, const std::vector<float>& x, std::vector<float>& out, const ForwardTaps* taps) {
  const V41Block& B = blocks_[l];
  const int64_t n = s.rows();
  const uint8_t* image = s.image.data();
  const int64_t D = c_.dim, E = c_.experts_for(l), k = c_.active_for(l), I = c_.moe_inter_dim;
  const float limit = static_cast<float>(c_.swiglu_limit);
  std::vector<float> logits(n * E);
  be_.linear(x.data(), n, D, B.gate.data(), E, logits.data());  // fp32 router
  std::vector<int32_t> sel(n * k);
  std::vector<float> wsel(n * k);
  std::vector<float> sc(E);
  std::vector<int32_t> order(E);
  std::vector<float> scores;  // [n, E] for on_route
  for (int64_t t = 0; t < n; ++t) {
    const float* lg = logits.data() + t * E;
    if (c_.score_func == "softmax") {
      float mx = kNegInf, z = 0;
      for (int64_t e = 0; e < E; ++e) mx = std::max(mx, lg[e] / static_cast<float>(c_.gate_temp));
      for (int64_t e = 0; e < E; ++e) z += (sc[e] = std::exp(lg[e] / static_cast<float>(c_.gate_temp) - mx));
      for (int64_t e = 0; e < E; ++e) sc[e] /= z;
    } else {
      for (int64_t e = 0; e < E; ++e) {
        const float v = lg[e] / static_cast<float>(c_.gate_temp);
        sc[e] = c_.score_func == "sigmoid" ? 1.0f / (1.0f + std::exp(-v)) : std::sqrt(softplus(v));
      }
    }
    // Image-span tokens select with bias_vl; the weights below still come from the unbiased scores.
    const bool vl = image[t] != 0;
    check(!vl || !B.gate_bias_vl.empty(), "v41: an image token reached layer ", l,
          " but the checkpoint has no ffn.gate.bias_vl there");
    const V41Floats& bias = vl ? B.gate_bias_vl : B.gate_bias;
    if (taps && taps->on_route) scores.insert(scores.end(), sc.begin(), sc.end());
    std::vector<float> biased(E);
    for (int64_t e = 0; e < E; ++e) biased[e] = sc[e] + bias[e];
    std::vector<int64_t> top = torch_topk(biased.data(), E, k, true);
    for (int64_t j = 0; j < k; ++j) order[j] = static_cast<int32_t>(top[j]);
    float sum = 0;
    for (int64_t j = 0; j < k; ++j) {
      sel[t * k + j] = order[j];
      sum += (wsel[t * k + j] = sc[order[j]]);
    }
    for (int64_t j = 0; j < k; ++j) {
      if (c_.norm_topk_prob && k > 1) wsel[t * k + j] /= (sum + 1e-20f);
      wsel[t * k + j] *= static_cast<float>(c_.route_scale);
    }
  }
  if (taps && taps->on_route) taps->on_route(l, scores, sel, wsel);
  std::vector<float> y(n * D, 0.0f);
  auto expert = [&](const V41Expert& ex, const std::vector<float>& xs, int64_t m, const float* rw, std::vector<float>& yo) {
    std::vector<float> g(m * I), u(m * I), h(m * I);
    lin(xs.data(), m, ex.w1, g.data());
    lin(xs.data(), m, ex.w3, u.data());
    for (int64_t r = 0; r < m; ++r)
      for (int64_t i = 0; i < I; ++i) {
        float gv = g[r * I + i], uv = u[r * I + i];
        if (limit > 0) {
          uv = std::clamp(uv, -limit, limit);
          gv = std::min(gv, limit);
        }
        float hv = gv / (1.0f + std::exp(-gv)) * uv;
        if (rw) hv = rw[r] * hv;
        h[r * I + i] = rb(hv);
      }
    yo.resize(m * D);
    lin(h.data(), m, ex.w2, yo.data());
  };
  std::vector<float> xs, yo, rw;
  std::vector<int64_t> rows;
  for (int64_t e = 0; e < E; ++e) {
    rows.clear();
    rw.clear();
    for (int64_t t = 0; t < n; ++t)
      for (int64_t j = 0; j < k; ++j)
        if (sel[t * k + j] == e) {
          rows.push_back(t);
          rw.push_back(wsel[t * k + j]);
        }
    if (rows.empty()) continue;
    const int64_t m = static_cast<int64_t>(rows.size());
    xs.resize(m * D);
    for (int64_t r = 0; r < m; ++r) std::copy_n(x.data() + rows[r] * D, D, xs.data() + r * D);
    expert(B.experts[e], xs, m, rw.data(), yo);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t d = 0; d < D; ++d) y[rows[r] * D + d] += yo[r * D + d];
  }
  expert(B.shared, x, n, nullptr, yo);
  out.resize(n * D);
  for (int64_t i = 0; i < n * D; ++i) out[i] = rb(y[i] + yo[i]);
}

// ---------------------------------------------------------------------------------------------------
// Engram (spec §5.3)

void V41Model::engram_apply(int64_t l, Step& s, const std::vector<int64_t>& ids, std::vector<float>& X) {
  const V41Block& B = blocks_[l];
  const int64_t n = s.rows();
  const uint8_t* image = s.image.data();
  const int64_t D = c_.dim, hc = c_.hc_mult, ehd = c_.engram_head_dim, C = B.e_wkv.k / ehd;
  std::vector<float> e(n * C * ehd), kv(n * (hc + 1) * D);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t col = 0; col < C; ++col) {
      const int64_t row = ids[t * C + col];
      check(row >= 0 && row < B.e_rows, "engram: row id ", row, " outside the table of ", B.e_rows, " rows");
      const uint8_t* w = B.e_table + row * ehd;
      const uint8_t* s = B.e_scale + row * (ehd / 32);
      for (int64_t d = 0; d < ehd; ++d) e[(t * C + col) * ehd + d] = e4m3_to_float(w[d]) * e8m0_to_float(s[d / 32]);
    }
  lin(e.data(), n, B.e_wkv, kv.data());
  const float eps = static_cast<float>(c_.norm_eps);
  const float dscale = static_cast<float>(std::pow(static_cast<double>(D), -0.5));
  for (int64_t t = 0; t < n; ++t) {
    if (image[t]) continue;  // gate_k = 0 for image-span tokens: the streams pass unchanged
    const float* val = kv.data() + t * (hc + 1) * D + hc * D;
    for (int64_t k = 0; k < hc; ++k) {
      float* h = X.data() + (t * hc + k) * D;
      const float* key = kv.data() + t * (hc + 1) * D + k * D;
      const float* w = B.e_qk.data() + k * D;
      float sh = 0, sk = 0, dot = 0;
      for (int64_t d = 0; d < D; ++d) {
        sh += h[d] * h[d];
        sk += key[d] * key[d];
        dot += h[d] * w[d] * key[d];
      }
      const float rstd = (1.0f / std::sqrt(sh / D + eps)) * (1.0f / std::sqrt(sk / D + eps));
      dot = dot * rstd * dscale;
      const float mag = std::sqrt(std::max(std::fabs(dot), 1e-6f));
      const float gate = 1.0f / (1.0f + std::exp(-std::copysign(mag, dot)));
      for (int64_t d = 0; d < D; ++d) h[d] = rb(h[d] + gate * val[d]);
    }
  }
}

}  // namespace deepinfer::model
