// DeepSeek-V4.1 attention over a flat batch (spec §5.4): projections for all rows at once; the
// compressor carry, the indexer's scores over each sequence's keys and the window lists per sequence;
// one sparse attention call that reads the state arena in place and this step's rows from `kv`.
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
constexpr int64_t kAttnBlock = 64;  // the reference kernel's online-softmax block of indices
float rb(float x) { return round_to_bf16(x); }

// Row index of a state row in the arena, in rows of `row_floats` floats (what sparse attention reads).
int32_t arena_row(const BlockPool& arena, const float* row, int64_t row_floats) {
  return static_cast<int32_t>(arena.row_index(row, row_floats * static_cast<int64_t>(sizeof(float))));
}

}  // namespace

// The compressor of KV source l: latents (pre-RoPE, normalized) of the groups this step completes,
// their first positions, and per sequence where its latents begin (lat_begin[S] = count).
void V41Model::compress(int64_t l, Step& s, const std::vector<float>& x, std::vector<float>& lat,
                        std::vector<int64_t>& lat_pos, std::vector<int64_t>& lat_begin) {
  const V41Block& B = blocks_[l];
  const int64_t ratio = c_.compress_ratios[l], hd = c_.head_dim, T = s.rows();
  lat_begin.assign(s.num() + 1, 0);
  if (ratio == 1) {
    lat.resize(T * hd);
    lin(x.data(), T, B.c_wkv, lat.data());
    rmsnorm(lat, B.c_norm, T, hd);
    lat_pos = s.pos;
    lat_begin = s.begin;
    return;
  }
  std::vector<float> kvf(T * hd), sc(T * hd), z(hd), e(ratio);
  lin(x.data(), T, B.c_wkv, kvf.data(), false);  // fp32 weights, fp32 pooling
  lin(x.data(), T, B.c_wgate, sc.data(), false);
  for (int64_t q = 0; q < s.num(); ++q) {
    V41SequenceState& st = *s.st[q];
    lat_begin[q] = static_cast<int64_t>(lat_pos.size());
    for (int64_t i = s.begin[q]; i < s.begin[q + 1]; ++i) {
      const int64_t p = s.pos[i];
      std::copy_n(kvf.data() + i * hd, hd, st.carry_kv(l, p));
      std::copy_n(sc.data() + i * hd, hd, st.carry_score(l, p));
      if ((p + 1) % ratio != 0) continue;
      const int64_t g0 = p + 1 - ratio;  // the group's positions g0 .. p, pooled in position order
      for (int64_t ch = 0; ch < hd; ++ch) {
        float mx = kNegInf, den = 0, acc = 0;
        for (int64_t j = 0; j < ratio; ++j) mx = std::max(mx, st.carry_score(l, g0 + j)[ch]);
        for (int64_t j = 0; j < ratio; ++j) den += (e[j] = std::exp(st.carry_score(l, g0 + j)[ch] - mx));
        for (int64_t j = 0; j < ratio; ++j) acc += st.carry_kv(l, g0 + j)[ch] * (e[j] / den);
        z[ch] = rb(acc);
      }
      lat.insert(lat.end(), z.begin(), z.end());
      lat_pos.push_back(g0);
    }
  }
  lat_begin[s.num()] = static_cast<int64_t>(lat_pos.size());
  const int64_t ng = static_cast<int64_t>(lat_pos.size());
  if (ng) rmsnorm(lat, B.c_norm, ng, hd);
}

