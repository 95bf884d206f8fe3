#include "model/deepseek_v41/v41_model.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>

#include "backends/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "core/env.h"
#include "core/error.h"
#include "core/progress.h"
#include "model/deepseek_v41/v41_step.h"
#include "model/logits_out.h"
#include "model/weight_loader.h"
#include "parallel/expert_parallel.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::model {

V41Options V41Options::from_env() {
  V41Options o;
  // SWA bounded replay settings (registered in src/core/env.cpp): compact unless set to another mode.
  const std::string mode = env_string("DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE");
  o.replay_compact = mode.empty() || mode == "compact";
  o.replay_keep = env_int("DEEPINFER_YOCO_PREFILL_KEEP_TOKENS");
  o.device = Device::resolve("");
  o.engram_device = env_string("DEEPINFER_ENGRAM_DEVICE");
  return o;
}

// ---------------------------------------------------------------------------------------------------
// state

void V41Model::check_pool(const BlockPool& pool) const {
  using St = V41SequenceState;
  for (auto [width, format] : {std::pair{c_.head_dim, St::kRingFormat}, {c_.head_dim, St::kCompressedFormat},
                               {c_.index_head_dim, St::kIndexKeyFormat}, {c_.head_dim, St::kCarryFormat}}) {
    const int64_t row = row_bytes(format, width);
    check(pool.block_bytes() >= row, "v41: state blocks of ", pool.block_bytes(), " bytes cannot hold a row of ", row,
          " bytes");
  }
  // the carries are read as fp32 rows of the arena (copy_rows), so their rows must tile a block
  const int64_t carry = row_bytes(St::kCarryFormat, c_.head_dim);
  check(pool.block_bytes() % carry == 0, "v41: state blocks of ", pool.block_bytes(), " bytes must hold whole carry rows of ",
        carry, " bytes");
  check(pool.memory().device() == be_.device(), "v41: the state arena is on ", pool.memory().device().str(),
        ", the model on ", be_.device().str());
}

int64_t V41Model::finest_block_bytes() const {
  using St = V41SequenceState;
  int64_t widest = 0;
  for (auto [width, format] : {std::pair{c_.head_dim, St::kRingFormat}, {c_.head_dim, St::kCompressedFormat},
                               {c_.index_head_dim, St::kIndexKeyFormat}, {c_.head_dim, St::kCarryFormat}})
    widest = std::max(widest, row_bytes(format, width));
  const int64_t carry = row_bytes(St::kCarryFormat, c_.head_dim);
  return (widest + carry - 1) / carry * carry;
}

void V41Model::set_state_pool(std::shared_ptr<BlockPool> pool) {
  check(pool != nullptr, "set_state_pool: no pool");
  check_pool(*pool);
  pool_ = std::move(pool);
}

int64_t V41Model::state_blocks_for(int64_t tokens) const { return blocks_for(tokens, pool_->block_bytes()); }

int64_t V41Model::blocks_for(int64_t tokens, int64_t bb) const {
  if (tokens <= 0) return 0;
  using St = V41SequenceState;
  auto bytes = [](int64_t width, RowFormat format) { return row_bytes(format, width); };
  int64_t b = 0;
  for (int64_t l : c_.kv_source_layers) {
    const int64_t rows = tokens / c_.compress_ratios[l];
    b += PagedRows::blocks_for(rows, bytes(c_.head_dim, St::kCompressedFormat), bb);
    if (c_.is_index_source[l]) b += PagedRows::blocks_for(rows, bytes(c_.index_head_dim, St::kIndexKeyFormat), bb);
  }
  return b + PagedRows::blocks_for(St::ring_rows_for(c_, rollback_), bytes(c_.head_dim, St::kRingFormat), bb) +
         PagedRows::blocks_for(St::carry_rows_for(c_, rollback_), bytes(c_.head_dim, St::kCarryFormat), bb);
}

std::unique_ptr<SequenceState> V41Model::new_sequence() const {
  return std::make_unique<V41SequenceState>(pool_, c_, rollback_);
}

// ---------------------------------------------------------------------------------------------------
// loading

