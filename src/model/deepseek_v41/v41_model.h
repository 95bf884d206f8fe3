// The DeepSeek-V4.1 causal LM on the op interface (spec §5, §6): CSA2 layer roles (Full / Reuse /
// Reindex / candidate source), ratio-2 and ratio-1 compressors, indexer with two-level top-k,
// single-pass mHC, MoE with MXFP4 experts, Engram, and the DSpark draft head. Numerics follow
// DeepSeek's reference inference/model.py under bf16: activations rounded to bf16 where the reference
// holds them in bf16, FP8 activation quantization (block 32, UE8M0) before every FP8/FP4 GEMM, FP8
// window KV, FP4 (E4M3 block-16 scales) compressed KV, FP4 (UE8M0 block 32) index keys/queries.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/causal_lm.h"
#include "model/deepseek_v41/v41_config.h"
#include "model/deepseek_v41/v41_engram.h"
#include "model/paged_rows.h"
#include "model/rope.h"
#include "ops/ops.h"

namespace deepinfer::model {

using V41Floats = std::vector<float>;

struct V41Linear {  // [n, k] fp32 (dequantized); quant = stored FP8/FP4 -> activations FP8-quantized first
  V41Floats w;
  int64_t n = 0, k = 0;
  bool quant = false;
};

struct V41Expert {
  V41Linear w1, w2, w3;
};

struct V41Block {
  V41Floats attn_norm, ffn_norm;
  V41Floats hc_attn_fn, hc_attn_base, hc_attn_scale, hc_ffn_fn, hc_ffn_base, hc_ffn_scale;
  V41Linear wq_a, wq_b, wkv, wo_a, wo_b;
  V41Floats q_norm, kv_norm, attn_sink;
  // compressor (KV sources): ratio > 1 -> wkv/wgate run in fp32; ratio 1 -> bf16 wkv only
  V41Linear c_wkv, c_wgate;
  V41Floats c_norm;
  // indexer (index sources); wk/k_norm on KV sources only
  V41Linear i_wq_b, i_weights_proj, i_wk;
  V41Floats i_k_norm;
  // MoE
  V41Floats gate, gate_bias, gate_bias_vl;  // bias_vl: expert selection of image-span tokens (may be absent)
  std::vector<V41Expert> experts;
  V41Expert shared;
  // Engram (engram layers): wkv, q_weight*k_weight, and the memory-mapped table read row by row
  V41Linear e_wkv;
  V41Floats e_qk;
  const uint8_t* e_table = nullptr;  // F8_E4M3 [rows, head_dim]
  const uint8_t* e_scale = nullptr;  // F8_E8M0 [rows, head_dim / 32]
  int64_t e_rows = 0;
  // DSpark stage extras
  V41Linear main_proj;
  V41Floats main_norm, final_norm, markov_embed;
  V41Linear markov_head, confidence;
};

// Per-sequence state (spec §6.1). Everything sized by the window or the sequence lives in PagedRows
// over one BlockPool: `fixed` holds the window ring of every layer and DSpark stage (ring l = rows
// [l*window, (l+1)*window)) followed by the ratio>1 carries (kv rows then score rows, [ratio, head_dim]
// each, at carry_row[layer]), allocated on the first token; each KV source's compressed rows and index
// keys grow with the sequence. The Engram history (at most max_ngram-1 ids) stays a small vector.
class V41SequenceState final : public SequenceState {
 public:
  struct Source {
    PagedRows ckv, ik;  // [rows, head_dim], [rows, index_head_dim]
  };
  V41SequenceState(std::shared_ptr<BlockPool> pool, const V41Config& c);
  int64_t length() const override { return length_; }
  int64_t bytes() const override { return blocks() * pool_->block_bytes(); }
  void reset() override;
  int64_t blocks() const;  // pool blocks held
  BlockPool& pool() const { return *pool_; }

  float* ring_row(int64_t ring, int64_t slot) { return fixed.row(ring * window_ + slot); }
  // Contiguous copies (tests, inspection): ring [window, head_dim] in slot order, a source's rows.
  V41Floats ring(int64_t layer) const;
  static V41Floats floats(const PagedRows& rows);

  std::shared_ptr<BlockPool> pool_;  // declared first: outlives the rows below
  int64_t length_ = 0;
  PagedRows fixed;                   // rings then carries; empty until the first token
  int64_t fixed_rows = 0;
  std::vector<int64_t> carry_row;    // per layer: first carry row in `fixed` (-1: none)
  std::vector<Source> sources;       // indexed by layer (empty for non-sources)
  std::vector<int64_t> engram_hist;  // compressed ids (or DEAD) of the last max_ngram-1 positions
  std::vector<int64_t> ring_from;    // per ring: first position it holds (> 0 after a compact replay)
  int64_t last_ik_owner = -1;        // last KV source that wrote index keys (reference emulation only)
  int64_t window_, head_dim_;
};

struct V41Draft {  // one DSpark draft block
  std::vector<int32_t> tokens;     // [block]: drafts for positions p+2 .. p+1+block
  std::vector<float> logits;       // [block, vocab] with the Markov bias added
  std::vector<float> confidence;   // [block]
};

class V41Model final : public CausalLM {
 public:
  static std::unique_ptr<V41Model> load(const std::string& dir);
  // token strings: decoded[i] (single-token decode) and raw[i] (vocabulary string) for the Engram map;
  // when empty the model folder's tokenizer.json is not consulted and Engram needs set_engram_tokens().
  void set_engram_tokens(const std::vector<std::string>& decoded, const std::vector<std::string>& raw);

