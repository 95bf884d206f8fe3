#include "model/deepseek_v4/v4_state.h"

#include "core/error.h"

namespace deepinfer::model {
namespace {

// Binds one compressor's arrays: carry [ratio, copies*width] (+ CSA's previous series A), rows.
CompressorState make_compressor(BlockPool* pool, int64_t width, int64_t ratio) {
  const int64_t copies = ratio == 4 ? 2 : 1;
  CompressorState c;
  c.pending_kv = PagedRows(pool, copies * width);
  c.pending_gate = PagedRows(pool, copies * width);
  if (copies == 2) {
    c.prev_kv = PagedRows(pool, width);
    c.prev_gate = PagedRows(pool, width);
  }
  c.rows = PagedRows(pool, width);
  return c;
}

int64_t compressor_blocks(int64_t width, int64_t ratio, int64_t bb, int64_t tokens) {
  const int64_t copies = ratio == 4 ? 2 : 1;
  int64_t b = 2 * PagedRows::blocks_for(ratio, copies * width, bb);
  if (copies == 2) b += 2 * PagedRows::blocks_for(ratio, width, bb);
  return b + PagedRows::blocks_for(tokens / ratio, width, bb);
}

}  // namespace

V4SequenceState::V4SequenceState(const V4Config& config, std::shared_ptr<BlockPool> pool)
    : config_(config), pool_(std::move(pool)), layers_(config.num_layers) {
  for (int64_t l = 0; l < config.num_layers; ++l) {
    V4LayerState& s = layers_[l];
    s.window = PagedRows(pool_.get(), config.head_dim);
    if (config.compress_ratio[l] > 0) s.kv = make_compressor(pool_.get(), config.head_dim, config.compress_ratio[l]);
    if (config.attention[l] == AttentionKind::kCSA) s.index = make_compressor(pool_.get(), config.index_head_dim, 4);
  }
}

void V4SequenceState::ensure_allocated() {
  if (allocated_) return;
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    V4LayerState& s = layers_[l];
    s.window.resize(config_.sliding_window);
    for (CompressorState* c : {&s.kv, &s.index}) {
      if (c->rows.width() == 0) continue;  // no compressor of this kind in this layer
      const int64_t ratio = c == &s.kv ? config_.compress_ratio[l] : 4;
      c->pending_kv.resize(ratio);
      c->pending_gate.resize(ratio);
      if (c->prev_kv.width() > 0) {
        c->prev_kv.resize(ratio);
        c->prev_gate.resize(ratio);
      }
    }
  }
  allocated_ = true;
}

int64_t V4SequenceState::bytes() const {
  int64_t blocks = 0;
  for (const V4LayerState& s : layers_) {
    blocks += s.window.blocks();
    for (const CompressorState* c : {&s.kv, &s.index})
      blocks += c->pending_kv.blocks() + c->pending_gate.blocks() + c->prev_kv.blocks() + c->prev_gate.blocks() +
                c->rows.blocks();
  }
  return blocks * pool_->block_bytes();
}

void V4SequenceState::truncate(int64_t length) {
  check(length == length_, "truncate: the DeepSeek-V4 state cannot take tokens back (asked ", length_ - length,
        "); only DeepSeek-V4.1 states keep rollback rows");
}

void V4SequenceState::reset() {
  for (V4LayerState& s : layers_) {
    s.window.clear();
    for (CompressorState* c : {&s.kv, &s.index}) {
      c->pending_kv.clear();
      c->pending_gate.clear();
      c->prev_kv.clear();
      c->prev_gate.clear();
      c->rows.clear();
      c->pending = 0;
      c->has_prev = false;
    }
  }
  length_ = 0;
  allocated_ = false;
}

int64_t V4SequenceState::blocks_for(const V4Config& c, int64_t bb, int64_t tokens) {
  if (tokens <= 0) return 0;
  int64_t blocks = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    blocks += PagedRows::blocks_for(c.sliding_window, c.head_dim, bb);
    if (c.compress_ratio[l] > 0) blocks += compressor_blocks(c.head_dim, c.compress_ratio[l], bb, tokens);
    if (c.attention[l] == AttentionKind::kCSA) blocks += compressor_blocks(c.index_head_dim, 4, bb, tokens);
  }
  return blocks;
}

}  // namespace deepinfer::model