// The indexer of index source l: keys of the new latents (KV sources), queries and weights of every
// row, per sequence the scores over its keys, the candidate blocks and the top-k selection.
void V41Model::index(int64_t l, Step& s, const std::vector<float>& x, const std::vector<float>& qr,
                     const std::vector<float>& lat, const std::vector<int64_t>& lat_pos,
                     const std::vector<int64_t>& lat_begin) {
  const V41Block& B = blocks_[l];
  const int64_t ih = c_.index_n_heads, id = c_.index_head_dim, ratio = c_.compress_ratios[l], T = s.rows();
  const int64_t src = c_.kv_source_of[l], ng = static_cast<int64_t>(lat_pos.size());
  const ops::RopeFreqs rope = rope_for(l);
  if (c_.is_kv_source[l] && ng) {
    std::vector<float> k(ng * id);
    lin(lat.data(), ng, B.i_wk, k.data());
    rmsnorm(k, B.i_k_norm, ng, id);
    be_.rope(k.data(), ng, 1, id, lat_pos.data(), rope, false);
    bf16(k);
    be_.fake_quant_fp4(k.data(), ng, id, 32);
    for (int64_t q = 0; q < s.num(); ++q) {
      for (int64_t g = lat_begin[q]; g < lat_begin[q + 1]; ++g) std::copy_n(k.data() + g * id, id, s.st[q]->sources[l].ik.append());
      if (lat_begin[q + 1] > lat_begin[q]) s.st[q]->last_ik_owner = l;  // the reference's shared_attn.index_k
    }
  }
  std::vector<float> iq(T * ih * id), wts(T * ih);
  lin(qr.data(), T, B.i_wq_b, iq.data());
  be_.rope(iq.data(), T, ih, id, s.pos.data(), rope, false);
  bf16(iq);
  be_.fake_quant_fp4(iq.data(), T * ih, id, 32);
  lin(x.data(), T, B.i_weights_proj, wts.data());
  const float wscale = static_cast<float>(std::pow(static_cast<double>(id), -0.5) * std::pow(static_cast<double>(ih), -0.5));
  for (float& v : wts) v = rb(v * wscale);

  int64_t K = 0;  // the widest selection of the batch; narrower rows end in -1 (no row)
  for (int64_t q = 0; q < s.num(); ++q) K = std::max(K, std::min(c_.index_topk, s.end_pos[q] / ratio));
  std::vector<int32_t> sel(T * K, -1);
  const bool cand_source = l == c_.candidate_source_layer;
  const bool cand_mask = c_.candidate_source_layer >= 0 && c_.candidate_source_layer < l;
  if (cand_source) s.cand.assign(T, {});
  std::vector<float> keys, dots, score;
  for (int64_t q = 0; q < s.num(); ++q) {
    V41SequenceState& st = *s.st[q];
    const int64_t b = s.begin[q], n = s.begin[q + 1] - b, width = s.end_pos[q] / ratio;
    check(st.sources[src].ik.size() == width, "v41: index keys of layer ", src, " are out of step");
    const int64_t topk = std::min(c_.index_topk, width);
    if (width == 0) continue;
    const PagedRows* kr = &st.sources[src].ik;
    if (o_.emulate_reference_stale_index_keys && st.last_ik_owner >= 0) {
      // DeepSeek's model.py re-publishes shared_attn.index_k only when a key owner produced a
      // latent; a ratio-2 source on a step that completes no group reads the last owner's cache.
      kr = &st.sources[st.last_ik_owner].ik;
      check(kr->size() >= width, "v41: stale index keys too short");
    }
    keys.resize(width * id);  // the first `width` rows, contiguous
    for (int64_t w = 0; w < width; ++w) std::copy_n(kr->row(w), id, keys.data() + w * id);
    dots.resize(n * ih * width);
    be_.linear(iq.data() + b * ih * id, n * ih, id, keys.data(), width, dots.data());
    // score[t,w] = sum_h bf16(relu(bf16(<q_th, k_w>)) * w_th), summed in fp32, rounded to bf16
    score.resize(n * width);
    for (int64_t t = 0; t < n; ++t) {
      const int64_t visible = (s.pos[b + t] + 1) / ratio;
      for (int64_t w = 0; w < width; ++w) {
        float acc = 0;
        for (int64_t h = 0; h < ih; ++h)
          acc += rb(std::max(rb(dots[(t * ih + h) * width + w]), 0.0f) * wts[(b + t) * ih + h]);
        score[t * width + w] = w >= visible ? kNegInf : rb(acc);
      }
    }
    if (cand_source) {
      const int64_t bs = c_.candidate_block_size, nb = (width + bs - 1) / bs;
      std::vector<float> bv(nb);
      for (int64_t t = 0; t < n; ++t) {
        const int64_t clen = (s.pos[b + t] + 1) / ratio;
        const int64_t last = clen >= 1 ? (clen - 1) / bs : -1;
        const int64_t nbt = o_.chunk_invariant_selection ? (clen + bs - 1) / bs : nb;  // blocks ranked
        for (int64_t k = 0; k < nb; ++k) {
          float m = kNegInf;
          for (int64_t w = k * bs; w < std::min(width, (k + 1) * bs); ++w) m = std::max(m, score[t * width + w]);
          bv[k] = k == last ? std::numeric_limits<float>::infinity() : m;
        }
        std::vector<uint8_t>& mask = s.cand[b + t];
        mask.assign(width, 0);
        for (int64_t k : torch_topk(bv.data(), nbt, std::min(c_.candidate_topk_blocks, nbt), true)) {
          if (!(bv[k] > kNegInf)) continue;
          for (int64_t w = k * bs; w < std::min(width, (k + 1) * bs); ++w) mask[w] = 1;
        }
      }
    } else if (cand_mask) {
      for (int64_t t = 0; t < n; ++t) {
        const std::vector<uint8_t>& mask = s.cand[b + t];
        check(static_cast<int64_t>(mask.size()) == width, "v41: candidate mask width mismatch at layer ", l);
        for (int64_t w = 0; w < width; ++w)
          if (!mask[w]) score[t * width + w] = kNegInf;
      }
    }
    for (int64_t t = 0; t < n; ++t) {
      const int64_t visible = (s.pos[b + t] + 1) / ratio;
      const int64_t ranked = o_.chunk_invariant_selection ? visible : width;  // rows ranked
      std::vector<int64_t> order = torch_topk(score.data() + t * width, ranked, std::min(topk, ranked), false);
      std::sort(order.begin(), order.end());
      order.resize(topk, width);  // past the ranked rows: no row
      for (int64_t j = 0; j < topk; ++j)
        sel[(b + t) * K + j] = order[j] < visible ? static_cast<int32_t>(order[j]) : -1;
    }
  }
  s.sel[l] = std::move(sel);
  s.sel_k[l] = K;
}

