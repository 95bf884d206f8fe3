#include "model/deepseek_v4/v4_model.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "core/error.h"
#include "core/thread_pool.h"

namespace deepinfer::model {

// The flat batch of one forward: token t belongs to sequence seq_of[t] at absolute position pos[t].
struct V4Model::Step {
  struct Seq {
    int64_t begin, end, start_pos;
    V4SequenceState* state;
  };
  int64_t tokens = 0;
  std::vector<int32_t> ids;
  std::vector<int64_t> pos;
  std::vector<Seq> seqs;
};

namespace {
// Orthonormal Walsh–Hadamard transform of each `dim`-vector (dim a power of two), scaled by dim^-1/2.
// The V4 reference rotates the indexer's queries and keys with it before their FP4 rounding: the
// scores are unchanged in exact arithmetic, only the quantization error is spread across channels.
void hadamard_rows(float* x, int64_t rows, int64_t dim) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  for (int64_t r = 0; r < rows; ++r) {
    float* v = x + r * dim;
    for (int64_t h = 1; h < dim; h *= 2)
      for (int64_t i = 0; i < dim; i += 2 * h)
        for (int64_t j = i; j < i + h; ++j) {
          float a = v[j], b = v[j + h];
          v[j] = a + b;
          v[j + h] = a - b;
        }
    for (int64_t i = 0; i < dim; ++i) v[i] *= scale;
  }
}
}  // namespace

V4Model::V4Model(V4Config config, V4Weights weights, ops::Backend& backend, bool simulate_quant)
    : config_(std::move(config)), w_(std::move(weights)), be_(backend), simulate_quant_(simulate_quant) {
  rope_main_ = make_rope_table(config_.rope_main, config_.rope_dim);
  rope_compress_ = make_rope_table(config_.rope_compress, config_.rope_dim);
  pool_ = std::make_shared<BlockPool>(default_block_bytes(), 0);
}

int64_t V4Model::default_block_bytes() const {
  int64_t widest = config_.head_dim;
  for (int64_t l = 0; l < config_.num_layers; ++l)
    if (config_.compress_ratio[l] == 4) widest = std::max(widest, 2 * config_.head_dim);
  const int64_t bytes = 16 * widest * static_cast<int64_t>(sizeof(float));
  return (bytes + 63) / 64 * 64;
}

std::unique_ptr<SequenceState> V4Model::new_sequence() const {
  return std::make_unique<V4SequenceState>(config_, pool_);
}

int64_t V4Model::state_blocks_for(int64_t tokens) const {
  return V4SequenceState::blocks_for(config_, pool_->block_bytes(), tokens);
}

// y = x · wᵀ. With quantization simulation on and an FP8/FP4-stored weight, the activations are first
// rounded to FP8 with UE8M0 scales per weight K-block, as the reference's act_quant.
void V4Model::project(const std::vector<float>& x, int64_t rows, const std::vector<float>& w, int64_t n, int64_t k,
                      std::vector<float>& y, bool quantized_weight) {
  y.resize(rows * n);
  if (simulate_quant_ && quantized_weight) {
    std::vector<float> xq(x.begin(), x.begin() + rows * k);
    be_.fake_quant_fp8(xq.data(), rows, k, config_.quant ? config_.quant->block_k : 128);
    be_.linear(xq.data(), rows, k, w.data(), n, y.data());
    return;
  }
  be_.linear(x.data(), rows, k, w.data(), n, y.data());
}

