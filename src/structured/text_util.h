// Small UTF-8 and character-class helpers shared by the regex and EBNF parsers.
#pragma once
#include <cstdint>
#include <string>

#include "core/error.h"
#include "structured/grammar.h"

namespace deepinfer::structured {

// Decodes the codepoint at s[pos] (advancing pos); invalid UTF-8 raises an Error naming `what`.
inline uint32_t next_codepoint(const std::string& s, size_t& pos, const char* what) {
  unsigned char c = s[pos];
  int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  check(len > 0 && pos + len <= s.size(), what, ": invalid UTF-8 at byte ", pos);
  uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
  for (int k = 1; k < len; ++k) {
    unsigned char d = s[pos + k];
    check((d & 0xC0) == 0x80, what, ": invalid UTF-8 at byte ", pos);
    cp = (cp << 6) | (d & 0x3F);
  }
  pos += len;
  return cp;
}

inline int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Reads exactly n hex digits at s[pos].
inline uint32_t read_hex(const std::string& s, size_t& pos, int n, const char* what) {
  uint32_t v = 0;
  for (int i = 0; i < n; ++i) {
    check(pos < s.size() && hex_value(s[pos]) >= 0, what, ": expected ", n, " hex digits at byte ", pos);
    v = v * 16 + hex_value(s[pos++]);
  }
  check(v <= kMaxCodepoint, what, ": codepoint out of range at byte ", pos);
  return v;
}

inline CodepointRanges digit_ranges() { return {{'0', '9'}}; }
inline CodepointRanges word_ranges() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
inline CodepointRanges space_ranges() { return {{'\t', '\r'}, {' ', ' '}}; }

}  // namespace deepinfer::structured