// Queries of rows x: wq_a, q_norm (qr, which the indexer reads too), wq_b, RoPE, bf16.
void V41Model::queries(const V41Block& B, const std::vector<float>& x, const std::vector<int64_t>& pos,
                       const ops::RopeFreqs& rope, std::vector<float>& qr, std::vector<float>& q) {
  const int64_t T = static_cast<int64_t>(pos.size()), H = c_.n_heads, hd = c_.head_dim;
  qr.resize(T * c_.q_lora_rank);
  q.resize(T * H * hd);
  lin(x.data(), T, B.wq_a, qr.data());
  rmsnorm(qr, B.q_norm, T, c_.q_lora_rank);
  lin(qr.data(), T, B.wq_b, q.data());
  be_.rope(q.data(), T, H, hd, pos.data(), rope, false);
  bf16(q);
}

// The window K=V of rows x: wkv, kv_norm, RoPE, bf16, FP8 (all channels, rope tail included).
void V41Model::window_kv(const V41Block& B, const std::vector<float>& x, const std::vector<int64_t>& pos,
                         const ops::RopeFreqs& rope, std::vector<float>& kv) {
  const int64_t T = static_cast<int64_t>(pos.size()), hd = c_.head_dim;
  kv.resize(T * hd);
  lin(x.data(), T, B.wkv, kv.data());
  rmsnorm(kv, B.kv_norm, T, hd);
  be_.rope(kv.data(), T, 1, hd, pos.data(), rope, false);
  bf16(kv);
  be_.fake_quant_fp8(kv.data(), T, hd, c_.fp8_block);
}

// Sparse attention of every row over its index list (arena rows, and this step's rows in kv), bf16,
// inverse RoPE at the query position, bf16: the heads' outputs before the output projection.
std::vector<float> V41Model::attend(const V41Block& B, const Step& s, const std::vector<float>& q,
                                    const std::vector<float>& kv, const std::vector<int32_t>& idx, int64_t K,
                                    const ops::RopeFreqs& rope) {
  const int64_t T = s.rows(), H = c_.n_heads, hd = c_.head_dim;
  std::vector<float> o(T * H * hd);
  be_.sparse_attention_online(q.data(), T, H, hd, reinterpret_cast<const float*>(s.st[0]->pool().base()), kv.data(),
                              idx.data(), K, B.attn_sink.data(),
                              static_cast<float>(std::pow(static_cast<double>(hd), -0.5)), kAttnBlock, o.data());
  bf16(o);
  be_.rope(o.data(), T, H, hd, s.pos.data(), rope, true);
  bf16(o);
  return o;
}