// Feeds `tokens` new (kv, gate) rows of one sequence into a compressor; every group of `ratio`
// completed emits one compressed row (softmax pool per channel, norm, RoPE at the group's first position).
void V4Model::compress(const CompressorWeights& cw, CompressorState& st, const float* kv, const float* gate,
                       int64_t first_pos, int64_t tokens, bool indexer_keys) {
  const int64_t width = cw.width, ratio = cw.ratio, row = cw.copies * width;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const int64_t slots = cw.copies * ratio;
  std::vector<float> skv(slots * width), sgate(slots * width), z(width);
  for (int64_t i = 0; i < tokens; ++i) {
    const int64_t p = first_pos + i;
    std::copy_n(kv + i * row, row, st.pending_kv.row(st.pending));
    float* g = st.pending_gate.row(st.pending);
    for (int64_t c = 0; c < row; ++c) g[c] = gate[i * row + c] + cw.ape[(p % ratio) * row + c];
    if (++st.pending < ratio) continue;

    if (cw.copies == 2) {  // slots: previous group's series A (none before group 1), then this group's series B
      for (int64_t s = 0; s < ratio; ++s) {
        std::copy_n(st.pending_kv.row(s) + width, width, skv.data() + (ratio + s) * width);
        std::copy_n(st.pending_gate.row(s) + width, width, sgate.data() + (ratio + s) * width);
        if (st.has_prev) {
          std::copy_n(st.prev_kv.row(s), width, skv.data() + s * width);
          std::copy_n(st.prev_gate.row(s), width, sgate.data() + s * width);
        } else {
          std::fill_n(skv.data() + s * width, width, 0.0f);
          std::fill_n(sgate.data() + s * width, width, neg_inf);
        }
        std::copy_n(st.pending_kv.row(s), width, st.prev_kv.row(s));
        std::copy_n(st.pending_gate.row(s), width, st.prev_gate.row(s));
      }
      st.has_prev = true;
    } else {
      for (int64_t s = 0; s < ratio; ++s) {
        std::copy_n(st.pending_kv.row(s), width, skv.data() + s * width);
        std::copy_n(st.pending_gate.row(s), width, sgate.data() + s * width);
      }
    }
    be_.softmax_pool(skv.data(), sgate.data(), 1, slots, width, z.data());
    be_.rms_norm(z.data(), cw.norm.data(), 1, width, static_cast<float>(config_.rms_norm_eps), z.data());
    const int64_t group_pos = p + 1 - ratio;
    be_.rope(z.data(), 1, 1, width, &group_pos, rope_compress_.freqs(), false);
    if (simulate_quant_) {
      if (indexer_keys) {
        hadamard_rows(z.data(), 1, width);
        be_.fake_quant_fp4(z.data(), 1, width, 32);
      } else {
        be_.fake_quant_fp8(z.data(), 1, width - config_.rope_dim, 64);
      }
    }
    std::copy(z.begin(), z.end(), st.rows.append());
    st.pending = 0;
  }
}

