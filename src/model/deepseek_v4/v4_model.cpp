#include "model/deepseek_v4/v4_model.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "model/deepseek_v4/v4_step.h"
#include "model/logits_out.h"

namespace deepinfer::model {

V4LoadOptions V4LoadOptions::from_env() {
  V4LoadOptions o;
  o.device = Device::resolve("");
  return o;
}

V4Model::V4Model(V4Config config, ops::Backend& backend, bool simulate_quant, int64_t rollback)
    : c_(std::move(config)), be_(backend), simulate_(simulate_quant), rollback_(rollback), ws_(backend),
      fws_(backend) {
  check(rollback_ >= 0, "v4: max_rollback_tokens must be >= 0, got ", rollback_);
  for (int64_t l = 0; l < c_.num_layers; ++l)
    check(!c_.hash_routed[l] || c_.scoring_func != "softmax",
          "v4: hash-routed layers with softmax scoring are not supported (layer ", l, ")");
  rope_main_ = make_rope_table(c_.rope_main, c_.rope_dim);
  rope_compress_ = make_rope_table(c_.rope_compress, c_.rope_dim);
  rope_main_freq_ = to_param(be_, rope_main_.inv_freq);
  rope_compress_freq_ = to_param(be_, rope_compress_.inv_freq);
  pool_ = std::make_shared<BlockPool>(default_block_bytes(), 0, &be_);
}

// ---------------------------------------------------------------------------------------------------
// state

namespace {
// The widths (floats) of the state's rows: window and compressed rows, the carries' copies * width rows.
std::vector<int64_t> row_widths(const V4Config& c) {
  std::vector<int64_t> w{c.head_dim};
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (c.compress_ratio[l] == 4) w.push_back(2 * c.head_dim);
    if (c.attention[l] == AttentionKind::kCSA) w.insert(w.end(), {c.index_head_dim, 2 * c.index_head_dim});
  }
  return w;
}
}  // namespace

int64_t V4Model::default_block_bytes() const {  // 16 of the widest rows, whole rows of every width
  int64_t row = 1, widest = 0;
  for (int64_t w : row_widths(c_)) {
    row = std::lcm(row, w * static_cast<int64_t>(sizeof(float)));
    widest = std::max(widest, w * static_cast<int64_t>(sizeof(float)));
  }
  return (16 * widest + row - 1) / row * row;
}

void V4Model::check_pool(const BlockPool& pool) const {
  for (int64_t w : row_widths(c_)) {
    const int64_t row = w * static_cast<int64_t>(sizeof(float));
    check(pool.block_bytes() % row == 0, "v4: state blocks of ", pool.block_bytes(), " bytes must hold whole rows of ",
          row, " bytes (attention reads the arena by row); ", default_block_bytes(), " would");
  }
  check(pool.memory().device() == be_.device(), "v4: the state arena is on ", pool.memory().device().str(),
        ", the model on ", be_.device().str());
}

void V4Model::set_state_pool(std::shared_ptr<BlockPool> pool) {
  check(pool != nullptr, "set_state_pool: no pool");
  check_pool(*pool);
  pool_ = std::move(pool);
}

std::unique_ptr<SequenceState> V4Model::new_sequence() const {
  return std::make_unique<V4SequenceState>(c_, pool_, rollback_);
}

int64_t V4Model::state_blocks_for(int64_t tokens) const {
  return V4SequenceState::blocks_for(c_, rollback_, pool_->block_bytes(), tokens);
}

float* V4Model::arena(const Step& s) const { return reinterpret_cast<float*>(s.st[0]->pool().base()); }

int32_t V4Model::arena_row(const Step& s, const float* row, int64_t width) const {
  return static_cast<int32_t>(s.st[0]->pool().row_index(row, width * static_cast<int64_t>(sizeof(float))));
}

// ---------------------------------------------------------------------------------------------------
// primitives

std::vector<float> V4Model::host(const float* p, int64_t n) const {
  std::vector<float> out(n);
  be_.download(out.data(), p, n * sizeof(float));
  return out;
}

ops::RopeFreqs V4Model::rope_for(int64_t l) const {
  const Param& f = c_.compress_ratio[l] == 0 ? rope_main_freq_ : rope_compress_freq_;
  const RopeTableData& t = c_.compress_ratio[l] == 0 ? rope_main_ : rope_compress_;
  return {f.data(), t.rope_dim, t.attention_factor};
}

// y = x Wᵀ: the reference's quantized linear (FP8 activations, block-scaled GEMM) for a quantized
// projection when the quantization points are simulated, else plain fp32.
void V4Model::lin(const float* x, int64_t m, const QLinear& W, float* y) {
  if (W.quant) return be_.linear_quant(x, m, W.q, c_.quant ? c_.quant->block_k : 128, y);
  be_.linear_plain(x, m, W.q, y);
}