namespace {

// The checkpoint's name prefix of block l: "layers.L." for the main layers, "mtp.S." for the DSpark stages.
std::string block_prefix(const V41Config& c, int64_t l) {
  return l >= c.n_layers ? "mtp." + std::to_string(l - c.n_layers) + "." : "layers." + std::to_string(l) + ".";
}

V41Expert load_expert(ops::Backend& mem, const V41Config& c, const WeightLoader& w, int64_t l, int64_t e) {
  const std::string x = block_prefix(c, l) + "ffn.experts." + std::to_string(e) + ".";
  const int64_t D = c.dim, I = c.moe_inter_dim;
  return {load_linear(mem, w, x + "w1", I, D), load_linear(mem, w, x + "w2", D, I), load_linear(mem, w, x + "w3", I, D)};
}

V41Linear group_view(const V41Linear& stack, int64_t g) {
  V41Linear v;
  v.n = stack.n;
  v.k = stack.k;
  v.quant = stack.quant;
  v.q = stack.q.group(g);
  return v;
}

void load_routed(ops::Backend& be, const V41Config& c, const WeightLoader& w, int64_t l, V41Block& B) {
  const std::string x = block_prefix(c, l) + "ffn.experts.";
  const int64_t E = c.experts_for(l), D = c.dim, I = c.moe_inter_dim;
  auto names = [&](const char* proj) {
    std::vector<std::string> v;
    for (int64_t e = 0; e < E; ++e) v.push_back(x + std::to_string(e) + "." + proj);
    return v;
  };
  B.routed = {load_stacked(be, w, names("w1"), I, D), load_stacked(be, w, names("w2"), D, I),
              load_stacked(be, w, names("w3"), I, D)};
  for (int64_t e = 0; e < E; ++e)
    B.experts[e] = {group_view(B.routed.w1, e), group_view(B.routed.w2, e), group_view(B.routed.w3, e)};
}

// routed = false: the routed experts are left out (expert parallelism loads the held ones).
void load_block(ops::Backend& mem, const V41Config& c, const WeightLoader& w, std::vector<std::vector<uint8_t>>& keep,
                int64_t l, V41Block& B, bool routed) {
  auto F = [&](const std::string& name, const std::vector<int64_t>& shape) { return to_param(mem, w.floats(name, shape)); };
  const bool mtp = l >= c.n_layers;
  const std::string p = block_prefix(c, l);
  const int64_t D = c.dim, hc = c.hc_mult, mix = (2 + hc) * hc, H = c.n_heads, hd = c.head_dim;
  B.attn_norm = F(p + "attn_norm.weight", {D});
  B.ffn_norm = F(p + "ffn_norm.weight", {D});
  B.hc_attn_fn = F(p + "hc_attn_fn", {mix, hc * D});
  B.hc_attn_base = F(p + "hc_attn_base", {mix});
  B.hc_attn_scale = F(p + "hc_attn_scale", {3});
  B.hc_ffn_fn = F(p + "hc_ffn_fn", {mix, hc * D});
  B.hc_ffn_base = F(p + "hc_ffn_base", {mix});
  B.hc_ffn_scale = F(p + "hc_ffn_scale", {3});
  const std::string a = p + "attn.";
  B.wq_a = load_linear(mem, w, a + "wq_a", c.q_lora_rank, D);
  B.q_norm = F(a + "q_norm.weight", {c.q_lora_rank});
  B.wq_b = load_linear(mem, w, a + "wq_b", H * hd, c.q_lora_rank);
  B.wkv = load_linear(mem, w, a + "wkv", hd, D);
  B.kv_norm = F(a + "kv_norm.weight", {hd});
  // the reference dequantizes wo_a to bf16 at load and runs it without act quant
  B.wo_a = load_linear(mem, w, a + "wo_a", c.o_groups * c.o_lora_rank, H * hd / c.o_groups, true);
  B.wo_b = load_linear(mem, w, a + "wo_b", D, c.o_groups * c.o_lora_rank);
  B.attn_sink = F(a + "attn_sink", {H});
  if (!mtp && c.is_kv_source[l]) {
    B.c_wkv = load_linear(mem, w, a + "compressor.wkv", hd, D);
    if (c.compress_ratios[l] > 1) B.c_wgate = load_linear(mem, w, a + "compressor.wgate", hd, D);
    B.c_norm = F(a + "compressor.norm.weight", {hd});
  }
  if (!mtp && c.is_index_source[l]) {
    B.i_wq_b = load_linear(mem, w, a + "indexer.wq_b", c.index_n_heads * c.index_head_dim, c.q_lora_rank);
    B.i_weights_proj = load_linear(mem, w, a + "indexer.weights_proj", c.index_n_heads, D);
    if (c.is_kv_source[l]) {
      B.i_wk = load_linear(mem, w, a + "indexer.wk", c.index_head_dim, hd);
      B.i_k_norm = F(a + "indexer.k_norm.weight", {c.index_head_dim});
    }
  }
  const int64_t E = c.experts_for(l), I = c.moe_inter_dim;
  const std::string f = p + "ffn.";
  B.gate = load_linear(mem, w, f + "gate", E, D, true);
  B.gate_bias = F(f + "gate.bias", {E});
  if (w.has(f + "gate.bias_vl")) B.gate_bias_vl = F(f + "gate.bias_vl", {E});
  B.experts.resize(E);
  if (routed) load_routed(mem, c, w, l, B);
  B.shared = {load_linear(mem, w, f + "shared_experts.w1", I, D), load_linear(mem, w, f + "shared_experts.w2", D, I),
              load_linear(mem, w, f + "shared_experts.w3", I, D)};
  if (!mtp && c.has_engram(l)) {
    const int64_t ei = c.engram_index(l), ehd = c.engram_head_dim, cols = (c.engram_max_ngram_size - 1) * c.engram_n_heads;
    const int64_t rows = c.engram_num_embeddings[ei];
    check(ehd % 32 == 0, "engram_head_dim must be a multiple of 32");
    // The table stays memory-mapped (the release's are ~92 GiB each) and is read row by row.
    B.e_table = w.raw(p + "engram.embed.weight", DType::F8_E4M3, {rows, ehd}, keep);
    B.e_scale = w.raw(p + "engram.embed.scale", DType::F8_E8M0, {rows, ehd / 32}, keep);
    B.e_rows = rows;
    B.e_checked = std::vector<std::atomic<uint64_t>>(static_cast<size_t>((rows + 63) / 64));
    B.e_wkv = load_linear(mem, w, p + "engram.wkv", (hc + 1) * D, cols * ehd);
    std::vector<float> q = w.floats(p + "engram.q_weight", {hc, D}), k = w.floats(p + "engram.k_weight", {hc, D});
    for (int64_t i = 0; i < hc * D; ++i) q[i] *= k[i];
    B.e_qk = to_param(mem, q);
  }
  if (mtp) {
    const int64_t s = l - c.n_layers;
    if (s == 0) {
      const int64_t nt = static_cast<int64_t>(c.dspark_target_layer_ids.size());
      B.main_proj = load_linear(mem, w, p + "main_proj", D, nt * D);
      B.main_norm = F(p + "main_norm.weight", {D});
    }
    if (s == c.n_mtp_layers - 1) {
      B.final_norm = F(p + "norm.weight", {D});
      B.markov_embed = row_table(mem, w.floats(p + "markov_head.embed.weight", {c.vocab_size, c.dspark_markov_rank}),
                                 c.vocab_size, c.dspark_markov_rank);
      B.markov_head = load_linear(mem, w, p + "markov_head.head", c.vocab_size, c.dspark_markov_rank, true);
      B.confidence = load_linear(mem, w, p + "confidence_head.proj", 1, D + c.dspark_markov_rank, true);
    }
  }
}

}  // namespace

