// Added tokens (special or not): found in the raw text before pre-tokenization, leftmost-longest,
// with HF's lstrip / rstrip / single_word rules.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::tokenizer {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false, lstrip = false, rstrip = false, normalized = false, single_word = false;
};

struct Segment {
  uint32_t begin, end;
  int32_t id;  // the added token's id, or -1 for plain text
};

class AddedTokenMatcher {
 public:
  explicit AddedTokenMatcher(const std::vector<AddedToken>& tokens);  // the set to look for
  // Splits text[begin, end) into plain-text and token segments appended to out.
  void split(std::string_view text, uint32_t begin, uint32_t end, std::vector<Segment>& out) const;
  bool empty() const { return tokens_.empty(); }

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> next;  // sorted by byte
    int32_t token = -1;                             // index into tokens_ when a token ends here
  };
  int32_t child(int32_t node, uint8_t b) const;
  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_;
  std::array<bool, 256> first_byte_{};
};

}  // namespace deepinfer::tokenizer
