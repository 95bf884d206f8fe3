// Per-sequence DeepSeek-V4 state: per layer a sliding-window ring of K=V latents, and for
// compressed layers the compressed rows plus the compressor's carry (tokens of the unfinished
// group, and for CSA the previous group's first-series halves). CSA layers hold the same for
// the indexer's keys.
#pragma once
#include <cstdint>
#include <vector>

#include "model/causal_lm.h"

namespace deepinfer::model {

struct CompressorState {
  std::vector<float> pending_kv, pending_gate;  // [pending, copies*width], gate with ape added
  std::vector<float> prev_kv, prev_gate;        // CSA: previous complete group's series A [ratio, width]
  std::vector<float> rows;                      // compressed rows [n_rows, width]
  int64_t pending = 0, n_rows = 0;
  int64_t bytes() const {
    return static_cast<int64_t>((pending_kv.capacity() + pending_gate.capacity() + prev_kv.capacity() +
                                 prev_gate.capacity() + rows.capacity()) * sizeof(float));
  }
};

struct V4LayerState {
  std::vector<float> window;  // ring [sliding_window, head_dim]; slot = position % sliding_window
  CompressorState kv, index;
};

class V4SequenceState final : public SequenceState {
 public:
  explicit V4SequenceState(int64_t layers) : layers_(layers) {}
  int64_t length() const override { return length_; }
  int64_t bytes() const override {
    int64_t b = 0;
    for (auto& l : layers_) b += static_cast<int64_t>(l.window.capacity() * sizeof(float)) + l.kv.bytes() + l.index.bytes();
    return b;
  }
  void reset() override {
    length_ = 0;
    for (auto& l : layers_) l = V4LayerState{};
  }
  std::vector<V4LayerState>& layers() { return layers_; }
  void advance(int64_t tokens) { length_ += tokens; }

 private:
  int64_t length_ = 0;
  std::vector<V4LayerState> layers_;
};

}  // namespace deepinfer::model
