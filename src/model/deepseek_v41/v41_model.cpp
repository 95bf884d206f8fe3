#include "model/deepseek_v41/v41_model.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <span>

#include "core/dtype.h"
#include "core/env.h"
#include "core/error.h"
#include "model/deepseek_v41/v41_step.h"
#include "model/weight_loader.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::model {
namespace {

float rb(float x) { return round_to_bf16(x); }

// The streams of fresh tokens: every stream holds the embedding; the pre-mix starts on stream 0.
void embed_rows(const V41Floats& embed, const std::vector<int64_t>& ids, int64_t hc, int64_t D, std::vector<float>& X,
                std::vector<float>& pre_mix) {
  const int64_t n = static_cast<int64_t>(ids.size());
  X.assign(n * hc * D, 0.0f);
  pre_mix.assign(n * hc, 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t k = 0; k < hc; ++k) std::copy_n(embed.data() + ids[t] * D, D, X.data() + (t * hc + k) * D);
    pre_mix[t * hc] = 1.0f;
  }
}

}  // namespace

V41Options V41Options::from_env() {
  V41Options o;
  // SWA bounded replay settings (registered in src/core/env.cpp): compact unless set to another mode.
  const std::string mode = env_string("DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE");
  o.replay_compact = mode.empty() || mode == "compact";
  o.replay_keep = env_int("DEEPINFER_YOCO_PREFILL_KEEP_TOKENS");
  return o;
}

// ---------------------------------------------------------------------------------------------------
// state

void V41Model::check_pool(const BlockPool& pool) const {
  const int64_t row = c_.head_dim * static_cast<int64_t>(sizeof(float));
  check(pool.block_bytes() % row == 0, "v41: state blocks of ", pool.block_bytes(),
        " bytes must hold whole rows of ", row, " bytes (attention reads the arena by row)");
}

void V41Model::set_state_pool(std::shared_ptr<BlockPool> pool) {
  check(pool != nullptr, "set_state_pool: no pool");
  check_pool(*pool);
  pool_ = std::move(pool);
}

int64_t V41Model::state_blocks_for(int64_t tokens) const { return blocks_for(tokens, pool_->block_bytes()); }

int64_t V41Model::blocks_for(int64_t tokens, int64_t bb) const {
  if (tokens <= 0) return 0;
  int64_t b = 0;
  for (int64_t l : c_.kv_source_layers) {
    const int64_t rows = tokens / c_.compress_ratios[l];
    b += PagedRows::blocks_for(rows, c_.head_dim, bb);
    if (c_.is_index_source[l]) b += PagedRows::blocks_for(rows, c_.index_head_dim, bb);
  }
  return b + PagedRows::blocks_for(V41SequenceState::fixed_rows_for(c_, rollback_), c_.head_dim, bb);
}

std::unique_ptr<SequenceState> V41Model::new_sequence() const {
  return std::make_unique<V41SequenceState>(pool_, c_, rollback_);
}

// ---------------------------------------------------------------------------------------------------
// loading

