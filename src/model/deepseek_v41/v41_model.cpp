#include "model/deepseek_v41/v41_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <span>
#include <limits>
#include <numeric>

#include "core/dtype.h"
#include "core/env.h"
#include "core/error.h"
#include "model/weight_loader.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::model {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int64_t kAttnBlock = 64;  // the reference kernel's online-softmax block of indices

float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }  // torch's threshold 20
float rb(float x) { return bf16_to_float(float_to_bf16(x)); }

// The final collapse of the hc streams with the last pre-mix: y[t] = bf16(sum_k pre[t,k] X[t,k]).
std::vector<float> collapse_streams(const std::vector<float>& X, const std::vector<float>& pre_mix, int64_t rows,
                                    int64_t hc, int64_t D) {
  std::vector<float> y(rows * D);
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t d = 0; d < D; ++d) {
      float acc = 0;
      for (int64_t k = 0; k < hc; ++k) acc += pre_mix[t * hc + k] * X[(t * hc + k) * D + d];
      y[t * D + d] = rb(acc);
    }
  return y;
}

// torch.topk(largest=True) on CPU, reproduced with its tie behaviour: (value, index) pairs in index
// order, compared by value only; std::partial_sort when k * 64 <= n, else std::nth_element at k-1
// (then, when sorted, std::sort of the first k-1). Exact ties (e.g. bf16 index scores) are thereby
// broken the way the reference's libstdc++ build breaks them. Returns the first k indices.
std::vector<int64_t> torch_topk(const float* v, int64_t n, int64_t k, bool sorted) {
  using elem = std::pair<float, int64_t>;
  std::vector<elem> q(n);
  for (int64_t j = 0; j < n; ++j) q[j] = {v[j], j};
  auto cmp = [](const elem& x, const elem& y) {
    return (std::isnan(x.first) && !std::isnan(y.first)) || x.first > y.first;
  };
  if (k > 0 && k < n + 1) {
    if (k * 64 <= n) {
      std::partial_sort(q.begin(), q.begin() + k, q.end(), cmp);
    } else {
      std::nth_element(q.begin(), q.begin() + (k - 1), q.end(), cmp);
      if (sorted) std::sort(q.begin(), q.begin() + (k - 1), cmp);
    }
  }
  std::vector<int64_t> out(k);
  for (int64_t j = 0; j < k; ++j) out[j] = q[j].second;
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// state

namespace {

int64_t ring_count(const V41Config& c) {
  return c.n_layers + (c.dspark_block_size > 0 && c.n_mtp_layers > 0 ? c.n_mtp_layers : 0);
}

}  // namespace

V41SequenceState::V41SequenceState(std::shared_ptr<BlockPool> pool, const V41Config& c)
    : pool_(std::move(pool)), fixed(pool_.get(), c.head_dim), window_(c.window_size), head_dim_(c.head_dim) {
  fixed_rows = ring_count(c) * c.window_size;
  carry_row.assign(c.n_layers, -1);
  sources.resize(c.n_layers);
  for (int64_t l : c.kv_source_layers) {
    sources[l].ckv = PagedRows(pool_.get(), c.head_dim);
    if (c.is_index_source[l]) sources[l].ik = PagedRows(pool_.get(), c.index_head_dim);
    if (c.compress_ratios[l] > 1) {
      carry_row[l] = fixed_rows;
      fixed_rows += 2 * c.compress_ratios[l];
    }
  }
  ring_from.assign(c.n_layers + c.n_mtp_layers, 0);
}

int64_t V41SequenceState::blocks() const {
  int64_t b = fixed.blocks();
  for (auto& s : sources) b += s.ckv.blocks() + s.ik.blocks();
  return b;
}

void V41SequenceState::reset() {
  length_ = 0;
  fixed.clear();
  for (auto& s : sources) {
    s.ckv.clear();
    s.ik.clear();
  }
  std::fill(ring_from.begin(), ring_from.end(), 0);
  last_ik_owner = -1;
  engram_hist.clear();
}

V41Floats V41SequenceState::floats(const PagedRows& rows) {
  V41Floats out(rows.size() * rows.width());
  rows.copy_to(out.data());
  return out;
}

V41Floats V41SequenceState::ring(int64_t layer) const {
  if (!fixed.size()) return {};
  V41Floats out(window_ * head_dim_);
  for (int64_t i = 0; i < window_; ++i) std::copy_n(fixed.row(layer * window_ + i), head_dim_, out.data() + i * head_dim_);
  return out;
}

void V41Model::set_state_pool(std::shared_ptr<BlockPool> pool) {
  check(pool != nullptr, "set_state_pool: no pool");
  pool_ = std::move(pool);
}

int64_t V41Model::state_blocks_for(int64_t tokens) const { return blocks_for(tokens, pool_->block_bytes()); }

int64_t V41Model::blocks_for(int64_t tokens, int64_t bb) const {
  if (tokens <= 0) return 0;
  int64_t fixed = ring_count(c_) * c_.window_size, b = 0;
  for (int64_t l : c_.kv_source_layers) {
    const int64_t r = c_.compress_ratios[l], rows = tokens / r;
    if (r > 1) fixed += 2 * r;
    b += PagedRows::blocks_for(rows, c_.head_dim, bb);
    if (c_.is_index_source[l]) b += PagedRows::blocks_for(rows, c_.index_head_dim, bb);
  }
  return b + PagedRows::blocks_for(fixed, c_.head_dim, bb);
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

V41Model::V41Model(V41Config c, ops::Backend& be) : c_(std::move(c)), be_(be) {
  rope_main_ = make_rope_table(c_.rope_main, c_.rope_head_dim);
  rope_compress_ = make_rope_table(c_.rope_compress, c_.rope_head_dim);
  // SWA bounded replay settings (registered in src/core/env.cpp): compact unless set to another mode.
  const std::string mode = env_string("DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE");
  replay_compact = mode.empty() || mode == "compact";
  replay_keep = env_int("DEEPINFER_YOCO_PREFILL_KEEP_TOKENS");
  if (c_.has_vision) image_token_id = c_.image_token_id;
  check(replay_keep > 0, "DEEPINFER_YOCO_PREFILL_KEEP_TOKENS must be positive, got ", replay_keep);
  pool_ = std::make_shared<BlockPool>(16384, 0);
}

std::unique_ptr<V41Model> V41Model::load(const std::string& dir) {
  V41Config c = V41Config::from_file(dir + "/config.json");
  auto m = std::make_unique<V41Model>(c, ops::cpu_backend());
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

std::unique_ptr<SequenceState> V41Model::new_sequence() const {
  return std::make_unique<V41SequenceState>(pool_, c_);
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
// attention (spec §5.4)

void V41Model::attention(int64_t l, V41SequenceState& st, int64_t P, int64_t n, const std::vector<float>& x,
                         const int64_t* pos, std::vector<float>& out) {
  const V41Block& B = blocks_[l];
  const int64_t H = c_.n_heads, hd = c_.head_dim, W = c_.window_size;
  const ops::RopeFreqs rope = rope_for(l);
  std::vector<float> qr(n * c_.q_lora_rank), q(n * H * hd), kv(n * hd);
  lin(x.data(), n, B.wq_a, qr.data());
  rmsnorm(qr, B.q_norm, n, c_.q_lora_rank);
  lin(qr.data(), n, B.wq_b, q.data());
  be_.rope(q.data(), n, H, hd, pos, rope, false);
  bf16(q);
  lin(x.data(), n, B.wkv, kv.data());
  rmsnorm(kv, B.kv_norm, n, hd);
  be_.rope(kv.data(), n, 1, hd, pos, rope, false);
  bf16(kv);
  be_.fake_quant_fp8(kv.data(), n, hd, c_.fp8_block);  // window K=V, all channels, rope tail included

  const int64_t ratio = c_.compress_ratios[l];
  const int64_t end_pos = P + n;
  std::vector<int32_t> sel;  // [n, topk] raw compressed positions or -1
  int64_t topk = 0, src = -1;
  if (ratio > 0) {
    src = c_.kv_source_of[l];
    V41SequenceState::Source& S = st.sources[src];
    // 1. the compressor: latents (pre-RoPE) of the groups this chunk completes
    std::vector<float> lat;
    std::vector<int64_t> lat_pos;
    if (c_.is_kv_source[l]) {
      if (ratio == 1) {
        lat.resize(n * hd);
        lin(x.data(), n, B.c_wkv, lat.data());
        rmsnorm(lat, B.c_norm, n, hd);
        for (int64_t i = 0; i < n; ++i) lat_pos.push_back(pos[i]);
      } else {
        std::vector<float> kvf(n * hd), sc(n * hd);
        lin(x.data(), n, B.c_wkv, kvf.data(), false);  // fp32 weights, fp32 pooling
        lin(x.data(), n, B.c_wgate, sc.data(), false);
        // carry rows in st.fixed: kv of slot s at c0 + s, its score at c0 + ratio + s
        const int64_t c0 = st.carry_row[l];
        auto kv_c = [&](int64_t s) { return st.fixed.row(c0 + s); };
        auto sc_c = [&](int64_t s) { return st.fixed.row(c0 + ratio + s); };
        for (int64_t i = 0; i < n; ++i) {
          const int64_t p = pos[i], slot = p % ratio;
          std::copy_n(kvf.data() + i * hd, hd, kv_c(slot));
          std::copy_n(sc.data() + i * hd, hd, sc_c(slot));
          if ((p + 1) % ratio != 0) continue;
          std::vector<float> z(hd);
          for (int64_t ch = 0; ch < hd; ++ch) {
            float mx = kNegInf;
            for (int64_t s = 0; s < ratio; ++s) mx = std::max(mx, sc_c(s)[ch]);
            float den = 0;
            std::vector<float> e(ratio);
            for (int64_t s = 0; s < ratio; ++s) den += (e[s] = std::exp(sc_c(s)[ch] - mx));
            float acc = 0;
            for (int64_t s = 0; s < ratio; ++s) acc += kv_c(s)[ch] * (e[s] / den);
            z[ch] = rb(acc);
          }
          lat.insert(lat.end(), z.begin(), z.end());
          lat_pos.push_back(p + 1 - ratio);
        }
        const int64_t ng = static_cast<int64_t>(lat_pos.size());
        if (ng) rmsnorm(lat, B.c_norm, ng, hd);
      }
    }
    const int64_t ng = static_cast<int64_t>(lat_pos.size());
    // 2. the indexer: keys from the pre-RoPE latent, queries, scores, candidates, selection
    if (c_.is_index_source[l]) {
      const int64_t ih = c_.index_n_heads, id = c_.index_head_dim;
      if (c_.is_kv_source[l] && ng) {
        std::vector<float> k(ng * id);
        lin(lat.data(), ng, B.i_wk, k.data());
        rmsnorm(k, B.i_k_norm, ng, id);
        be_.rope(k.data(), ng, 1, id, lat_pos.data(), rope, false);
        bf16(k);
        be_.fake_quant_fp4(k.data(), ng, id, 32);
        for (int64_t g = 0; g < ng; ++g) std::copy_n(k.data() + g * id, id, S.ik.append());
      }
      if (c_.is_kv_source[l] && ng) st.last_ik_owner = l;  // the reference's shared_attn.index_k
      const int64_t width = end_pos / ratio;
      check(S.ik.size() == width, "v41: index keys of layer ", src, " are out of step");
      topk = std::min(c_.index_topk, width);
      sel.assign(n * std::max<int64_t>(topk, 0), -1);
      if (width > 0) {
        std::vector<float> iq(n * ih * id), wts(n * ih);
        lin(qr.data(), n, B.i_wq_b, iq.data());
        be_.rope(iq.data(), n, ih, id, pos, rope, false);
        bf16(iq);
        be_.fake_quant_fp4(iq.data(), n * ih, id, 32);
        lin(x.data(), n, B.i_weights_proj, wts.data());
        const float wscale = static_cast<float>(std::pow(static_cast<double>(id), -0.5) * std::pow(static_cast<double>(ih), -0.5));
        for (float& v : wts) v = rb(v * wscale);
        std::vector<float> score(n * width);
        // score[t,w] = sum_h bf16(relu(bf16(<q_th, k_w>)) * w_th), summed in fp32, rounded to bf16
        std::vector<float> dots(n * ih * width);
        const PagedRows* kr = &S.ik;
        if (emulate_reference_stale_index_keys && st.last_ik_owner >= 0) {
          // DeepSeek's model.py re-publishes shared_attn.index_k only when a key owner produced a
          // latent; a ratio-2 source on a step that completes no group reads the last owner's cache.
          kr = &st.sources[st.last_ik_owner].ik;
          check(kr->size() >= width, "v41: stale index keys too short");
        }
        std::vector<float> keys(width * id);  // the first `width` rows, contiguous
        for (int64_t w = 0; w < width; ++w) std::copy_n(kr->row(w), id, keys.data() + w * id);
        be_.linear(iq.data(), n * ih, id, keys.data(), width, dots.data());
        for (int64_t t = 0; t < n; ++t) {
          const int64_t visible = (pos[t] + 1) / ratio;
          for (int64_t w = 0; w < width; ++w) {
            float acc = 0;
            for (int64_t h = 0; h < ih; ++h) acc += rb(std::max(rb(dots[(t * ih + h) * width + w]), 0.0f) * wts[t * ih + h]);
            score[t * width + w] = w >= visible ? kNegInf : rb(acc);
          }
        }
        if (l == c_.candidate_source_layer) {
          const int64_t bs = c_.candidate_block_size, nb = (width + bs - 1) / bs;
          candidates_.assign(n * width, 0);
          cand_width_ = width;
          std::vector<std::pair<float, int64_t>> blk(nb);
          for (int64_t t = 0; t < n; ++t) {
            const int64_t clen = (pos[t] + 1) / ratio;
            const int64_t last = clen >= 1 ? (clen - 1) / bs : -1;
            for (int64_t b = 0; b < nb; ++b) {
              float m = kNegInf;
              for (int64_t w = b * bs; w < std::min(width, (b + 1) * bs); ++w) m = std::max(m, score[t * width + w]);
              blk[b] = {b == last ? std::numeric_limits<float>::infinity() : m, b};
            }
            const int64_t kb = std::min(c_.candidate_topk_blocks, nb);
            std::vector<float> bv(nb);
            for (int64_t b = 0; b < nb; ++b) bv[b] = blk[b].first;
            for (int64_t b : torch_topk(bv.data(), nb, kb, true)) {
              if (!(bv[b] > kNegInf)) continue;
              for (int64_t w = b * bs; w < std::min(width, (b + 1) * bs); ++w) candidates_[t * width + w] = 1;
            }
          }
        } else if (c_.candidate_source_layer >= 0 && c_.candidate_source_layer < l) {
          check(cand_width_ == width, "v41: candidate mask width mismatch at layer ", l);
          for (int64_t i = 0; i < n * width; ++i)
            if (!candidates_[i]) score[i] = kNegInf;
        }
        for (int64_t t = 0; t < n; ++t) {
          std::vector<int64_t> order = torch_topk(score.data() + t * width, width, topk, false);
          std::sort(order.begin(), order.end());
          const int64_t visible = (pos[t] + 1) / ratio;
          for (int64_t j = 0; j < topk; ++j) sel[t * topk + j] = order[j] < visible ? static_cast<int32_t>(order[j]) : -1;
        }
      }
      selection_[l] = sel;
      selection_k_[l] = topk;
    } else {
      const int64_t ix = c_.index_source_of[l];
      sel = selection_[ix];
      topk = selection_k_[ix];
    }
    // 3. RoPE + FP4 (E4M3 block 16) of the latents into the compressed cache
    if (ng) {
      be_.rope(lat.data(), ng, 1, hd, lat_pos.data(), rope, false);
      bf16(lat);
      be_.fake_quant_fp4_e4m3(lat.data(), ng, hd, 16);
      for (int64_t g = 0; g < ng; ++g) std::copy_n(lat.data() + g * hd, hd, S.ckv.append());
    }
  }

  // Pool = ring rows before this chunk ++ the chunk's rows ++ the source's compressed rows.
  const int64_t from = st.ring_from[l];
  const int64_t nprev = std::clamp<int64_t>(P - from, 0, W - 1);
  const int64_t width = ratio > 0 ? end_pos / ratio : 0;
  std::vector<float> pool((nprev + n + width) * hd);
  for (int64_t i = 0; i < nprev; ++i) std::copy_n(st.ring_row(l, (P - nprev + i) % W), hd, pool.data() + i * hd);
  std::copy_n(kv.data(), n * hd, pool.data() + nprev * hd);
  if (width) {
    check(st.sources[src].ckv.size() == width, "v41: compressed rows of layer ", src, " are out of step");
    st.sources[src].ckv.copy_to(pool.data() + (nprev + n) * hd);
  }
  const int64_t K = W + topk;
  std::vector<int32_t> idx(n * K, -1);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = pos[i];
    int64_t k = 0;
    for (int64_t qp = std::max<int64_t>(from, p - W + 1); qp <= p; ++qp)
      idx[i * K + k++] = static_cast<int32_t>(qp < P ? qp - (P - nprev) : nprev + qp - P);
    for (int64_t j = 0; j < topk; ++j) {
      const int32_t s = sel[i * topk + j];
      idx[i * K + W + j] = s < 0 ? -1 : static_cast<int32_t>(nprev + n + s);
    }
  }
  std::vector<float> o(n * H * hd);
  be_.sparse_attention_online(q.data(), n, H, hd, pool.data(), idx.data(), K, B.attn_sink.data(),
                              static_cast<float>(std::pow(static_cast<double>(hd), -0.5)), kAttnBlock, o.data());
  bf16(o);
  for (int64_t i = 0; i < n; ++i) std::copy_n(kv.data() + i * hd, hd, st.ring_row(l, (P + i) % W));
  be_.rope(o.data(), n, H, hd, pos, rope, true);
  bf16(o);
  output_projection(B, o, n, out);
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

// DSpark stage attention (reference DSparkAttention, decode): block queries at p+1..p+B attend the
// stage's ring (its main-token rows up to p) plus every block position.
void V41Model::dspark_attention(int64_t l, V41SequenceState& st, int64_t p, const std::vector<float>& x,
                                std::vector<float>& out) {
  const V41Block& B = blocks_[l];
  const int64_t H = c_.n_heads, hd = c_.head_dim, W = c_.window_size, n = c_.dspark_block_size;
  const ops::RopeFreqs rope = rope_main_.freqs();
  std::vector<int64_t> pos(n);
  for (int64_t i = 0; i < n; ++i) pos[i] = p + 1 + i;
  std::vector<float> qr(n * c_.q_lora_rank), q(n * H * hd), kv(n * hd);
  lin(x.data(), n, B.wq_a, qr.data());
  rmsnorm(qr, B.q_norm, n, c_.q_lora_rank);
  lin(qr.data(), n, B.wq_b, q.data());
  be_.rope(q.data(), n, H, hd, pos.data(), rope, false);
  bf16(q);
  lin(x.data(), n, B.wkv, kv.data());
  rmsnorm(kv, B.kv_norm, n, hd);
  be_.rope(kv.data(), n, 1, hd, pos.data(), rope, false);
  bf16(kv);
  be_.fake_quant_fp8(kv.data(), n, hd, c_.fp8_block);
  check(st.fixed.size() > 0, "dspark: stage ring is empty (draft before any forward)");
  std::vector<float> pool((W + n) * hd);
  for (int64_t i = 0; i < W; ++i) std::copy_n(st.ring_row(l, i), hd, pool.data() + i * hd);
  std::copy_n(kv.data(), n * hd, pool.data() + W * hd);
  const int64_t K = W + n;
  std::vector<int32_t> idx(n * K, -1);
  for (int64_t i = 0; i < n; ++i) {
    int64_t k = 0;
    for (int64_t qp = std::max<int64_t>(st.ring_from[l], p - W + 1); qp <= p; ++qp) idx[i * K + k++] = static_cast<int32_t>(qp % W);
    for (int64_t j = 0; j < n; ++j) idx[i * K + W + j] = static_cast<int32_t>(W + j);
  }
  std::vector<float> o(n * H * hd);
  be_.sparse_attention_online(q.data(), n, H, hd, pool.data(), idx.data(), K, B.attn_sink.data(),
                              static_cast<float>(std::pow(static_cast<double>(hd), -0.5)), kAttnBlock, o.data());
  bf16(o);
  be_.rope(o.data(), n, H, hd, pos.data(), rope, true);
  bf16(o);
  output_projection(B, o, n, out);
}

// ---------------------------------------------------------------------------------------------------
// MoE (spec §5.5)

void V41Model::moe(int64_t l, int64_t n, const std::vector<float>& x, const uint8_t* image, std::vector<float>& out) {
  const V41Block& B = blocks_[l];
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
    const bool vl = image && image[t];
    check(!vl || !B.gate_bias_vl.empty(), "v41: an image token reached layer ", l,
          " but the checkpoint has no ffn.gate.bias_vl there");
    const V41Floats& bias = vl ? B.gate_bias_vl : B.gate_bias;
    if (on_route) scores.insert(scores.end(), sc.begin(), sc.end());
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
  if (on_route) on_route(l, scores, sel, wsel);
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

void V41Model::engram_apply(int64_t l, int64_t n, const int64_t* ids, const uint8_t* image, std::vector<float>& X) {
  const V41Block& B = blocks_[l];
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

// ---------------------------------------------------------------------------------------------------
// blocks (single-pass mHC, spec §5.2)

void V41Model::block_forward(int64_t l, V41SequenceState& st, int64_t P, int64_t n, std::vector<float>& X,
                             std::vector<float>& pre_mix, const int64_t* pos, const uint8_t* image, bool dspark) {
  const V41Block& B = blocks_[l];
  const int64_t D = c_.dim, hc = c_.hc_mult;
  const float eps = static_cast<float>(c_.norm_eps), hc_eps = static_cast<float>(c_.hc_eps);
  std::vector<float> pre(n * hc), post(n * hc), comb(n * hc * hc), a(n * D), sub;
  auto collapse = [&](const std::vector<float>& mix) {
    for (int64_t t = 0; t < n; ++t)
      for (int64_t d = 0; d < D; ++d) {
        float acc = 0;
        for (int64_t k = 0; k < hc; ++k) acc += mix[t * hc + k] * X[(t * hc + k) * D + d];
        a[t * D + d] = rb(acc);
      }
  };
  auto expand = [&]() {
    std::vector<float> mixed(n * hc * D);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t k = 0; k < hc; ++k)
        for (int64_t d = 0; d < D; ++d) {
          float acc = 0;
          for (int64_t j = 0; j < hc; ++j) acc += comb[(t * hc + j) * hc + k] * X[(t * hc + j) * D + d];
          mixed[(t * hc + k) * D + d] = rb(post[t * hc + k] * sub[t * D + d] + acc);
        }
    X.swap(mixed);
  };
  be_.hc_weights(X.data(), n, hc, D, B.hc_attn_fn.data(), B.hc_attn_base.data(), B.hc_attn_scale.data(), eps, hc_eps,
                 c_.hc_sinkhorn_iters, pre.data(), post.data(), comb.data());
  std::vector<float> attn_pre = pre;
  collapse(pre_mix);
  rmsnorm(a, B.attn_norm, n, D);
  if (dspark) dspark_attention(l, st, P, a, sub);
  else attention(l, st, P, n, a, pos, sub);
  expand();
  be_.hc_weights(X.data(), n, hc, D, B.hc_ffn_fn.data(), B.hc_ffn_base.data(), B.hc_ffn_scale.data(), eps, hc_eps,
                 c_.hc_sinkhorn_iters, pre.data(), post.data(), comb.data());
  collapse(attn_pre);
  rmsnorm(a, B.ffn_norm, n, D);
  moe(l, n, a, image, sub);
  expand();
  pre_mix = pre;
}

// ---------------------------------------------------------------------------------------------------
// forward

void V41Model::forward_seq(V41SequenceState& st, const int32_t* ids_in, int64_t n, std::vector<float>& normed_rows,
                           const std::vector<int64_t>& want_rows) {
  const int64_t D = c_.dim, hc = c_.hc_mult, P = st.length_, W = c_.window_size;
  std::vector<int64_t> pos(n), ids(ids_in, ids_in + n);
  std::vector<uint8_t> image(n);  // image-span tokens (spec §5.7): every position carries image_token_id
  for (int64_t i = 0; i < n; ++i) {
    pos[i] = P + i;
    image[i] = image_token_id >= 0 && ids[i] == image_token_id;
  }
  if (st.fixed.size() == 0) {  // the first token: rings and carries (scores start at -inf)
    st.fixed.resize(st.fixed_rows);
    for (int64_t l = 0; l < c_.n_layers; ++l)
      for (int64_t r = 0; st.carry_row[l] >= 0 && r < c_.compress_ratios[l]; ++r)
        std::fill_n(st.fixed.row(st.carry_row[l] + c_.compress_ratios[l] + r), c_.head_dim, kNegInf);
  }
  selection_.assign(c_.n_layers, {});
  selection_k_.assign(c_.n_layers, 0);
  candidates_.clear();
  cand_width_ = 0;

  // Engram hash ids for every engram layer, once per forward.
  std::vector<int64_t> hash;
  const int64_t NL = static_cast<int64_t>(c_.engram_layer_ids.size());
  if (NL) {
    check(engram_ != nullptr, "v41: the model has Engram layers but no token map: put the model's tokenizer.json "
          "in its folder (or call V41Model::set_engram_tokens)");
    // Image-span tokens enter the history as DEAD (they and every lookback through them hash as pad).
    // The state keeps only the last max_ngram-1 entries (all a lookback reads), DEAD included.
    std::vector<int64_t> hist = st.engram_hist;
    const int64_t base = P - static_cast<int64_t>(hist.size());
    for (int64_t i = 0; i < n; ++i) hist.push_back(image[i] ? EngramHasher::kDead : engram_->compressed(ids[i]));
    hash.resize(n * NL * engram_->cols());
    engram_->hash(hist, P, n, hash.data(), base);
    const int64_t keep = std::min<int64_t>(engram_->max_ngram() - 1, static_cast<int64_t>(hist.size()));
    st.engram_hist.assign(hist.end() - keep, hist.end());
    if (on_hash_ids) on_hash_ids(P, hash);
  }

  std::vector<float> X(n * hc * D), pre_mix(n * hc, 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t k = 0; k < hc; ++k) std::copy_n(embed_.data() + ids[t] * D, D, X.data() + (t * hc + k) * D);
    pre_mix[t * hc] = 1.0f;
  }
  const int64_t nt = static_cast<int64_t>(c_.dspark_target_layer_ids.size());
  const bool has_dspark = c_.dspark_block_size > 0 && c_.n_mtp_layers > 0;
  std::vector<float> main_hidden(has_dspark ? n * nt * D : 0);

  // SWA bounded replay: a prefill from 0 longer than KEEP runs the layers after the last KV source on
  // its last KEEP tokens only.
  int64_t cut = 0;  // rows dropped before the layers after the last KV source
  if (replay_compact)
    check(replay_keep >= W + (has_dspark ? c_.dspark_block_size : 0), "DEEPINFER_YOCO_PREFILL_KEEP_TOKENS=",
          replay_keep, " is smaller than the window (", W, ") plus the maximum draft lookback (",
          has_dspark ? c_.dspark_block_size : 0, ")");
  // Only when every requested logit row lies in the kept tail (an engine asks for the last row): a
  // caller that wants earlier rows gets the exact full prefill.
  const bool tail_only = std::all_of(want_rows.begin(), want_rows.end(), [&](int64_t r) { return r >= n - replay_keep; });
  if (replay_compact && tail_only && P == 0 && c_.last_kv_source >= 0 && n > replay_keep) {
    for (int64_t l = c_.last_kv_source + 1; l < c_.n_layers; ++l)
      check(!c_.has_engram(l), "SWA bounded replay: Engram layer ", l, " after the last KV source");
    cut = n - replay_keep;
  }
  int64_t rows = n, row0 = 0;
  for (int64_t l = 0; l < c_.n_layers; ++l) {
    if (cut && l == c_.last_kv_source + 1) {
      auto drop = [&](auto& v, int64_t width) { v.erase(v.begin(), v.begin() + cut * width); };
      drop(X, hc * D);
      drop(pre_mix, hc);
      drop(pos, 1);
      drop(image, 1);
      for (int64_t s = 0; s < c_.n_layers; ++s)
        if (!selection_[s].empty()) drop(selection_[s], selection_k_[s]);
      if (!candidates_.empty()) drop(candidates_, cand_width_);
      for (int64_t s = l; s < c_.n_layers; ++s) st.ring_from[s] = cut;
      rows -= cut;
      row0 = cut;
    }
    if (c_.has_engram(l)) {
      const int64_t ei = c_.engram_index(l), C = engram_->cols();
      std::vector<int64_t> lid(rows * C);
      for (int64_t t = 0; t < rows; ++t) std::copy_n(hash.data() + ((row0 + t) * NL + ei) * C, C, lid.data() + t * C);
      if (on_engram_input) on_engram_input(l, X);
      engram_apply(l, rows, lid.data(), image.data(), X);
    }
    if (on_layer_input) on_layer_input(l, X, pre_mix);
    for (int64_t j = 0; j < nt; ++j)
      if (c_.dspark_target_layer_ids[j] == l)
        for (int64_t t = 0; t < rows; ++t)
          for (int64_t d = 0; d < D; ++d) {
            float acc = 0;
            for (int64_t k = 0; k < hc; ++k) acc += X[((t) * hc + k) * D + d];
            main_hidden[((row0 + t) * nt + j) * D + d] = rb(acc / static_cast<float>(hc));
          }
    block_forward(l, st, P + row0, rows, X, pre_mix, pos.data(), image.data(), false);
  }
  // final collapse with the last pre-mix, norm
  std::vector<float> y = collapse_streams(X, pre_mix, rows, hc, D);
  std::vector<float> yn = y;
  rmsnorm(yn, norm_, rows, D);
  if (on_final) on_final(y, yn);
  normed_rows.resize(want_rows.size() * D);
  for (size_t i = 0; i < want_rows.size(); ++i) {
    const int64_t r = want_rows[i] - row0;
    check(r >= 0 && r < rows, "forward: internal error: logit row ", want_rows[i], " outside the kept tail");
    std::copy_n(yn.data() + r * D, D, normed_rows.data() + i * D);
  }

  // DSpark: every stage's ring gets kv_norm(wkv(main_x)) of every (kept) main token.
  if (has_dspark) {
    const int64_t m = rows;
    std::vector<float> mh(main_hidden.begin() + row0 * nt * D, main_hidden.end()), mx(m * D);
    const V41Block& S0 = blocks_[c_.n_layers];
    lin(mh.data(), m, S0.main_proj, mx.data());
    rmsnorm(mx, S0.main_norm, m, D);
    for (int64_t s = 0; s < c_.n_mtp_layers; ++s) {
      const int64_t l = c_.n_layers + s, hd = c_.head_dim;
      const V41Block& B = blocks_[l];
      std::vector<float> kv(m * hd);
      lin(mx.data(), m, B.wkv, kv.data());
      rmsnorm(kv, B.kv_norm, m, hd);
      be_.rope(kv.data(), m, 1, hd, pos.data(), rope_main_.freqs(), false);
      bf16(kv);
      be_.fake_quant_fp8(kv.data(), m, hd, c_.fp8_block);
      if (row0) st.ring_from[l] = row0;
      for (int64_t i = 0; i < m; ++i) std::copy_n(kv.data() + i * hd, hd, st.ring_row(l, pos[i] % W));
    }
  }
  st.length_ += n;
}

void V41Model::forward(const ForwardBatch& batch, std::vector<float>& logits) {
  const int64_t num = static_cast<int64_t>(batch.states.size());
  check(static_cast<int64_t>(batch.seq_start.size()) == num + 1 && batch.seq_start.front() == 0 &&
            batch.seq_start.back() == static_cast<int32_t>(batch.token_ids.size()),
        "forward: seq_start must have one entry per sequence plus one, from 0 to the token count");
  for (int32_t id : batch.token_ids)
    check(id >= 0 && id < c_.vocab_size, "forward: token id ", id, " is outside the vocabulary (", c_.vocab_size, ")");
  const int64_t T = static_cast<int64_t>(batch.token_ids.size()), D = c_.dim, V = c_.vocab_size;
  for (int32_t r : batch.logit_rows) check(r >= 0 && r < T, "forward: logit row ", r, " is outside the batch");
  // The blocks this batch adds, per pool, must be free before any state changes.
  std::vector<V41SequenceState*> states(num);
  std::map<BlockPool*, int64_t> need;
  for (int64_t s = 0; s < num; ++s) {
    auto* st = states[s] = dynamic_cast<V41SequenceState*>(batch.states[s]);
    check(st != nullptr, "forward: sequence ", s, " has no DeepSeek-V4.1 state");
    check(batch.seq_start[s] <= batch.seq_start[s + 1], "forward: seq_start is not ascending at sequence ", s);
    const int64_t bb = st->pool().block_bytes(), L = st->length();
    need[&st->pool()] += blocks_for(L + batch.seq_start[s + 1] - batch.seq_start[s], bb) - blocks_for(L, bb);
  }
  for (auto [pool, k] : need)
    check(pool->capacity() == 0 || pool->used() + k <= pool->capacity(), "forward: state memory exhausted: ", k,
          " more blocks needed, ", pool->capacity() - pool->used(), " of ", pool->capacity(), " free");
  std::vector<float> normed(batch.logit_rows.size() * D);
  for (int64_t s = 0; s < num; ++s) {
    V41SequenceState* st = states[s];
    const int64_t b = batch.seq_start[s], e = batch.seq_start[s + 1];
    if (e == b) continue;
    std::vector<int64_t> want, slots;
    for (size_t i = 0; i < batch.logit_rows.size(); ++i)
      if (batch.logit_rows[i] >= b && batch.logit_rows[i] < e) {
        want.push_back(batch.logit_rows[i] - b);
        slots.push_back(static_cast<int64_t>(i));
      }
    std::vector<float> rows;
    forward_seq(*st, batch.token_ids.data() + b, e - b, rows, want);
    for (size_t i = 0; i < slots.size(); ++i) std::copy_n(rows.data() + i * D, D, normed.data() + slots[i] * D);
  }
  logits.resize(batch.logit_rows.size() * V);
  be_.linear(normed.data(), static_cast<int64_t>(batch.logit_rows.size()), D, head_.data(), V, logits.data());
}

V41Draft V41Model::draft(V41SequenceState& st, int32_t anchor, const int32_t* force_tokens) {
  check(c_.dspark_block_size > 0 && c_.n_mtp_layers > 0, "dspark: the model has no draft head");
  check(st.length_ > 0, "dspark: draft needs at least one consumed token");
  const int64_t D = c_.dim, hc = c_.hc_mult, n = c_.dspark_block_size, V = c_.vocab_size, R = c_.dspark_markov_rank;
  const int64_t p = st.length_ - 1;
  std::vector<int64_t> ids(n, c_.dspark_noise_token_id);
  ids[0] = anchor;
  std::vector<float> X(n * hc * D), pre_mix(n * hc, 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t k = 0; k < hc; ++k) std::copy_n(embed_.data() + ids[t] * D, D, X.data() + (t * hc + k) * D);
    pre_mix[t * hc] = 1.0f;
  }
  // The draft block is text (anchor + noise): no image routing, as in the reference's forward_spec.
  for (int64_t s = 0; s < c_.n_mtp_layers; ++s)
    block_forward(c_.n_layers + s, st, p, n, X, pre_mix, nullptr, nullptr, true);
  const V41Block& L = blocks_[c_.n_layers + c_.n_mtp_layers - 1];
  std::vector<float> y = collapse_streams(X, pre_mix, n, hc, D);
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
