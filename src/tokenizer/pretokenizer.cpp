#include "tokenizer/pretokenizer.h"

#include <algorithm>
#include <array>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace deepinfer::tokenizer {

namespace {

constexpr size_t kNone = size_t(-1);

// Code point at byte i of valid UTF-8 (the tokenizer validates input first).
inline uint32_t cp_at(const unsigned char* s, size_t i, uint32_t& len) {
  unsigned char b = s[i];
  if (b < 0x80) return len = 1, b;
  if (b < 0xE0) return len = 2, ((b & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu);
  if (b < 0xF0) return len = 3, ((b & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu);
  return len = 4, ((b & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) | ((s[i + 2] & 0x3Fu) << 6) | (s[i + 3] & 0x3Fu);
}

inline uint8_t cls_at(const unsigned char* s, size_t i, uint32_t& len, uint32_t& cp) {
  cp = cp_at(s, i, len);
  if (cp < 128) {  // ASCII fast path, computed once
    static const std::array<uint8_t, 128> ascii = [] {
      std::array<uint8_t, 128> t{};
      for (uint32_t c = 0; c < 128; ++c) t[c] = char_class(c);
      return t;
    }();
    return ascii[cp];
  }
  return char_class(cp);
}

// End of the longest run from i whose characters have a class in `mask`.
inline size_t run_of(const unsigned char* s, size_t n, size_t i, uint8_t mask) {
  uint32_t len, cp;
  while (i < n && (cls_at(s, i, len, cp) & mask)) i += len;
  return i;
}

class OnigMatcher : public Matcher {
 public:
  explicit OnigMatcher(const std::string& p) : re_(p) {}
  bool find(std::string_view t, size_t from, size_t& b, size_t& e) const override { return re_.search(t, from, b, e); }
 private:
  Regex re_;
};

class LiteralMatcher : public Matcher {
 public:
  explicit LiteralMatcher(std::string s) : s_(std::move(s)) {}
  bool find(std::string_view t, size_t from, size_t& b, size_t& e) const override {
    size_t p = t.find(s_, from);
    if (p == std::string_view::npos) return false;
    b = p, e = p + s_.size();
    return true;
  }
 private:
  std::string s_;
};

// Hand-written equivalents of DeepSeek's three Split patterns (Oniguruma leftmost-first
// semantics, including backtracking of the greedy quantifiers).
const std::string kDigits = "\\p{N}{1,3}";
const std::string kCjk = "[一-龥぀-ゟ゠-ヿ]+";
const std::string kWords =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";

class DigitsMatcher : public Matcher {
 public:
  bool find(std::string_view t, size_t from, size_t& b, size_t& e) const override {
    auto s = reinterpret_cast<const unsigned char*>(t.data());
    uint32_t len, cp;
    for (size_t i = from; i < t.size(); i += len) {
      if (!(cls_at(s, i, len, cp) & kNumber)) continue;
      size_t j = i + len;
      for (int k = 1; k < 3 && j < t.size() && (cls_at(s, j, len, cp) & kNumber); ++k) j += len;
      b = i, e = j;
      return true;
    }
    return false;
  }
};

inline bool is_cjk(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x3040 && c <= 0x30FF);
}

class CjkMatcher : public Matcher {
 public:
  bool find(std::string_view t, size_t from, size_t& b, size_t& e) const override {
    auto s = reinterpret_cast<const unsigned char*>(t.data());
    uint32_t len;
    for (size_t i = from; i < t.size(); i += len) {
      if (!is_cjk(cp_at(s, i, len))) continue;
      size_t j = i + len;
      while (j < t.size() && is_cjk(cp_at(s, j, len))) j += len;
      b = i, e = j;
      return true;
    }
    return false;
  }
};

inline bool ascii_punct(uint32_t c) {
  return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') || (c >= '{' && c <= '~');
}
inline bool ascii_alpha(unsigned char c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }

class WordsMatcher : public Matcher {
 public:
  bool find(std::string_view t, size_t from, size_t& b, size_t& e) const override {
    auto s = reinterpret_cast<const unsigned char*>(t.data());
    size_t n = t.size();
    uint32_t len, cp;
    for (size_t i = from; i < n; i += len) {
      uint8_t cls = cls_at(s, i, len, cp);
      size_t end = match_at(s, n, i, cp, len, cls);
      if (end != kNone) return b = i, e = end, true;
    }
    return false;
  }

 private:
  static size_t match_at(const unsigned char* s, size_t n, size_t i, uint32_t c, uint32_t len, uint8_t cls) {
    // [punct][A-Za-z]+
    if (c < 128 && ascii_punct(c) && i + 1 < n && ascii_alpha(s[i + 1])) {
      size_t j = i + 2;
      while (j < n && ascii_alpha(s[j])) ++j;
      return j;
    }
    // [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
    if (c != '\r' && c != '\n' && !(cls & (kLetter | kPunct | kSymbol))) {
      size_t j = run_of(s, n, i + len, kLetter | kMark);
      if (j > i + len) return j;
    }
    if (cls & (kLetter | kMark)) return run_of(s, n, i, kLetter | kMark);
    // ' ?[\p{P}\p{S}]+[\r\n]*'
    size_t p = c == ' ' ? i + 1 : i;
    size_t q = run_of(s, n, p, kPunct | kSymbol);
    if (q > p) {
      while (q < n && (s[q] == '\r' || s[q] == '\n')) ++q;
      return q;
    }
    if (!(cls & kSpace)) return kNone;
    // \s*[\r\n]+ : the whitespace run up to and including its last \r or \n
    size_t j = i, last_nl = kNone, last_start = i;
    uint32_t l2, c2;
    while (j < n && (cls_at(s, j, l2, c2) & kSpace)) {
      if (c2 == '\r' || c2 == '\n') last_nl = j;
      last_start = j;
      j += l2;
    }
    if (last_nl != kNone) return last_nl + 1;
    // \s+(?!\S) : the whole run at the end of text, else all but its last character
    if (j == n) return j;
    if (last_start > i) return last_start;
    return j;  // \s+
  }
};

}  // namespace

std::unique_ptr<Matcher> Matcher::regex(const std::string& pattern, bool allow_fast) {
  if (allow_fast) {
    if (pattern == kDigits) return std::make_unique<DigitsMatcher>();
    if (pattern == kCjk) return std::make_unique<CjkMatcher>();
    if (pattern == kWords) return std::make_unique<WordsMatcher>();
  }
  return std::make_unique<OnigMatcher>(pattern);
}

std::unique_ptr<Matcher> Matcher::literal(const std::string& s) {
  check(!s.empty(), "Split pattern: empty string");
  return std::make_unique<LiteralMatcher>(s);
}

PreTokenizer::PreTokenizer() = default;
PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

PreTokenizer PreTokenizer::from_json(const nlohmann::json& j, bool allow_fast) {
  PreTokenizer p;
  if (!j.is_null()) p.add_steps(j, allow_fast);
  return p;
}

// GPT-2's pattern, used by ByteLevel when use_regex is true.
static const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

void PreTokenizer::add_steps(const nlohmann::json& j, bool allow_fast) {
  std::string type = j.value("type", "");
  if (type == "Sequence") {
    for (auto& sub : j.at("pretokenizers")) add_steps(sub, allow_fast);
  } else if (type == "Split") {
    check(!byte_level_, "pre_tokenizer: a Split after ByteLevel is not supported");
    Step s;
    auto& pat = j.at("pattern");
    if (pat.contains("Regex")) s.matcher = Matcher::regex(pat["Regex"].get<std::string>(), allow_fast);
    else if (pat.contains("String")) s.matcher = Matcher::literal(pat["String"].get<std::string>());
    else fail("pre_tokenizer Split: pattern must hold Regex or String");
    std::string b = j.value("behavior", "Isolated");
    if (b == "Removed") s.behavior = Behavior::kRemoved;
    else if (b == "Isolated") s.behavior = Behavior::kIsolated;
    else if (b == "MergedWithPrevious") s.behavior = Behavior::kMergedWithPrevious;
    else if (b == "MergedWithNext") s.behavior = Behavior::kMergedWithNext;
    else if (b == "Contiguous") s.behavior = Behavior::kContiguous;
    else fail("pre_tokenizer Split: unknown behavior '", b, "'");
    s.invert = j.value("invert", false);
    steps_.push_back(std::move(s));
  } else if (type == "ByteLevel") {
    check(!j.value("add_prefix_space", false),
          "pre_tokenizer ByteLevel: add_prefix_space=true is not supported");
    if (j.value("use_regex", true))
      steps_.push_back(Step{Matcher::regex(kGpt2Pattern, false), Behavior::kIsolated, false});
    byte_level_ = true;
  } else {
    fail("pre_tokenizer type '", type, "' is not supported (supported: Sequence, Split, ByteLevel)");
  }
}

void PreTokenizer::split(std::string_view text, std::vector<Piece>& out, std::vector<Piece>& scratch) const {
  out.clear();
  if (text.empty()) return;
  out.push_back({0, uint32_t(text.size())});
  for (auto& s : steps_) {
    scratch.clear();
    apply(s, text, out, scratch);
    out.swap(scratch);
  }
}

void PreTokenizer::apply(const Step& s, std::string_view text, const std::vector<Piece>& in,
                         std::vector<Piece>& out) const {
  struct Part {
    uint32_t b, e;
    bool match;
  };
  thread_local std::vector<Part> parts;
  for (const Piece& p : in) {
    std::string_view sub = text.substr(p.begin, p.end - p.begin);
    // The matches and the gaps between them, as HF's find_matches (Oniguruma find_iter) makes them.
    parts.clear();
    size_t pos = 0, prev = 0, mb, me;
    size_t last_match_end = kNone;
    while (pos <= sub.size() && s.matcher->find(sub, pos, mb, me)) {
      if (me == mb && last_match_end == me) {  // an empty match right after the last: skip a char
        if (pos >= sub.size()) break;
        uint32_t len;
        cp_at(reinterpret_cast<const unsigned char*>(sub.data()), pos, len);
        pos += len;
        continue;
      }
      if (prev != mb) parts.push_back({uint32_t(prev), uint32_t(mb), false});
      parts.push_back({uint32_t(mb), uint32_t(me), true});
      prev = pos = last_match_end = me;
    }
    if (prev != sub.size()) parts.push_back({uint32_t(prev), uint32_t(sub.size()), false});
    if (s.invert)
      for (auto& x : parts) x.match = !x.match;
    size_t first = out.size();
    bool prev_match = false;
    switch (s.behavior) {
      case Behavior::kIsolated:
        for (auto& x : parts) out.push_back({x.b, x.e});
        break;
      case Behavior::kRemoved:
        for (auto& x : parts)
          if (!x.match) out.push_back({x.b, x.e});
        break;
      case Behavior::kContiguous:
        for (auto& x : parts) {
          if (x.match == prev_match && out.size() > first) out.back().end = x.e;
          else out.push_back({x.b, x.e});
          prev_match = x.match;
        }
        break;
      case Behavior::kMergedWithPrevious:
        for (auto& x : parts) {
          if (x.match && !prev_match && out.size() > first) out.back().end = x.e;
          else out.push_back({x.b, x.e});
          prev_match = x.match;
        }
        break;
      case Behavior::kMergedWithNext: {
        for (size_t k = parts.size(); k-- > 0;) {  // HF folds from the right
          auto& x = parts[k];
          if (x.match && !prev_match && out.size() > first) out.back().begin = x.b;
          else out.push_back({x.b, x.e});
          prev_match = x.match;
        }
        std::reverse(out.begin() + first, out.end());
        break;
      }
    }
    // Back to text offsets, dropping empty pieces.
    size_t w = first;
    for (size_t k = first; k < out.size(); ++k)
      if (out[k].end > out[k].begin) out[w++] = {out[k].begin + p.begin, out[k].end + p.begin};
    out.resize(w);
  }
}

}  // namespace deepinfer::tokenizer