V41Model::V41Model(V41Config c, ops::Backend& be, const V41Options& options)
    : c_(std::move(c)), be_(be), ws_(be), fws_(be), prof_(be) {
  rope_main_ = make_rope_table(c_.rope_main, c_.rope_head_dim);
  rope_compress_ = make_rope_table(c_.rope_compress, c_.rope_head_dim);
  pool_ = std::make_shared<BlockPool>(16384, 0, &be_);
  rope_main_freq_ = param(rope_main_.inv_freq);
  rope_compress_freq_ = param(rope_compress_.inv_freq);
  set_options(options);
}

void V41Model::set_options(const V41Options& o) {
  check(o.replay_keep > 0, "DEEPINFER_YOCO_PREFILL_KEEP_TOKENS must be positive, got ", o.replay_keep);
  check(o.max_rollback_tokens >= 0 || o.max_rollback_tokens == V41Options::kAuto,
        "v41: max_rollback_tokens must be >= 0, got ", o.max_rollback_tokens);
  for (int64_t l = 0; l < c_.n_layers && !o.expert_parallel && l < static_cast<int64_t>(blocks_.size()); ++l)
    check(loaded_experts(l) == c_.n_routed_experts, "v41: the model was loaded with expert parallelism (some experts "
          "live on other ranks); it cannot run without it");
  o_ = o;
  const bool dspark = c_.dspark_block_size > 0 && c_.n_mtp_layers > 0;
  rollback_ = o.max_rollback_tokens == V41Options::kAuto ? (dspark ? c_.dspark_block_size : 0) : o.max_rollback_tokens;
  image_token_ = o.image_token_id == V41Options::kAuto ? (c_.has_vision ? c_.image_token_id : -1) : o.image_token_id;
  check_pool(*pool_);
}

std::unique_ptr<V41Model> V41Model::load(const std::string& dir, const V41Options& options) {
  V41Config c = V41Config::from_file(dir + "/config.json");
  auto m = std::make_unique<V41Model>(c, ops::backend_for(options.device), options);
  std::optional<WeightLoader> loader;
  if (options.dummy_weights) {
    loader.emplace(DummyWeights{}, c.fp8_block);
  } else {
    m->ckpt_ = std::make_unique<io::Checkpoint>(io::Checkpoint::open(dir));
    if (options.device.is_cpu()) check_fits_in_memory(*m->ckpt_, {"engram.embed."});  // Engram tables stay mapped
    else check_fits_on_device(*m->ckpt_, {"engram.embed."}, m->be_);
    loader.emplace(*m->ckpt_, c.fp8_block, c.fp8_block, [](const std::string& n) { return n; });
  }
  const WeightLoader& w = *loader;
  m->embed_ = row_table(m->be_, w.floats("embed.weight", {c.vocab_size, c.dim}), c.vocab_size, c.dim);
  m->head_ = load_linear(m->be_, w, "head", c.vocab_size, c.dim, true);
  m->norm_ = to_param(m->be_, w.floats("norm.weight", {c.dim}));
  const int64_t nb = c.n_layers + (c.dspark_block_size > 0 ? c.n_mtp_layers : 0);
  m->blocks_.resize(nb);
  const bool ep = options.expert_parallel != nullptr;  // main layers' routed experts: the held ones only
  Progress progress(options.dummy_weights ? "DeepSeek-V4.1 dummy weights" : "loading DeepSeek-V4.1", nb, "layers");
  for (int64_t l = 0; l < nb; ++l) {
    load_block(m->be_, m->c_, w, m->dummy_tables_, l, m->blocks_[l], !ep || l >= c.n_layers);
    progress.update(l + 1);
  }
  if (ep) m->load_held_experts();
  m->place_engram_tables();
  // Engram's compressed token map comes from the tokenizer: every id decoded alone (special tokens
  // kept) and its vocabulary string. Without tokenizer.json, set_engram_tokens() must be called.
  const std::string tok_path = dir + "/tokenizer.json";
  if (!c.engram_layer_ids.empty() && std::ifstream(tok_path).good()) {
    const EngramTokenStrings strings = engram_token_strings(tokenizer::Tokenizer::load(tok_path));
    try {
      m->set_engram_tokens(strings.decoded, strings.raw);
    } catch (const Error& e) {  // the hasher checks config.json's Engram fields (against the tokenizer)
      fail(dir, "/config.json: ", e.what());
    }
  }
  return m;
}

