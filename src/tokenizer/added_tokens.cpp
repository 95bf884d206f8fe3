#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace deepinfer::tokenizer {

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens) : tokens_(tokens) {
  nodes_.emplace_back();
  for (size_t t = 0; t < tokens_.size(); ++t) {
    const std::string& s = tokens_[t].content;
    if (s.empty()) continue;
    first_byte_[uint8_t(s[0])] = true;
    int32_t node = 0;
    for (unsigned char b : s) {
      int32_t c = child(node, b);
      if (c < 0) {
        c = int32_t(nodes_.size());
        auto& nx = nodes_[node].next;
        nx.insert(std::upper_bound(nx.begin(), nx.end(), std::make_pair(b, INT32_MIN)), {b, c});
        nodes_.emplace_back();
      }
      node = c;
    }
    if (nodes_[node].token < 0) nodes_[node].token = int32_t(t);  // first definition wins
  }
}

int32_t AddedTokenMatcher::child(int32_t node, uint8_t b) const {
  for (auto& [byte, c] : nodes_[node].next)
    if (byte == b) return c;
  return -1;
}

namespace {

// Previous / next code point around a byte offset of valid UTF-8.
uint32_t cp_before(std::string_view t, size_t i, size_t& start) {
  size_t j = i - 1;
  while (j > 0 && (uint8_t(t[j]) & 0xC0) == 0x80) --j;
  start = j;
  return utf8_step(reinterpret_cast<const unsigned char*>(t.data()) + j, i - j).cp;
}
uint32_t cp_after(std::string_view t, size_t i, uint32_t& len) {
  Utf8Step s = utf8_step(reinterpret_cast<const unsigned char*>(t.data()) + i, t.size() - i);
  len = s.len;
  return s.cp;
}
bool is_space(uint32_t cp) { return char_class(cp) & kSpace; }
bool is_word(uint32_t cp) { return cp == '_' || (char_class(cp) & (kLetter | kNumber)); }

}  // namespace

void AddedTokenMatcher::split(std::string_view text, uint32_t begin, uint32_t end, std::vector<Segment>& out) const {
  uint32_t done = begin;  // text before this offset is already emitted
  uint32_t i = begin;
  while (i < end) {
    if (!first_byte_[uint8_t(text[i])]) {
      ++i;
      continue;
    }
    int32_t node = 0, best = -1;
    uint32_t best_end = 0;
    for (uint32_t j = i; j < end; ++j) {  // longest token starting at i
      node = child(node, uint8_t(text[j]));
      if (node < 0) break;
      if (nodes_[node].token >= 0) best = nodes_[node].token, best_end = j + 1;
    }
    if (best < 0) {
      ++i;
      continue;
    }
    const AddedToken& tok = tokens_[best];
    uint32_t start = i, stop = best_end;
    i = best_end;
    std::string_view sub = text.substr(0, end);
    if (tok.single_word) {  // must not touch a word character on either side
      size_t s;
      uint32_t len;
      bool left_ok = start == begin || !is_word(cp_before(sub, start, s));
      bool right_ok = stop == end || !is_word(cp_after(sub, stop, len));
      if (!left_ok || !right_ok) continue;
    }
    if (tok.lstrip) {  // swallow whitespace on the left, but not what an earlier match took
      size_t s;
      while (start > done && is_space(cp_before(sub, start, s))) start = uint32_t(s);
    }
    if (tok.rstrip) {
      uint32_t len;
      while (stop < end && is_space(cp_after(sub, stop, len))) stop += len;
      i = stop;
    }
    if (done < start) out.push_back({done, start, -1});
    out.push_back({start, stop, tok.id});
    done = stop;
  }
  if (done < end) out.push_back({done, end, -1});
}

}  // namespace deepinfer::tokenizer
