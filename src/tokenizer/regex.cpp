#include "tokenizer/regex.h"

#include <oniguruma.h>

#include <array>
#include <iterator>
#include <mutex>
#include <vector>

#include "core/error.h"

namespace deepinfer::tokenizer {

namespace {

void init_onig() {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encodings, 1);
  });
}

// One region per thread: onig_search needs scratch space, allocating it per call is slow.
OnigRegion* thread_region() {
  struct Holder {
    OnigRegion* r = onig_region_new();
    ~Holder() { onig_region_free(r, 1); }
  };
  thread_local Holder h;
  return h.r;
}

}  // namespace

Regex::Regex(const std::string& pattern) : pattern_(pattern) {
  init_onig();
  OnigRegex reg;
  OnigErrorInfo info;
  auto p = reinterpret_cast<const OnigUChar*>(pattern.data());
  int rc = onig_new(&reg, p, p + pattern.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8,
                    ONIG_SYNTAX_DEFAULT, &info);
  if (rc != ONIG_NORMAL) {
    OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(msg, rc, &info);
    fail("bad regex /", pattern, "/: ", reinterpret_cast<char*>(msg));
  }
  reg_ = reg;
}

Regex::~Regex() {
  if (reg_) onig_free(static_cast<OnigRegex>(reg_));
}

bool Regex::search(std::string_view text, size_t from, size_t& match_begin, size_t& match_end) const {
  OnigRegion* region = thread_region();
  auto s = reinterpret_cast<const OnigUChar*>(text.data());
  auto e = s + text.size();
  int r = onig_search(static_cast<OnigRegex>(reg_), s, e, s + from, e, region, ONIG_OPTION_NONE);
  if (r == ONIG_MISMATCH) return false;
  if (r < 0) fail("regex /", pattern_, "/: search failed (code ", r, ")");
  match_begin = size_t(region->beg[0]);
  match_end = size_t(region->end[0]);
  return true;
}

#include "tokenizer/unicode_tables.inc"

uint8_t char_class(uint32_t cp) {
  // One byte per code point (1.1 MB), filled once from the generated ranges of HF's Unicode data.
  static const std::vector<uint8_t> table = [] {
    std::vector<uint8_t> t(0x110000, 0);
    auto fill = [&](const uint32_t (*r)[2], size_t n, uint8_t bit) {
      for (size_t i = 0; i < n; ++i)
        for (uint32_t c = r[i][0]; c <= r[i][1]; ++c) t[c] |= bit;
    };
#define DEEPINFER_FILL(name) fill(name##Ranges, std::size(name##Ranges), name)
    DEEPINFER_FILL(kLetter);
    DEEPINFER_FILL(kMark);
    DEEPINFER_FILL(kNumber);
    DEEPINFER_FILL(kPunct);
    DEEPINFER_FILL(kSymbol);
    DEEPINFER_FILL(kSpace);
#undef DEEPINFER_FILL
    return t;
  }();
  return cp < 0x110000 ? table[cp] : 0;
}

}  // namespace deepinfer::tokenizer