  int64_t vocab_size() const override { return c_.vocab_size; }
  std::unique_ptr<SequenceState> new_sequence() const override;
  void forward(const ForwardBatch& batch, std::vector<float>& logits) override;

  // State memory: sequences allocate fixed-size blocks from the pool set when they were created
  // (initially the model's own unlimited pool of 16384-byte blocks).
  int64_t state_block_bytes() const override { return pool_->block_bytes(); }
  void set_state_pool(std::shared_ptr<BlockPool> pool) override;
  // Blocks one sequence holds after consuming `tokens` tokens from empty (exact; 0 for 0 tokens).
  int64_t state_blocks_for(int64_t tokens) const override;

  // DSpark: after the main forward consumed the token at position p (= state.length()-1) and the
  // anchor (token for p+1) was chosen, drafts block tokens for positions p+2.. with greedy sampling.
  // force_tokens (tests): feed these block tokens to the Markov chain instead of the sampled ones.
  V41Draft draft(V41SequenceState& state, int32_t anchor, const int32_t* force_tokens = nullptr);

  const V41Config& config() const { return c_; }
  const EngramHasher* engram() const { return engram_.get(); }

  // Test hooks. on_layer_input(layer, X [T,hc,D], pre_mix [T,hc]) runs at each backbone layer's input
  // (after its Engram); it may overwrite both (teacher forcing). on_final(collapsed, normed).
  std::function<void(int64_t, std::vector<float>&, std::vector<float>&)> on_layer_input;
  std::function<void(const std::vector<float>&, const std::vector<float>&)> on_final;
  std::function<void(int64_t, std::vector<float>&)> on_engram_input;  // streams before layer L's Engram
  // on_hash_ids(first position, ids [T, n_engram_layers, cols]) for every forward's Engram hash ids.
  std::function<void(int64_t, const std::vector<int64_t>&)> on_hash_ids;
  // on_route(layer, router scores [n, E] before the bias, selected experts [n, k], their weights [n, k]).
  std::function<void(int64_t, const std::vector<float>&, const std::vector<int32_t>&, const std::vector<float>&)>
      on_route;
  // Positions holding this token id are image-span tokens (spec §5.3, §5.5, §5.7): DEAD in the Engram
  // history with gate 0, experts selected with gate.bias_vl. Set at construction to the config's
  // image_token_id when the model has a vision tower (the reference marks image tokens only when it
  // has one), else -1. There is no vision tower here: image positions keep the token's embedding.
  int64_t image_token_id = -1;
  // SWA bounded replay (spec §5.9): a prefill from position 0 runs the layers after the last KV source
  // only on its last keep_tokens tokens when compact is set. Defaults from the environment.
  bool replay_compact = false;
  // Reproduces a quirk of DeepSeek's model.py (off by default): its shared index-key pointer is only
  // re-published by a KV source that produced a latent this step, so during decode a ratio-2 index
  // source on a step that completes no group scores against the last publisher's keys (the ratio-1
  // source's cache). On for verification against the reference's decode goldens only.
  bool emulate_reference_stale_index_keys = false;
  int64_t replay_keep = 140;

  V41Model(V41Config c, ops::Backend& be);

 private:
  void forward_seq(V41SequenceState& st, const int32_t* ids, int64_t n, std::vector<float>& normed_rows,
                   const std::vector<int64_t>& want_rows);
  void block_forward(int64_t l, V41SequenceState& st, int64_t P, int64_t n, std::vector<float>& X,
                     std::vector<float>& pre_mix, const int64_t* pos, const uint8_t* image, bool dspark);
  void attention(int64_t l, V41SequenceState& st, int64_t P, int64_t n, const std::vector<float>& x,
                 const int64_t* pos, std::vector<float>& out);
  void dspark_attention(int64_t l, V41SequenceState& st, int64_t p, const std::vector<float>& x,
                        std::vector<float>& out);
  void moe(int64_t l, int64_t n, const std::vector<float>& x, const uint8_t* image, std::vector<float>& out);
  void engram_apply(int64_t l, int64_t n, const int64_t* ids, const uint8_t* image, std::vector<float>& X);
  void lin(const float* x, int64_t m, const V41Linear& W, float* y, bool to_bf16 = true);
  void output_projection(const V41Block& B, const std::vector<float>& o, int64_t n, std::vector<float>& out);
  void bf16(std::vector<float>& v) { be_.round_bf16(v.data(), static_cast<int64_t>(v.size())); }
  void rmsnorm(std::vector<float>& x, const V41Floats& w, int64_t rows, int64_t dim);
  const ops::RopeFreqs rope_for(int64_t l) const;
  int64_t blocks_for(int64_t tokens, int64_t block_bytes) const;

  V41Config c_;
  ops::Backend& be_;
  std::unique_ptr<io::Checkpoint> ckpt_;
  V41Floats embed_, head_, norm_;
  std::vector<V41Block> blocks_;  // n_layers + n_mtp_layers
  RopeTableData rope_main_, rope_compress_;
  std::unique_ptr<EngramHasher> engram_;
  std::shared_ptr<BlockPool> pool_;

  // per-forward shared results of sources (reference's shared_attn), for the sequence being run
  std::vector<std::vector<int32_t>> selection_;  // per index source layer: [n, topk] raw positions or -1
  std::vector<int64_t> selection_k_;             // per index source layer: topk of this forward
  std::vector<uint8_t> candidates_;              // [n, width]
  int64_t cand_width_ = 0;
};

}  // namespace deepinfer::model