void V41Model::attention(int64_t l, Step& s, const std::vector<float>& x, std::vector<float>& out) {
  const V41Block& B = blocks_[l];
  const int64_t hd = c_.head_dim, W = c_.window_size, T = s.rows();
  const ops::RopeFreqs rope = rope_for(l);
  std::vector<float> qr, q, kv;
  queries(B, x, s.pos, rope, qr, q);
  window_kv(B, x, s.pos, rope, kv);

  const int64_t ratio = c_.compress_ratios[l];
  const int64_t src = ratio > 0 ? c_.kv_source_of[l] : -1;
  const std::vector<int32_t>* sel = nullptr;
  int64_t ksel = 0;
  if (ratio > 0) {
    std::vector<float> lat;
    std::vector<int64_t> lat_pos, lat_begin(s.num() + 1, 0);
    if (c_.is_kv_source[l]) compress(l, s, x, lat, lat_pos, lat_begin);
    if (c_.is_index_source[l]) index(l, s, x, qr, lat, lat_pos, lat_begin);
    const int64_t ix = c_.is_index_source[l] ? l : c_.index_source_of[l];
    sel = &s.sel[ix];
    ksel = s.sel_k[ix];
    // RoPE + FP4 (E4M3 block 16) of the latents into the compressed cache
    if (const int64_t ng = static_cast<int64_t>(lat_pos.size())) {
      be_.rope(lat.data(), ng, 1, hd, lat_pos.data(), rope, false);
      bf16(lat);
      be_.fake_quant_fp4_e4m3(lat.data(), ng, hd, 16);
      for (int64_t qi = 0; qi < s.num(); ++qi)
        for (int64_t g = lat_begin[qi]; g < lat_begin[qi + 1]; ++g)
          std::copy_n(lat.data() + g * hd, hd, s.st[qi]->sources[l].ckv.append());
    }
  }

  // Index lists: the window (earlier positions from the arena's ring, this step's from kv) then the
  // selected compressed rows (arena).
  const BlockPool& arena = s.st[0]->pool();
  const int64_t K = W + ksel;
  std::vector<int32_t> idx(T * K, -1);
  for (int64_t qi = 0; qi < s.num(); ++qi) {
    V41SequenceState& st = *s.st[qi];
    const int64_t b = s.begin[qi], P0 = s.first(qi), from = st.ring_from[l];
    if (ratio > 0)
      check(st.sources[src].ckv.size() == s.end_pos[qi] / ratio, "v41: compressed rows of layer ", src,
            " are out of step");
    for (int64_t i = b; i < s.begin[qi + 1]; ++i) {
      const int64_t p = s.pos[i];
      int64_t k = 0;
      for (int64_t qp = std::max<int64_t>(from, p - W + 1); qp <= p; ++qp)
        idx[i * K + k++] = qp < P0 ? arena_row(arena, st.ring_row(l, qp), hd) : ops::fresh_row(b + qp - P0);
      for (int64_t j = 0; j < ksel; ++j) {
        const int32_t r = (*sel)[i * ksel + j];
        idx[i * K + W + j] = r < 0 ? -1 : arena_row(arena, st.sources[src].ckv.row(r), hd);
      }
    }
  }
  std::vector<float> o = attend(B, s, q, kv, idx, K, rope);
  // the step's rows enter the rings only now: earlier rows of this step read them as fresh rows
  for (int64_t qi = 0; qi < s.num(); ++qi)
    for (int64_t i = s.begin[qi]; i < s.begin[qi + 1]; ++i)
      std::copy_n(kv.data() + i * hd, hd, s.st[qi]->ring_row(l, s.pos[i]));
  output_projection(B, o, T, out);
}

// Grouped output projection: wo_a per group of heads (dequantized, bf16 out, no activation quantization),
// then wo_b.
void V41Model::output_projection(const V41Block& B, const std::vector<float>& o, int64_t n, std::vector<float>& out) {
  const int64_t H = c_.n_heads, hd = c_.head_dim, G = c_.o_groups, R = c_.o_lora_rank, gin = H * hd / G;
  std::vector<float> og(n * gin), ug(n * R), u(n * G * R);
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t t = 0; t < n; ++t) std::copy_n(o.data() + t * H * hd + g * gin, gin, og.data() + t * gin);
    be_.linear(og.data(), n, gin, B.wo_a.w.data() + g * R * gin, R, ug.data());
    be_.round_bf16(ug.data(), n * R);
    for (int64_t t = 0; t < n; ++t) std::copy_n(ug.data() + t * R, R, u.data() + t * G * R + g * R);
  }
  out.resize(n * c_.dim);
  lin(u.data(), n, B.wo_b, out.data());
}

// DSpark stage attention (reference DSparkAttention, decode): the block queries at p+1..p+B of each
// sequence attend the stage's ring (its main-token rows up to p) plus every block position.
void V41Model::dspark_attention(int64_t l, Step& s, const std::vector<float>& x, std::vector<float>& out) {
  const V41Block& B = blocks_[l];
  const int64_t hd = c_.head_dim, W = c_.window_size, T = s.rows();
  const ops::RopeFreqs rope = rope_main_.freqs();
  std::vector<float> qr, q, kv;
  queries(B, x, s.pos, rope, qr, q);
  window_kv(B, x, s.pos, rope, kv);
  const BlockPool& arena = s.st[0]->pool();
  const int64_t n = c_.dspark_block_size, K = W + n;
  std::vector<int32_t> idx(T * K, -1);
  for (int64_t qi = 0; qi < s.num(); ++qi) {
    V41SequenceState& st = *s.st[qi];
    check(st.fixed.size() > 0, "dspark: stage ring is empty (draft before any forward)");
    const int64_t b = s.begin[qi], p = s.first(qi) - 1;
    for (int64_t i = b; i < s.begin[qi + 1]; ++i) {
      int64_t k = 0;
      for (int64_t qp = std::max<int64_t>(st.ring_from[l], p - W + 1); qp <= p; ++qp)
        idx[i * K + k++] = arena_row(arena, st.ring_row(l, qp), hd);
      for (int64_t j = 0; j < n; ++j) idx[i * K + W + j] = ops::fresh_row(b + j);
    }
  }
  output_projection(B, attend(B, s, q, kv, idx, K, rope), T, out);
}

}  // namespace deepinfer::model
