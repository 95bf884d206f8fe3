// DeepSeek-V4.1 Engram hashing (spec §5.3, DeepSeek's engram.py): the compressed token map, the
// bucket primes and offsets, the per-layer multipliers, and the n-gram hash ids of each position.
// Pure integer host work; exact equality with the reference is the requirement.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/deepseek_v41/v41_config.h"

namespace deepinfer::tokenizer {
class Tokenizer;
}

namespace deepinfer::model {

// token id -> compressed id, in first-seen order of token id. decoded[i] is the single-token decode
// (skip_special_tokens=False), keyed by tokenizer::engram_normalize; raw[i] the vocabulary string (the
// key when the decode holds U+FFFD).
std::vector<int64_t> build_compressed_token_map(const std::vector<std::string>& decoded,
                                                const std::vector<std::string>& raw, int64_t* compressed_size);

// What build_compressed_token_map reads, from a tokenizer: every id decoded alone (special tokens kept)
// and its vocabulary string.
struct EngramTokenStrings {
  std::vector<std::string> decoded, raw;
};
EngramTokenStrings engram_token_strings(const tokenizer::Tokenizer& tok);

// The odd int64 multipliers of a layer, numpy's default_rng(10007*layer).integers(0,
// (int64max // compressed_vocab) // 2, max_ngram, int64) * 2 + 1, computed (numpy_rng.h).
std::vector<int64_t> engram_multipliers(int64_t layer, int64_t compressed_vocab, int64_t max_ngram);

// The bucket primes of every Engram layer, [layer][ngram-1][head]: for each n-gram size the primes above
// vocab_size - 1, distinct across all of them; a layer's table has their sum rows (engram_num_embeddings).
std::vector<int64_t> engram_primes(int64_t vocab_size, int64_t n_heads, int64_t max_ngram, int64_t layers);

class EngramHasher {
 public:
  static constexpr int64_t kDead = -1;
  // token_map: from build_compressed_token_map; its size must equal the config's compressed vocab.
  EngramHasher(const V41Config& c, std::vector<int64_t> token_map, int64_t compressed_size);

  int64_t n_layers() const { return static_cast<int64_t>(layer_ids_.size()); }
  int64_t cols() const { return (max_ngram_ - 1) * n_heads_; }  // ids per position per layer
  int64_t compressed(int64_t token_id) const;                   // cmap[token]
  // Hash ids [n, n_layers, cols] of positions start..start+n-1 given the compressed history
  // (hist[i] = cmap[token at position base + i] or kDead), row ids with offsets included. The history
  // must reach back max_ngram-1 positions before `start` (or to position 0).
  void hash(const std::vector<int64_t>& hist, int64_t start, int64_t n, int64_t* out, int64_t base = 0) const;
  int64_t max_ngram() const { return max_ngram_; }

  const std::vector<int64_t>& token_map() const { return token_map_; }
  const std::vector<int64_t>& primes() const { return primes_; }          // [layer][ngram-1][head]
  const std::vector<int64_t>& offsets() const { return offsets_; }        // [layer][(ngram-1)*heads]
  const std::vector<int64_t>& multipliers() const { return multipliers_; }  // [layer][max_ngram]

 private:
  std::vector<int64_t> layer_ids_, token_map_, primes_, offsets_, multipliers_;
  int64_t max_ngram_, n_heads_, pad_;
};

}  // namespace deepinfer::model
