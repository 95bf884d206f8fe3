#include "model/deepseek_v41/v41_engram.h"

#include <limits>
#include <span>
#include <set>
#include <unordered_map>

#include "core/error.h"
#include "model/deepseek_v41/numpy_rng.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::model {
namespace {

bool is_prime(int64_t n) {
  if (n < 2) return false;
  if (n % 2 == 0) return n == 2;
  for (int64_t d = 3; d * d <= n; d += 2)
    if (n % d == 0) return false;
  return true;
}

}  // namespace

EngramTokenStrings engram_token_strings(const tokenizer::Tokenizer& tok) {
  const int64_t V = tok.vocab_size();
  EngramTokenStrings s{std::vector<std::string>(V), std::vector<std::string>(V)};
  for (int64_t id = 0; id < V; ++id) {
    const int32_t one = static_cast<int32_t>(id);
    s.decoded[id] = tok.decode(std::span<const int32_t>(&one, 1), false);
    s.raw[id] = tok.token_string(one);
  }
  return s;
}

std::vector<int64_t> build_compressed_token_map(const std::vector<std::string>& decoded,
                                                const std::vector<std::string>& raw, int64_t* compressed_size) {
  check(decoded.size() == raw.size(), "engram: decoded and raw token lists differ in size");
  std::unordered_map<std::string, int64_t> key_to_new;
  std::vector<int64_t> map(decoded.size());
  for (size_t i = 0; i < decoded.size(); ++i) {
    const bool partial = decoded[i].find("\xEF\xBF\xBD") != std::string::npos;  // U+FFFD
    const std::string key = partial ? raw[i] : tokenizer::engram_normalize(decoded[i]);
    auto it = key_to_new.find(key);
    if (it == key_to_new.end()) it = key_to_new.emplace(key, static_cast<int64_t>(key_to_new.size())).first;
    map[i] = it->second;
  }
  *compressed_size = static_cast<int64_t>(key_to_new.size());
  return map;
}

std::vector<int64_t> engram_multipliers(int64_t layer, int64_t vocab, int64_t max_ngram) {
  check(layer >= 0 && vocab >= 1 && max_ngram >= 1, "engram: bad multiplier request (layer ", layer,
        ", compressed vocab ", vocab, ", max_ngram ", max_ngram, ")");
  const int64_t bound = std::numeric_limits<int64_t>::max() / vocab / 2;
  check(bound >= 1, "engram: compressed vocab ", vocab, " leaves no multiplier range");
  std::vector<int64_t> m = numpy_integers(static_cast<uint64_t>(10007 * layer), 0, bound, max_ngram);
  for (int64_t& v : m) v = v * 2 + 1;
  return m;
}

std::vector<int64_t> engram_primes(int64_t vocab_size, int64_t n_heads, int64_t max_ngram, int64_t layers) {
  std::vector<int64_t> primes;
  std::set<int64_t> seen;  // distinct across heads, n-gram sizes and layers
  for (int64_t l = 0; l < layers; ++l)
    for (int64_t n = 0; n < max_ngram - 1; ++n) {
      int64_t current = vocab_size - 1;
      for (int64_t h = 0; h < n_heads; ++h) {
        int64_t cand = current + 1;
        while (!is_prime(cand) || seen.count(cand)) ++cand;
        seen.insert(cand);
        current = cand;
        primes.push_back(cand);
      }
    }
  return primes;
}

EngramHasher::EngramHasher(const V41Config& c, std::vector<int64_t> token_map, int64_t compressed_size)
    : layer_ids_(c.engram_layer_ids), token_map_(std::move(token_map)), max_ngram_(c.engram_max_ngram_size),
      n_heads_(c.engram_n_heads) {
  check(compressed_size == c.engram_compressed_vocab_size, "config: engram_compressed_vocab_size = ",
        c.engram_compressed_vocab_size, ": the tokenizer's compressed token map has ", compressed_size,
        " entries (every hash would be wrong)");
  check(c.engram_pad_id >= 0 && c.engram_pad_id < static_cast<int64_t>(token_map_.size()), "engram: pad id out of range");
  pad_ = token_map_[c.engram_pad_id];
  primes_ = engram_primes(c.engram_vocab_size, n_heads_, max_ngram_, static_cast<int64_t>(layer_ids_.size()));
  const int64_t per_layer = (max_ngram_ - 1) * n_heads_;
  for (size_t li = 0; li < layer_ids_.size(); ++li) {
    int64_t running = 0;
    for (int64_t i = 0; i < per_layer; ++i) {
      offsets_.push_back(running);
      running += primes_[li * per_layer + i];
    }
    check(running == c.engram_num_embeddings[li], "config: engram_vocab_size = ", c.engram_vocab_size,
          " does not fit engram_num_embeddings[", li, "] = ", c.engram_num_embeddings[li], ": layer ", layer_ids_[li],
          "'s table is its primes above engram_vocab_size (one per n-gram size and head) summed, ", running, " rows");
    auto m = engram_multipliers(layer_ids_[li], compressed_size, max_ngram_);
    multipliers_.insert(multipliers_.end(), m.begin(), m.end());
  }
}

int64_t EngramHasher::compressed(int64_t token_id) const {
  check(token_id >= 0 && token_id < static_cast<int64_t>(token_map_.size()), "engram: token id ", token_id,
        " out of range");
  return token_map_[token_id];
}

void EngramHasher::hash(const std::vector<int64_t>& hist, int64_t start, int64_t n, int64_t* out,
                        int64_t base) const {
  check(base >= 0 && start >= base && (base == 0 || start - base >= max_ngram_ - 1) &&
            start + n - base <= static_cast<int64_t>(hist.size()),
        "engram: the history does not cover positions ", start, "..", start + n - 1);
  const int64_t NL = n_layers(), C = cols();
  std::vector<int64_t> tok(max_ngram_);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = start + i;
    bool blocked = false;
    for (int64_t s = 0; s < max_ngram_; ++s) {
      const int64_t q = p - s;  // before position 0 the lookback is blocked (pad)
      const int64_t src = q < 0 ? pad_ : hist[q - base];
      blocked = blocked || p < s || src == kDead;
      tok[s] = blocked ? pad_ : src;
    }
    for (int64_t li = 0; li < NL; ++li) {
      const int64_t* mult = multipliers_.data() + li * max_ngram_;
      uint64_t rolling = static_cast<uint64_t>(tok[0]) * static_cast<uint64_t>(mult[0]);  // int64 wrap-around
      for (int64_t s = 1; s < max_ngram_; ++s) {
        rolling ^= static_cast<uint64_t>(tok[s]) * static_cast<uint64_t>(mult[s]);
        const int64_t h = static_cast<int64_t>(rolling);
        for (int64_t k = 0; k < n_heads_; ++k) {
          const int64_t col = (s - 1) * n_heads_ + k;
          const int64_t prime = primes_[li * C + col];
          int64_t r = h % prime;
          if (r < 0) r += prime;  // torch's % is a floor modulus
          out[(i * NL + li) * C + col] = r + offsets_[li * C + col];
        }
      }
    }
  }
}

}  // namespace deepinfer::model
