// The DeepSeek-V4.1 causal LM on the op interface (spec §5, §6): CSA2 layer roles (Full / Reuse /
// Reindex / candidate source), ratio-2 and ratio-1 compressors, indexer with two-level top-k,
// single-pass mHC, MoE with MXFP4 experts, Engram, and the DSpark draft head. Numerics follow
// DeepSeek's reference inference/model.py under bf16: activations rounded to bf16 where the reference
// holds them in bf16, FP8 activation quantization (block 32, UE8M0) before every FP8/FP4 GEMM, FP8
// window KV, FP4 (E4M3 block-16 scales) compressed KV, FP4 (UE8M0 block 32) index keys/queries.
//
// forward() runs the whole flat batch (prefill chunks and decode tokens of many sequences) through
// each layer at once: one GEMM per projection for all rows; only the per-sequence parts (compressor
// carry, indexer scores over the sequence's keys, window lists) loop over sequences.
#pragma once
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/safetensors.h"
#include "model/causal_lm.h"
#include "model/forward_profile.h"
#include "model/idle_gap.h"
#include "model/deepseek/linear.h"
#include "model/deepseek_v41/v41_config.h"
#include "model/deepseek_v41/v41_engram.h"
#include "model/deepseek_v41/v41_state.h"
#include "model/rope.h"
#include "ops/ops.h"

namespace deepinfer::parallel {
class ContextParallel;
class ExpertParallel;
}

namespace deepinfer::model {

using V41Linear = QLinear;  // model/deepseek/linear.h

struct V41Expert {
  V41Linear w1, w2, w3;
};

struct V41Block {
  Param attn_norm, ffn_norm;
  Param hc_attn_fn, hc_attn_base, hc_attn_scale, hc_ffn_fn, hc_ffn_base, hc_ffn_scale;
  V41Linear wq_a, wq_b, wkv, wo_a, wo_b;
  Param q_norm, kv_norm, attn_sink;
  // compressor (KV sources): ratio > 1 -> wkv/wgate run in fp32; ratio 1 -> bf16 wkv only
  V41Linear c_wkv, c_wgate;
  Param c_norm;
  // indexer (index sources); wk/k_norm on KV sources only
  V41Linear i_wq_b, i_weights_proj, i_wk;
  Param i_k_norm;
  // MoE
  V41Linear gate;  // BF16 as released; the router's fp32 math on it (bf16 x, fp32 accumulation)
  Param gate_bias, gate_bias_vl;  // bias_vl: expert selection of image-span tokens (may be absent)
  std::vector<V41Expert> experts;  // without expert parallelism: views into `routed`
  V41Expert routed;                // the routed experts stacked (q.groups = experts); empty with expert parallelism
  V41Expert shared;
  // Engram (engram layers): wkv, q_weight*k_weight, and the table: memory-mapped on the host and read row
  // by row, and with DEEPINFER_ENGRAM_DEVICE also copied to the device (e_device), where it is gathered
  V41Linear e_wkv;
  Param e_qk;
  const uint8_t* e_table = nullptr;  // F8_E4M3 [rows, head_dim]
  const uint8_t* e_scale = nullptr;  // F8_E8M0 [rows, head_dim / 32]
  int64_t e_rows = 0;
  Buffer e_device;                   // the table then its scales, on the model's device (empty: on the host)
  mutable std::vector<std::atomic<uint64_t>> e_checked;  // a bit per row: found finite (V41Model::check_engram_rows)
  // DSpark stage extras
  V41Linear main_proj;
  Param main_norm, final_norm;
  RowTable markov_embed;
  V41Linear markov_head, confidence;
};

// How a V4.1 model runs (load-time choices; the engine fills them from DEEPINFER_* variables).
struct V41Options {
  static constexpr int64_t kAuto = -2;
  // SWA bounded replay (spec §5.9): a prefill from position 0 runs the layers after the last KV
  // source only on its last replay_keep tokens when replay_compact is set.
  bool replay_compact = true;
  int64_t replay_keep = 140;
  // Reproduces a quirk of DeepSeek's model.py (off by default): its shared index-key pointer is only
  // re-published by a KV source that produced a latent this step, so during decode a ratio-2 index
  // source on a step that completes no group scores against the last publisher's keys (the ratio-1
  // source's cache). On for verification against the reference's decode goldens only.
  bool emulate_reference_stale_index_keys = false;
  // Positions holding this token id are image-span tokens (spec §5.3, §5.5, §5.7): DEAD in the Engram
  // history with gate 0, experts selected with gate.bias_vl. kAuto: the config's image_token_id when
  // the model has a vision tower (the reference marks image tokens only then), else none (-1).
  int64_t image_token_id = kAuto;
  // Top-k selections (index rows, candidate blocks) rank each token's visible rows only, so that a
  // token's logits are the same bits in a prefill, in chunks of any size and in decode (exact
  // preemption by recompute and draft verification). Off: rank the chunk's whole width with the
  // invisible rows at -inf, as DeepSeek's reference does; its exact ties (bf16 scores) then break
  // differently by chunk. Both are within the goldens' tolerances; on is the default.
  bool chunk_invariant_selection = true;
  // Tokens a state can take back (truncate); kAuto: the DSpark block size (0 without DSpark).
  int64_t max_rollback_tokens = kAuto;