namespace {

V41Linear load_linear(const WeightLoader& w, const std::string& base, int64_t n, int64_t k) {
  V41Linear L;
  L.n = n;
  L.k = k;
  const io::TensorView& t = w.checkpoint().get(base + ".weight");
  L.quant = t.dtype == DType::F8_E4M3 || t.dtype == DType::I8 || t.dtype == DType::U8;
  L.w = w.matrix(base, n, k);
  return L;
}

void load_block(const V41Config& c, const WeightLoader& w, io::Checkpoint& ck, int64_t l, V41Block& B) {
  const bool mtp = l >= c.n_layers;
  const std::string p = mtp ? "mtp." + std::to_string(l - c.n_layers) + "." : "layers." + std::to_string(l) + ".";
  const int64_t D = c.dim, hc = c.hc_mult, mix = (2 + hc) * hc, H = c.n_heads, hd = c.head_dim;
  B.attn_norm = w.floats(p + "attn_norm.weight", {D});
  B.ffn_norm = w.floats(p + "ffn_norm.weight", {D});
  B.hc_attn_fn = w.floats(p + "hc_attn_fn", {mix, hc * D});
  B.hc_attn_base = w.floats(p + "hc_attn_base", {mix});
  B.hc_attn_scale = w.floats(p + "hc_attn_scale", {3});
  B.hc_ffn_fn = w.floats(p + "hc_ffn_fn", {mix, hc * D});
  B.hc_ffn_base = w.floats(p + "hc_ffn_base", {mix});
  B.hc_ffn_scale = w.floats(p + "hc_ffn_scale", {3});
  const std::string a = p + "attn.";
  B.wq_a = load_linear(w, a + "wq_a", c.q_lora_rank, D);
  B.q_norm = w.floats(a + "q_norm.weight", {c.q_lora_rank});
  B.wq_b = load_linear(w, a + "wq_b", H * hd, c.q_lora_rank);
  B.wkv = load_linear(w, a + "wkv", hd, D);
  B.kv_norm = w.floats(a + "kv_norm.weight", {hd});
  B.wo_a = load_linear(w, a + "wo_a", c.o_groups * c.o_lora_rank, H * hd / c.o_groups);
  B.wo_a.quant = false;  // the reference dequantizes wo_a to bf16 at load and runs it without act quant
  B.wo_b = load_linear(w, a + "wo_b", D, c.o_groups * c.o_lora_rank);
  B.attn_sink = w.floats(a + "attn_sink", {H});
  if (!mtp && c.is_kv_source[l]) {
    B.c_wkv = load_linear(w, a + "compressor.wkv", hd, D);
    if (c.compress_ratios[l] > 1) B.c_wgate = load_linear(w, a + "compressor.wgate", hd, D);
    B.c_norm = w.floats(a + "compressor.norm.weight", {hd});
  }
  if (!mtp && c.is_index_source[l]) {
    B.i_wq_b = load_linear(w, a + "indexer.wq_b", c.index_n_heads * c.index_head_dim, c.q_lora_rank);
    B.i_weights_proj = load_linear(w, a + "indexer.weights_proj", c.index_n_heads, D);
    if (c.is_kv_source[l]) {
      B.i_wk = load_linear(w, a + "indexer.wk", c.index_head_dim, hd);
      B.i_k_norm = w.floats(a + "indexer.k_norm.weight", {c.index_head_dim});
    }
  }
  const int64_t E = c.experts_for(l), I = c.moe_inter_dim;
  const std::string f = p + "ffn.";
  B.gate = w.floats(f + "gate.weight", {E, D});
  B.gate_bias = w.floats(f + "gate.bias", {E});
  if (w.has(f + "gate.bias_vl")) B.gate_bias_vl = w.floats(f + "gate.bias_vl", {E});
  B.experts.resize(E);
  for (int64_t e = 0; e < E; ++e) {
    const std::string x = f + "experts." + std::to_string(e) + ".";
    B.experts[e] = {load_linear(w, x + "w1", I, D), load_linear(w, x + "w2", D, I), load_linear(w, x + "w3", I, D)};
  }
  B.shared = {load_linear(w, f + "shared_experts.w1", I, D), load_linear(w, f + "shared_experts.w2", D, I),
              load_linear(w, f + "shared_experts.w3", I, D)};
  if (!mtp && c.has_engram(l)) {
    const int64_t ei = c.engram_index(l), ehd = c.engram_head_dim, cols = (c.engram_max_ngram_size - 1) * c.engram_n_heads;
    const int64_t rows = c.engram_num_embeddings[ei];
    check(ehd % 32 == 0, "engram_head_dim must be a multiple of 32");
    // The table stays memory-mapped (the release's are ~92 GiB each) and is read row by row.
    B.e_table = ck.get(p + "engram.embed.weight", DType::F8_E4M3, {rows, ehd}).data;
    B.e_scale = ck.get(p + "engram.embed.scale", DType::F8_E8M0, {rows, ehd / 32}).data;
    B.e_rows = rows;
    B.e_wkv = load_linear(w, p + "engram.wkv", (hc + 1) * D, cols * ehd);
    V41Floats q = w.floats(p + "engram.q_weight", {hc, D}), k = w.floats(p + "engram.k_weight", {hc, D});
    B.e_qk.resize(hc * D);
    for (int64_t i = 0; i < hc * D; ++i) B.e_qk[i] = q[i] * k[i];
  }
  if (mtp) {
    const int64_t s = l - c.n_layers;
    if (s == 0) {
      const int64_t nt = static_cast<int64_t>(c.dspark_target_layer_ids.size());
      B.main_proj = load_linear(w, p + "main_proj", D, nt * D);
      B.main_norm = w.floats(p + "main_norm.weight", {D});
    }
    if (s == c.n_mtp_layers - 1) {
      B.final_norm = w.floats(p + "norm.weight", {D});
      B.markov_embed = w.floats(p + "markov_head.embed.weight", {c.vocab_size, c.dspark_markov_rank});
      B.markov_head = load_linear(w, p + "markov_head.head", c.vocab_size, c.dspark_markov_rank);
      B.confidence = load_linear(w, p + "confidence_head.proj", 1, D + c.dspark_markov_rank);
    }
  }
}

}  // namespace

