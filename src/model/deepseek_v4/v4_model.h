// The DeepSeek-V4 causal LM (spec §3): embedding, mHC blocks of sliding/CSA/HCA attention and MoE,
// hc head, final norm and head, over flat batches of many sequences.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/causal_lm.h"
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
};

class V4Model final : public CausalLM {
 public:
  V4Model(V4Config config, V4Weights weights, ops::Backend& backend, bool simulate_quant);
  static std::unique_ptr<V4Model> load(const std::string& dir, const V4LoadOptions& options = {});

  int64_t vocab_size() const override { return config_.vocab_size; }
  std::unique_ptr<SequenceState> new_sequence() const override;
  void forward(const ForwardBatch& batch, std::vector<float>& logits, const ForwardTaps* taps = nullptr) override;

  const V4Config& config() const { return config_; }
  // State memory: sequences created after set_state_pool draw their blocks from `pool`.
  int64_t state_block_bytes() const override { return pool_->block_bytes(); }
  int64_t default_block_bytes() const;  // 16 rows of the widest state row (a CSA carry row)
  void set_state_pool(std::shared_ptr<BlockPool> pool) override { pool_ = std::move(pool); }
  int64_t state_blocks_for(int64_t tokens) const override;
  bool simulates_quantization() const { return simulate_quant_; }
  // Test hook: when set, forward() stores the streams entering each layer ([T, hc, D] each) and the
  // final normalized hidden state ([T, D]) as the last entry.
  std::vector<std::vector<float>>* capture_hidden = nullptr;

 private:
  struct Step;  // one forward's flat batch layout and scratch
  void attention(int64_t layer, Step& s, const std::vector<float>& x, std::vector<float>& out);
  void moe(int64_t layer, Step& s, const std::vector<float>& x, std::vector<float>& out);
  void project(const std::vector<float>& x, int64_t rows, const std::vector<float>& w, int64_t n, int64_t k,
               std::vector<float>& y, bool quantized_weight);
  void compress(const CompressorWeights& cw, CompressorState& st, const float* kv, const float* gate,
                int64_t first_pos, int64_t tokens, bool indexer_keys);

  V4Config config_;
  V4Weights w_;
  ops::Backend& be_;
  bool simulate_quant_;
  RopeTableData rope_main_, rope_compress_;
  std::shared_ptr<BlockPool> pool_;  // until the engine installs one: unlimited, default_block_bytes()
};

}  // namespace deepinfer::model
