// DeepSeek-V4 attention over a flat batch (spec §3.3): projections for all rows at once; the
// compressors (CSA's overlapping ratio-4 windows, HCA's plain ones) pool each completed group from
// the carry ring and this step's rows; the lightning indexer scores every row over its sequence's
// index keys and keeps the top-k; one sparse attention per round of a chunk reads the window ring,
// and the compressed rows in place in the state arena. The host computes only row numbers.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "model/deepseek_v4/v4_model.h"
#include "model/deepseek_v4/v4_step.h"

namespace deepinfer::model {
namespace {
int32_t i32(int64_t v) { return static_cast<int32_t>(v); }
}  // namespace

// One compressor's new rows this step: groups completed per sequence.
struct V4Model::Rows {
  std::vector<int64_t> begin;  // [S+1]
};

// Feeds this step's (kv, gate) rows of every sequence into a compressor of layer l (the layer's KV
// compressor, or its indexer's when `index`): every completed group of `ratio` positions emits one row
// (softmax pool per channel over the group's slots, norm, RoPE at the group's first position), appended
// to the state's compressed rows. A group's slots come from the carry ring (earlier steps) or this
// step's projections; the carry then takes this step's last positions.
void V4Model::compress(const V4Compressor& cw, int64_t l, bool index, Step& s, const float* x, Rows& out) {
  const int64_t T = s.rows(), ratio = cw.ratio, width = cw.width, copies = cw.copies, row = copies * width;
  const int64_t slots = copies * ratio;
  Workspace::Scope scope(ws_);
  Tensor kvf = ws_.f32({T, row}), gate = ws_.f32({T, row}), ape = ws_.f32({T, row});
  lin(x, T, cw.wkv, kvf.f32());
  lin(x, T, cw.wgate, gate.f32());
  std::vector<int32_t> phase(T);
  for (int64_t t = 0; t < T; ++t) phase[t] = i32(s.pos[t] % ratio);
  Tensor ph = ws_.upload(phase, DType::I32);
  be_.copy_rows(cw.ape.data(), ph.i32(), T, row, ape.f32(), nullptr);
  be_.add(gate.f32(), ape.f32(), T * row);

  std::vector<int32_t> carry_src, carry_kv, carry_gate;         // this step's rows into the carry ring
  std::vector<int32_t> old_kv, old_gate, old_dst, fresh_src, fresh_dst;  // group slots (rows of `width`)
  std::vector<int64_t> group_pos;
  out.begin.assign(s.num() + 1, 0);
  for (int64_t q = 0; q < s.num(); ++q) {
    V4SequenceState::Layer& ls = s.st[q]->layer(l);
    V4SequenceState::Compressor& C = index ? ls.index : ls.kv;
    const int64_t b = s.begin[q], P0 = s.first(q);
    out.begin[q] = static_cast<int64_t>(group_pos.size());
    // Slot `dst` of the group gets half `half` of position pp's row.
    auto take = [&](int64_t pp, int64_t half, int64_t dst) {
      if (pp >= P0) {
        fresh_src.push_back(i32((b + pp - P0) * copies + half));
        fresh_dst.push_back(i32(dst));
      } else {
        old_kv.push_back(arena_row(s, C.carry_kv(pp) + half * width, width));
        old_gate.push_back(arena_row(s, C.carry_gate(pp) + half * width, width));
        old_dst.push_back(i32(dst));
      }
    };
    for (int64_t i = b; i < s.begin[q + 1]; ++i) {
      const int64_t p = s.pos[i];
      if (p >= s.end_pos[q] - C.carry_size) {
        carry_src.push_back(i32(i));
        carry_kv.push_back(arena_row(s, C.carry_kv(p), row));
        carry_gate.push_back(arena_row(s, C.carry_gate(p), row));
      }
      if ((p + 1) % ratio != 0) continue;
      const int64_t g0 = p + 1 - ratio, slot0 = static_cast<int64_t>(group_pos.size()) * slots;
      for (int64_t j = 0; j < ratio; ++j) {
        if (copies == 1) {
          take(g0 + j, 0, slot0 + j);
          continue;
        }
        // CSA: the previous group's first series (none before group 1), then this group's second.
        if (g0 >= ratio) take(g0 - ratio + j, 0, slot0 + j);
        take(g0 + j, 1, slot0 + ratio + j);
      }
      group_pos.push_back(g0);
    }
  }
  out.begin[s.num()] = static_cast<int64_t>(group_pos.size());
  const int64_t ng = static_cast<int64_t>(group_pos.size());
  if (ng) {
    Tensor kvg = ws_.f32({ng * slots, width}), gg = ws_.f32({ng * slots, width}), z = ws_.f32({ng, width});
    be_.fill(kvg.f32(), ng * slots * width, 0.0f);  // an absent slot: kv 0, gate -inf (weight 0)
    be_.fill(gg.f32(), ng * slots * width, -std::numeric_limits<float>::infinity());
    Tensor okv = ws_.upload(old_kv, DType::I32), og = ws_.upload(old_gate, DType::I32);
    Tensor od = ws_.upload(old_dst, DType::I32), fs = ws_.upload(fresh_src, DType::I32);
    Tensor fd = ws_.upload(fresh_dst, DType::I32), gp = ws_.upload(group_pos, DType::I64);
    const int64_t no = static_cast<int64_t>(old_dst.size()), nf = static_cast<int64_t>(fresh_dst.size());
    be_.copy_rows(arena(s), okv.i32(), no, width, kvg.f32(), od.i32());
    be_.copy_rows(arena(s), og.i32(), no, width, gg.f32(), od.i32());
    be_.copy_rows(kvf.f32(), fs.i32(), nf, width, kvg.f32(), fd.i32());
    be_.copy_rows(gate.f32(), fs.i32(), nf, width, gg.f32(), fd.i32());
    be_.softmax_pool(kvg.f32(), gg.f32(), ng, slots, width, z.f32());
    be_.rms_norm(z.f32(), cw.norm.data(), ng, width, static_cast<float>(c_.rms_norm_eps), z.f32(), false);
    const ops::RopeFreqs rope{rope_compress_freq_.data(), rope_compress_.rope_dim, rope_compress_.attention_factor};
    be_.rope(z.f32(), ng, 1, width, gp.i64(), rope, false, false);
    if (simulate_) {  // the reference stores index keys FP4 (after the rotation), KV FP8 without the RoPE tail
      if (index) {
        hadamard(z.f32(), ng);
        be_.fake_quant_fp4(z.f32(), ng, width, 32);
      } else {
        quant_head(z.f32(), ng, width, width - c_.rope_dim);
      }
    }
    std::vector<int32_t> dst;
    for (int64_t q = 0; q < s.num(); ++q) {
      V4SequenceState::Layer& ls = s.st[q]->layer(l);
      PagedRows& rows = (index ? ls.index : ls.kv).rows;
      const int64_t first = rows.size();
      rows.extend(out.begin[q + 1] - out.begin[q]);
      for (int64_t r = first; r < rows.size(); ++r) dst.push_back(arena_row(s, rows.row_as<float>(r), width));
    }
    Tensor d = ws_.upload(dst, DType::I32);
    be_.copy_rows(z.f32(), nullptr, ng, width, arena(s), d.i32());
  }
  // after the pooling read the old carry rows: this step's rows into the ring
  const int64_t nc = static_cast<int64_t>(carry_src.size());
  Tensor cs = ws_.upload(carry_src, DType::I32), ck = ws_.upload(carry_kv, DType::I32);
  Tensor cg = ws_.upload(carry_gate, DType::I32);
  be_.copy_rows(kvf.f32(), cs.i32(), nc, row, arena(s), ck.i32());
  be_.copy_rows(gate.f32(), cs.i32(), nc, row, arena(s), cg.i32());
}

// The lightning indexer of CSA layer l: queries and head weights of every row, this step's index keys,
// scores sum_h w[t,h] relu(<q[t,h], key>) / sqrt(index_dim) over each row's visible keys, and the
// top index_topk of them (all when fewer): sel [T, K] compressed row numbers or -1, in the caller's scope.
void V4Model::indexer(int64_t l, Step& s, const float* x, const float* qr, Tensor& sel, int64_t& K) {
  const V4Layer& L = w_.layers[l];
  const int64_t T = s.rows(), ih = c_.index_n_heads, id = c_.index_head_dim, ratio = c_.compress_ratio[l];
  int64_t maxw = 0;
  for (int64_t q = 0; q < s.num(); ++q) maxw = std::max(maxw, s.end_pos[q] / ratio);
  K = std::min(c_.index_topk, maxw);
  sel = ws_.i32({T, std::max<int64_t>(K, 1)});
  Workspace::Scope scope(ws_);
  Tensor iq = ws_.f32({T, ih, id}), wts = ws_.f32({T, ih});
  lin(qr, T, L.index_wq_b, iq.f32());
  const ops::RopeFreqs rope{rope_compress_freq_.data(), rope_compress_.rope_dim, rope_compress_.attention_factor};
  be_.rope(iq.f32(), T, ih, id, s.pos_d.i64(), rope, false, false);
  if (simulate_) {
    hadamard(iq.f32(), T * ih);
    be_.fake_quant_fp4(iq.f32(), T * ih, id, 32);
  }
  lin(x, T, L.index_weights_proj, wts.f32());
  be_.scale(wts.f32(), T * ih, 1.0f / std::sqrt(static_cast<float>(ih)));
  Rows keys;
  compress(L.index_compressor, l, true, s, x, keys);

  std::vector<int32_t> key_rows, key_begin(T), width(T), visible(T), topk(T, i32(c_.index_topk));
  for (int64_t q = 0; q < s.num(); ++q) {
    const PagedRows& kr = s.st[q]->layer(l).index.rows;
    const int64_t w = kr.size(), kb = static_cast<int64_t>(key_rows.size());
    check(w == s.end_pos[q] / ratio, "v4: index keys of layer ", l, " are out of step");
    for (int64_t r = 0; r < w; ++r) key_rows.push_back(arena_row(s, kr.row_as<float>(r), id));
    for (int64_t i = s.begin[q]; i < s.begin[q + 1]; ++i) {
      key_begin[i] = i32(kb);
      width[i] = i32(w);
      visible[i] = i32(std::min((s.pos[i] + 1) / ratio, w));
    }
  }
  if (K == 0) return;
  const int64_t ld = maxw;
  Tensor kr = ws_.upload(key_rows, DType::I32), kb = ws_.upload(key_begin, DType::I32);
  Tensor wd = ws_.upload(width, DType::I32), vd = ws_.upload(visible, DType::I32), td = ws_.upload(topk, DType::I32);
  Tensor score = ws_.f32({T, ld});
  be_.index_scores_fp32(iq.f32(), wts.f32(), T, ih, id, arena(s), kr.i32(), kb.i32(), wd.i32(), vd.i32(), ld,
                        1.0f / std::sqrt(static_cast<float>(id)), score.f32());
  // every visible row is ranked; exact ties (rows whose every head's ReLU is 0) go to the lower row
  be_.index_select_stable(score.f32(), T, ld, vd.i32(), vd.i32(), td.i32(), K, sel.i32());

}

// Sparse attention of every row over its window (the ring) and its compressed rows (CSA: the selected
// ones, HCA: every visible one), o [T, H, hd]. A chunk runs in rounds of round_tokens() positions per
// sequence: a round's rows enter the ring first (the ring holds the window plus one round), so every
// index is an arena row.
void V4Model::attend(int64_t l, Step& s, const float* q, const float* kv, const Tensor* sel, int64_t ksel, float* o) {
  const V4Layer& L = w_.layers[l];
  const int64_t H = c_.num_heads, hd = c_.head_dim, W = c_.sliding_window, ratio = c_.compress_ratio[l];
  const bool compressed = ratio > 0, csa = sel != nullptr;
  int64_t longest = 0, most_rows = 0;
  std::vector<int32_t> table, table_begin(s.num());  // CSA: arena rows of every sequence's compressed rows
  for (int64_t qi = 0; qi < s.num(); ++qi) {
    longest = std::max(longest, s.begin[qi + 1] - s.begin[qi]);
    if (!compressed) continue;
    const PagedRows& rows = s.st[qi]->layer(l).kv.rows;
    check(rows.size() == s.end_pos[qi] / ratio, "v4: compressed rows of layer ", l, " are out of step");
    most_rows = std::max(most_rows, rows.size());
    table_begin[qi] = i32(static_cast<int64_t>(table.size()));
    if (csa)
      for (int64_t r = 0; r < rows.size(); ++r) table.push_back(arena_row(s, rows.row_as<float>(r), hd));
  }
  const int64_t K = W + (csa ? ksel : compressed ? most_rows : 0), round = V4SequenceState::round_tokens(c_);
  Workspace::Scope scope(ws_);
  Tensor td = ws_.upload(table, DType::I32);
  for (int64_t r0 = 0; r0 < longest; r0 += round) {
    Workspace::Scope round_scope(ws_);
    std::vector<int32_t> rows, ring, idx, begin;
    for (int64_t qi = 0; qi < s.num(); ++qi) {
      V4SequenceState& st = *s.st[qi];
      const PagedRows& crows = st.layer(l).kv.rows;
      for (int64_t i = s.begin[qi] + r0; i < std::min(s.begin[qi + 1], s.begin[qi] + r0 + round); ++i) {
        const int64_t p = s.pos[i];
        rows.push_back(i32(i));
        ring.push_back(arena_row(s, st.ring_row(l, p), hd));
        begin.push_back(table_begin[qi]);
        const size_t at = idx.size();
        idx.resize(at + K, -1);
        int64_t k = 0;
        for (int64_t qp = std::max<int64_t>(0, p - W + 1); qp <= p; ++qp)
          idx[at + k++] = arena_row(s, st.ring_row(l, qp), hd);
        if (compressed && !csa)
          for (int64_t w = 0; w < std::min((p + 1) / ratio, crows.size()); ++w)
            idx[at + W + w] = arena_row(s, crows.row_as<float>(w), hd);
      }
    }
    const int64_t n = static_cast<int64_t>(rows.size());
    Tensor rd = ws_.upload(rows, DType::I32), rg = ws_.upload(ring, DType::I32), ix = ws_.upload(idx, DType::I32);
    be_.copy_rows(kv, rd.i32(), n, hd, arena(s), rg.i32());  // the round's rows into the ring
    if (csa && ksel) {  // the selected compressed rows -> arena rows
      Tensor sg = ws_.i32({n, ksel}), bd = ws_.upload(begin, DType::I32);
      be_.copy_rows(reinterpret_cast<const float*>(sel->data), rd.i32(), n, ksel, reinterpret_cast<float*>(sg.data),
                    nullptr);
      be_.lookup_rows(sg.i32(), n, ksel, td.i32(), bd.i32(), ix.i32() + W, K);
    }
    Tensor qg = ws_.f32({n, H, hd}), og = ws_.f32({n, H, hd});
    be_.copy_rows(q, rd.i32(), n, H * hd, qg.f32(), nullptr);
    be_.sparse_attention(qg.f32(), n, H, hd, arena(s), ix.i32(), K, L.attn_sink.data(),
                         1.0f / std::sqrt(static_cast<float>(hd)), og.f32());
    be_.copy_rows(og.f32(), nullptr, n, H * hd, o, rd.i32());
  }
}

// Grouped output projection: wo_a per group of heads (plain), then wo_b.
void V4Model::output_projection(const V4Layer& L, const float* o, int64_t n, float* out) {
  Workspace::Scope scope(ws_);
  Tensor u = ws_.f32({n, c_.o_groups * c_.o_lora_rank});
  be_.linear_block_diag(o, n, L.wo_a.q, c_.o_groups, false, u.f32());
  lin(u.f32(), n, L.wo_b, out);
}

void V4Model::attention(int64_t l, Step& s, const float* x, float* out) {
  const V4Layer& L = w_.layers[l];
  const int64_t T = s.rows(), H = c_.num_heads, hd = c_.head_dim;
  const float eps = static_cast<float>(c_.rms_norm_eps);
  const ops::RopeFreqs rope = rope_for(l);
  Workspace::Scope scope(ws_);
  Tensor qr = ws_.f32({T, c_.q_lora_rank}), q = ws_.f32({T, H, hd}), kv = ws_.f32({T, hd});
  lin(x, T, L.wq_a, qr.f32());
  be_.rms_norm(qr.f32(), L.q_norm.data(), T, c_.q_lora_rank, eps, qr.f32(), false);
  lin(qr.f32(), T, L.wq_b, q.f32());
  be_.rms_norm(q.f32(), nullptr, T * H, hd, eps, q.f32(), false);  // per-head unweighted norm (V4 only)
  be_.rope(q.f32(), T, H, hd, s.pos_d.i64(), rope, false, false);
  lin(x, T, L.wkv, kv.f32());
  be_.rms_norm(kv.f32(), L.kv_norm.data(), T, hd, eps, kv.f32(), false);
  be_.rope(kv.f32(), T, 1, hd, s.pos_d.i64(), rope, false, false);
  if (simulate_) quant_head(kv.f32(), T, hd, hd - c_.rope_dim);  // the latent's non-RoPE channels FP8-rounded

  Tensor sel;
  int64_t ksel = 0;
  if (c_.compress_ratio[l] > 0) {
    Rows rows;
    compress(L.compressor, l, false, s, x, rows);
    if (c_.attention[l] == AttentionKind::kCSA) indexer(l, s, x, qr.f32(), sel, ksel);
  }
  Tensor o = ws_.f32({T, H, hd});
  attend(l, s, q.f32(), kv.f32(), c_.attention[l] == AttentionKind::kCSA ? &sel : nullptr, ksel, o.f32());
  be_.rope(o.f32(), T, H, hd, s.pos_d.i64(), rope, true, false);  // undo the values' RoPE at the query position
  output_projection(L, o.f32(), T, out);
}

}  // namespace deepinfer::model
