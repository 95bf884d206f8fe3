// The BPE model of a byte-level tokenizer.json: merges applied by rank over raw bytes.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace deepinfer::tokenizer {

class BpeModel {
 public:
  // vocab: token bytes -> id (byte-level strings already decoded to bytes).
  // merges: pairs of token bytes in rank order. Throws when a merge names unknown tokens.
  BpeModel(std::unordered_map<std::string, int32_t> vocab,
           const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges);
  // Appends the ids of one pre-token. Bytes with no single-byte token are dropped (as HF does
  // when there is no unk token).
  void encode_word(std::string_view bytes, std::vector<int32_t>& out) const;
  size_t merge_count() const { return merge_count_; }

 private:
  struct Slot {
    uint64_t key = kEmpty;
    int32_t rank = 0, id = 0;
  };
  static constexpr uint64_t kEmpty = ~uint64_t(0);
  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  // Rank and result of merging (a, b); false when the pair has no merge.
  bool lookup(int32_t a, int32_t b, int32_t& rank, int32_t& id) const {
    uint64_t k = key(a, b);
    size_t i = (k * 0x9E3779B97F4A7C15ull) >> shift_;
    while (true) {
      const Slot& s = slots_[i];
      if (s.key == k) return rank = s.rank, id = s.id, true;
      if (s.key == kEmpty) return false;
      i = (i + 1) & (slots_.size() - 1);
    }
  }
  void insert(int32_t a, int32_t b, int32_t rank, int32_t id);
  void merge_small(std::vector<int32_t>& out, size_t first) const;
  void merge_large(std::vector<int32_t>& out, size_t first) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::array<int32_t, 256> byte_id_;
  std::vector<Slot> slots_;  // open-addressing hash table of merges
  int shift_ = 64;
  size_t merge_count_ = 0;
  bool ignore_merges_;
};

}  // namespace deepinfer::tokenizer