// The Engram tables stay where the loader put them (host memory, memory-mapped) unless the model runs on
// a GPU and DEEPINFER_ENGRAM_DEVICE asks for the device (device), or they take at most half of the
// memory left free by the other weights (auto): then each step's rows are gathered on the device.
void V41Model::place_engram_tables() {
  const std::string& where = o_.engram_device;
  check(where == "auto" || where == "host" || where == "device", "DEEPINFER_ENGRAM_DEVICE = '", where,
        "': not auto, host or device");
  if (be_.device().is_cpu() || where == "host") return;
  size_t bytes = 0;
  for (const V41Block& B : blocks_)
    if (B.e_table) bytes += static_cast<size_t>(B.e_rows * c_.engram_head_dim * 33 / 32);  // codes + scales
  if (bytes == 0) return;
  size_t free = 0, total = 0;
  const bool known = be_.memory_info(&free, &total);
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  if (where == "auto" && (!known || bytes > free / 2)) return;
  check(!known || bytes <= free, "DEEPINFER_ENGRAM_DEVICE = device: the Engram tables need ",
        static_cast<int64_t>(bytes / kGiB * 10) / 10.0, " GiB on ", be_.device().str(), ", which has ",
        static_cast<int64_t>(free / kGiB * 10) / 10.0, " GiB free (host keeps them in host memory)");
  for (V41Block& B : blocks_) {
    if (!B.e_table) continue;
    const size_t codes = static_cast<size_t>(B.e_rows * c_.engram_head_dim), scales = codes / 32;
    B.e_device = Buffer(be_, codes + scales);  // the host copy stays: check_engram_rows reads it
    auto* d = static_cast<uint8_t*>(B.e_device.data());
    be_.upload(d, B.e_table, codes);
    be_.upload(d + codes, B.e_scale, scales);
  }
}

void V41Model::load_held_experts() {
  const parallel::ExpertParallel& ep = *o_.expert_parallel;
  check(ep.config().num_layers == c_.n_layers && ep.config().num_experts == c_.n_routed_experts,
        "expert parallelism: set up for ", ep.config().num_layers, " layers of ", ep.config().num_experts,
        " experts, the model has ", c_.n_layers, " of ", c_.n_routed_experts);
  std::optional<WeightLoader> loader;  // the experts come from where load() took the rest
  if (o_.dummy_weights) {
    loader.emplace(DummyWeights{}, c_.fp8_block);
  } else {
    check(ckpt_ != nullptr, "expert parallelism: the model has no checkpoint to load experts from");
    loader.emplace(*ckpt_, c_.fp8_block, c_.fp8_block, [](const std::string& n) { return n; });
  }
  const WeightLoader& w = *loader;
  for (int64_t l = 0; l < c_.n_layers; ++l) {
    const std::vector<int64_t> held = ep.held_experts(l);
    std::vector<V41Expert>& experts = blocks_[l].experts;
    for (int64_t e = 0; e < static_cast<int64_t>(experts.size()); ++e) {
      const bool want = std::binary_search(held.begin(), held.end(), e), has = experts[e].w1.n > 0;
      if (want && !has) experts[e] = load_expert(be_, c_, w, l, e);
      if (!want && has) experts[e] = {};
    }
  }
}

int64_t V41Model::loaded_experts(int64_t layer) const {
  const auto& ex = blocks_.at(layer).experts;
  return std::count_if(ex.begin(), ex.end(), [](const V41Expert& e) { return e.w1.n > 0; });
}

void V41Model::set_engram_tokens(const std::vector<std::string>& decoded, const std::vector<std::string>& raw) {
  int64_t size = 0;
  std::vector<int64_t> map = build_compressed_token_map(decoded, raw, &size);
  engram_ = std::make_unique<EngramHasher>(c_, std::move(map), size);
}


// ---------------------------------------------------------------------------------------------------
// primitives with the reference's rounding points

Param V41Model::param(const std::vector<float>& v) const { return to_param(be_, v); }

std::vector<float> V41Model::host(const float* p, int64_t n) const {
  std::vector<float> out(n);
  be_.download(out.data(), p, n * sizeof(float));
  return out;
}

void V41Model::lin(const float* x, int64_t m, const V41Linear& W, float* y, bool to_bf16) {
  if (W.quant) {  // act_quant (FP8 e4m3, UE8M0 per fp8_block) then the block-scaled GEMM: bf16 out
    check(to_bf16, "v41: a quantized projection's output is bf16 (the reference GEMM's dtype)");
    be_.linear_quant(x, m, W.q, c_.fp8_block, y);
    return;
  }
  be_.linear_plain(x, m, W.q, y);
  if (to_bf16) be_.round_bf16(y, m * W.n);
}