V41Model::V41Model(V41Config c, ops::Backend& be, const V41Options& options) : c_(std::move(c)), be_(be) {
  rope_main_ = make_rope_table(c_.rope_main, c_.rope_head_dim);
  rope_compress_ = make_rope_table(c_.rope_compress, c_.rope_head_dim);
  pool_ = std::make_shared<BlockPool>(16384, 0);
  set_options(options);
}

void V41Model::set_options(const V41Options& o) {
  check(o.replay_keep > 0, "DEEPINFER_YOCO_PREFILL_KEEP_TOKENS must be positive, got ", o.replay_keep);
  check(o.max_rollback_tokens >= 0 || o.max_rollback_tokens == V41Options::kAuto,
        "v41: max_rollback_tokens must be >= 0, got ", o.max_rollback_tokens);
  o_ = o;
  const bool dspark = c_.dspark_block_size > 0 && c_.n_mtp_layers > 0;
  rollback_ = o.max_rollback_tokens == V41Options::kAuto ? (dspark ? c_.dspark_block_size : 0) : o.max_rollback_tokens;
  image_token_ = o.image_token_id == V41Options::kAuto ? (c_.has_vision ? c_.image_token_id : -1) : o.image_token_id;
  check_pool(*pool_);
}

std::unique_ptr<V41Model> V41Model::load(const std::string& dir, const V41Options& options) {
  V41Config c = V41Config::from_file(dir + "/config.json");
  auto m = std::make_unique<V41Model>(c, ops::cpu_backend(), options);
  m->ckpt_ = std::make_unique<io::Checkpoint>(io::Checkpoint::open(dir));
  check_fits_in_memory(*m->ckpt_, {"engram.embed."});  // Engram tables stay memory-mapped
  WeightLoader w(*m->ckpt_, c.fp8_block, c.fp8_block, [](const std::string& n) { return n; });
  m->embed_ = w.floats("embed.weight", {c.vocab_size, c.dim});
  m->head_ = w.floats("head.weight", {c.vocab_size, c.dim});
  m->norm_ = w.floats("norm.weight", {c.dim});
  const int64_t nb = c.n_layers + (c.dspark_block_size > 0 ? c.n_mtp_layers : 0);
  m->blocks_.resize(nb);
  for (int64_t l = 0; l < nb; ++l) load_block(m->c_, w, *m->ckpt_, l, m->blocks_[l]);
  // Engram's compressed token map comes from the tokenizer: every id decoded alone (special tokens
  // kept) and its vocabulary string. Without tokenizer.json, set_engram_tokens() must be called.
  const std::string tok_path = dir + "/tokenizer.json";
  if (!c.engram_layer_ids.empty() && std::ifstream(tok_path).good()) {
    tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(tok_path);
    const int64_t V = tok.vocab_size();
    std::vector<std::string> decoded(V), raw(V);
    for (int64_t id = 0; id < V; ++id) {
      const int32_t one = static_cast<int32_t>(id);
      decoded[id] = tok.decode(std::span<const int32_t>(&one, 1), false);
      raw[id] = tok.token_string(one);
    }
    m->set_engram_tokens(decoded, raw);
  }
  return m;
}