  // Where the model runs (weights, state arena, activations).
  Device device;
  // load_format="dummy": random weights in the released formats (DummyWeights), no checkpoint read.
  bool dummy_weights = false;
  // Where the Engram tables live on a GPU (DEEPINFER_ENGRAM_DEVICE): host, device or auto.
  std::string engram_device = "auto";
  // MoE expert parallelism (v41_expert_parallel.cpp): this rank loads only its routed experts of the
  // main layers and every forward exchanges tokens with the other ranks; null: all experts local.
  std::shared_ptr<parallel::ExpertParallel> expert_parallel;
  // Balanced context parallelism (v41_context_parallel.cpp): every CP rank is given the same batch
  // and computes its share of each sequence's tokens; the rows the others need are all-gathered and
  // every rank's states end up whole. Null: one rank computes every row. With expert_parallel too,
  // a CP rank's rows go through the EP exchange at every MoE layer (its EP group spans the CP ranks).
  std::shared_ptr<parallel::ContextParallel> context_parallel;

  static V41Options from_env();  // DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE / _KEEP_TOKENS, DEEPINFER_DEVICE, _ENGRAM_DEVICE
};

struct V41Draft {  // one DSpark draft block
  std::vector<int32_t> tokens;     // [block]: drafts for positions p+2 .. p+1+block
  std::vector<float> logits;       // [block, vocab] with the Markov bias added (draft(..., with_logits) only)
  std::vector<float> confidence;   // [block]
};

class V41Model final : public CausalLM {
 public:
  static std::unique_ptr<V41Model> load(const std::string& dir, const V41Options& options = V41Options::from_env());
  // token strings: decoded[i] (single-token decode) and raw[i] (vocabulary string) for the Engram map;
  // when empty the model folder's tokenizer.json is not consulted and Engram needs set_engram_tokens().
  void set_engram_tokens(const std::vector<std::string>& decoded, const std::vector<std::string>& raw);

  int64_t vocab_size() const override { return c_.vocab_size; }
  std::unique_ptr<SequenceState> new_sequence() const override;
  void forward(const ForwardBatch& batch, std::vector<float>& logits, const ForwardTaps* taps = nullptr) override;

  // State memory: sequences allocate fixed-size blocks from the pool set when they were created
  // (initially the model's own unlimited pool of 16384-byte blocks).
  int64_t state_block_bytes() const override { return pool_->block_bytes(); }
  void set_state_pool(std::shared_ptr<BlockPool> pool) override;
  // Blocks one sequence holds after consuming `tokens` tokens from empty (exact; 0 for 0 tokens).
  int64_t state_blocks_for(int64_t tokens) const override;
  // The smallest state block set_state_pool accepts: whole carry rows with room for the widest row.
  int64_t finest_block_bytes() const;
  DeviceMemory* state_memory() const override { return &be_; }
  void set_batch_invariant(bool on) override { be_.set_batch_invariant(on); }
  bool can_copy_states() const override { return true; }
  bool draws_on_device() const override { return true; }
  double idle_before_last_forward_ms() override { return idle_.last_ms(be_); }