void V41Model::lin_grouped(const float* x, int64_t m, const V41Linear& W, const int32_t* offsets, int64_t max_rows,
                           float* y) {
  if (W.quant) return be_.linear_quant_grouped(x, m, W.q, offsets, max_rows, c_.fp8_block, y);
  ops::for_each_group(be_, offsets, W.q.groups, m, [&](int64_t g, int64_t row, int64_t rows) {
    be_.linear_plain(x + row * W.k, rows, W.q.group(g), y + row * W.n);  // float experts (test checkpoints)
  });
  be_.round_bf16(y, m * W.n);
}

void V41Model::rmsnorm(float* x, const Param& w, int64_t rows, int64_t dim) {
  be_.rms_norm(x, w.data(), rows, dim, static_cast<float>(c_.norm_eps), x, true);
}

const ops::RopeFreqs V41Model::rope_for(int64_t l) const {
  if (l < c_.n_layers && c_.compress_ratios[l] > 0)
    return {rope_compress_freq_.data(), rope_compress_.rope_dim, rope_compress_.attention_factor};
  return main_rope();
}

// The streams of fresh tokens: every stream holds the embedding; the pre-mix starts on stream 0.
void V41Model::embed(const std::vector<int64_t>& ids, Tensor& X, Tensor& pre_mix, const std::vector<int32_t>& rows_for,
                     const std::vector<float>& rows_in) {
  const int64_t n = static_cast<int64_t>(ids.size()), hc = c_.hc_mult, D = c_.dim;
  std::vector<int32_t> rows(n * hc);
  std::vector<float> mix(n * hc, 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t k = 0; k < hc; ++k) rows[t * hc + k] = static_cast<int32_t>(ids[t]);
    mix[t * hc] = 1.0f;
  }
  X = fws_.f32({n, hc, D});
  pre_mix = fws_.upload(mix, DType::F32);
  Workspace::Scope scope(ws_);
  Tensor r = ws_.upload(rows, DType::I32);
  embed_.gather(be_, r.i32(), n * hc, X.f32());
  if (rows_for.empty()) return;
  const int64_t m = static_cast<int64_t>(rows_for.size());
  check(static_cast<int64_t>(rows_in.size()) == m * D, "forward: embed_rows holds ", rows_in.size(), " values for ", m,
        " tokens of dim ", D);
  std::vector<int32_t> src, dst;  // row i into every stream of its token
  for (int64_t i = 0; i < m; ++i)
    for (int64_t k = 0; k < hc; ++k) src.push_back(static_cast<int32_t>(i)), dst.push_back(static_cast<int32_t>(rows_for[i] * hc + k));
  Tensor v = ws_.upload(rows_in, DType::F32), s = ws_.upload(src, DType::I32), d = ws_.upload(dst, DType::I32);
  be_.copy_rows(v.f32(), s.i32(), m * hc, D, X.f32(), d.i32());
}

// ---------------------------------------------------------------------------------------------------
// blocks (single-pass mHC, spec §5.2)

void V41Model::point(const Step& s, int64_t l, const char* name, const float* x, int64_t n) const {
  if (s.taps && s.taps->on_point) s.taps->on_point(l, name, host(x, n));
}

void V41Model::block_forward(int64_t l, Step& s, Tensor& X, Tensor& pre_mix) {
  const int64_t D = c_.dim, hc = c_.hc_mult, n = s.rows();
  const float eps = static_cast<float>(c_.norm_eps), hc_eps = static_cast<float>(c_.hc_eps);
  const V41Block& B = blocks_[l];
  Workspace::Scope scope(ws_);
  Tensor pre = ws_.f32({n, hc}), attn_pre = ws_.f32({n, hc}), post = ws_.f32({n, hc}), comb = ws_.f32({n, hc, hc});
  Tensor a = ws_.f32({n, D}), sub = ws_.f32({n, D});
  auto collapse = [&](const Tensor& mix) { be_.hc_collapse(X.f32(), mix.f32(), n, hc, D, true, a.f32()); };
  auto expand = [&]() {
    be_.hc_expand(X.f32(), sub.f32(), post.f32(), comb.f32(), n, hc, D, true, X.f32());  // in place
  };
  prof_.section(s.dspark ? "draft_mhc" : "attn_mhc");
  be_.hc_weights(X.f32(), n, hc, D, B.hc_attn_fn.data(), B.hc_attn_base.data(), B.hc_attn_scale.data(), eps, hc_eps,
                 c_.hc_sinkhorn_iters, attn_pre.f32(), post.f32(), comb.f32());
  point(s, l, "attn_pre", attn_pre.f32(), n * hc);
  collapse(pre_mix);
  point(s, l, "attn_in", a.f32(), n * D);
  rmsnorm(a.f32(), B.attn_norm, n, D);
  point(s, l, "attn_normed", a.f32(), n * D);
  if (s.dspark) dspark_attention(l, s, a.f32(), sub.f32());
  else attention(l, s, a.f32(), sub.f32());
  point(s, l, "attn_out", sub.f32(), n * D);
  prof_.section(s.dspark ? "draft_mhc" : "ffn_mhc");
  expand();
  point(s, l, "after_attn", X.f32(), n * hc * D);
  be_.hc_weights(X.f32(), n, hc, D, B.hc_ffn_fn.data(), B.hc_ffn_base.data(), B.hc_ffn_scale.data(), eps, hc_eps,
                 c_.hc_sinkhorn_iters, pre.f32(), post.f32(), comb.f32());
  point(s, l, "ffn_pre", pre.f32(), n * hc);
  collapse(attn_pre);
  point(s, l, "ffn_in", a.f32(), n * D);
  rmsnorm(a.f32(), B.ffn_norm, n, D);
  point(s, l, "ffn_normed", a.f32(), n * D);
  moe(l, s, a.f32(), sub.f32());
  expand();
  be_.copy(pre_mix.data, pre.data, pre.bytes());
}

