// DeepSeek-V4.1 attention over a flat batch (spec §5.4): projections for all rows at once; the
// compressor carry, the indexer's scores over each sequence's keys and the window lists per sequence;
// one sparse attention call that reads the state arena in place and this step's rows from `kv`.
// All math runs as backend ops on device tensors; the host computes only row numbers (positions,
// arena rows) and uploads them.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/deepseek_v41/v41_model.h"
#include "model/deepseek_v41/v41_step.h"

namespace deepinfer::model {
namespace {

constexpr int64_t kAttnBlock = 64;  // the reference kernel's online-softmax block of indices
int32_t i32(int64_t v) { return static_cast<int32_t>(v); }
int64_t round_up4(int64_t v) { return (v + 3) / 4 * 4; }

}  // namespace

struct V41Model::Latents {
  Tensor rows;                 // [count, head_dim] pre-RoPE, normalized
  std::vector<int64_t> pos;    // first position of each group
  Tensor pos_d;                // pos on the device (I64)
  std::vector<int64_t> begin;  // [S+1] each sequence's first latent
  int64_t count() const { return static_cast<int64_t>(pos.size()); }
};

float* V41Model::arena_f32(const Step& s) const { return reinterpret_cast<float*>(s.st[0]->pool().base()); }
uint8_t* V41Model::arena_bytes(const Step& s) const { return reinterpret_cast<uint8_t*>(s.st[0]->pool().base()); }
int64_t V41Model::arena_block_bytes(const Step& s) const { return s.st[0]->pool().block_bytes(); }

int32_t V41Model::arena_row(const Step& s, const std::byte* row, const PagedRows& kind) const {
  return i32(s.st[0]->pool().row_index(row, kind.row_bytes()));
}

// Grows `rows` by n rows (written by the caller's next op) and lists their arena rows.
void V41Model::append_rows(const Step& s, PagedRows& rows, int64_t n, std::vector<int32_t>& out) const {
  const int64_t first = rows.size();
  rows.extend(n);
  for (int64_t r = first; r < first + n; ++r) out.push_back(arena_row(s, rows.row(r), rows));
}

// The window rows [n, head_dim] (FP8-valued already) in the ring's packed format, back to back: sparse
// attention's fresh rows. Quantizing a fake-quantized FP8 row again gives the same codes x scales (the
// values are exactly representable at the block's own amax scale), so these equal the ring's rows.
Tensor V41Model::window_rows_packed(const Tensor& rows, int64_t n) {
  const int64_t rb = row_bytes(V41SequenceState::kRingFormat, c_.head_dim);
  Tensor out = ws_.take(DType::U8, {std::max<int64_t>(n, 1), rb});
  be_.quantize_rows(rows.f32(), nullptr, n, c_.head_dim, V41SequenceState::kRingFormat, out.u8(), 0, nullptr);
  return out;
}

// The compressor of KV source l: latents of the groups this step completes. The carry holds the
// kv/score rows of earlier positions; this step's come from kvf/sc directly (a long step wraps the
// carry ring before its groups are pooled), and only each sequence's last carry positions are written.
//
// With context parallelism x holds this rank's rows (s) and the latents are the whole step's (w):
// the projections of every rank's rows are gathered and every rank pools the whole step.
void V41Model::compress(int64_t l, Step& s, const float* x, Latents& lat) {
  const V41Block& B = blocks_[l];
  Step& w = s.whole();
  const int64_t ratio = c_.compress_ratios[l], hd = c_.head_dim, T = w.rows(), n = s.rows();
  lat.begin.assign(w.num() + 1, 0);
  if (ratio == 1) {  // the latents are the normalized rows (in the caller's scope)
    Tensor mine = ws_.f32({n, hd});
    lin(x, n, B.c_wkv, mine.f32());
    rmsnorm(mine.f32(), B.c_norm, n, hd);
    lat.rows = everyone(s, mine, hd);
    lat.pos = w.pos;
    lat.pos_d = w.pos_d;
    lat.begin = w.begin;
    return;
  }
  // a step completes at most one group per row: T rows bound the latents (in the caller's scope)
  lat.rows = ws_.f32({T, hd});
  lat.pos_d = ws_.take(DType::I64, {T});
  Workspace::Scope scope(ws_);
  Tensor kvf_mine = ws_.f32({n, hd}), sc_mine = ws_.f32({n, hd});
  lin(x, n, B.c_wkv, kvf_mine.f32(), false);  // fp32 weights, fp32 pooling
  lin(x, n, B.c_wgate, sc_mine.f32(), false);
  const Tensor kvf = everyone(s, kvf_mine, hd), sc = everyone(s, sc_mine, hd);
  std::vector<int32_t> carry_src, carry_kv, carry_sc;  // this step's rows into the carry ring
  std::vector<int32_t> old_kv, old_sc, old_dst, fresh_src, fresh_dst;  // group slots: arena rows / fresh rows
  for (int64_t q = 0; q < w.num(); ++q) {
    V41SequenceState& st = *w.st[q];
    const int64_t b = w.begin[q], P0 = w.first(q), carry = st.carry_size(l);
    lat.begin[q] = lat.count();
    for (int64_t i = b; i < w.begin[q + 1]; ++i) {
      const int64_t p = w.pos[i];
      if (p >= w.end_pos[q] - carry) {
        carry_src.push_back(i32(i));
        carry_kv.push_back(arena_row(w, st.carry_kv(l, p), st.carries));
        carry_sc.push_back(arena_row(w, st.carry_score(l, p), st.carries));
      }
      if ((p + 1) % ratio != 0) continue;
      const int64_t g0 = p + 1 - ratio, slot0 = lat.count() * ratio;  // positions g0 .. p, pooled in order
      for (int64_t j = 0; j < ratio; ++j) {
        const int64_t pp = g0 + j;
        if (pp >= P0) {
          fresh_src.push_back(i32(b + pp - P0));
          fresh_dst.push_back(i32(slot0 + j));
        } else {
          old_kv.push_back(arena_row(w, st.carry_kv(l, pp), st.carries));
          old_sc.push_back(arena_row(w, st.carry_score(l, pp), st.carries));
          old_dst.push_back(i32(slot0 + j));
        }
      }
      lat.pos.push_back(g0);
    }
  }
  lat.begin[w.num()] = lat.count();
  const int64_t ng = lat.count();
  if (ng) {
    Tensor kvg = ws_.f32({ng * ratio, hd}), scg = ws_.f32({ng * ratio, hd});
    Tensor okv = ws_.upload(old_kv, DType::I32), osc = ws_.upload(old_sc, DType::I32);
    Tensor od = ws_.upload(old_dst, DType::I32), fs = ws_.upload(fresh_src, DType::I32);
    Tensor fd = ws_.upload(fresh_dst, DType::I32);
    const int64_t no = static_cast<int64_t>(old_dst.size()), nf = static_cast<int64_t>(fresh_dst.size());
    be_.copy_rows(arena_f32(w), okv.i32(), no, hd, kvg.f32(), od.i32());
    be_.copy_rows(arena_f32(w), osc.i32(), no, hd, scg.f32(), od.i32());
    be_.copy_rows(kvf.f32(), fs.i32(), nf, hd, kvg.f32(), fd.i32());
    be_.copy_rows(sc.f32(), fs.i32(), nf, hd, scg.f32(), fd.i32());
    be_.softmax_pool_v41(kvg.f32(), scg.f32(), ng, ratio, hd, lat.rows.f32());
    rmsnorm(lat.rows.f32(), B.c_norm, ng, hd);
  }
  // after the pooling read the old carry rows: this step's rows into the ring
  const int64_t nc = static_cast<int64_t>(carry_src.size());
  Tensor cs = ws_.upload(carry_src, DType::I32), ck = ws_.upload(carry_kv, DType::I32);
  Tensor cg = ws_.upload(carry_sc, DType::I32);
  be_.copy_rows(kvf.f32(), cs.i32(), nc, hd, arena_f32(w), ck.i32());
  be_.copy_rows(sc.f32(), cs.i32(), nc, hd, arena_f32(w), cg.i32());
  be_.upload(lat.pos_d.data, lat.pos.data(), lat.pos.size() * sizeof(int64_t));
}

// The indexer of index source l: keys of the new latents (KV sources), queries and weights of every
// row, the scores of every row over its sequence's keys, the candidate blocks and the top-k selection.
void V41Model::index(int64_t l, Step& s, const float* x, const float* qr, const Latents& lat) {
  const V41Block& B = blocks_[l];
  const int64_t ih = c_.index_n_heads, id = c_.index_head_dim, ratio = c_.compress_ratios[l], T = s.rows();
  const int64_t src = c_.kv_source_of[l], ng = lat.count();
  const ops::RopeFreqs rope = rope_for(l);
  Workspace::Scope scope(ws_);
  if (c_.is_kv_source[l] && ng) {
    Tensor k = ws_.f32({ng, id});
    lin(lat.rows.f32(), ng, B.i_wk, k.f32());
    rmsnorm(k.f32(), B.i_k_norm, ng, id);
    be_.rope(k.f32(), ng, 1, id, lat.pos_d.i64(), rope, false, true);
    std::vector<int32_t> dst;
    for (int64_t q = 0; q < s.num(); ++q) {
      append_rows(s, s.st[q]->sources[l].ik, lat.begin[q + 1] - lat.begin[q], dst);
      if (lat.begin[q + 1] > lat.begin[q]) s.st[q]->last_ik_owner = l;  // the reference's shared_attn.index_k
    }
    Tensor d = ws_.upload(dst, DType::I32);  // FP4 with UE8M0 scales per 32 (fp4_act_quant) into the arena
    be_.quantize_rows(k.f32(), nullptr, ng, id, V41SequenceState::kIndexKeyFormat, arena_bytes(s), arena_block_bytes(s),
                      d.i32());
  }
  Tensor iq = ws_.f32({T, ih, id}), wts = ws_.f32({T, ih});
  lin(qr, T, B.i_wq_b, iq.f32());
  be_.rope(iq.f32(), T, ih, id, s.pos_d.i64(), rope, false, true);  // the rest is bf16 (the GEMM's)
  be_.fake_quant_fp4(iq.f32(), T * ih, id, 32);
  lin(x, T, B.i_weights_proj, wts.f32());
  be_.scale(wts.f32(), T * ih, static_cast<float>(std::pow(static_cast<double>(id), -0.5) * std::pow(static_cast<double>(ih), -0.5)));
  be_.round_bf16(wts.f32(), T * ih);

  // Per row: its sequence's keys (arena rows), how many exist (width), how many it sees (visible).
  int64_t K = 0, maxw = 0;  // the widest selection / key count of the batch; narrower rows end in -1
  std::vector<int32_t> key_rows, key_begin(T), width(T), visible(T), ranked(T), topk(T), nblocks(T);
  const int64_t bs = c_.candidate_block_size;
  for (int64_t q = 0; q < s.num(); ++q) {
    V41SequenceState& st = *s.st[q];
    const int64_t w = s.end_pos[q] / ratio;
    check(st.sources[src].ik.size() == w, "v41: index keys of layer ", src, " are out of step");
    const PagedRows* kr = &st.sources[src].ik;
    if (o_.emulate_reference_stale_index_keys && st.last_ik_owner >= 0) {
      // DeepSeek's model.py re-publishes shared_attn.index_k only when a key owner produced a
      // latent; a ratio-2 source on a step that completes no group reads the last owner's cache.
      kr = &st.sources[st.last_ik_owner].ik;
      check(kr->size() >= w, "v41: stale index keys too short");
    }
    const int64_t kb = static_cast<int64_t>(key_rows.size());
    for (int64_t r = 0; r < w; ++r) key_rows.push_back(arena_row(s, kr->row(r), *kr));
    K = std::max(K, std::min(c_.index_topk, w));
    maxw = std::max(maxw, w);
    for (int64_t i = s.begin[q]; i < s.begin[q + 1]; ++i) {
      const int64_t vis = (s.pos[i] + 1) / ratio;
      key_begin[i] = i32(kb);
      width[i] = i32(w);
      visible[i] = i32(vis);
      ranked[i] = i32(o_.chunk_invariant_selection ? vis : w);  // rows ranked
      topk[i] = i32(std::min(c_.index_topk, w));
      nblocks[i] = i32(o_.chunk_invariant_selection ? (vis + bs - 1) / bs : (w + bs - 1) / bs);  // blocks ranked
    }
  }
  const int64_t ld = round_up4(std::max<int64_t>(maxw, 1));  // the mask's rows are whole floats (compaction)
  Tensor kr = ws_.upload(key_rows, DType::I32), kb = ws_.upload(key_begin, DType::I32);
  Tensor wd = ws_.upload(width, DType::I32), vd = ws_.upload(visible, DType::I32);
  Tensor score = ws_.f32({T, ld});
  be_.index_scores(iq.f32(), wts.f32(), T, ih, id, arena_bytes(s), arena_block_bytes(s), kr.i32(), kb.i32(), wd.i32(),
                   vd.i32(), ld, score.f32());

  const bool cand_source = l == c_.candidate_source_layer;
  const bool cand_mask = c_.candidate_source_layer >= 0 && c_.candidate_source_layer < l;
  const uint8_t* mask = nullptr;
  if (cand_source) {
    s.cand = fws_.take(DType::U8, {T, ld});
    s.cand_ld = ld;
    s.cand_width.clear();
    for (int64_t q = 0; q < s.num(); ++q) s.cand_width.push_back(s.end_pos[q] / ratio);
    Tensor nb = ws_.upload(nblocks, DType::I32);
    be_.candidate_mask(score.f32(), T, ld, wd.i32(), vd.i32(), nb.i32(), bs, c_.candidate_topk_blocks, s.cand.u8());
  } else if (cand_mask) {
    for (int64_t q = 0; q < s.num(); ++q)
      check(s.cand_width[q] == s.end_pos[q] / ratio, "v41: candidate mask width mismatch at layer ", l);
    check(s.cand_ld == ld, "v41: candidate mask width mismatch at layer ", l);
    mask = s.cand.u8();
  }
  Tensor rd = ws_.upload(ranked, DType::I32), td = ws_.upload(topk, DType::I32);
  s.sel[l] = fws_.i32({T, std::max<int64_t>(K, 1)});
  be_.index_select(score.f32(), mask, T, ld, rd.i32(), vd.i32(), td.i32(), K, s.sel[l].i32());
  s.sel_k[l] = K;
}

// Queries of rows x: wq_a, q_norm (qr, which the indexer reads too), wq_b, RoPE, bf16.
void V41Model::queries(const V41Block& B, const float* x, const Step& s, const ops::RopeFreqs& rope, float* qr,
                       float* q) {
  const int64_t T = s.rows(), H = c_.n_heads, hd = c_.head_dim;
  lin(x, T, B.wq_a, qr);
  rmsnorm(qr, B.q_norm, T, c_.q_lora_rank);
  lin(qr, T, B.wq_b, q);
  be_.rope(q, T, H, hd, s.pos_d.i64(), rope, false, true);
}

// The window K=V of rows x: wkv, kv_norm, RoPE, bf16, FP8 (all channels, rope tail included).
void V41Model::window_kv(const V41Block& B, const float* x, const Step& s, const ops::RopeFreqs& rope, float* kv) {
  const int64_t T = s.rows(), hd = c_.head_dim;
  lin(x, T, B.wkv, kv);
  rmsnorm(kv, B.kv_norm, T, hd);
  be_.rope(kv, T, 1, hd, s.pos_d.i64(), rope, false, true);
  be_.fake_quant_fp8(kv, T, hd, c_.fp8_block);
}

// Sparse attention of every row over its index list (arena rows, and this step's packed window rows in
// kv; the first `window` columns window rows, the rest compressed rows), bf16, inverse RoPE at the query
// position, bf16: the heads' outputs before the output projection.
void V41Model::attend(const V41Block& B, const Step& s, const float* q, const uint8_t* kv, const Tensor& idx,
                      int64_t K, int64_t window, const ops::RopeFreqs& rope, float* o) {
  const int64_t T = s.rows(), H = c_.n_heads, hd = c_.head_dim;
  be_.sparse_attention_online(q, T, H, hd, arena_bytes(s), arena_block_bytes(s), kv, idx.i32(), K, window,
                              B.attn_sink.data(), static_cast<float>(std::pow(static_cast<double>(hd), -0.5)),
                              kAttnBlock, o);
  be_.round_bf16(o, T * H * hd);
  be_.rope(o, T, H, hd, s.pos_d.i64(), rope, true, true);
}

// The arena rows of KV source src's compressed rows, per sequence, and where each row's sequence starts
// in that table: built once per step (after src appended its latents) for src and every layer reusing it.
const V41Model::CompressedRows& V41Model::compressed_rows(Step& s, int64_t src) {
  CompressedRows& t = s.ckv_rows[src];
  if (t.table.data) return t;
  const int64_t ratio = c_.compress_ratios[src];
  std::vector<int32_t> table, begin(s.rows());
  for (int64_t qi = 0; qi < s.num(); ++qi) {
    const PagedRows& ckv = s.st[qi]->sources[src].ckv;
    check(ckv.size() == s.end_pos[qi] / ratio, "v41: compressed rows of layer ", src, " are out of step");
    for (int64_t i = s.begin[qi]; i < s.begin[qi + 1]; ++i) begin[i] = i32(static_cast<int64_t>(table.size()));
    for (int64_t r = 0; r < ckv.size(); ++r) table.push_back(arena_row(s, ckv.row(r), ckv));
  }
  if (table.empty()) table.push_back(-1);  // a tensor with data: the table of this step is built
  t.table = fws_.upload(table, DType::I32);
  t.begin = fws_.upload(begin, DType::I32);
  return t;
}

// Writes this step's window rows into ring `ring` (only each sequence's last ring-size positions: the
// earlier ones would be overwritten within the step).
void V41Model::write_rings(Step& s, int64_t ring, const float* kv) {
  Workspace::Scope scope(ws_);
  std::vector<int32_t> src, dst;
  for (int64_t q = 0; q < s.num(); ++q)
    for (int64_t i = s.begin[q]; i < s.begin[q + 1]; ++i)
      if (s.pos[i] >= s.end_pos[q] - s.st[q]->ring_size()) {
        src.push_back(i32(i));
        dst.push_back(arena_row(s, s.st[q]->ring_row(ring, s.pos[i]), s.st[q]->rings));
      }
  Tensor sd = ws_.upload(src, DType::I32), dd = ws_.upload(dst, DType::I32);
  be_.quantize_rows(kv, sd.i32(), static_cast<int64_t>(src.size()), c_.head_dim, V41SequenceState::kRingFormat,
                    arena_bytes(s), arena_block_bytes(s), dd.i32());
}

void V41Model::attention(int64_t l, Step& s, const float* x, float* out) {
  const V41Block& B = blocks_[l];
  const int64_t hd = c_.head_dim, W = c_.window_size, T = s.rows(), H = c_.n_heads;
  const ops::RopeFreqs rope = rope_for(l);
  Workspace::Scope scope(ws_);
  Tensor qr = ws_.f32({T, c_.q_lora_rank}), q = ws_.f32({T, H, hd}), kv = ws_.f32({T, hd});
  prof_.section("attn_qkv");
  queries(B, x, s, rope, qr.f32(), q.f32());
  window_kv(B, x, s, rope, kv.f32());
  point(s, l, "q", q.f32(), T * H * hd);
  point(s, l, "window_kv", kv.f32(), T * hd);
  Step& w = s.whole();  // context parallelism: the window rows this rank reads, from the ranks computing them
  const Tensor kv_all = window_rows(s, kv, hd, W);

  const int64_t ratio = c_.compress_ratios[l];
  const int64_t src = ratio > 0 ? c_.kv_source_of[l] : -1;
  const Tensor* sel = nullptr;
  int64_t ksel = 0;
  if (ratio > 0) {
    prof_.section("attn_compress_index");
    Latents lat;
    lat.begin.assign(s.num() + 1, 0);
    if (c_.is_kv_source[l]) compress(l, s, x, lat);
    if (c_.is_index_source[l]) index(l, s, x, qr.f32(), lat);
    const int64_t ix = c_.is_index_source[l] ? l : c_.index_source_of[l];
    sel = &s.sel[ix];
    ksel = s.sel_k[ix];
    // RoPE, bf16, then FP4 with E4M3 scales per 16 (fp4_act_quant) of the latents into the compressed cache
    if (const int64_t ng = lat.count()) {
      be_.rope(lat.rows.f32(), ng, 1, hd, lat.pos_d.i64(), rope, false, true);
      std::vector<int32_t> dst;
      for (int64_t qi = 0; qi < s.num(); ++qi)
        append_rows(s, s.st[qi]->sources[l].ckv, lat.begin[qi + 1] - lat.begin[qi], dst);
      Tensor d = ws_.upload(dst, DType::I32);
      be_.quantize_rows(lat.rows.f32(), nullptr, ng, hd, V41SequenceState::kCompressedFormat, arena_bytes(s),
                        arena_block_bytes(s), d.i32());
    }
  }

  // Index lists: the window (earlier positions from the arena's ring, this step's from kv), then the
  // selected compressed rows (arena rows, translated on the device from the selection).
  prof_.section("attn_index_lists");
  const int64_t K = W + ksel;
  std::vector<int32_t> idx(T * K, -1);
  for (int64_t qi = 0; qi < s.num(); ++qi) {
    V41SequenceState& st = *s.st[qi];
    const int64_t wb = w.begin[qi], P0 = w.first(qi), from = st.ring_from[l];
    for (int64_t i = s.begin[qi]; i < s.begin[qi + 1]; ++i) {
      const int64_t p = s.pos[i];
      int64_t k = 0;
      for (int64_t qp = std::max<int64_t>(from, p - W + 1); qp <= p; ++qp)
        idx[i * K + k++] = qp < P0 ? arena_row(s, st.ring_row(l, qp), st.rings) : ops::fresh_row(wb + qp - P0);
    }
  }
  Tensor idx_d = ws_.upload(idx, DType::I32);
  if (ksel) {
    const CompressedRows& t = compressed_rows(s, src);
    be_.lookup_rows(sel->i32(), T, ksel, t.table.i32(), t.begin.i32(), idx_d.i32() + W, K);
  }
  prof_.section("attn_sparse");
  Tensor o = ws_.f32({T, H, hd});
  attend(B, s, q.f32(), window_rows_packed(kv_all, w.rows()).u8(), idx_d, K, W, rope, o.f32());
  point(s, l, "heads_out", o.f32(), T * H * hd);
  // the step's rows enter the rings only now: earlier rows of this step read them as fresh rows
  write_rings(w, l, kv_all.f32());
  prof_.section("attn_out_proj");
  output_projection(B, o.f32(), T, out);
}

// Grouped output projection: wo_a per group of heads (dequantized, bf16 out, no activation quantization),
// then wo_b.
void V41Model::output_projection(const V41Block& B, const float* o, int64_t n, float* out) {
  Workspace::Scope scope(ws_);
  Tensor u = ws_.f32({n, c_.o_groups * c_.o_lora_rank});
  be_.linear_block_diag(o, n, B.wo_a.q, c_.o_groups, true, u.f32());
  lin(u.f32(), n, B.wo_b, out);
}

// DSpark stage attention (reference DSparkAttention, decode): the block queries at p+1..p+B of each
// sequence attend the stage's ring (its main-token rows up to p) plus every block position.
void V41Model::dspark_attention(int64_t l, Step& s, const float* x, float* out) {
  const V41Block& B = blocks_[l];
  const int64_t hd = c_.head_dim, W = c_.window_size, T = s.rows(), H = c_.n_heads;
  const ops::RopeFreqs rope = main_rope();
  Workspace::Scope scope(ws_);
  Tensor qr = ws_.f32({T, c_.q_lora_rank}), q = ws_.f32({T, H, hd}), kv = ws_.f32({T, hd});
  queries(B, x, s, rope, qr.f32(), q.f32());
  window_kv(B, x, s, rope, kv.f32());
  const int64_t n = c_.dspark_block_size, K = W + n;
  std::vector<int32_t> idx(T * K, -1);
  for (int64_t qi = 0; qi < s.num(); ++qi) {
    V41SequenceState& st = *s.st[qi];
    check(st.started(), "dspark: stage ring is empty (draft before any forward)");
    const int64_t b = s.begin[qi], p = s.first(qi) - 1;
    for (int64_t i = b; i < s.begin[qi + 1]; ++i) {
      int64_t k = 0;
      for (int64_t qp = std::max<int64_t>(st.ring_from[l], p - W + 1); qp <= p; ++qp)
        idx[i * K + k++] = arena_row(s, st.ring_row(l, qp), st.rings);
      for (int64_t j = 0; j < n; ++j) idx[i * K + W + j] = ops::fresh_row(b + j);
    }
  }
  Tensor idx_d = ws_.upload(idx, DType::I32), o = ws_.f32({T, H, hd});
  attend(B, s, q.f32(), window_rows_packed(kv, T).u8(), idx_d, K, K, rope, o.f32());
  output_projection(B, o.f32(), T, out);
}

}  // namespace deepinfer::model
