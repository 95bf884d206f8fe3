#include "engine/text.h"

#include <algorithm>

#include "core/error.h"

namespace deepinfer::engine {

std::vector<int32_t> TextCodec::encode_chat(const std::vector<ChatMessage>&, const ChatOptions&) const {
  fail("this model's tokenizer has no chat encoding");
}

static bool ends_incomplete(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;  // U+FFFD: partial UTF-8
}

std::string IncrementalText::update(const TextCodec& codec, std::span<const int32_t> ids, bool skip_special) {
  // Decode with a little left context so merges at the boundary render as they would in full.
  std::string prefix = codec.decode(ids.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special);
  std::string full = codec.decode(ids.subspan(prefix_offset_), skip_special);
  if (full.size() <= prefix.size() || ends_incomplete(full)) return {};
  std::string delta = full.substr(prefix.size());
  prefix_offset_ = read_offset_;
  read_offset_ = ids.size();
  text_ += delta;
  return delta;
}

std::string IncrementalText::visible(const std::vector<std::string>& stops) const {
  size_t hold = 0;
  for (auto& s : stops)
    for (size_t k = std::min(s.size() - 1, text_.size()); k > hold; --k)
      if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  return text_.substr(0, text_.size() - hold);
}

std::optional<std::string> IncrementalText::find_stop(const std::vector<std::string>& stops, bool include) {
  size_t longest = 0;
  for (auto& s : stops) longest = std::max(longest, s.size());
  // A match may start up to longest-1 bytes before the new text.
  size_t from = checked_ > longest ? checked_ - longest + 1 : 0;
  size_t best = std::string::npos;
  const std::string* hit = nullptr;
  for (auto& s : stops) {
    size_t pos = text_.find(s, from);
    if (pos != std::string::npos && pos < best) best = pos, hit = &s;
  }
  checked_ = text_.size();
  if (!hit) return std::nullopt;
  text_.resize(include ? best + hit->size() : best);
  return *hit;
}

}  // namespace deepinfer::engine
