#include "tokenizer/regex.h"

#include <oniguruma.h>

#include <array>
#include <atomic>
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

uint8_t char_class(uint32_t cp) {
  // Code points are classified once per 256-block on first use; Oniguruma answers each query.
  static const std::array<OnigCtype, 6> ctypes = [] {
    init_onig();
    std::array<OnigCtype, 6> t{};
    const char* names[6] = {"L", "M", "N", "P", "S", "Alnum"};
    for (int i = 0; i < 6; ++i) {
      auto n = reinterpret_cast<const OnigUChar*>(names[i]);
      t[i] = ONIGENC_PROPERTY_NAME_TO_CTYPE(ONIG_ENCODING_UTF8, const_cast<OnigUChar*>(n),
                                            const_cast<OnigUChar*>(n + std::char_traits<char>::length(names[i])));
    }
    return t;
  }();
  constexpr uint32_t kBlocks = 0x110000 / 256;
  static std::array<std::atomic<const uint8_t*>, kBlocks> blocks{};
  if (cp >= 0x110000) return 0;
  const uint8_t* block = blocks[cp >> 8].load(std::memory_order_acquire);
  if (!block) {
    auto* b = new uint8_t[256];
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = (cp & ~0xFFu) | i;
      uint8_t bits = 0;
      const uint8_t flags[6] = {kLetter, kMark, kNumber, kPunct, kSymbol, kAlnum};
      for (int k = 0; k < 6; ++k)
        if (ONIGENC_IS_CODE_CTYPE(ONIG_ENCODING_UTF8, c, ctypes[k])) bits |= flags[k];
      if (ONIGENC_IS_CODE_CTYPE(ONIG_ENCODING_UTF8, c, ONIGENC_CTYPE_SPACE)) bits |= kSpace;
      b[i] = bits;
    }
    const uint8_t* expected = nullptr;
    if (blocks[cp >> 8].compare_exchange_strong(expected, b)) block = b;
    else delete[] b, block = expected;  // another thread won; use its table
  }
  return block[cp & 0xFF];
}

}  // namespace deepinfer::tokenizer
