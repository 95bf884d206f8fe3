// Test doubles: a deterministic CausalLM whose logits are a pure function of the token history
// (so runs with and without batching, chunking, preemption or async compare bitwise), and a
// small text codec.
#pragma once
#include <atomic>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/text.h"
#include "model/causal_lm.h"
#include "core/counter_rng.h"

namespace deepinfer::testing {

// Holds one pool block per `tokens_per_block` tokens consumed, as a real model's state would, and the
// hash after each of its last kRollback tokens, so truncate() takes back draft tokens exactly.
class HashState : public model::SequenceState {
 public:
  HashState(std::shared_ptr<BlockPool> pool, int tokens_per_block) : pool_(std::move(pool)), tpb_(tokens_per_block) {}
  ~HashState() override { reset(); }
  int64_t length() const override { return static_cast<int64_t>(chunks_total); }
  int64_t bytes() const override { return static_cast<int64_t>(blocks_.size()) * pool_->block_bytes(); }
  static constexpr int64_t kRollback = 8;
  void reset() override {
    hash = 0x1234;
    chunks_total = 0;
    history.clear();
    chunk_sizes.clear();
    for (void* b : blocks_) pool_->release(b);
    blocks_.clear();
  }
  void truncate(int64_t length) override {
    const int64_t back = chunks_total - length;
    if (back < 0 || back > static_cast<int64_t>(history.size()) || back > kRollback)
      throw std::runtime_error("HashState: cannot take back " + std::to_string(back) + " tokens");
    for (int64_t i = 0; i < back; ++i) hash = history.back(), history.pop_back();
    chunks_total = length;
  }
  int64_t max_rollback() const override { return kRollback; }
  void consume(uint64_t next) {
    history.push_back(hash);  // the hash before this token
    if (static_cast<int64_t>(history.size()) > kRollback) history.erase(history.begin());
    hash = next;
    ++chunks_total;
  }
  void grow() {  // after consuming tokens: the blocks this length takes
    while (static_cast<int64_t>(blocks_.size()) * tpb_ < chunks_total) blocks_.push_back(pool_->allocate());
  }
  uint64_t hash = 0x1234;
  int64_t chunks_total = 0;
  std::vector<uint64_t> history;          // hashes before each of the last kRollback tokens
  std::vector<int32_t> chunk_sizes;       // how the engine fed this sequence

 private:
  std::shared_ptr<BlockPool> pool_;
  int tpb_;
  std::vector<void*> blocks_;
};

class HashLM : public model::CausalLM {
 public:
  // poison: a token that makes forward() throw; nan_after: a token after which the logits are NaN.
  // tokens_per_block: how many tokens one state block of the pool holds.
  explicit HashLM(int64_t vocab = 97, int32_t poison = -1, int32_t nan_after = -1, int tokens_per_block = 16)
      : vocab_(vocab), poison_(poison), nan_after_(nan_after), tpb_(tokens_per_block) {}
  int64_t vocab_size() const override { return vocab_; }
  std::unique_ptr<model::SequenceState> new_sequence() const override {
    return std::make_unique<HashState>(pool_, tpb_);
  }
  int64_t state_block_bytes() const override { return 64; }
  void set_state_pool(std::shared_ptr<BlockPool> pool) override { pool_ = std::move(pool); }
  int64_t state_blocks_for(int64_t tokens) const override { return (tokens + tpb_ - 1) / tpb_; }

  // The logits after a history with this hash: a spread of values in [-4, 4).
  static float logit(uint64_t hash, int64_t v) {
    return static_cast<float>(splitmix64(hash ^ (v * 0x9e3779b97f4a7c15ULL)) >> 40) / 16777216.0f * 8 - 4;
  }
  static uint64_t next_hash(uint64_t h, int32_t token) { return splitmix64(h ^ (uint64_t(token) << 20)); }

  void forward(const model::ForwardBatch& b, std::vector<float>& logits, const model::ForwardTaps* = nullptr) override {
    ++forwards;
    for (int32_t t : b.token_ids)
      if (t == poison_) throw std::runtime_error("poisoned token " + std::to_string(t));
    logits.assign(b.logit_rows.size() * vocab_, 0.0f);
    size_t row = 0;
    for (size_t s = 0; s + 1 < b.seq_start.size(); ++s) {
      auto* st = static_cast<HashState*>(b.states[s]);
      st->chunk_sizes.push_back(b.seq_start[s + 1] - b.seq_start[s]);
      for (int32_t i = b.seq_start[s]; i < b.seq_start[s + 1]; ++i) {
        st->consume(next_hash(st->hash, b.token_ids[i]));
        st->grow();
        while (row < b.logit_rows.size() && b.logit_rows[row] == i) {
          for (int64_t v = 0; v < vocab_; ++v)
            logits[row * vocab_ + v] = b.token_ids[i] == nan_after_ ? NAN : logit(st->hash, v);
          ++row;
        }
      }
    }
    if (row != b.logit_rows.size()) throw std::runtime_error("logit_rows not in flat order");
  }

  // Reference: the logits row after feeding `history` from an empty state.
  std::vector<float> logits_after(const std::vector<int32_t>& history) const {
    uint64_t h = 0x1234;
    for (int32_t t : history) h = next_hash(h, t);
    std::vector<float> row(vocab_);
    for (int64_t v = 0; v < vocab_; ++v) row[v] = logit(h, v);
    return row;
  }

  std::atomic<int> forwards{0};

 private:
  int64_t vocab_;
  int32_t poison_;
  int32_t nan_after_;
  int tpb_;
  std::shared_ptr<BlockPool> pool_ = std::make_shared<BlockPool>(64, 0);
};

// Token t is 1-3 lowercase letters; tokens 90/91 are the two halves of "é" (a UTF-8 split).
class LetterCodec : public engine::TextCodec {
 public:
  static std::string piece(int32_t t) {
    if (t == 90) return "\xC3";
    if (t == 91) return "\xA9";
    std::string s;
    for (int i = 0; i <= t % 3; ++i) s += static_cast<char>('a' + (t * 7 + i * 5) % 26);
    return s;
  }
  std::vector<int32_t> encode(const std::string& text) const override {
    std::vector<int32_t> ids;
    for (char c : text) ids.push_back((c - 'a') * 3 % 89);  // any deterministic mapping
    return ids;
  }
  std::string decode(std::span<const int32_t> ids, bool) const override {
    std::string s;
    for (int32_t t : ids) s += piece(t);
    // A dangling lead byte renders as U+FFFD, as byte-level BPE tokenizers do.
    if (!s.empty() && (static_cast<unsigned char>(s.back()) & 0xE0) == 0xC0) s.back() = '?', s.replace(s.size() - 1, 1, "\xEF\xBF\xBD");
    return s;
  }
};

}  // namespace deepinfer::testing