void V4Model::lin_grouped(const float* x, int64_t m, const QLinear& W, const int32_t* offsets, int64_t max_rows,
                          float* y) {
  if (W.quant) return be_.linear_quant_grouped(x, m, W.q, offsets, max_rows, c_.quant ? c_.quant->block_k : 128, y);
  ops::for_each_group(be_, offsets, W.q.groups, m, [&](int64_t g, int64_t row, int64_t rows) {
    be_.linear_plain(x + row * W.k, rows, W.q.group(g), y + row * W.n);
  });
}

void V4Model::quant_head(float* x, int64_t rows, int64_t width, int64_t dim) {
  Workspace::Scope scope(ws_);
  Tensor t = ws_.f32({rows, dim});
  be_.copy_2d(x, width, rows, dim, t.f32(), dim);
  be_.fake_quant_fp8(t.f32(), rows, dim, 64);
  be_.copy_2d(t.f32(), dim, rows, dim, x, width);
}

// The orthonormal Walsh–Hadamard rotation of each index_head_dim vector, which the reference applies
// to the indexer's queries and keys before their FP4 rounding (scores unchanged in exact arithmetic;
// the quantization error spreads across channels).
void V4Model::hadamard(float* x, int64_t rows) {
  Workspace::Scope scope(ws_);
  const int64_t d = c_.index_head_dim;
  Tensor t = ws_.f32({rows, d});
  be_.linear_plain(x, rows, w_.hadamard.q, t.f32());
  be_.copy(x, t.data, t.bytes());
}

// ---------------------------------------------------------------------------------------------------
// forward

// One block: two mHC sites (weights, collapse, norm, sub-layer, expand) around attention and the MoE.
void V4Model::block(int64_t l, Step& s, Tensor& X) {
  const int64_t n = s.rows(), hc = c_.hc_mult, D = c_.hidden_size;
  const float eps = static_cast<float>(c_.rms_norm_eps), hc_eps = static_cast<float>(c_.hc_eps);
  const V4Layer& L = w_.layers[l];
  Workspace::Scope scope(ws_);
  Tensor pre = ws_.f32({n, hc}), post = ws_.f32({n, hc}), comb = ws_.f32({n, hc, hc});
  Tensor a = ws_.f32({n, D}), sub = ws_.f32({n, D});
  auto site = [&](const V4Hc& h, const Param& norm, const std::function<void()>& sublayer) {
    be_.hc_weights(X.f32(), n, hc, D, h.fn.data(), h.base.data(), h.scale.data(), eps, hc_eps, c_.hc_sinkhorn_iters,
                   pre.f32(), post.f32(), comb.f32());
    be_.hc_collapse(X.f32(), pre.f32(), n, hc, D, false, a.f32());
    be_.rms_norm(a.f32(), norm.data(), n, D, eps, a.f32(), false);
    sublayer();
    be_.hc_expand(X.f32(), sub.f32(), post.f32(), comb.f32(), n, hc, D, false, X.f32());  // in place
  };
  site(L.hc_attn, L.attn_norm, [&] { attention(l, s, a.f32(), sub.f32()); });
  site(L.hc_ffn, L.ffn_norm, [&] { moe(l, s, a.f32(), sub.f32()); });
}

