// What the engine needs from a tokenizer (encode, decode, chat prompts), and the incremental
// detokenizer + stop-string matcher each sequence runs over its generated tokens.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "deepinfer/llm.h"

namespace deepinfer::engine {

class TextCodec {
 public:
  virtual ~TextCodec() = default;
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const = 0;
  // The chat prompt's token ids (with the generation prompt appended).
  virtual std::vector<int32_t> encode_chat(const std::vector<ChatMessage>& messages, const ChatOptions& options) const;
  // Raw bytes of every token id ("" for special ids), for structured output; empty: unsupported.
  virtual std::vector<std::string> token_bytes() const { return {}; }
};

// Decodes generated tokens a few at a time (a token may end inside a UTF-8 character, so text is
// only emitted once it decodes cleanly), and finds stop strings, also across token boundaries.
class IncrementalText {
 public:
  // Decodes ids (all generated tokens so far) past what was already decoded; returns the new text.
  std::string update(const TextCodec& codec, std::span<const int32_t> ids, bool skip_special_tokens);
  // Looks for a stop string in the text added since the last call; on a match the text is cut
  // before it (or after it, with include) and the matched string is returned.
  std::optional<std::string> find_stop(const std::vector<std::string>& stops, bool include);
  const std::string& text() const { return text_; }
  // The text safe to stream: without a tail that could still grow into a stop string.
  std::string visible(const std::vector<std::string>& stops) const;

 private:
  std::string text_;
  size_t prefix_offset_ = 0, read_offset_ = 0;  // token offsets: context start, decoded end
  size_t checked_ = 0;                          // text bytes already searched for stop strings
};

}  // namespace deepinfer::engine
