// The CPU backend's DeepSeek-specific ops (MoE routing and combine, the V4.1 indexer's scores,
// candidate blocks and top-k, compressor pooling, Engram), in the reference's rounding points.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/torch_topk.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace deepinfer::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
float rb(float x) { return round_to_bf16(x); }
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }  // torch's threshold 20

}  // namespace

void CpuBackend::hc_mean(const float* x, int64_t rows, int64_t hc, int64_t dim, float* out, int64_t out_ld) {
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t d = 0; d < dim; ++d) {
      float acc = 0;
      for (int64_t k = 0; k < hc; ++k) acc += x[(t * hc + k) * dim + d];
      out[t * out_ld + d] = rb(acc / static_cast<float>(hc));
    }
}

void CpuBackend::softmax_pool_v41(const float* kv, const float* score, int64_t windows, int64_t slots,
                                  int64_t channels, float* z) {
  std::vector<float> e(slots);
  for (int64_t w = 0; w < windows; ++w)
    for (int64_t c = 0; c < channels; ++c) {
      auto at = [&](const float* v, int64_t s) { return v[(w * slots + s) * channels + c]; };
      float mx = kNegInf, den = 0, acc = 0;
      for (int64_t s = 0; s < slots; ++s) mx = std::max(mx, at(score, s));
      for (int64_t s = 0; s < slots; ++s) den += (e[s] = std::exp(at(score, s) - mx));
      for (int64_t s = 0; s < slots; ++s) acc += at(kv, s) * (e[s] / den);
      z[w * channels + c] = rb(acc);
    }
}

void CpuBackend::moe_route(const float* logits, int64_t n, int64_t E, const float* bias, const float* bias_vl,
                           const uint8_t* image, const RouteParams& p, int32_t* sel, float* weight, float* scores) {
  const int64_t k = p.k;
  std::vector<float> sc(E), biased(E);
  for (int64_t t = 0; t < n; ++t) {
    const float* lg = logits + t * E;
    if (p.score_func == ScoreFunc::kSoftmax) {
      float mx = kNegInf, z = 0;
      for (int64_t e = 0; e < E; ++e) mx = std::max(mx, lg[e] / p.temperature);
      for (int64_t e = 0; e < E; ++e) z += (sc[e] = std::exp(lg[e] / p.temperature - mx));
      for (int64_t e = 0; e < E; ++e) sc[e] /= z;
    } else {
      for (int64_t e = 0; e < E; ++e) {
        const float v = lg[e] / p.temperature;
        sc[e] = p.score_func == ScoreFunc::kSigmoid ? 1.0f / (1.0f + std::exp(-v)) : std::sqrt(softplus(v));
      }
    }
    if (scores) std::copy(sc.begin(), sc.end(), scores + t * E);
    // Image-span tokens select with bias_vl; the weights still come from the unbiased scores.
    const float* b = image && image[t] ? bias_vl : bias;
    for (int64_t e = 0; e < E; ++e) biased[e] = sc[e] + (b ? b[e] : 0.0f);
    const std::vector<int64_t> top = torch_topk(biased.data(), E, k, true);
    float sum = 0;
    for (int64_t j = 0; j < k; ++j) {
      sel[t * k + j] = static_cast<int32_t>(top[j]);
      sum += (weight[t * k + j] = sc[top[j]]);
    }
    for (int64_t j = 0; j < k; ++j) {
      if (p.normalize && k > 1) weight[t * k + j] /= (sum + 1e-20f);
      weight[t * k + j] *= p.route_scale;
    }
  }
}

void CpuBackend::moe_combine(const float* y, const int32_t* slot, int64_t n, int64_t k, int64_t dim,
                             const float* shared, float* out) {
  parallel_for(n, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t d = 0; d < dim; ++d) {
        float acc = 0;
        for (int64_t j = 0; j < k; ++j)
          if (slot[t * k + j] >= 0) acc += y[slot[t * k + j] * dim + d];
        out[t * dim + d] = rb(acc + (shared ? shared[t * dim + d] : 0.0f));
      }
  });
}

