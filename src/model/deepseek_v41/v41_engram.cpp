#include "model/deepseek_v41/v41_engram.h"

#include <algorithm>
#include <set>
#include <unordered_map>

#include "core/error.h"
#include "model/deepseek_v41/v41_tables.h"

namespace deepinfer::model {
namespace {

// UTF-8 decoding/encoding of well-formed strings (token decodes are valid UTF-8 or contain U+FFFD).
std::vector<uint32_t> utf8_decode(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < n && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}

void utf8_append(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

const char* fold_of(uint32_t cp) {
  const v41::FoldEntry* b = v41::kFoldTable;
  const v41::FoldEntry* e = b + v41::kFoldTableSize;
  const v41::FoldEntry* it = std::lower_bound(b, e, cp, [](const v41::FoldEntry& f, uint32_t c) { return f.code_point < c; });
  return it != e && it->code_point == cp ? it->folded : nullptr;
}

// Rust's char::is_whitespace (Unicode White_Space), which tokenizers' Strip uses.
bool is_white_space(uint32_t c) {
  return (c >= 0x9 && c <= 0xD) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_prime(int64_t n) {
  if (n < 2) return false;
  if (n % 2 == 0) return n == 2;
  for (int64_t d = 3; d * d <= n; d += 2)
    if (n % d == 0) return false;
  return true;
}

}  // namespace

std::string engram_normalize(const std::string& text) {
  // NFKC -> NFD -> StripAccents -> Lowercase, per code point through the generated table.
  std::string folded;
  for (uint32_t cp : utf8_decode(text)) {
    if (const char* f = fold_of(cp)) folded += f;
    else utf8_append(folded, cp);
  }
  // [ \t\r\n]+ -> " "
  std::string collapsed;
  bool in_run = false;
  for (const char ch : folded) {
    const bool ws = ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n';
    if (ws && !in_run) collapsed += ' ';
    if (!ws) collapsed += ch;
    in_run = ws;
  }
  if (collapsed == " ") return collapsed;  // protected by the sentinel in engram.py
  std::vector<uint32_t> cps = utf8_decode(collapsed);
  size_t b = 0, e = cps.size();
  while (b < e && is_white_space(cps[b])) ++b;
  while (e > b && is_white_space(cps[e - 1])) --e;
  std::string out;
  for (size_t i = b; i < e; ++i) utf8_append(out, cps[i]);
  return out.empty() ? text : out;
}

std::vector<int64_t> build_compressed_token_map(const std::vector<std::string>& decoded,
                                                const std::vector<std::string>& raw, int64_t* compressed_size) {
  check(decoded.size() == raw.size(), "engram: decoded and raw token lists differ in size");
  std::unordered_map<std::string, int64_t> key_to_new;
  std::vector<int64_t> map(decoded.size());
  for (size_t i = 0; i < decoded.size(); ++i) {
    const bool partial = decoded[i].find("\xEF\xBF\xBD") != std::string::npos;  // U+FFFD
    const std::string key = partial ? raw[i] : engram_normalize(decoded[i]);
    auto it = key_to_new.find(key);
    if (it == key_to_new.end()) it = key_to_new.emplace(key, static_cast<int64_t>(key_to_new.size())).first;
    map[i] = it->second;
  }
  *compressed_size = static_cast<int64_t>(key_to_new.size());
  return map;
}

std::vector<int64_t> engram_multipliers(int64_t layer, int64_t vocab, int64_t max_ngram) {
  check(max_ngram <= 4, "engram: multipliers are tabulated for max_ngram_size <= 4, got ", max_ngram);
  for (size_t i = 0; i < v41::kMultipliersSize; ++i) {
    const auto& e = v41::kMultipliers[i];
    if (e.compressed_vocab == vocab && e.layer == layer) return std::vector<int64_t>(e.mult, e.mult + max_ngram);
  }
  fail("engram: no hash multipliers tabulated for layer ", layer, " and compressed vocab ", vocab,
       " (regenerate src/model/deepseek_v41/v41_tables.cpp with tools/gen/gen_v41_tables.py)");
}

EngramHasher::EngramHasher(const V41Config& c, std::vector<int64_t> token_map, int64_t compressed_size)
    : layer_ids_(c.engram_layer_ids), token_map_(std::move(token_map)), max_ngram_(c.engram_max_ngram_size),
      n_heads_(c.engram_n_heads) {
  check(compressed_size == c.engram_compressed_vocab_size, "engram: the compressed token map has ", compressed_size,
        " entries but engram_compressed_vocab_size is ", c.engram_compressed_vocab_size,
        " (every hash would be wrong)");
  check(c.engram_pad_id >= 0 && c.engram_pad_id < static_cast<int64_t>(token_map_.size()), "engram: pad id out of range");
  pad_ = token_map_[c.engram_pad_id];
  std::set<int64_t> seen;
  for (size_t li = 0; li < layer_ids_.size(); ++li) {
    int64_t running = 0, sum = 0;
    for (int64_t n = 0; n < max_ngram_ - 1; ++n) {
      int64_t current = c.engram_vocab_size - 1;
      for (int64_t h = 0; h < n_heads_; ++h) {
        int64_t cand = current + 1;
        while (!is_prime(cand) || seen.count(cand)) ++cand;
        seen.insert(cand);
        current = cand;
        primes_.push_back(cand);
        offsets_.push_back(running);
        running += cand;
        sum += cand;
      }
    }
    check(sum == c.engram_num_embeddings[li], "engram: the primes of layer ", layer_ids_[li], " sum to ", sum,
          " but engram_num_embeddings says ", c.engram_num_embeddings[li]);
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
