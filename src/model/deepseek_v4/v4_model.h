// The DeepSeek-V4 causal LM (spec §3) on the op interface: embedding, mHC blocks of sliding/CSA/HCA
// attention and MoE, hc head, final norm and head. Numerics follow transformers' implementation in
// fp32 (the goldens); with a quantized checkpoint the reference's quantization points can be simulated
// (FP8 activations before FP8/FP4 GEMMs, FP8 KV, FP4 indexer).
//
// forward() runs the whole flat batch through each layer at once: one GEMM per projection for all rows,
// the compressors, indexer scores and attention reading every sequence's state rows in place in the
// state arena through row indices; the host computes only row numbers. Weights, activations and state
// live on the backend's device (the CPU's or a GPU's), the same code for both.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/causal_lm.h"
#include "model/idle_gap.h"
#include "model/deepseek_v4/v4_config.h"
#include "model/deepseek_v4/v4_state.h"
#include "model/deepseek_v4/v4_weights.h"
#include "model/rope.h"
#include "ops/ops.h"

namespace deepinfer::model {

// Whether to reproduce the reference's quantization points (FP8 activations before FP8/FP4 GEMMs,
// FP8 KV, FP4 indexer): kAuto = on exactly when the checkpoint has a quantization_config.
enum class QuantSimulation { kAuto, kOn, kOff };

struct V4LoadOptions {
  QuantSimulation quant_simulation = QuantSimulation::kAuto;
  Device device;                 // where weights, state and activations live
  int64_t max_rollback_tokens = 8;  // tokens a state can take back (truncate)
  static V4LoadOptions from_env();  // the device from DEEPINFER_DEVICE
};

class V4Model final : public CausalLM {
 public:
  V4Model(V4Config config, ops::Backend& backend, bool simulate_quant, int64_t rollback);
  static std::unique_ptr<V4Model> load(const std::string& dir, const V4LoadOptions& options = V4LoadOptions::from_env());

  int64_t vocab_size() const override { return c_.vocab_size; }
  std::unique_ptr<SequenceState> new_sequence() const override;
  // Taps: on_layer_input (streams X; the pre-mix is empty: V4's mHC has none), on_final.
  void forward(const ForwardBatch& batch, std::vector<float>& logits, const ForwardTaps* taps = nullptr) override;

  const V4Config& config() const { return c_; }
  // State memory: sequences created after set_state_pool draw their blocks from `pool`.
  int64_t state_block_bytes() const override { return pool_->block_bytes(); }
  int64_t default_block_bytes() const;  // 16 rows of the widest state row (a CSA carry row)
  void set_state_pool(std::shared_ptr<BlockPool> pool) override;
  int64_t state_blocks_for(int64_t tokens) const override;
  DeviceMemory* state_memory() const override { return &be_; }
  void set_batch_invariant(bool on) override { be_.set_batch_invariant(on); }
  bool can_copy_states() const override { return true; }
  bool draws_on_device() const override { return true; }
  double idle_before_last_forward_ms() override { return idle_.last_ms(be_); }
  bool simulates_quantization() const { return simulate_; }
  int64_t max_rollback() const { return rollback_; }

 private:
  struct Step;  // one forward's flat batch layout
  struct Rows;  // one compressor's new rows this step
  void block(int64_t l, Step& s, Tensor& X);
  void attention(int64_t l, Step& s, const float* x, float* out);
  void compress(const V4Compressor& cw, int64_t l, bool index, Step& s, const float* x, Rows& out);
  void indexer(int64_t l, Step& s, const float* x, const float* qr, Tensor& sel, int64_t& K);
  void attend(int64_t l, Step& s, const float* q, const float* kv, const Tensor* sel, int64_t ksel, float* o);
  void output_projection(const V4Layer& L, const float* o, int64_t n, float* out);
  void moe(int64_t l, Step& s, const float* x, float* out);
  void lin(const float* x, int64_t m, const QLinear& W, float* y);
  void lin_grouped(const float* x, int64_t m, const QLinear& W, const int32_t* offsets, int64_t max_rows, float* y);
  void expert_ffn(const V4Expert& ex, const float* x, int64_t m, const float* row_scale, float* y,
                  const int32_t* offsets = nullptr, int64_t max_rows = 0);
  // FP8 rounding of the first `dim` channels of rows of `width` (the latents' non-RoPE part).
  void quant_head(float* x, int64_t rows, int64_t width, int64_t dim);
  void hadamard(float* x, int64_t rows);
  void check_pool(const BlockPool& pool) const;
  float* arena(const Step& s) const;
  int32_t arena_row(const Step& s, const float* row, int64_t width) const;
  ops::RopeFreqs rope_for(int64_t l) const;
  std::vector<float> host(const float* p, int64_t n) const;

  V4Config c_;
  V4Weights w_;
  ops::Backend& be_;
  bool simulate_;
  int64_t rollback_;
  RopeTableData rope_main_, rope_compress_;
  Param rope_main_freq_, rope_compress_freq_;  // inv_freq on the device
  Workspace ws_, fws_;  // scratch (scoped per layer), and what lives through one forward
  IdleGap idle_;        // the device's idle time before each forward
  std::shared_ptr<BlockPool> pool_;  // until the engine installs one: unlimited, default_block_bytes()
};

}  // namespace deepinfer::model