void CpuBackend::moe_group(const int32_t* sel, const float* weight, int64_t n, int64_t k, int64_t experts,
                          int32_t* perm, float* row_weight, int32_t* slot, int32_t* offsets) {
  std::vector<int64_t> next(experts + 1, 0);
  for (int64_t i = 0; i < n * k; ++i) {
    check(sel[i] >= 0 && sel[i] < experts, "moe_group: expert ", sel[i], " outside 0..", experts - 1);
    ++next[sel[i] + 1];
  }
  for (int64_t e = 0; e < experts; ++e) next[e + 1] += next[e];
  for (int64_t e = 0; e <= experts; ++e) offsets[e] = static_cast<int32_t>(next[e]);
  std::vector<std::pair<int32_t, int64_t>> mine(k);  // (expert, j) of one token, by expert
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < k; ++j) mine[j] = {sel[t * k + j], j};
    std::sort(mine.begin(), mine.end());
    for (int64_t j = 0; j < k; ++j) {
      const int64_t r = next[mine[j].first]++;
      perm[r] = static_cast<int32_t>(t);
      row_weight[r] = weight[t * k + mine[j].second];
      slot[t * k + j] = static_cast<int32_t>(r);
    }
  }
}

void CpuBackend::index_scores(const float* q, const float* weight, int64_t tokens, int64_t heads, int64_t dim,
                              const uint8_t* keys, int64_t key_block_bytes, const int32_t* key_rows,
                              const int32_t* key_begin, const int32_t* width, const int32_t* visible, int64_t ld,
                              float* scores) {
  const int64_t key_bytes = row_bytes(RowFormat::kFp4E8m0x32, dim);
  std::vector<float> kc, dots;
  for (int64_t t0 = 0; t0 < tokens;) {
    // A run of tokens over the same keys (one sequence's rows) shares one gather and one GEMM.
    int64_t t1 = t0 + 1;
    while (t1 < tokens && key_begin[t1] == key_begin[t0] && width[t1] == width[t0]) ++t1;
    const int64_t W = width[t0], n = t1 - t0;
    kc.resize(W * dim);
    for (int64_t w = 0; w < W; ++w)
      dequantize_row(keys + paged_row_offset(key_rows[key_begin[t0] + w], key_bytes, key_block_bytes), dim,
                     RowFormat::kFp4E8m0x32, kc.data() + w * dim);
    dots.resize(n * heads * W);
    if (W) linear(q + t0 * heads * dim, n * heads, dim, kc.data(), W, dots.data());
    // score[t,w] = bf16(sum_h bf16(relu(bf16(<q_th, k_w>)) * w_th)), summed in fp32
    for (int64_t t = t0; t < t1; ++t) {
      float* row = scores + t * ld;
      for (int64_t w = 0; w < ld; ++w) {
        if (w >= visible[t] || w >= W) {
          row[w] = kNegInf;
          continue;
        }
        float acc = 0;
        for (int64_t h = 0; h < heads; ++h)
          acc += rb(std::max(rb(dots[((t - t0) * heads + h) * W + w]), 0.0f) * weight[t * heads + h]);
        row[w] = rb(acc);
      }
    }
    t0 = t1;
  }
}

void CpuBackend::index_scores_fp32(const float* q, const float* weight, int64_t tokens, int64_t heads, int64_t dim,
                                   const float* keys, const int32_t* key_rows, const int32_t* key_begin,
                                   const int32_t* width, const int32_t* visible, int64_t ld, float scale,
                                   float* scores) {
  parallel_for(tokens, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t w = 0; w < ld; ++w) {
        if (w >= visible[t] || w >= width[t]) {
          scores[t * ld + w] = kNegInf;
          continue;
        }
        const float* key = keys + static_cast<int64_t>(key_rows[key_begin[t] + w]) * dim;
        float acc = 0;
        for (int64_t h = 0; h < heads; ++h) {
          const float* qh = q + (t * heads + h) * dim;
          float d = 0;
          for (int64_t c = 0; c < dim; ++c) d += qh[c] * key[c];
          acc += std::max(d, 0.0f) * scale * weight[t * heads + h];
        }
        scores[t * ld + w] = acc;
      }
  });
}