void V4Model::attention(int64_t l, Step& s, const std::vector<float>& x, std::vector<float>& out) {
  const V4Config& c = config_;
  const V4LayerWeights& L = w_.layers[l];
  const int64_t T = s.tokens, D = c.hidden_size, H = c.num_heads, hd = c.head_dim, W = c.sliding_window;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const ops::RopeFreqs rope = (c.compress_ratio[l] == 0 ? rope_main_ : rope_compress_).freqs();
  const bool quant = c.quant.has_value();

  std::vector<float> qr, q, kv;
  project(x, T, L.wq_a, c.q_lora_rank, D, qr, quant);
  be_.rms_norm(qr.data(), L.q_norm.data(), T, c.q_lora_rank, eps, qr.data());
  project(qr, T, L.wq_b, H * hd, c.q_lora_rank, q, quant);
  be_.rms_norm(q.data(), nullptr, T * H, hd, eps, q.data());  // per-head unweighted norm (V4 only)
  be_.rope(q.data(), T, H, hd, s.pos.data(), rope, false);
  project(x, T, L.wkv, hd, D, kv, quant);
  be_.rms_norm(kv.data(), L.kv_norm.data(), T, hd, eps, kv.data());
  be_.rope(kv.data(), T, 1, hd, s.pos.data(), rope, false);
  if (simulate_quant_)  // the reference stores the latent's non-RoPE channels FP8-rounded
    for (int64_t t = 0; t < T; ++t) be_.fake_quant_fp8(kv.data() + t * hd, 1, hd - c.rope_dim, 64);

  const bool compressed = c.compress_ratio[l] > 0, csa = c.attention[l] == AttentionKind::kCSA;
  std::vector<float> ckv, cgate, ikv, igate, iq, iweights;
  if (compressed) {
    const auto& cw = L.compressor;
    project(x, T, cw.wkv, cw.copies * hd, D, ckv, false);
    project(x, T, cw.wgate, cw.copies * hd, D, cgate, false);
  }
  const int64_t ih = c.index_n_heads, id = c.index_head_dim;
  if (csa) {
    const auto& iw = L.indexer;
    project(x, T, iw.compressor.wkv, 2 * id, D, ikv, false);
    project(x, T, iw.compressor.wgate, 2 * id, D, igate, false);
    project(qr, T, iw.wq_b, ih * id, c.q_lora_rank, iq, quant);
    be_.rope(iq.data(), T, ih, id, s.pos.data(), rope_compress_.freqs(), false);
    if (simulate_quant_) {
      hadamard_rows(iq.data(), T * ih, id);
      be_.fake_quant_fp4(iq.data(), T * ih, id, 32);
    }
    project(x, T, iw.weights_proj, ih, D, iweights, false);
    const float wscale = 1.0f / std::sqrt(static_cast<float>(ih));
    for (float& v : iweights) v *= wscale;
  }

  std::vector<float> o(T * H * hd);
  for (const Step::Seq& seq : s.seqs) {
    V4LayerState& ls = seq.state->layer(l);
    const int64_t n = seq.end - seq.begin, P = seq.start_pos, b = seq.begin;
    if (compressed) {
      const int64_t row = L.compressor.copies * hd;
      compress(L.compressor, ls.kv, ckv.data() + b * row, cgate.data() + b * row, P, n, false);
    }
    if (csa) compress(L.indexer.compressor, ls.index, ikv.data() + b * 2 * id, igate.data() + b * 2 * id, P, n, true);

    // Pool: the window rows before this chunk (from the ring), the chunk's rows, the compressed rows.
    const int64_t nprev = std::min<int64_t>(P, W - 1), n_rows = compressed ? ls.kv.rows.size() : 0;
    std::vector<float> pool((nprev + n + n_rows) * hd);
    for (int64_t i = 0; i < nprev; ++i) std::copy_n(ls.window.row((P - nprev + i) % W), hd, pool.data() + i * hd);
    std::copy_n(kv.data() + b * hd, n * hd, pool.data() + nprev * hd);
    if (compressed) ls.kv.rows.copy_to(pool.data() + (nprev + n) * hd);

    const int64_t ratio = c.compress_ratio[l];
    const int64_t topk = csa ? std::min(c.index_topk, n_rows) : 0;
    const int64_t K = W + (csa ? topk : compressed ? n_rows : 0);
    std::vector<int32_t> idx(n * K, -1);
    parallel_for(n, [&](int64_t i0, int64_t i1) {
      std::vector<std::pair<float, int32_t>> scored;
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t p = P + i;
        int32_t* row = idx.data() + i * K;
        int64_t k = 0;
        for (int64_t qp = std::max<int64_t>(0, p - W + 1); qp <= p; ++qp)
          row[k++] = static_cast<int32_t>(qp < P ? qp - (P - nprev) : nprev + qp - P);
        if (!compressed) continue;
        const int64_t visible = std::min((p + 1) / ratio, n_rows);
        const int32_t base = static_cast<int32_t>(nprev + n);
        if (!csa || visible <= topk) {
          for (int64_t w = 0; w < visible; ++w) row[W + w] = base + static_cast<int32_t>(w);
          continue;
        }
        // Lightning indexer: score = sum_h weight[t,h] * relu(<iq[t,h], key_w>) / sqrt(index_dim); keep top-k.
        const float* qt = iq.data() + (b + i) * ih * id;
        const float* wt = iweights.data() + (b + i) * ih;
        const float sscale = 1.0f / std::sqrt(static_cast<float>(id));
        scored.clear();
        for (int64_t w = 0; w < visible; ++w) {
          const float* key = ls.index.rows.row(w);
          float score = 0;
          for (int64_t h = 0; h < ih; ++h) {
            float d = 0;
            for (int64_t ch = 0; ch < id; ++ch) d += qt[h * id + ch] * key[ch];
            score += std::max(d, 0.0f) * sscale * wt[h];
          }
          scored.emplace_back(score, static_cast<int32_t>(w));
        }
        // Ties (e.g. rows whose every head's ReLU is 0) go to the lower row, as torch.topk does.
        std::nth_element(scored.begin(), scored.begin() + topk, scored.end(), [](auto& a, auto& b2) {
          return a.first > b2.first || (a.first == b2.first && a.second < b2.second);
        });
        for (int64_t j = 0; j < topk; ++j) row[W + j] = base + scored[j].second;
      }
    });
    be_.sparse_attention(q.data() + b * H * hd, n, H, hd, pool.data(), idx.data(), K, L.attn_sink.data(),
                         1.0f / std::sqrt(static_cast<float>(hd)), o.data() + b * H * hd);
    for (int64_t i = 0; i < n; ++i) std::copy_n(kv.data() + (b + i) * hd, hd, ls.window.row((P + i) % W));
  }

  // Undo the values' RoPE at the query position, then the grouped output projection.
  be_.rope(o.data(), T, H, hd, s.pos.data(), rope, true);
  const int64_t G = c.o_groups, R = c.o_lora_rank, gin = H * hd / G;
  std::vector<float> og(T * gin), ug, u(T * G * R);
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t t = 0; t < T; ++t) std::copy_n(o.data() + t * H * hd + g * gin, gin, og.data() + t * gin);
    std::vector<float> wg(L.wo_a.begin() + g * R * gin, L.wo_a.begin() + (g + 1) * R * gin);
    project(og, T, wg, R, gin, ug, false);  // the reference runs wo_a dequantized, without act quant
    for (int64_t t = 0; t < T; ++t) std::copy_n(ug.data() + t * R, R, u.data() + t * G * R + g * R);
  }
  project(u, T, L.wo_b, D, G * R, out, quant);
}

