// Per-sequence DeepSeek-V4.1 state (spec §6.1) and its rollback. Everything sized by the window or the
// sequence lives in PagedRows over one BlockPool arena: `rings` holds the window ring of every layer and
// DSpark stage (ring l = rows [l*ring, (l+1)*ring)), `carries` the ratio>1 compressor carries (kv rows
// then score rows, a ring of `carry` positions each); each KV source's compressed rows and index keys
// grow with the sequence. Rings and carries are `rollback` positions longer than the reference's, so
// that truncate() can take back up to `rollback` tokens exactly (the rows of the kept positions are
// never overwritten by the tokens taken back).
//
// The layout (row kind: width x stored format, core/row_format.h), the reference's storage points
// (inference/model.py): ring rows head_dim as FP8 e4m3 + UE8M0 per 32 (act_quant of the window K, RoPE
// tail included: 528 B at 512), compressed rows head_dim as FP4 e2m1 + E4M3 per 16 (fp4_act_quant after
// RoPE: 288 B), index keys index_head_dim as FP4 e2m1 + UE8M0 per 32 (68 B at 128); carries head_dim x
// F32 (the fp32 projections the reference keeps in fp32). The rows hold exactly the codes and scales of
// the reference's quantization, so their values are those its bf16 caches hold.
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
  static constexpr RowFormat kRingFormat = RowFormat::kFp8E8m0x32, kCompressedFormat = RowFormat::kFp4E4m3x16,
                             kIndexKeyFormat = RowFormat::kFp4E8m0x32, kCarryFormat = RowFormat::kF32;
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