void V4Model::forward(const ForwardBatch& batch, std::vector<float>& logits, const ForwardTaps* taps) {
  const std::vector<int64_t> pos = check_batch(batch, c_.vocab_size);
  check(batch.embed_tokens.empty(), "DeepSeek-V4 takes no input rows (embed_tokens): it has no vision input");
  const int64_t num = static_cast<int64_t>(batch.states.size()), T = static_cast<int64_t>(batch.token_ids.size());
  const int64_t D = c_.hidden_size, hc = c_.hc_mult;
  // The blocks this batch adds must be free before any state changes; one arena holds every state.
  Step s;
  int64_t need = 0;
  BlockPool* pool = nullptr;
  for (int64_t q = 0; q < num; ++q) {
    auto* st = dynamic_cast<V4SequenceState*>(batch.states[q]);
    check(st != nullptr, "forward: sequence ", q, " has no DeepSeek-V4 state");
    const int64_t n = batch.seq_start[q + 1] - batch.seq_start[q];
    if (n == 0) continue;
    check(pool == nullptr || &st->pool() == pool, "forward: the sequences of one batch must share one state arena");
    pool = &st->pool();
    const int64_t bb = pool->block_bytes();
    need += V4SequenceState::blocks_for(c_, rollback_, bb, st->length() + n) -
            V4SequenceState::blocks_for(c_, rollback_, bb, st->length());
    s.st.push_back(st);
    s.begin.push_back(batch.seq_start[q]);
    s.end_pos.push_back(st->length() + n);
  }
  s.begin.push_back(T);
  if (pool) {
    check_pool(*pool);
    check(pool->capacity() == 0 || pool->used() + need <= pool->capacity(), "forward: state memory exhausted: ", need,
          " more blocks needed, ", pool->capacity() - pool->used(), " of ", pool->capacity(), " free");
  }
  logits.clear();
  if (T == 0) return;
  s.pos = pos;
  s.ids = batch.token_ids;
  for (V4SequenceState* st : s.st) st->start();

  ws_.reset();
  fws_.reset();
  idle_.begin(be_);
  s.pos_d = fws_.upload(s.pos, DType::I64);
  Tensor X = fws_.f32({T, hc, D});  // every stream starts as the token's embedding
  {
    Workspace::Scope scope(ws_);
    std::vector<int32_t> rows(T * hc);
    for (int64_t i = 0; i < T * hc; ++i) rows[i] = s.ids[i / hc];
    Tensor r = ws_.upload(rows, DType::I32);
    w_.embed.gather(be_, r.i32(), T * hc, X.f32());
  }
  for (int64_t l = 0; l < c_.num_layers; ++l) {
    if (taps && taps->on_layer_input) {  // may overwrite the streams
      std::vector<float> hx = host(X.f32(), X.numel()), none;
      taps->on_layer_input(l, hx, none);
      be_.upload(X.data, hx.data(), X.bytes());
    }
    block(l, s, X);
  }
  for (int64_t q = 0; q < s.num(); ++q) s.st[q]->advance_to(s.end_pos[q]);

  // hc head + final norm on the rows whose logits are wanted (every row for on_final).
  const bool all = taps && taps->on_final;
  std::vector<int32_t> rows = batch.logit_rows;
  if (all) {
    rows.resize(T);
    std::iota(rows.begin(), rows.end(), 0);
  }
  const int64_t R = static_cast<int64_t>(rows.size()), NR = static_cast<int64_t>(batch.logit_rows.size());
  const float eps = static_cast<float>(c_.rms_norm_eps);
  Tensor rd = ws_.upload(rows, DType::I32), xr = ws_.f32({R, hc, D}), hpre = ws_.f32({R, hc});
  Tensor y = ws_.f32({R, D}), yn = ws_.f32({R, D});
  be_.copy_rows(X.f32(), rd.i32(), R, hc * D, xr.f32(), nullptr);
  be_.hc_weights(xr.f32(), R, hc, D, w_.hc_head.fn.data(), w_.hc_head.base.data(), w_.hc_head.scale.data(), eps,
                 static_cast<float>(c_.hc_eps), c_.hc_sinkhorn_iters, hpre.f32(), nullptr, nullptr);
  be_.hc_collapse(xr.f32(), hpre.f32(), R, hc, D, false, y.f32());
  be_.rms_norm(y.f32(), w_.norm.data(), R, D, eps, yn.f32(), false);
  Tensor picked = yn;
  if (all) {
    taps->on_final(host(y.f32(), y.numel()), host(yn.f32(), yn.numel()));
    Tensor lr = ws_.upload(batch.logit_rows, DType::I32);
    picked = ws_.f32({std::max<int64_t>(NR, 1), D});
    be_.copy_rows(yn.f32(), lr.i32(), NR, D, picked.f32(), nullptr);
  }
  Tensor out = ws_.f32({std::max<int64_t>(NR, 1), c_.vocab_size});
  be_.linear_plain(picked.f32(), NR, w_.head.q, out.f32());
  return_logits(be_, ws_, out.f32(), NR, c_.vocab_size, batch.draws, logits);
  idle_.end(be_);
}

// ---------------------------------------------------------------------------------------------------
// MoE (spec §3.5): sqrt-softplus router with bias (or the token's hash experts), routed experts in token
// groups, shared expert; the experts' outputs added per token in expert order, then the shared one.

void V4Model::expert_ffn(const V4Expert& ex, const float* x, int64_t m, const float* row_scale, float* y,
                         const int32_t* offsets, int64_t max_rows) {
  Workspace::Scope scope(ws_);
  const int64_t I = ex.w1.n;
  Tensor g = ws_.f32({m, I}), u = ws_.f32({m, I}), h = ws_.f32({m, I});
  auto L = [&](const float* in, const QLinear& W, float* out) {
    if (offsets) lin_grouped(in, m, W, offsets, max_rows, out);
    else lin(in, m, W, out);
  };
  L(x, ex.w1, g.f32());
  L(x, ex.w3, u.f32());
  be_.swiglu(g.f32(), u.f32(), m, I, static_cast<float>(c_.swiglu_limit), row_scale, h.f32(), false);  // weight before w2
  L(h.f32(), ex.w2, y);
}