namespace {
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }  // torch's threshold
}  // namespace

void V4Model::moe(int64_t l, Step& s, const std::vector<float>& x, std::vector<float>& out) {
  const V4Config& c = config_;
  const V4LayerWeights& L = w_.layers[l];
  const int64_t T = s.tokens, D = c.hidden_size, E = c.n_routed_experts, k = c.experts_per_token;
  const int64_t I = c.moe_intermediate_size;
  const bool quant = c.quant.has_value();
  const float limit = static_cast<float>(c.swiglu_limit);

  std::vector<float> logits;
  project(x, T, L.gate, E, D, logits, false);
  std::vector<float> scores(T * E);
  for (int64_t t = 0; t < T; ++t) {
    float* sc = scores.data() + t * E;
    const float* lg = logits.data() + t * E;
    if (c.scoring_func == "softmax") {
      float mx = *std::max_element(lg, lg + E), z = 0;
      for (int64_t e = 0; e < E; ++e) z += (sc[e] = std::exp(lg[e] - mx));
      for (int64_t e = 0; e < E; ++e) sc[e] /= z;
    } else {
      for (int64_t e = 0; e < E; ++e)
        sc[e] = c.scoring_func == "sigmoid" ? 1.0f / (1.0f + std::exp(-lg[e])) : std::sqrt(softplus(lg[e]));
    }
  }
  // Selection (hash table or biased top-k), weights from the unbiased scores.
  std::vector<int32_t> sel(T * k);
  std::vector<float> weight(T * k);
  for (int64_t t = 0; t < T; ++t) {
    const float* sc = scores.data() + t * E;
    int32_t* st = sel.data() + t * k;
    if (c.hash_routed[l]) {
      std::copy_n(L.tid2eid.data() + static_cast<int64_t>(s.ids[t]) * k, k, st);
    } else {
      std::vector<int32_t> order(E);
      for (int64_t e = 0; e < E; ++e) order[e] = static_cast<int32_t>(e);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
        float va = sc[a] + L.gate_bias[a], vb = sc[b] + L.gate_bias[b];
        return va > vb || (va == vb && a < b);
      });
      std::copy_n(order.begin(), k, st);
    }
    float sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += (weight[t * k + j] = sc[st[j]]);
    for (int64_t j = 0; j < k; ++j) {
      if (c.norm_topk_prob && c.scoring_func != "softmax") weight[t * k + j] /= sum;
      weight[t * k + j] *= static_cast<float>(c.routed_scaling_factor);
    }
  }

  out.assign(T * D, 0.0f);
  std::vector<float> xs, g, u, h, y;
  for (int64_t e = 0; e < E; ++e) {
    std::vector<int64_t> rows;
    std::vector<float> rw;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < k; ++j)
        if (sel[t * k + j] == e) {
          rows.push_back(t);
          rw.push_back(weight[t * k + j]);
        }
    if (rows.empty()) continue;
    const int64_t m = static_cast<int64_t>(rows.size());
    xs.resize(m * D);
    for (int64_t r = 0; r < m; ++r) std::copy_n(x.data() + rows[r] * D, D, xs.data() + r * D);
    const ExpertWeights& ex = L.experts[e];
    project(xs, m, ex.w1, I, D, g, quant);
    project(xs, m, ex.w3, I, D, u, quant);
    h.resize(m * I);
    be_.swiglu(g.data(), u.data(), m, I, limit, rw.data(), h.data());  // routing weight before w2
    project(h, m, ex.w2, D, I, y, quant);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t d = 0; d < D; ++d) out[rows[r] * D + d] += y[r * D + d];
  }
  const int64_t Is = I * c.n_shared_experts;
  project(x, T, L.shared.w1, Is, D, g, quant);
  project(x, T, L.shared.w3, Is, D, u, quant);
  h.resize(T * Is);
  be_.swiglu(g.data(), u.data(), T, Is, limit, nullptr, h.data());
  project(h, T, L.shared.w2, D, Is, y, quant);
  for (int64_t i = 0; i < T * D; ++i) out[i] += y[i];
}