void CpuBackend::candidate_mask(const float* scores, int64_t tokens, int64_t ld, const int32_t* width,
                                const int32_t* clen, const int32_t* ranked, int64_t bs, int64_t topk_blocks,
                                uint8_t* mask) {
  std::vector<float> bv;
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t W = width[t], nb = (W + bs - 1) / bs, last = clen[t] >= 1 ? (clen[t] - 1) / bs : -1;
    const float* row = scores + t * ld;
    bv.assign(nb, kNegInf);
    for (int64_t b = 0; b < nb; ++b) {
      float m = kNegInf;
      for (int64_t w = b * bs; w < std::min(W, (b + 1) * bs); ++w) m = std::max(m, row[w]);
      bv[b] = b == last ? std::numeric_limits<float>::infinity() : m;
    }
    uint8_t* mk = mask + t * ld;
    std::fill_n(mk, ld, 0);
    const int64_t nbt = std::min<int64_t>(ranked[t], nb);
    for (int64_t b : torch_topk(bv.data(), nbt, std::min(topk_blocks, nbt), true)) {
      if (!(bv[b] > kNegInf)) continue;
      for (int64_t w = b * bs; w < std::min(W, (b + 1) * bs); ++w) mk[w] = 1;
    }
  }
}

void CpuBackend::index_select(const float* scores, const uint8_t* mask, int64_t tokens, int64_t ld,
                              const int32_t* ranked, const int32_t* visible, const int32_t* topk, int64_t K,
                              int32_t* sel) {
  std::vector<float> row(ld);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t w = 0; w < ld; ++w) row[w] = mask && !mask[t * ld + w] ? kNegInf : scores[t * ld + w];
    const int64_t r = ranked[t], m = std::min<int64_t>(topk[t], r);
    std::vector<int64_t> order = torch_topk(row.data(), r, m, false);
    std::sort(order.begin(), order.end());
    int32_t* out = sel + t * K;
    std::fill_n(out, K, -1);
    for (int64_t j = 0; j < m; ++j) out[j] = order[j] < visible[t] ? static_cast<int32_t>(order[j]) : -1;
  }
}

void CpuBackend::index_select_stable(const float* scores, int64_t tokens, int64_t ld, const int32_t* ranked,
                                     const int32_t* visible, const int32_t* topk, int64_t K, int32_t* sel) {
  (void)ld;
  parallel_for(tokens, [&](int64_t t0, int64_t t1) {
    std::vector<int32_t> order;
    for (int64_t t = t0; t < t1; ++t) {
      const float* row = scores + t * ld;
      const int64_t r = ranked[t], m = std::min<int64_t>(topk[t], r);
      order.resize(r);
      for (int64_t w = 0; w < r; ++w) order[w] = static_cast<int32_t>(w);
      std::partial_sort(order.begin(), order.begin() + m, order.end(), [&](int32_t a, int32_t b) {
        return row[a] > row[b] || (row[a] == row[b] && a < b);
      });
      std::sort(order.begin(), order.begin() + m);
      int32_t* out = sel + t * K;
      std::fill_n(out, K, -1);
      for (int64_t j = 0; j < m; ++j) out[j] = order[j] < visible[t] ? order[j] : -1;
    }
  });
}

void CpuBackend::lookup_rows(const int32_t* in, int64_t tokens, int64_t k, const int32_t* table, const int32_t* begin,
                             int32_t* out, int64_t out_ld) {
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t r = in[t * k + j];
      out[t * out_ld + j] = r < 0 ? -1 : table[begin[t] + r];
    }
}

void CpuBackend::embedding_fp8(const uint8_t* table, const uint8_t* scale, int64_t dim, const int64_t* ids, int64_t n,
                               float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* w = table + ids[i] * dim;
    const uint8_t* s = scale + ids[i] * (dim / 32);
    for (int64_t d = 0; d < dim; ++d) out[i * dim + d] = e4m3_to_float(w[d]) * e8m0_to_float(s[d / 32]);
  }
}

void CpuBackend::embedding_fp8_on_device(const uint8_t* table, const uint8_t* scale, int64_t dim, const int64_t* ids,
                                         int64_t n, float* out) {
  embedding_fp8(table, scale, dim, ids, n, out);  // the CPU's device memory is host memory
}

void CpuBackend::engram_gate(float* x, const float* kv, const float* qk, const uint8_t* image, int64_t n, int64_t hc,
                             int64_t D, float eps) {
  const float dscale = static_cast<float>(std::pow(static_cast<double>(D), -0.5));
  for (int64_t t = 0; t < n; ++t) {
    if (image && image[t]) continue;  // gate 0 for image-span tokens: the streams pass unchanged
    const float* val = kv + t * (hc + 1) * D + hc * D;
    for (int64_t k = 0; k < hc; ++k) {
      float* h = x + (t * hc + k) * D;
      const float* key = kv + t * (hc + 1) * D + k * D;
      const float* w = qk + k * D;
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

}  // namespace deepinfer::cpu