// Keeps rows `kept` (device I32, n rows) of a forward-lifetime tensor of `width` 4-byte entries per row.
static Tensor compact(ops::Backend& be, Workspace& fws, const Tensor& t, int64_t width, const Tensor& kept, int64_t n) {
  Tensor out = fws.take(t.dtype, {std::max<int64_t>(n, 1), width * 4 / static_cast<int64_t>(dtype_bits(t.dtype) / 8)});
  be.copy_rows(static_cast<const float*>(t.data), kept.i32(), n, width, static_cast<float*>(out.data), nullptr);
  return out;
}

// ---------------------------------------------------------------------------------------------------
// forward

void V41Model::forward_batch(const ForwardBatch& batch, std::vector<float>& logits, const ForwardTaps* taps) {
  const std::vector<int64_t> pos = check_batch(batch, c_.vocab_size);
  const int64_t num = static_cast<int64_t>(batch.states.size()), D = c_.dim, hc = c_.hc_mult, W = c_.window_size;
  // The blocks this batch adds must be free before any state changes; one arena holds every state.
  prof_.section("setup");
  Step s;
  s.taps = taps;
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
    if (!st->started()) st->start();
  s.sel_k.assign(c_.n_layers, 0);

  // Engram hash ids [T, n_engram_layers, cols], per sequence from its history.
  prof_.section("engram_hash");
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

  // Context parallelism: from here this rank computes its share of every sequence's rows; the whole
  // step stays in `whole` for what crosses rows (v41_context_parallel.cpp).
  Step whole;
  std::vector<int64_t> cut_mine = cut;  // the cut in this rank's rows
  std::vector<int32_t> embed_tokens = batch.embed_tokens;
  std::vector<float> embed_rows = batch.embed_rows;
  if (o_.context_parallel) {
    check(taps == nullptr, "forward: taps observe the whole batch; with context parallelism each rank holds a part");
    whole = std::move(s);
    s = take_my_rows(whole, ids, hash, NL * (engram_ ? engram_->cols() : 0), embed_tokens, embed_rows, cut, cut_mine);
  }

  prof_.section("embed");
  ws_.reset();
  fws_.reset();
  idle_.begin(be_);
  s.pos_d = fws_.upload(s.pos, DType::I64);
  s.image_d = fws_.upload(s.image, DType::U8);
  if (s.all) whole.pos_d = fws_.upload(whole.pos, DType::I64);
  s.sel.assign(c_.n_layers, Tensor{});
  Tensor X, pre_mix;
  embed(ids, X, pre_mix, embed_tokens, embed_rows);
  const int64_t nt = static_cast<int64_t>(c_.dspark_target_layer_ids.size());
  Tensor main_hidden = has_dspark ? fws_.f32({s.rows(), nt, D}) : Tensor{};  // [rows, targets, D] for the DSpark rings
  for (int64_t l = 0; l < c_.n_layers; ++l) {
    if (any_cut && l == c_.last_kv_source + 1) {
      const std::vector<int32_t> kept = s.kept_rows(cut_mine);
      const int64_t nk = static_cast<int64_t>(kept.size());
      Tensor kd = fws_.upload(kept, DType::I32);
      X = compact(be_, fws_, X, hc * D, kd, nk);
      pre_mix = compact(be_, fws_, pre_mix, hc, kd, nk);
      if (has_dspark) main_hidden = compact(be_, fws_, main_hidden, nt * D, kd, nk);
      for (int64_t j = 0; j < l; ++j)
        if (s.sel[j].data) s.sel[j] = compact(be_, fws_, s.sel[j], std::max<int64_t>(s.sel_k[j], 1), kd, nk);
      if (s.cand.data) s.cand = compact(be_, fws_, s.cand, s.cand_ld / 4, kd, nk);
      s.cut_rows(hash, NL * (engram_ ? engram_->cols() : 0), cut_mine);
      s.commit_cut(cut_mine);
      s.pos_d = fws_.upload(s.pos, DType::I64);
      s.image_d = fws_.upload(s.image, DType::U8);
      if (s.all) {
        whole.commit_cut(cut);
        whole.pos_d = fws_.upload(whole.pos, DType::I64);
      }
      for (int64_t q = 0; q < s.num(); ++q)
        for (int64_t r = l; r < c_.n_layers && cut[q]; ++r) s.st[q]->ring_from[r] = cut[q];
    }
    const int64_t rows = s.rows();
    if (c_.has_engram(l)) {
      const int64_t ei = c_.engram_index(l), C = engram_->cols();
      std::vector<int64_t> lid(rows * C);
      for (int64_t t = 0; t < rows; ++t) std::copy_n(hash.data() + (t * NL + ei) * C, C, lid.data() + t * C);
      if (taps && taps->on_engram_input) {  // may overwrite the streams (teacher forcing)
        std::vector<float> hx = host(X.f32(), X.numel());
        taps->on_engram_input(l, hx);
        be_.upload(X.data, hx.data(), X.bytes());
      }
      prof_.section("engram");
      engram_apply(l, s, lid, X.f32());
    }
    if (taps && taps->on_layer_input) {
      std::vector<float> hx = host(X.f32(), X.numel()), hp = host(pre_mix.f32(), pre_mix.numel());
      taps->on_layer_input(l, hx, hp);
      be_.upload(X.data, hx.data(), X.bytes());
      be_.upload(pre_mix.data, hp.data(), pre_mix.bytes());
    }
    for (int64_t j = 0; j < nt; ++j)
      if (c_.dspark_target_layer_ids[j] == l) be_.hc_mean(X.f32(), rows, hc, D, main_hidden.f32() + j * D, nt * D);
    block_forward(l, s, X, pre_mix);
  }
  // final collapse with the last pre-mix, norm
  prof_.section("head");
  const int64_t rows = s.rows();
  Tensor y = ws_.f32({rows, D}), yn = ws_.f32({rows, D});
  be_.hc_collapse(X.f32(), pre_mix.f32(), rows, hc, D, true, y.f32());  // the final collapse, last pre-mix
  be_.copy(yn.data, y.data, y.bytes());
  rmsnorm(yn.f32(), norm_, rows, D);
  if (taps && taps->on_final) taps->on_final(host(y.f32(), y.numel()), host(yn.f32(), yn.numel()));
  const int64_t R = static_cast<int64_t>(batch.logit_rows.size());
  std::vector<int32_t> pick(R);
  for (int64_t i = 0; i < R; ++i) {
    const int64_t r = batch.logit_rows[i];
    int64_t q = static_cast<int64_t>(std::upper_bound(batch.seq_start.begin(), batch.seq_start.end(), r) -
                                     batch.seq_start.begin()) - 1;
    while (batch.seq_start[q + 1] == batch.seq_start[q]) ++q;  // skip sequences without tokens
    const int64_t qs = seq_of_step[q], local = r - batch.seq_start[q] - cut[qs];
    check(local >= 0, "forward: internal error: logit row ", r, " outside the kept tail");
    pick[i] = static_cast<int32_t>(s.whole().begin[qs] + local);
  }
  Tensor normed = ws_.f32({std::max<int64_t>(R, 1), D});
  cp_logits_rows(s, pick, yn.f32(), normed);
  prof_.section("dspark_rings");
  if (has_dspark) dspark_rings(s, main_hidden.f32());
  for (int64_t q = 0; q < s.num(); ++q) s.st[q]->advance_to(s.end_pos[q]);
  prof_.section("lm_head");
  Tensor out = ws_.f32({std::max<int64_t>(R, 1), c_.vocab_size});
  be_.linear_plain(normed.f32(), R, head_.q, out.f32());
  return_logits(be_, ws_, out.f32(), R, c_.vocab_size, batch.draws, logits);
  idle_.end(be_);
  prof_.finish();
}