void V4Model::forward(const ForwardBatch& batch, std::vector<float>& logits, const ForwardTaps*) {
  const V4Config& c = config_;
  check_batch(batch, c.vocab_size);
  check(batch.embed_tokens.empty(), "DeepSeek-V4 takes no input rows (embed_tokens): it has no vision input");
  const int64_t num_seqs = static_cast<int64_t>(batch.states.size());
  check(static_cast<int64_t>(batch.seq_start.size()) == num_seqs + 1 && batch.seq_start.front() == 0 &&
            batch.seq_start.back() == static_cast<int32_t>(batch.token_ids.size()),
        "forward: seq_start must have one entry per sequence plus one, from 0 to the token count");
  Step s;
  s.tokens = static_cast<int64_t>(batch.token_ids.size());
  s.ids = batch.token_ids;
  s.pos.resize(s.tokens);
  for (int64_t i = 0; i < num_seqs; ++i) {
    auto* st = dynamic_cast<V4SequenceState*>(batch.states[i]);
    check(st != nullptr, "forward: sequence ", i, " has no DeepSeek-V4 state");
    const int64_t b = batch.seq_start[i], e = batch.seq_start[i + 1];
    check(b <= e, "forward: seq_start is not ascending at sequence ", i);
    for (int64_t t = b; t < e; ++t) s.pos[t] = st->length() + (t - b);
    if (e > b) s.seqs.push_back({b, e, st->length(), st});
  }
  for (int32_t id : s.ids)
    check(id >= 0 && id < c.vocab_size, "forward: token id ", id, " is outside the vocabulary (", c.vocab_size, ")");
  for (int32_t r : batch.logit_rows)
    check(r >= 0 && r < s.tokens, "forward: logit row ", r, " is outside the batch of ", s.tokens, " tokens");
  for (auto& seq : s.seqs) seq.state->ensure_allocated();

  const int64_t T = s.tokens, D = c.hidden_size, hc = c.hc_mult;
  const float eps = static_cast<float>(c.rms_norm_eps), hc_eps = static_cast<float>(c.hc_eps);
  std::vector<float> X(T * hc * D);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < hc; ++k) std::copy_n(w_.embed.data() + s.ids[t] * D, D, X.data() + (t * hc + k) * D);
  if (capture_hidden) capture_hidden->clear();

  std::vector<float> pre(T * hc), post(T * hc), comb(T * hc * hc), a(T * D), sub;
  // One mHC site: collapse the streams with `pre`, run the sub-layer, expand with `post` + Cᵀ·streams.
  auto site = [&](const HcWeights& hw, const std::vector<float>& norm, auto&& sublayer) {
    be_.hc_weights(X.data(), T, hc, D, hw.fn.data(), hw.base.data(), hw.scale.data(), eps, hc_eps,
                   c.hc_sinkhorn_iters, pre.data(), post.data(), comb.data());
    be_.hc_collapse(X.data(), pre.data(), T, hc, D, false, a.data());
    be_.rms_norm(a.data(), norm.data(), T, D, eps, a.data());
    sublayer(a, sub);
    std::vector<float> mixed(T * hc * D);
    be_.hc_expand(X.data(), sub.data(), post.data(), comb.data(), T, hc, D, false, mixed.data());
    X.swap(mixed);
  };
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (capture_hidden) capture_hidden->push_back(X);
    const V4LayerWeights& L = w_.layers[l];
    site(L.hc_attn, L.attn_norm, [&](const std::vector<float>& in, std::vector<float>& o) { attention(l, s, in, o); });
    site(L.hc_ffn, L.ffn_norm, [&](const std::vector<float>& in, std::vector<float>& o) { moe(l, s, in, o); });
  }
  for (auto& seq : s.seqs) seq.state->advance(seq.end - seq.begin);

  // hc head + final norm on the rows whose logits are wanted (all rows when capturing).
  std::vector<int32_t> rows = batch.logit_rows;
  if (capture_hidden) {
    rows.resize(T);
    for (int64_t t = 0; t < T; ++t) rows[t] = static_cast<int32_t>(t);
  }
  const int64_t R = static_cast<int64_t>(rows.size());
  std::vector<float> xr(R * hc * D), hpre(R * hc), y(R * D);
  for (int64_t r = 0; r < R; ++r) std::copy_n(X.data() + rows[r] * hc * D, hc * D, xr.data() + r * hc * D);
  be_.hc_weights(xr.data(), R, hc, D, w_.hc_head.fn.data(), w_.hc_head.base.data(), w_.hc_head.scale.data(), eps,
                 hc_eps, c.hc_sinkhorn_iters, hpre.data(), nullptr, nullptr);
  be_.hc_collapse(xr.data(), hpre.data(), R, hc, D, false, y.data());
  be_.rms_norm(y.data(), w_.norm.data(), R, D, eps, y.data());
  if (capture_hidden) {
    capture_hidden->push_back(y);
    std::vector<float> picked(batch.logit_rows.size() * D);
    for (size_t i = 0; i < batch.logit_rows.size(); ++i)
      std::copy_n(y.data() + batch.logit_rows[i] * D, D, picked.data() + i * D);
    y.swap(picked);
  }
  logits.resize(batch.logit_rows.size() * c.vocab_size);
  be_.linear(y.data(), static_cast<int64_t>(batch.logit_rows.size()), D, w_.head.data(), c.vocab_size, logits.data());
}

std::unique_ptr<V4Model> V4Model::load(const std::string& dir, const V4LoadOptions& options) {
  V4Config config = V4Config::from_file(dir + "/config.json");
  io::Checkpoint ckpt = io::Checkpoint::open(dir);
  check_fits_in_memory(ckpt);
  // A checkpoint saved by transformers carries the "model." prefix; read it through the name map.
  const bool hf_names = ckpt.contains("model.embed_tokens.weight");
  std::function<std::string(const std::string&)> names = transformers_name;
  if (!hf_names) names = [](const std::string& n) { return n; };
  WeightLoader loader(ckpt, config.quant ? config.quant->block_n : 128, config.quant ? config.quant->block_k : 128,
                      names);
  V4Weights weights = load_v4_weights(config, loader);
  bool simulate = options.quant_simulation == QuantSimulation::kOn ||
                  (options.quant_simulation == QuantSimulation::kAuto && config.quant.has_value());
  return std::make_unique<V4Model>(std::move(config), std::move(weights), ops::cpu_backend(), simulate);
}

}  // namespace deepinfer::model
