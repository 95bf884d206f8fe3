// Oniguruma regex, compiled the way HF tokenizers compiles Split patterns (Ruby syntax, UTF-8).
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace deepinfer::tokenizer {

class Regex {
 public:
  explicit Regex(const std::string& pattern);  // throws deepinfer::Error on a bad pattern
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // First match in text[from, text.size()) — text is the whole subject, so lookaround sees it.
  // Returns false when there is none. Thread-safe.
  bool search(std::string_view text, size_t from, size_t& match_begin, size_t& match_end) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* reg_ = nullptr;  // OnigRegex
};

// Unicode general-category bits of a code point, as Oniguruma's tables define them.
enum CharClass : uint8_t {
  kLetter = 1, kMark = 2, kNumber = 4, kPunct = 8, kSymbol = 16, kSpace = 32, kAlnum = 64,
};
uint8_t char_class(uint32_t cp);

}  // namespace deepinfer::tokenizer