void V41Model::set_engram_tokens(const std::vector<std::string>& decoded, const std::vector<std::string>& raw) {
  int64_t size = 0;
  std::vector<int64_t> map = build_compressed_token_map(decoded, raw, &size);
  engram_ = std::make_unique<EngramHasher>(c_, std::move(map), size);
}


// ---------------------------------------------------------------------------------------------------
// primitives with the reference's rounding points

void V41Model::lin(const float* x, int64_t m, const V41Linear& W, float* y, bool to_bf16) {
  if (W.quant) {  // act_quant (FP8 e4m3, UE8M0 per 32) then the block-scaled GEMM
    std::vector<float> xq(x, x + m * W.k);
    be_.fake_quant_fp8(xq.data(), m, W.k, c_.fp8_block);
    be_.linear_kblocked(xq.data(), m, W.k, W.w.data(), W.n, 32, y);  // FP8/FP4 kernels walk K in blocks of 32
  } else {
    be_.linear(x, m, W.k, W.w.data(), W.n, y);
  }
  if (to_bf16) be_.round_bf16(y, m * W.n);
}

void V41Model::rmsnorm(std::vector<float>& x, const V41Floats& w, int64_t rows, int64_t dim) {
  be_.rms_norm(x.data(), w.data(), rows, dim, static_cast<float>(c_.norm_eps), x.data());
  be_.round_bf16(x.data(), rows * dim);
}

const ops::RopeFreqs V41Model::rope_for(int64_t l) const {
  return (l < c_.n_layers && c_.compress_ratios[l] > 0 ? rope_compress_ : rope_main_).freqs();
}

// ---------------------------------------------------------------------------------------------------
// blocks (single-pass mHC, spec §5.2)

void V41Model::block_forward(int64_t l, Step& s, std::vector<float>& X, std::vector<float>& pre_mix,
                             const ForwardTaps* taps) {
  const int64_t D = c_.dim, hc = c_.hc_mult, n = s.rows();
  const float eps = static_cast<float>(c_.norm_eps), hc_eps = static_cast<float>(c_.hc_eps);
  const V41Block& B = blocks_[l];
  std::vector<float> pre(n * hc), post(n * hc), comb(n * hc * hc), a(n * D), sub;
  std::vector<float> mixed(n * hc * D);
  auto collapse = [&](const std::vector<float>& mix) { be_.hc_collapse(X.data(), mix.data(), n, hc, D, true, a.data()); };
  auto expand = [&]() {
    be_.hc_expand(X.data(), sub.data(), post.data(), comb.data(), n, hc, D, true, mixed.data());
    X.swap(mixed);
  };
  be_.hc_weights(X.data(), n, hc, D, B.hc_attn_fn.data(), B.hc_attn_base.data(), B.hc_attn_scale.data(), eps, hc_eps,
                 c_.hc_sinkhorn_iters, pre.data(), post.data(), comb.data());
  std::vector<float> attn_pre = pre;
  collapse(pre_mix);
  rmsnorm(a, B.attn_norm, n, D);
  if (s.dspark) dspark_attention(l, s, a, sub);
  else attention(l, s, a, sub);
  expand();
  be_.hc_weights(X.data(), n, hc, D, B.hc_ffn_fn.data(), B.hc_ffn_base.data(), B.hc_ffn_scale.data(), eps, hc_eps,
                 c_.hc_sinkhorn_iters, pre.data(), post.data(), comb.data());
  collapse(attn_pre);
  rmsnorm(a, B.ffn_norm, n, D);
  moe(l, s, a, sub, taps);
  expand();
  pre_mix = pre;
}

// ---------------------------------------------------------------------------------------------------
// forward

