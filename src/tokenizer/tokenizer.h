// Byte-level BPE tokenizer read from a Hugging Face `tokenizer.json` (DeepSeek V3/V4 family).
// Produces exactly the ids of HF `tokenizers`; see docs/tokenizer.md for what is supported.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::tokenizer {

struct TokenizerData;  // immutable tables, shared by every copy of a Tokenizer

class Tokenizer {
 public:
  // path: a tokenizer.json file, or a folder holding it (+ tokenizer_config.json if present).
  static Tokenizer load(const std::string& path);
  // json: the text of a tokenizer.json; config_json: of tokenizer_config.json, or empty.
  static Tokenizer from_json(std::string_view json, std::string_view config_json = {},
                             const std::string& origin = "<memory>");

  // Thread-safe. add_special_tokens: BOS/EOS per tokenizer_config.json and the post-processor.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;
  // Appends to out (no clearing): the allocation-free form for hot loops.
  void encode_into(std::string_view text, bool add_special_tokens, std::vector<int32_t>& out) const;
  // Added-token strings (e.g. "<｜User｜>") in the text stay text (HF's split_special_tokens): for
  // untrusted content that must not be able to forge special tokens.
  std::vector<int32_t> encode_plain(std::string_view text) const;
  // Invalid UTF-8 (e.g. a cut multi-byte character) becomes U+FFFD, like HF.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  int64_t vocab_size() const;                        // largest id + 1, added tokens included
  const std::string& token_bytes(int32_t id) const;  // raw bytes the token stands for
  const std::string& token_string(int32_t id) const; // the token as written in tokenizer.json
  bool is_special(int32_t id) const;                 // an added token with "special": true
  bool is_added(int32_t id) const;                   // any added token (special or not)
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  bool add_bos_token() const;  // tokenizer_config.json's add_bos_token (false when absent)

 private:
  void encode_impl(std::string_view text, bool add_special_tokens, bool match_added, std::vector<int32_t>& out) const;
  const TokenizerData& data() const;  // throws when default-constructed
  std::shared_ptr<const TokenizerData> d_;
};

// Streaming decode: push ids one by one; each call returns only text whose UTF-8 is complete,
// so no broken character is ever emitted. The concatenation of every push() and finish()
// equals Tokenizer::decode of the same ids.
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(Tokenizer tok, bool skip_special_tokens = true);
  std::string push(int32_t id);
  std::string finish();  // flushes a trailing incomplete sequence as U+FFFD
 private:
  Tokenizer tok_;
  bool skip_special_;
  std::string pending_;  // bytes of an incomplete UTF-8 sequence
};

// UTF-8 with every ill-formed subsequence replaced by U+FFFD (Rust's from_utf8_lossy rules).
std::string utf8_lossy(std::string_view bytes);

}  // namespace deepinfer::tokenizer