  // DSpark: after the main forward consumed the token at position p (= state.length()-1) and the
  // anchor (token for p+1) was chosen, drafts block tokens for positions p+2.. with greedy sampling.
  // force_tokens (tests): feed these block tokens to the Markov chain instead of the sampled ones.
  V41Draft draft(V41SequenceState& state, int32_t anchor, const int32_t* force_tokens = nullptr);
  // The same for many sequences in one flat forward (each draft bitwise what it gets alone);
  // force_tokens: empty, or one pointer (or null) per state. V41Draft::confidence holds the confidence
  // head's logits (the probability is their sigmoid). with_logits: also V41Draft::logits, every block
  // position's full vocabulary (tests; the engine's greedy drafts need only tokens and confidences, and
  // at batch 128 those logits are 331 MB to bring back from the device).
  std::vector<V41Draft> draft(const std::vector<V41SequenceState*>& states, const std::vector<int32_t>& anchors,
                              const std::vector<const int32_t*>& force_tokens = {}, bool with_logits = true);

  const V41Config& config() const { return c_; }
  const V41Options& options() const { return o_; }
  // Changes the run options; rollback length only for states created afterwards.
  void set_options(const V41Options& options);
  int64_t image_token_id() const { return image_token_; }
  int64_t max_rollback() const { return rollback_; }
  const EngramHasher* engram() const { return engram_.get(); }
  // Routed experts of `layer` whose weights this model holds (all of them without expert parallelism).
  int64_t loaded_experts(int64_t layer) const;

  V41Model(V41Config c, ops::Backend& be, const V41Options& options = {});