void V41Model::forward(const ForwardBatch& batch, std::vector<float>& logits, const ForwardTaps* taps) {
  const std::vector<int64_t> pos = check_batch(batch, c_.vocab_size);
  const int64_t num = static_cast<int64_t>(batch.states.size()), D = c_.dim, hc = c_.hc_mult, W = c_.window_size;
  // The blocks this batch adds must be free before any state changes; one arena holds every state.
  Step s;
  int64_t need = 0;
  BlockPool* arena = nullptr;
  std::vector<int64_t> seq_of_step(num, -1);
  for (int64_t q = 0; q < num; ++q) {
    auto* st = dynamic_cast<V41SequenceState*>(batch.states[q]);
    check(st != nullptr, "forward: sequence ", q, " has no DeepSeek-V4.1 state");
    const int64_t n = batch.seq_start[q + 1] - batch.seq_start[q];
    if (n == 0) continue;
    check(arena == nullptr || &st->pool() == arena, "forward: the sequences of one batch must share one state arena");
    arena = &st->pool();
    need += blocks_for(st->length() + n, arena->block_bytes()) - blocks_for(st->length(), arena->block_bytes());
    seq_of_step[q] = s.num();
    s.st.push_back(st);
    s.begin.push_back(batch.seq_start[q]);
    s.end_pos.push_back(st->length() + n);
  }
  s.begin.push_back(static_cast<int64_t>(batch.token_ids.size()));
  if (arena)
    check(arena->capacity() == 0 || arena->used() + need <= arena->capacity(), "forward: state memory exhausted: ",
          need, " more blocks needed, ", arena->capacity() - arena->used(), " of ", arena->capacity(), " free");
  const int64_t T = static_cast<int64_t>(batch.token_ids.size());
  std::vector<int64_t> ids(batch.token_ids.begin(), batch.token_ids.end());
  s.pos = pos;
  s.image.resize(T);
  for (int64_t t = 0; t < T; ++t) s.image[t] = image_token_ >= 0 && ids[t] == image_token_;  // spec §5.7
  for (V41SequenceState* st : s.st)
    if (st->fixed.size() == 0) st->start();
  s.sel.assign(c_.n_layers, {});
  s.sel_k.assign(c_.n_layers, 0);

  // Engram hash ids [T, n_engram_layers, cols], per sequence from its history.
  std::vector<int64_t> hash;
  const int64_t NL = static_cast<int64_t>(c_.engram_layer_ids.size());
  if (NL) {
    check(engram_ != nullptr, "v41: the model has Engram layers but no token map: put the model's tokenizer.json "
          "in its folder (or call V41Model::set_engram_tokens)");
    const int64_t C = engram_->cols(), keep = engram_->max_ngram() - 1 + rollback_;
    hash.resize(T * NL * C);
    for (int64_t q = 0; q < s.num(); ++q) {
      // Image-span tokens enter the history as DEAD (they and every lookback through them hash as pad).
      V41SequenceState& st = *s.st[q];
      const int64_t b = s.begin[q], n = s.begin[q + 1] - b, P = st.length_;
      std::vector<int64_t> hist = st.engram_hist;
      const int64_t base = P - static_cast<int64_t>(hist.size());
      for (int64_t i = b; i < b + n; ++i) hist.push_back(s.image[i] ? EngramHasher::kDead : engram_->compressed(ids[i]));
      std::vector<int64_t> h(n * NL * C);
      engram_->hash(hist, P, n, h.data(), base);
      std::copy(h.begin(), h.end(), hash.begin() + b * NL * C);
      st.engram_hist.assign(hist.end() - std::min<int64_t>(keep, static_cast<int64_t>(hist.size())), hist.end());
      if (taps && taps->on_hash_ids) taps->on_hash_ids(P, h);
    }
  }

  // SWA bounded replay: a prefill from 0 longer than KEEP runs the layers after the last KV source on
  // its last KEEP tokens only — when every logit row it asks for lies in that tail (an engine asks for
  // the last row); a caller that wants earlier rows gets the exact full prefill.
  const bool has_dspark = c_.dspark_block_size > 0 && c_.n_mtp_layers > 0;
  if (o_.replay_compact)
    check(o_.replay_keep >= W + std::max<int64_t>(has_dspark ? c_.dspark_block_size : 0, rollback_),
          "DEEPINFER_YOCO_PREFILL_KEEP_TOKENS=", o_.replay_keep, " is smaller than the window (", W,
          ") plus the maximum draft lookback (", std::max<int64_t>(has_dspark ? c_.dspark_block_size : 0, rollback_), ")");
  std::vector<int64_t> cut(s.num(), 0);
  for (int64_t q = 0; q < s.num(); ++q) {
    const int64_t b = s.begin[q], n = s.begin[q + 1] - b;
    bool tail_only = true;
    for (int32_t r : batch.logit_rows) tail_only &= !(r >= b && r < b + n) || r >= b + n - o_.replay_keep;
    if (o_.replay_compact && tail_only && s.st[q]->length_ == 0 && c_.last_kv_source >= 0 && n > o_.replay_keep) {
      for (int64_t l = c_.last_kv_source + 1; l < c_.n_layers; ++l)
        check(!c_.has_engram(l), "SWA bounded replay: Engram layer ", l, " after the last KV source");
      cut[q] = n - o_.replay_keep;
    }
  }
  const bool any_cut = std::any_of(cut.begin(), cut.end(), [](int64_t v) { return v > 0; });

  std::vector<float> X, pre_mix;
  embed_rows(embed_, ids, hc, D, X, pre_mix);
  const int64_t nt = static_cast<int64_t>(c_.dspark_target_layer_ids.size());
  std::vector<float> main_hidden(has_dspark ? T * nt * D : 0);  // [rows, targets, D] for the DSpark rings
  for (int64_t l = 0; l < c_.n_layers; ++l) {
    if (any_cut && l == c_.last_kv_source + 1) {
      s.cut_rows(X, hc * D, cut);
      s.cut_rows(pre_mix, hc, cut);
      s.cut_rows(main_hidden, nt * D, cut);
      s.cut_rows(hash, NL * (engram_ ? engram_->cols() : 0), cut);
      s.commit_cut(cut);
      for (int64_t q = 0; q < s.num(); ++q)
        for (int64_t r = l; r < c_.n_layers && cut[q]; ++r) s.st[q]->ring_from[r] = cut[q];
    }
    const int64_t rows = s.rows();
    if (c_.has_engram(l)) {
      const int64_t ei = c_.engram_index(l), C = engram_->cols();
      std::vector<int64_t> lid(rows * C);
      for (int64_t t = 0; t < rows; ++t) std::copy_n(hash.data() + (t * NL + ei) * C, C, lid.data() + t * C);
      if (taps && taps->on_engram_input) taps->on_engram_input(l, X);
      engram_apply(l, s, lid, X);
    }
    if (taps && taps->on_layer_input) taps->on_layer_input(l, X, pre_mix);
    for (int64_t j = 0; j < nt; ++j)
      if (c_.dspark_target_layer_ids[j] == l)
        for (int64_t t = 0; t < rows; ++t)
          for (int64_t d = 0; d < D; ++d) {
            float acc = 0;
            for (int64_t k = 0; k < hc; ++k) acc += X[(t * hc + k) * D + d];
            main_hidden[(t * nt + j) * D + d] = rb(acc / static_cast<float>(hc));
          }
    block_forward(l, s, X, pre_mix, taps);
  }
  // final collapse with the last pre-mix, norm
  const int64_t rows = s.rows();
  std::vector<float> y(rows * D);
  be_.hc_collapse(X.data(), pre_mix.data(), rows, hc, D, true, y.data());  // the final collapse, last pre-mix
  std::vector<float> yn = y;
  rmsnorm(yn, norm_, rows, D);
  if (taps && taps->on_final) taps->on_final(y, yn);
  const int64_t R = static_cast<int64_t>(batch.logit_rows.size());
  std::vector<float> normed(R * D);
  for (int64_t i = 0; i < R; ++i) {
    const int64_t r = batch.logit_rows[i];
    int64_t q = static_cast<int64_t>(std::upper_bound(batch.seq_start.begin(), batch.seq_start.end(), r) -
                                     batch.seq_start.begin()) - 1;
    while (batch.seq_start[q + 1] == batch.seq_start[q]) ++q;  // skip sequences without tokens
    const int64_t qs = seq_of_step[q], local = r - batch.seq_start[q] - cut[qs];
    check(local >= 0, "forward: internal error: logit row ", r, " outside the kept tail");
    std::copy_n(yn.data() + (s.begin[qs] + local) * D, D, normed.data() + i * D);
  }
  if (has_dspark) dspark_rings(s, main_hidden);
  for (int64_t q = 0; q < s.num(); ++q) s.st[q]->advance_to(s.end_pos[q]);
  logits.resize(R * c_.vocab_size);
  be_.linear(normed.data(), R, D, head_.data(), c_.vocab_size, logits.data());
}

