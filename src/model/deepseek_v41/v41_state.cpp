#include "model/deepseek_v41/v41_state.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace deepinfer::model {
namespace {

int64_t ring_count(const V41Config& c) {
  return c.n_layers + (c.dspark_block_size > 0 && c.n_mtp_layers > 0 ? c.n_mtp_layers : 0);
}

}  // namespace

int64_t V41SequenceState::ring_rows_for(const V41Config& c, int64_t rollback) {
  return ring_count(c) * (c.window_size + rollback);
}

int64_t V41SequenceState::carry_rows_for(const V41Config& c, int64_t rollback) {
  int64_t rows = 0;
  for (int64_t l : c.kv_source_layers)
    if (c.compress_ratios[l] > 1) rows += 2 * (c.compress_ratios[l] + rollback);
  return rows;
}

V41SequenceState::V41SequenceState(std::shared_ptr<BlockPool> pool, const V41Config& c, int64_t rollback)
    : pool_(std::move(pool)), rings(pool_.get(), c.head_dim, kRingFormat), carries(pool_.get(), c.head_dim, kCarryFormat),
      window_(c.window_size), head_dim_(c.head_dim), rollback_(rollback), ring_size_(c.window_size + rollback) {
  ring_rows = ring_count(c) * ring_size_;
  carry_row.assign(c.n_layers, -1);
  carry_size_.assign(c.n_layers, 0);
  ratio_ = c.compress_ratios;
  sources.resize(c.n_layers);
  for (int64_t l : c.kv_source_layers) {
    sources[l].ckv = PagedRows(pool_.get(), c.head_dim, kCompressedFormat);
    if (c.is_index_source[l]) sources[l].ik = PagedRows(pool_.get(), c.index_head_dim, kIndexKeyFormat);
    if (c.compress_ratios[l] > 1) {
      carry_row[l] = carry_rows;
      carry_size_[l] = c.compress_ratios[l] + rollback;
      carry_rows += 2 * carry_size_[l];
    }
  }
  ring_from.assign(c.n_layers + c.n_mtp_layers, 0);
}

void V41SequenceState::start() {
  rings.resize(ring_rows);
  carries.resize(carry_rows);
  const std::vector<float> ninf(head_dim_, -std::numeric_limits<float>::infinity());
  for (size_t l = 0; l < carry_row.size(); ++l)  // scores start at -inf, as the reference's
    for (int64_t r = 0; carry_row[l] >= 0 && r < carry_size_[l]; ++r)
      pool_->memory().upload(carries.row(carry_row[l] + carry_size_[l] + r), ninf.data(), head_dim_ * sizeof(float));
}

int64_t V41SequenceState::blocks() const {
  int64_t b = rings.blocks() + carries.blocks();
  for (auto& s : sources) b += s.ckv.blocks() + s.ik.blocks();
  return b;
}

void V41SequenceState::reset() {
  length_ = peak_ = 0;
  rings.clear();
  carries.clear();
  for (auto& s : sources) {
    s.ckv.clear();
    s.ik.clear();
  }
  std::fill(ring_from.begin(), ring_from.end(), 0);
  last_ik_owner = -1;
  engram_hist.clear();
}

void V41SequenceState::copy_from(const SequenceState& other) {
  const auto* src = dynamic_cast<const V41SequenceState*>(&other);
  check(src != nullptr, "copy_from: not a DeepSeek-V4.1 state");
  if (src == this) return;
  check(src->pool_ == pool_ && src->ring_rows == ring_rows && src->carry_rows == carry_rows && src->rollback_ == rollback_ &&
            src->sources.size() == sources.size(),
        "copy_from: the states belong to different models or state arenas");
  reset();
  rings.copy_from(src->rings);
  carries.copy_from(src->carries);
  for (size_t l = 0; l < sources.size(); ++l) {
    if (sources[l].ckv.pool_ptr()) sources[l].ckv.share_from(src->sources[l].ckv);
    if (sources[l].ik.pool_ptr()) sources[l].ik.share_from(src->sources[l].ik);
  }
  engram_hist = src->engram_hist;
  ring_from = src->ring_from;
  last_ik_owner = src->last_ik_owner;
  length_ = src->length_;
  peak_ = src->peak_;
}

void V41SequenceState::truncate(int64_t length) {
  const int64_t back = length_ - length;
  check(length >= 0 && back >= 0, "truncate: length ", length, " outside [0, ", length_, "]");
  // Rows of positions >= peak - rollback are intact (ring and carry positions wrap after window/ratio +
  // rollback positions; the Engram history keeps max_ngram - 1 + rollback ids).
  check(length >= peak_ - rollback_, "truncate: back to ", length, " asked, the state can go back to ",
        std::max<int64_t>(peak_ - rollback_, 0), " (it keeps ", rollback_,
        " tokens of history past its longest length; the model's max_rollback_tokens)");
  if (back == 0) return;
  if (length == 0) return reset();
  for (int64_t r : ring_from)
    check(length >= r, "truncate: position ", length, " lies before the rows a compact replay kept (from ", r, ")");
  for (size_t l = 0; l < sources.size(); ++l) {
    if (!sources[l].ckv.pool_ptr()) continue;  // not a KV source (ratio > 0 at every source)
    const int64_t rows = length / ratio_[l];
    sources[l].ckv.truncate(rows);
    if (sources[l].ik.pool_ptr()) sources[l].ik.truncate(rows);
  }
  const int64_t keep = std::max<int64_t>(0, static_cast<int64_t>(engram_hist.size()) - back);
  engram_hist.resize(keep);
  length_ = length;
}

V41Floats V41SequenceState::ring(int64_t layer) const {
  if (!started()) return {};
  const V41Floats all = rings.floats();
  V41Floats out(window_ * head_dim_, 0.0f);
  // position p sits at slot p % window in the reference: the latest position per slot wins
  for (int64_t p = std::max<int64_t>(ring_from[layer], length_ - window_); p < length_; ++p)
    std::copy_n(all.data() + (layer * ring_size_ + p % ring_size_) * head_dim_, head_dim_,
                out.data() + (p % window_) * head_dim_);
  return out;
}

}  // namespace deepinfer::model