// DSpark: every stage's ring gets kv_norm(wkv(main_x)) of every (kept) main token.
void V41Model::dspark_rings(Step& s, const float* main_hidden) {
  const int64_t m = s.rows(), D = c_.dim, hd = c_.head_dim;
  Workspace::Scope scope(ws_);
  Tensor mx = ws_.f32({m, D}), kv = ws_.f32({m, hd});
  const V41Block& S0 = blocks_[c_.n_layers];
  lin(main_hidden, m, S0.main_proj, mx.f32());
  rmsnorm(mx.f32(), S0.main_norm, m, D);
  for (int64_t stage = 0; stage < c_.n_mtp_layers; ++stage) {
    const int64_t l = c_.n_layers + stage;
    window_kv(blocks_[l], mx.f32(), s, main_rope(), kv.f32());
    Step& w = s.whole();  // context parallelism: every rank's rows into the rings
    for (int64_t q = 0; q < w.num(); ++q) {
      V41SequenceState& st = *w.st[q];
      if (w.begin[q + 1] > w.begin[q] && st.length_ == 0 && w.first(q) > 0) st.ring_from[l] = w.first(q);  // compact replay
    }
    write_rings(w, l, window_rows(s, kv, hd, 0).f32());
  }
}

V41Draft V41Model::draft(V41SequenceState& st, int32_t anchor, const int32_t* force_tokens) {
  return std::move(draft({&st}, {anchor}, {force_tokens}).front());
}

