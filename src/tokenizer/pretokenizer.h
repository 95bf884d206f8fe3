// The pre_tokenizer section of tokenizer.json: splits text into pieces that BPE encodes alone.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace deepinfer::tokenizer {

struct Piece {
  uint32_t begin, end;  // byte range in the text handed to split()
};

// Finds the next match of a Split pattern: an Oniguruma regex, a literal, or a hand-written
// matcher for DeepSeek's three patterns (proven equal to Oniguruma by the tests; much faster).
class Matcher {
 public:
  virtual ~Matcher() = default;
  // First match starting at or after `from` in text; false when none.
  virtual bool find(std::string_view text, size_t from, size_t& b, size_t& e) const = 0;
  static std::unique_ptr<Matcher> regex(const std::string& pattern, bool allow_fast = true);
  static std::unique_ptr<Matcher> literal(const std::string& s);
};

class PreTokenizer {
 public:
  PreTokenizer();
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  // Reads the JSON section (null allowed). Throws on pre-tokenizers this engine does not run.
  static PreTokenizer from_json(const nlohmann::json& j, bool allow_fast = true);
  // Pieces of text, in order; empty pieces are dropped. out and scratch are reused buffers.
  void split(std::string_view text, std::vector<Piece>& out, std::vector<Piece>& scratch) const;
  bool byte_level() const { return byte_level_; }

 private:
  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
  struct Step {
    std::unique_ptr<Matcher> matcher;
    Behavior behavior;
    bool invert;
  };
  void add_steps(const nlohmann::json& j, bool allow_fast);
  void apply(const Step& s, std::string_view text, const std::vector<Piece>& in, std::vector<Piece>& out) const;
  std::vector<Step> steps_;
  bool byte_level_ = false;
};

}  // namespace deepinfer::tokenizer