// DSpark: every stage's ring gets kv_norm(wkv(main_x)) of every (kept) main token.
void V41Model::dspark_rings(Step& s, const std::vector<float>& main_hidden) {
  const int64_t m = s.rows(), D = c_.dim, hd = c_.head_dim;
  std::vector<float> mx(m * D), kv;
  const V41Block& S0 = blocks_[c_.n_layers];
  lin(main_hidden.data(), m, S0.main_proj, mx.data());
  rmsnorm(mx, S0.main_norm, m, D);
  for (int64_t stage = 0; stage < c_.n_mtp_layers; ++stage) {
    const int64_t l = c_.n_layers + stage;
    window_kv(blocks_[l], mx, s.pos, rope_main_.freqs(), kv);
    for (int64_t q = 0; q < s.num(); ++q) {
      V41SequenceState& st = *s.st[q];
      if (s.begin[q + 1] > s.begin[q] && st.length_ == 0 && s.first(q) > 0) st.ring_from[l] = s.first(q);  // compact replay
      for (int64_t i = s.begin[q]; i < s.begin[q + 1]; ++i) std::copy_n(kv.data() + i * hd, hd, st.ring_row(l, s.pos[i]));
    }
  }
}

V41Draft V41Model::draft(V41SequenceState& st, int32_t anchor, const int32_t* force_tokens) {
  check(c_.dspark_block_size > 0 && c_.n_mtp_layers > 0, "dspark: the model has no draft head");
  check(st.length_ > 0, "dspark: draft needs at least one consumed token");
  const int64_t D = c_.dim, hc = c_.hc_mult, n = c_.dspark_block_size, V = c_.vocab_size, R = c_.dspark_markov_rank;
  const int64_t p = st.length_ - 1;
  std::vector<int64_t> ids(n, c_.dspark_noise_token_id);
  ids[0] = anchor;
  // The draft block is text (anchor + noise): no image routing, as in the reference's forward_spec.
  Step s;
  s.dspark = true;
  s.st = {&st};
  s.begin = {0, n};
  s.end_pos = {st.length_};
  for (int64_t i = 0; i < n; ++i) s.pos.push_back(p + 1 + i);
  s.image.assign(n, 0);
  std::vector<float> X, pre_mix;
  embed_rows(embed_, ids, hc, D, X, pre_mix);
  for (int64_t stage = 0; stage < c_.n_mtp_layers; ++stage) block_forward(c_.n_layers + stage, s, X, pre_mix, nullptr);
  const V41Block& L = blocks_[c_.n_layers + c_.n_mtp_layers - 1];
  std::vector<float> y(n * D);
  be_.hc_collapse(X.data(), pre_mix.data(), n, hc, D, true, y.data());
  std::vector<float> yn = y;
  rmsnorm(yn, L.final_norm, n, D);
  V41Draft out;
  out.logits.resize(n * V);
  be_.linear(yn.data(), n, D, head_.data(), V, out.logits.data());
  std::vector<int32_t> toks(n + 1);
  toks[0] = anchor;
  std::vector<float> bias(V), feat(D + R);
  out.confidence.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    const float* emb = L.markov_embed.data() + static_cast<int64_t>(toks[i]) * R;
    be_.linear(emb, 1, R, L.markov_head.w.data(), V, bias.data());
    float* lg = out.logits.data() + i * V;
    for (int64_t v = 0; v < V; ++v) lg[v] += bias[v];
    toks[i + 1] = static_cast<int32_t>(std::max_element(lg, lg + V) - lg);
    out.tokens.push_back(toks[i + 1]);
    if (force_tokens) toks[i + 1] = force_tokens[i];
    std::copy_n(y.data() + i * D, D, feat.data());
    std::copy_n(emb, R, feat.data() + D);
    be_.linear(feat.data(), 1, D + R, L.confidence.w.data(), 1, &out.confidence[i]);
  }
  return out;
}

}  // namespace deepinfer::model