void V4Model::moe(int64_t l, Step& s, const float* x, float* out) {
  const V4Layer& L = w_.layers[l];
  const int64_t n = s.rows(), D = c_.hidden_size, E = c_.n_routed_experts, k = c_.experts_per_token, M = n * k;
  Workspace::Scope scope(ws_);
  Tensor logits = ws_.f32({n, E}), sel = ws_.i32({n, k}), wsel = ws_.f32({n, k});
  lin(x, n, L.gate, logits.f32());  // fp32 router
  if (c_.hash_routed[l]) {
    // The token's tid2eid experts: every other expert's logit -inf, so its score is 0 and the top-k
    // is exactly the hash experts, weighted by their scores as the reference does.
    std::vector<float> mask(n * E, -std::numeric_limits<float>::infinity());
    for (int64_t t = 0; t < n; ++t)
      for (int64_t j = 0; j < k; ++j) mask[t * E + L.tid2eid[static_cast<int64_t>(s.ids[t]) * k + j]] = 0.0f;
    Tensor md = ws_.upload(mask, DType::F32);
    be_.add(logits.f32(), md.f32(), n * E);
  }
  using SF = ops::Backend::ScoreFunc;
  const SF sf = c_.scoring_func == "softmax" ? SF::kSoftmax : c_.scoring_func == "sigmoid" ? SF::kSigmoid
                                                                                          : SF::kSqrtSoftplus;
  const ops::Backend::RouteParams rp{sf, 1.0f, k, c_.norm_topk_prob && sf != SF::kSoftmax,
                                     static_cast<float>(c_.routed_scaling_factor)};
  be_.moe_route(logits.f32(), n, E, L.gate_bias.empty() ? nullptr : L.gate_bias.data(), nullptr, nullptr, rp,
                sel.i32(), wsel.f32(), nullptr);
  Tensor perm = ws_.i32({M}), rw = ws_.f32({M}), slot = ws_.i32({n, k}), offsets = ws_.i32({E + 1});
  be_.moe_group(sel.i32(), wsel.f32(), n, k, E, perm.i32(), rw.f32(), slot.i32(), offsets.i32());
  Tensor xs = ws_.f32({M, D}), ys = ws_.f32({M, D}), shared = ws_.f32({n, D});
  be_.copy_rows(x, perm.i32(), M, D, xs.f32(), nullptr);
  expert_ffn(L.routed, xs.f32(), M, rw.f32(), ys.f32(), offsets.i32(), n);
  expert_ffn(L.shared, x, n, nullptr, shared.f32());
  // out = ((0 + y_e1) + y_e2 ..) + shared, experts by ascending id (slot's order): slot transposed to
  // [k, n], row j picks every token's j-th expert row.
  std::vector<int32_t> transpose(M);
  for (int64_t j = 0; j < k; ++j)
    for (int64_t t = 0; t < n; ++t) transpose[j * n + t] = static_cast<int32_t>(t * k + j);
  Tensor tr = ws_.upload(transpose, DType::I32), slot_t = ws_.i32({k, n}), term = ws_.f32({n, D});
  be_.copy_rows(reinterpret_cast<const float*>(slot.data), tr.i32(), M, 1, reinterpret_cast<float*>(slot_t.data),
                nullptr);
  be_.fill(out, n * D, 0.0f);
  for (int64_t j = 0; j < k; ++j) {
    be_.copy_rows(ys.f32(), slot_t.i32() + j * n, n, D, term.f32(), nullptr);
    be_.add(out, term.f32(), n * D);
  }
  be_.add(out, shared.f32(), n * D);
}

// ---------------------------------------------------------------------------------------------------
// loading

std::unique_ptr<V4Model> V4Model::load(const std::string& dir, const V4LoadOptions& options) {
  V4Config config = V4Config::from_file(dir + "/config.json");
  io::Checkpoint ckpt = io::Checkpoint::open(dir);
  ops::Backend& be = ops::backend_for(options.device);
  if (options.device.is_cpu()) check_fits_in_memory(ckpt);
  else check_fits_on_device(ckpt, {}, be);
  // A checkpoint saved by transformers carries the "model." prefix; read it through the name map.
  const bool hf_names = ckpt.contains("model.embed_tokens.weight");
  std::function<std::string(const std::string&)> names = transformers_name;
  if (!hf_names) names = [](const std::string& n) { return n; };
  WeightLoader loader(ckpt, config.quant ? config.quant->block_n : 128, config.quant ? config.quant->block_k : 128,
                      names);
  const bool simulate = options.quant_simulation == QuantSimulation::kOn ||
                        (options.quant_simulation == QuantSimulation::kAuto && config.quant.has_value());
  auto m = std::make_unique<V4Model>(std::move(config), be, simulate, options.max_rollback_tokens);
  m->w_ = load_v4_weights(m->c_, loader, be, simulate);
  return m;
}

}  // namespace deepinfer::model
