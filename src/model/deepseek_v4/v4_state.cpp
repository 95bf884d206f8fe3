#include "model/deepseek_v4/v4_state.h"

#include "core/error.h"

namespace deepinfer::model {
namespace {

// A compressor of `ratio` over rows of `width`: CSA (ratio 4) pools two overlapping series per token.
// Its carry keeps the positions a later group reads (copies * ratio - 1) plus the rollback.
V4SequenceState::Compressor make_compressor(BlockPool* pool, int64_t width, int64_t ratio, int64_t rollback) {
  V4SequenceState::Compressor c;
  c.ratio = ratio;
  c.width = width;
  c.copies = ratio == 4 ? 2 : 1;
  c.carry_size = c.copies * ratio + rollback;
  c.carry = PagedRows(pool, c.copies * width);
  c.rows = PagedRows(pool, width);
  return c;
}

int64_t compressor_blocks(int64_t width, int64_t ratio, int64_t rollback, int64_t bb, int64_t tokens) {
  const int64_t copies = ratio == 4 ? 2 : 1;
  constexpr int64_t f = sizeof(float);  // V4's rows are fp32
  return PagedRows::blocks_for(2 * (copies * ratio + rollback), copies * width * f, bb) +
         PagedRows::blocks_for(tokens / ratio, width * f, bb);
}

int64_t ring_positions(const V4Config& c, int64_t rollback) {
  return c.sliding_window + rollback + V4SequenceState::round_tokens(c);
}

}  // namespace

V4SequenceState::V4SequenceState(const V4Config& config, std::shared_ptr<BlockPool> pool, int64_t rollback)
    : pool_(std::move(pool)), config_(config), rollback_(rollback), ring_size_(ring_positions(config, rollback)),
      layers_(config.num_layers) {
  for (int64_t l = 0; l < config.num_layers; ++l) {
    Layer& s = layers_[l];
    s.window = PagedRows(pool_.get(), config.head_dim);
    if (config.compress_ratio[l] > 0)
      s.kv = make_compressor(pool_.get(), config.head_dim, config.compress_ratio[l], rollback);
    if (config.attention[l] == AttentionKind::kCSA)
      s.index = make_compressor(pool_.get(), config.index_head_dim, 4, rollback);
  }
}

void V4SequenceState::start() {
  if (started_) return;
  for (Layer& s : layers_) {
    s.window.resize(ring_size_);
    for (Compressor* c : {&s.kv, &s.index})
      if (c->ratio) c->carry.resize(2 * c->carry_size);
  }
  started_ = true;
}

int64_t V4SequenceState::blocks() const {
  int64_t b = 0;
  for (const Layer& s : layers_) b += s.window.blocks() + s.kv.carry.blocks() + s.kv.rows.blocks() +
                                      s.index.carry.blocks() + s.index.rows.blocks();
  return b;
}

void V4SequenceState::truncate(int64_t length) {
  check(length >= 0 && length <= length_, "truncate: length ", length, " outside 0 .. ", length_);
  check(length >= peak_ - rollback_, "truncate: the DeepSeek-V4 state keeps ", rollback_,
        " tokens of rollback; taking back to ", length, " from a peak of ", peak_, " is more");
  for (Layer& s : layers_)
    for (Compressor* c : {&s.kv, &s.index})
      if (c->ratio) c->rows.truncate(length / c->ratio);
  length_ = length;
}

void V4SequenceState::copy_from(const SequenceState& other) {
  const auto* src = dynamic_cast<const V4SequenceState*>(&other);
  check(src != nullptr && src->pool_ == pool_ && src->rollback_ == rollback_ &&
            src->layers_.size() == layers_.size(),
        "copy_from: not a DeepSeek-V4 state of the same model and pool");
  reset();
  if (!src->started_) return;
  for (size_t l = 0; l < layers_.size(); ++l) {
    Layer& d = layers_[l];
    const Layer& s = src->layers_[l];
    d.window.copy_from(s.window);
    for (auto [dc, sc] : {std::pair{&d.kv, &s.kv}, std::pair{&d.index, &s.index}}) {
      if (!dc->ratio) continue;
      dc->carry.copy_from(sc->carry);
      dc->rows.share_from(sc->rows);
    }
  }
  started_ = true;
  length_ = src->length_;
  peak_ = src->peak_;  // the rings hold what the source's do: the same tokens can be taken back
}

void V4SequenceState::reset() {
  for (Layer& s : layers_) {
    s.window.clear();
    for (Compressor* c : {&s.kv, &s.index}) {
      c->carry.clear();
      c->rows.clear();
    }
  }
  length_ = peak_ = 0;
  started_ = false;
}

int64_t V4SequenceState::blocks_for(const V4Config& c, int64_t rollback, int64_t bb, int64_t tokens) {
  if (tokens <= 0) return 0;
  int64_t blocks = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    blocks += PagedRows::blocks_for(ring_positions(c, rollback), c.head_dim * int64_t{sizeof(float)}, bb);
    if (c.compress_ratio[l] > 0) blocks += compressor_blocks(c.head_dim, c.compress_ratio[l], rollback, bb, tokens);
    if (c.attention[l] == AttentionKind::kCSA) blocks += compressor_blocks(c.index_head_dim, 4, rollback, bb, tokens);
  }
  return blocks;
}

}  // namespace deepinfer::model
