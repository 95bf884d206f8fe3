#include "tokenizer/normalizer.h"

#include <algorithm>
#include <iterator>
#include <string_view>

#include "tokenizer/unicode.h"

namespace deepinfer::tokenizer {
namespace {

// Code points lo..hi fold by one rule (see tools/gen/gen_fold_tables.py): step 1/2 maps lo, lo+step, ...
// to text (code point `vary` of it counting up with cp - lo; -1: all to text) and leaves the ones in
// between alone; step 0 is a list, text holding one code point per cp.
struct FoldRun {
  uint32_t lo, hi;
  uint8_t step;
  int8_t vary;
  const char* text;  // UTF-8
};
#include "tokenizer/fold_tables.inc"

// Hangul syllables decompose into their jamo (Unicode §3.12), which fold to themselves.
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7, kVCount = 21,
                   kTCount = 28, kSCount = 19 * kVCount * kTCount;

// Rust's char::is_whitespace (Unicode White_Space), which tokenizers' Strip uses.
bool is_white_space(uint32_t c) {
  return (c >= 0x9 && c <= 0xD) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Calls f(offset, length, code point or -1 for a malformed byte run) for each piece of s.
template <class F>
void for_each_code_point(std::string_view s, F f) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const Utf8Step st = utf8_step(p + i, s.size() - i);
    f(i, st.len, st.kind == Utf8Step::kChar ? static_cast<int64_t>(st.cp) : int64_t{-1});
    i += st.len;
  }
}

}  // namespace

void append_folded(std::string& out, uint32_t cp) {
  if (cp - kSBase < kSCount) {
    const uint32_t s = cp - kSBase;
    append_utf8(out, kLBase + s / (kVCount * kTCount));
    append_utf8(out, kVBase + s % (kVCount * kTCount) / kTCount);
    if (s % kTCount) append_utf8(out, kTBase + s % kTCount);
    return;
  }
  const FoldRun* run = std::lower_bound(std::begin(kFoldRuns), std::end(kFoldRuns), cp,
                                        [](const FoldRun& r, uint32_t c) { return r.hi < c; });
  if (run == std::end(kFoldRuns) || cp < run->lo || (run->step == 2 && (cp - run->lo) % 2)) {
    append_utf8(out, cp);
    return;
  }
  int64_t k = 0;  // index of the code point of text being read
  for_each_code_point(run->text, [&](size_t, size_t, int64_t c) {
    if (run->step == 0) {
      if (k++ == cp - run->lo) append_utf8(out, static_cast<uint32_t>(c));
    } else {
      append_utf8(out, static_cast<uint32_t>(c + (k++ == run->vary ? cp - run->lo : 0)));
    }
  });
}

std::string engram_normalize(const std::string& text) {
  std::string folded;
  for_each_code_point(text, [&](size_t at, size_t len, int64_t cp) {
    if (cp < 0) folded.append(text, at, len);
    else append_folded(folded, static_cast<uint32_t>(cp));
  });
  std::string collapsed;  // [ \t\r\n]+ -> " "
  bool in_run = false;
  for (const char ch : folded) {
    const bool ws = ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n';
    if (ws && !in_run) collapsed += ' ';
    if (!ws) collapsed += ch;
    in_run = ws;
  }
  if (collapsed == " ") return collapsed;  // protected by the sentinel in engram.py
  size_t begin = collapsed.size(), end = 0;  // the bytes between the first and last non-White_Space piece
  for_each_code_point(collapsed, [&](size_t at, size_t len, int64_t cp) {
    if (cp >= 0 && is_white_space(static_cast<uint32_t>(cp))) return;
    begin = std::min(begin, at);
    end = at + len;
  });
  return begin < end ? collapsed.substr(begin, end - begin) : text;
}

}  // namespace deepinfer::tokenizer
