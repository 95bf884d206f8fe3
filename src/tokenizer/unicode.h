// UTF-8 and GPT-2 byte-level helpers shared by the tokenizer's parts.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace deepinfer::tokenizer {

// Result of reading one UTF-8 sequence at the front of a buffer (Unicode "maximal subpart" rules).
struct Utf8Step {
  enum Kind { kChar, kInvalid, kIncomplete } kind;
  uint32_t len;  // bytes consumed (kChar, kInvalid) or available so far (kIncomplete)
  uint32_t cp;   // the code point when kChar
};
Utf8Step utf8_step(const unsigned char* p, size_t n);

// Appends the UTF-8 encoding of cp.
void append_utf8(std::string& out, uint32_t cp);

// GPT-2's bytes_to_unicode: each byte is shown as one printable code point.
const std::array<uint32_t, 256>& byte_to_codepoint();
// Inverse: the byte a code point stands for, or -1 when it is not a byte-level character.
int codepoint_to_byte(uint32_t cp);

// Decodes a byte-level token string to raw bytes; false when some character is not in the map.
bool byte_level_decode(std::string_view token, std::string& out);

}  // namespace deepinfer::tokenizer
