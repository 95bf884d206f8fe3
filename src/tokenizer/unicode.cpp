#include "tokenizer/unicode.h"

#include "tokenizer/tokenizer.h"

namespace deepinfer::tokenizer {

Utf8Step utf8_step(const unsigned char* p, size_t n) {
  unsigned char b = p[0];
  if (b < 0x80) return {Utf8Step::kChar, 1, b};
  uint32_t width = 0, cp = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b >= 0xC2 && b <= 0xDF) width = 2, cp = b & 0x1F;
  else if (b >= 0xE0 && b <= 0xEF) width = 3, cp = b & 0x0F, lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
  else if (b >= 0xF0 && b <= 0xF4) width = 4, cp = b & 0x07, lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
  else return {Utf8Step::kInvalid, 1, 0};
  for (uint32_t i = 1; i < width; ++i) {
    if (i >= n) return {Utf8Step::kIncomplete, i, 0};
    unsigned char c = p[i];
    bool ok = i == 1 ? (c >= lo && c <= hi) : (c >= 0x80 && c <= 0xBF);
    if (!ok) return {Utf8Step::kInvalid, i, 0};
    cp = (cp << 6) | (c & 0x3F);
  }
  return {Utf8Step::kChar, width, cp};
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  auto p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t i = 0, n = bytes.size();
  while (i < n) {
    Utf8Step s = utf8_step(p + i, n - i);
    if (s.kind == Utf8Step::kChar) out.append(bytes.data() + i, s.len);
    else out += "\xEF\xBF\xBD";  // an incomplete tail is one replacement too
    i += s.len;
  }
  return out;
}

const std::array<uint32_t, 256>& byte_to_codepoint() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      t[b] = printable ? uint32_t(b) : next++;
    }
    return t;
  }();
  return table;
}

int codepoint_to_byte(uint32_t cp) {
  static const std::array<int16_t, 324> inverse = [] {
    std::array<int16_t, 324> t;
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[byte_to_codepoint()[b]] = int16_t(b);
    return t;
  }();
  return cp < inverse.size() ? inverse[cp] : -1;
}

bool byte_level_decode(std::string_view token, std::string& out) {
  auto p = reinterpret_cast<const unsigned char*>(token.data());
  size_t i = 0;
  while (i < token.size()) {
    Utf8Step s = utf8_step(p + i, token.size() - i);
    if (s.kind != Utf8Step::kChar) return false;
    int b = codepoint_to_byte(s.cp);
    if (b < 0) return false;
    out += char(b);
    i += s.len;
  }
  return true;
}

}  // namespace deepinfer::tokenizer
