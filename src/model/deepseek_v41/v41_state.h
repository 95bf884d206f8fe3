// Per-sequence DeepSeek-V4.1 state (spec §6.1) and its rollback. Everything sized by the window or the
// sequence lives in PagedRows over one BlockPool arena: `rings` holds the window ring of every layer and
// DSpark stage (ring l = rows [l*ring, (l+1)*ring)), `carries` the ratio>1 compressor carries (kv rows
// then score rows, a ring of `carry` positions each); each KV source's compressed rows and index keys
// grow with the sequence. Rings and carries are `rollback` positions longer than the reference's, so
// that truncate() can take back up to `rollback` tokens exactly (the rows of the kept positions are
// never overwritten by the tokens taken back).
//
// The layout (row kind: width x dtype): ring rows head_dim x BF16, compressed rows head_dim x BF16, index
// keys index_head_dim x BF16, carries head_dim x F32. The model rounds every ring, compressed and index
// row to the reference's FP8/FP4 points before it writes it, and those values are exact in BF16 (8
// significant bits, fp32's exponent range): a window row is e4m3 x 2^k (4 bits), a compressed row e2m1 x
// an e4m3 scale (2 x 4 bits: at most 6), an index key e2m1 x 2^k (2 bits). The carries hold the fp32
// projections the reference keeps in fp32.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "model/causal_lm.h"
#include "model/deepseek_v41/v41_config.h"
#include "model/paged_rows.h"

namespace deepinfer::model {

using V41Floats = std::vector<float>;

class V41SequenceState final : public SequenceState {
 public:
  static constexpr DType kRingDType = DType::BF16, kCompressedDType = DType::BF16, kIndexKeyDType = DType::BF16,
                         kCarryDType = DType::F32;
  struct Source {
    PagedRows ckv, ik;  // [rows, head_dim], [rows, index_head_dim]
  };
  V41SequenceState(std::shared_ptr<BlockPool> pool, const V41Config& c, int64_t rollback);
  int64_t length() const override { return length_; }
  int64_t bytes() const override { return blocks() * pool_->block_bytes(); }
  void reset() override;
  // Takes back the last length()-`length` tokens: every row a later forward reads is then what it was
  // before those tokens were appended. Allowed down to the longest length reached minus max_rollback().
  void truncate(int64_t length) override;
  void advance_to(int64_t length) {  // after a forward
    length_ = length;
    peak_ = std::max(peak_, length);
  }
  int64_t max_rollback() const override { return rollback_; }
  // A copy of `src` at its length: compressed rows and index keys shared (append-only, copy on
  // write), rings, carries and the Engram history copied.
  void copy_from(const SequenceState& src) override;
  int64_t blocks() const;  // pool blocks held
  BlockPool& pool() const { return *pool_; }

  // The ring row holding position `pos` of ring `ring` (a layer, or n_layers + DSpark stage).
  std::byte* ring_row(int64_t ring, int64_t pos) { return rings.row(ring * ring_size_ + pos % ring_size_); }
  // The compressor carry of layer l: kv and score rows of position `pos`.
  std::byte* carry_kv(int64_t l, int64_t pos) { return carries.row(carry_row[l] + pos % carry_size_[l]); }
  std::byte* carry_score(int64_t l, int64_t pos) {
    return carries.row(carry_row[l] + carry_size_[l] + pos % carry_size_[l]);
  }
  int64_t carry_size(int64_t l) const { return carry_size_[l]; }  // positions a carry ring holds
  int64_t ring_size() const { return ring_size_; }                  // positions a window ring holds
  // Contiguous fp32 copies (tests, inspection): a ring as the reference holds it ([window, head_dim],
  // position p at slot p % window), a source's rows.
  V41Floats ring(int64_t layer) const;
  static V41Floats floats(const PagedRows& rows) { return rows.floats(); }
  // Rows of `rings` and of `carries` for a config and rollback length.
  static int64_t ring_rows_for(const V41Config& c, int64_t rollback);
  static int64_t carry_rows_for(const V41Config& c, int64_t rollback);
  void start();  // allocates rings and carries at the first token
  bool started() const { return rings.size() > 0; }

  std::shared_ptr<BlockPool> pool_;  // declared first: outlives the rows below
  int64_t length_ = 0, peak_ = 0;  // length now, longest length since the last reset
  PagedRows rings, carries;          // empty until the first token
  int64_t ring_rows = 0, carry_rows = 0;
  std::vector<int64_t> carry_row;    // per layer: first carry row in `carries` (-1: none)
  std::vector<Source> sources;       // indexed by layer (empty for non-sources)
  std::vector<int64_t> engram_hist;  // compressed ids (or DEAD) of the last max_ngram-1+rollback positions
  std::vector<int64_t> ring_from;    // per ring: first position it holds (> 0 after a compact replay)
  int64_t last_ik_owner = -1;        // last KV source that wrote index keys (reference emulation only)

 private:
  int64_t window_, head_dim_, rollback_, ring_size_;
  std::vector<int64_t> carry_size_, ratio_;
};

}  // namespace deepinfer::model