std::vector<V41Draft> V41Model::draft(const std::vector<V41SequenceState*>& states, const std::vector<int32_t>& anchors,
                                      const std::vector<const int32_t*>& force_tokens, bool with_logits) {
  check(c_.dspark_block_size > 0 && c_.n_mtp_layers > 0, "dspark: the model has no draft head");
  const int64_t S = static_cast<int64_t>(states.size());
  check(static_cast<int64_t>(anchors.size()) == S, "dspark: ", S, " states but ", anchors.size(), " anchors");
  check(force_tokens.empty() || static_cast<int64_t>(force_tokens.size()) == S, "dspark: force_tokens per state");
  if (S == 0) return {};
  prof_.section("draft_setup");
  const int64_t D = c_.dim, hc = c_.hc_mult, n = c_.dspark_block_size, V = c_.vocab_size, R = c_.dspark_markov_rank;
  // The draft blocks are text (anchor + noise): no image routing, as in the reference's forward_spec.
  Step s;
  s.dspark = true;
  std::vector<int64_t> ids;
  for (int64_t q = 0; q < S; ++q) {
    V41SequenceState& st = *states[q];
    check(st.length_ > 0, "dspark: draft needs at least one consumed token");
    check(st.pool().memory().device() == be_.device(), "dspark: the state lives on another device");
    for (int64_t r = 0; r < q; ++r) check(states[r] != &st, "dspark: a state appears twice in one draft batch");
    s.st.push_back(&st);
    s.begin.push_back(q * n);
    s.end_pos.push_back(st.length_);
    for (int64_t i = 0; i < n; ++i) {
      s.pos.push_back(st.length_ + i);  // positions p+1 .. p+block, p = length - 1
      ids.push_back(i == 0 ? anchors[q] : c_.dspark_noise_token_id);
    }
  }
  s.begin.push_back(S * n);
  s.image.assign(S * n, 0);
  ws_.reset();
  fws_.reset();
  s.pos_d = fws_.upload(s.pos, DType::I64);
  s.image_d = fws_.upload(s.image, DType::U8);
  Tensor X, pre_mix;
  embed(ids, X, pre_mix);
  for (int64_t stage = 0; stage < c_.n_mtp_layers; ++stage) block_forward(c_.n_layers + stage, s, X, pre_mix);
  const V41Block& L = blocks_[c_.n_layers + c_.n_mtp_layers - 1];
  const int64_t T = S * n;
  Tensor y = ws_.f32({T, D}), yn = ws_.f32({T, D}), logits = ws_.f32({T, V}), bias = ws_.f32({S, V});
  Tensor emb = ws_.f32({S, R}), feat = ws_.f32({S, D + R}), conf = ws_.f32({T}), pick = ws_.f32({S, V});
  // toks[i][q]: position i's draft of sequence q; rows[i][q]: its row of the flat block.
  Tensor toks = ws_.i32({n, S}), rows = ws_.i32({n, S}), prev = ws_.i32({S});
  prof_.section("draft_head_chain");
  be_.hc_collapse(X.f32(), pre_mix.f32(), T, hc, D, true, y.f32());
  be_.copy(yn.data, y.data, y.bytes());
  rmsnorm(yn.f32(), L.final_norm, T, D);
  be_.linear_plain(yn.f32(), T, head_.q, logits.f32());
  std::vector<int32_t> row(n * S);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t q = 0; q < S; ++q) row[i * S + q] = static_cast<int32_t>(q * n + i);
  be_.upload(rows.data, row.data(), row.size() * sizeof(int32_t));
  be_.upload(prev.data, anchors.data(), S * sizeof(int32_t));
  // The Markov chain, every sequence at once: bias from the previous token's embedding row, greedy
  // choice, confidence. The chosen tokens stay on the device (one read-back at the end), except when
  // tests force the chain's tokens: then each position's choice is read back to build the next input.
  const bool forcing = std::any_of(force_tokens.begin(), force_tokens.end(), [](const int32_t* f) { return f; });
  std::vector<int32_t> picked(S);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t* prev_d = i == 0 || forcing ? prev.i32() : toks.i32() + (i - 1) * S;
    const int32_t* rows_d = rows.i32() + i * S;
    int32_t* tok_d = toks.i32() + i * S;
    L.markov_embed.gather(be_, prev_d, S, emb.f32());
    be_.linear_plain(emb.f32(), S, L.markov_head.q, bias.f32());
    be_.copy_rows(logits.f32(), rows_d, S, V, pick.f32(), nullptr);
    be_.add(pick.f32(), bias.f32(), S * V);
    be_.copy_rows(pick.f32(), nullptr, S, V, logits.f32(), rows_d);  // the logits keep the bias
    be_.argmax(pick.f32(), S, V, tok_d);
    be_.copy_rows(y.f32(), rows_d, S, D, pick.f32(), nullptr);  // feat = [y row, embedding row]
    be_.copy_2d(pick.f32(), D, S, D, feat.f32(), D + R);
    be_.copy_2d(emb.f32(), R, S, R, feat.f32() + D, D + R);
    be_.linear_plain(feat.f32(), S, L.confidence.q, bias.f32());
    be_.copy_rows(bias.f32(), nullptr, S, 1, conf.f32(), rows_d);
    if (forcing) {
      be_.download(picked.data(), tok_d, S * sizeof(int32_t));
      for (int64_t q = 0; q < S; ++q)
        if (force_tokens[q]) picked[q] = force_tokens[q][i];
      be_.upload(prev.data, picked.data(), S * sizeof(int32_t));
    }
  }
  std::vector<int32_t> drafted(n * S);
  be_.download(drafted.data(), toks.data, drafted.size() * sizeof(int32_t));
  const std::vector<float> hc_ = host(conf.f32(), T);
  std::vector<V41Draft> out(S);
  for (int64_t q = 0; q < S; ++q) {
    for (int64_t i = 0; i < n; ++i) out[q].tokens.push_back(drafted[i * S + q]);
    out[q].confidence.assign(hc_.begin() + q * n, hc_.begin() + (q + 1) * n);
  }
  if (with_logits)
    for (int64_t q = 0; q < S; ++q) {
      out[q].logits.resize(n * V);
      be_.download(out[q].logits.data(), logits.f32() + q * n * V, n * V * sizeof(float));
    }
  prof_.finish();
  return out;
}

}  // namespace deepinfer::model