 private:
  struct Step;  // one forward's flat batch layout (defined in v41_step.h)
  // Activations are device tensors of the workspaces: ws_ for scratch (scoped per layer), fws_ for
  // what lives through one forward (streams, index selections, candidate masks).
  void block_forward(int64_t l, Step& s, Tensor& X, Tensor& pre_mix);  // taps: s.taps
  void attention(int64_t l, Step& s, const float* x, float* out);
  void queries(const V41Block& B, const float* x, const Step& s, const ops::RopeFreqs& rope, float* qr, float* q);
  void window_kv(const V41Block& B, const float* x, const Step& s, const ops::RopeFreqs& rope, float* kv);
  void attend(const V41Block& B, const Step& s, const float* q, const uint8_t* kv, const Tensor& idx, int64_t K,
              int64_t window, const ops::RopeFreqs& rope, float* o);
  struct Latents;  // a KV source's new compressed rows this step
  void compress(int64_t l, Step& s, const float* x, Latents& lat);
  void index(int64_t l, Step& s, const float* x, const float* qr, const Latents& lat);
  void dspark_attention(int64_t l, Step& s, const float* x, float* out);
  void moe(int64_t l, Step& s, const float* x, float* out);
  // One expert's SwiGLU FFN on m rows (g, u, h: [m, moe_inter_dim] scratch); row_scale: routing weights.
  // offsets: ex is a stack of experts, and rows [offsets[e], offsets[e + 1]) (at most max_rows) go to expert e.
  void expert_ffn(const V41Expert& ex, const float* x, int64_t m, const float* row_scale, float* y, float* g, float* u,
                  float* h, const int32_t* offsets = nullptr, int64_t max_rows = 0);
  // Expert parallelism (v41_expert_parallel.cpp): the forward of this rank's batch in lock-step with
  // the other ranks, the MoE exchange of one layer (n = 0: an idle rank), loading the held experts.
  void forward_batch(const ForwardBatch& batch, std::vector<float>& logits, const ForwardTaps* taps);
  void moe_expert_parallel(int64_t l, const float* x, int64_t n, const std::vector<int32_t>& sel,
                           const std::vector<float>& weights, float* out);
  void load_held_experts();
  void place_engram_tables();  // DEEPINFER_ENGRAM_DEVICE: the tables onto the device when asked / when they fit
  // Context parallelism (v41_context_parallel.cpp): this rank's part of the whole step w (the rows of
  // w it computes: `mine`), and the gather of rows computed on several ranks.
  Step local_step(Step& w, std::vector<int32_t>& mine) const;
  // local_step, and this rank's rows of the per-row inputs: ids, Engram hashes (hash_width per row),
  // embedding replacements, the replay cut (cut_mine: in this rank's rows).
  Step take_my_rows(Step& w, std::vector<int64_t>& ids, std::vector<int64_t>& hash, int64_t hash_width,
                    std::vector<int32_t>& embed_tokens, std::vector<float>& embed_rows, const std::vector<int64_t>& cut,
                    std::vector<int64_t>& cut_mine) const;
  void gather_rows(const Step& s, const std::vector<int32_t>& want, const float* mine, int64_t width, float* out);
  Tensor everyone(const Step& s, const Tensor& mine, int64_t width);  // every row of the whole step
  // The whole step's window KV rows this rank reads: its own, the window - 1 before each of them and
  // each sequence's ring tail; the rest zero (window 0: the ring tails only).
  Tensor window_rows(const Step& s, const Tensor& mine, int64_t width, int64_t window);
  void cp_logits_rows(const Step& s, const std::vector<int32_t>& pick, const float* yn, Tensor& normed);
  void check_engram_rows(int64_t l, const std::vector<int64_t>& ids) const;
  void engram_apply(int64_t l, Step& s, const std::vector<int64_t>& ids, float* X);
  void dspark_rings(Step& s, const float* main_hidden);
  void lin(const float* x, int64_t m, const V41Linear& W, float* y, bool to_bf16 = true);
  void lin_grouped(const float* x, int64_t m, const V41Linear& W, const int32_t* offsets, int64_t max_rows, float* y);
  void output_projection(const V41Block& B, const float* o, int64_t n, float* out);
  void rmsnorm(float* x, const Param& w, int64_t rows, int64_t dim);
  // rows_for / rows: optional embedding replacements (ForwardBatch::embed_tokens / embed_rows).
  void embed(const std::vector<int64_t>& ids, Tensor& X, Tensor& pre_mix, const std::vector<int32_t>& rows_for = {},
             const std::vector<float>& rows = {});
  // The state arena's start as fp32 (carries) or bytes (the packed rings, compressed rows and index
  // keys, paged in blocks of arena_block_bytes), and the arena row index of a state row of `kind`
  // (BlockPool::row_index: what ops address the arena by).
  float* arena_f32(const Step& s) const;
  uint8_t* arena_bytes(const Step& s) const;
  int64_t arena_block_bytes(const Step& s) const;
  int32_t arena_row(const Step& s, const std::byte* row, const PagedRows& kind) const;
  void append_rows(const Step& s, PagedRows& rows, int64_t n, std::vector<int32_t>& out) const;
  Tensor window_rows_packed(const Tensor& rows, int64_t n);
  void write_rings(Step& s, int64_t ring, const float* kv);
  struct CompressedRows;
  const CompressedRows& compressed_rows(Step& s, int64_t src);
  ops::RopeFreqs main_rope() const { return {rope_main_freq_.data(), rope_main_.rope_dim, rope_main_.attention_factor}; }
  const ops::RopeFreqs rope_for(int64_t l) const;
  int64_t blocks_for(int64_t tokens, int64_t block_bytes) const;
  void check_pool(const BlockPool& pool) const;
  std::vector<float> host(const float* p, int64_t n) const;  // a device array copied to the host (taps)
  // ForwardTaps::on_point: n values at x, copied to the host only when the forward is tapped there.
  void point(const Step& s, int64_t l, const char* name, const float* x, int64_t n) const;
  Param param(const std::vector<float>& host) const;

  V41Config c_;
  ops::Backend& be_;
  V41Options o_;
  int64_t image_token_ = -1, rollback_ = 0;
  std::unique_ptr<io::Checkpoint> ckpt_;
  std::vector<std::vector<uint8_t>> dummy_tables_;  // host tables of dummy weights (Engram)
  RowTable embed_;
  Param norm_;
  V41Linear head_;  // fp32 logits (linear_plain) from the bf16 weight where the backend keeps it bf16
  std::vector<V41Block> blocks_;  // n_layers + n_mtp_layers
  RopeTableData rope_main_, rope_compress_;
  Param rope_main_freq_, rope_compress_freq_;  // inv_freq on the device
  Workspace ws_, fws_;
  ForwardProfile prof_;  // DEEPINFER_PROFILE_FORWARD=1 only
  IdleGap idle_;         // the device's idle time before each forward
  std::unique_ptr<EngramHasher> engram_;
  std::shared_ptr<BlockPool> pool_;
};

}  // namespace deepinfer::model
