// Regex front end: a recursive-descent parser of the usual (Python/ECMAScript) syntax building
// grammar expressions. Backreferences, lookaround, \b and inline flags are rejected by name.
#include <iterator>
#include <map>
#include <string>

#include "structured/structured.h"
#include "structured/text_util.h"

namespace deepinfer::structured {

namespace {

#include "tokenizer/unicode_tables.inc"  // general-category ranges (generated from HF tokenizers' data)

class RegexParser {
 public:
  RegexParser(Grammar& g, const std::string& re, bool json_string) : g_(g), s_(re), json_(json_string) {}

  // search: unanchored JSON-schema `pattern` semantics (a match anywhere in the string).
  int parse(bool search) {
    std::vector<int> alts;
    do {
      bool anchored_start = false, anchored_end = false;
      int body = parse_seq(&anchored_start, &anchored_end);
      if (search) {
        std::vector<int> parts;
        if (!anchored_start) parts.push_back(g_.star(any()));
        parts.push_back(body);
        if (!anchored_end) parts.push_back(g_.star(any()));
        body = g_.seq(parts);
      }
      alts.push_back(body);
    } while (eat('|'));
    check(pos_ == s_.size(), "regex: unbalanced ')' at position ", pos_, " in /", s_, "/");
    return g_.alt(alts);
  }

 private:
  bool eat(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) { ++pos_; return true; }
    return false;
  }
  bool at_end() const { return pos_ >= s_.size(); }
  [[noreturn]] void unsupported(const std::string& what) {
    fail("regex: unsupported ", what, " at position ", pos_, " in /", s_, "/");
  }

  // Any character ('.'): Python's default, every codepoint but newline.
  int any() { return chars({{0, '\n' - 1}, {'\n' + 1, kMaxCodepoint}}); }

  // A set of codepoints; in JSON-string mode the characters JSON must escape become escapes.
  int chars(CodepointRanges r) {
    r = normalize_ranges(std::move(r));
    if (!json_) return g_.cls(r);
    CodepointRanges plain;
    std::vector<int> alts;
    for (auto [lo, hi] : r) {
      for (uint32_t c = lo; c <= hi && c < 0x20; ++c) alts.push_back(escaped(c));
      for (uint32_t c : {uint32_t('"'), uint32_t('\\')})
        if (lo <= c && c <= hi) alts.push_back(escaped(c));
      plain.push_back({lo, hi});
    }
    plain = normalize_ranges(plain);
    CodepointRanges keep = negate_ranges({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}});
    CodepointRanges inter;
    for (auto [a, b] : plain)
      for (auto [c, d] : keep)
        if (std::max(a, c) <= std::min(b, d)) inter.push_back({std::max(a, c), std::min(b, d)});
    if (!inter.empty()) alts.push_back(g_.cls(inter));
    check(!alts.empty(), "regex: empty character class in /", s_, "/");
    return g_.alt(alts);
  }
  int escaped(uint32_t c) {
    switch (c) {
      case '"': return g_.lit("\\\"");
      case '\\': return g_.lit("\\\\");
      case '\n': return g_.lit("\\n");
      case '\r': return g_.lit("\\r");
      case '\t': return g_.lit("\\t");
      case '\b': return g_.lit("\\b");
      case '\f': return g_.lit("\\f");
    }
    const char* hex = "0123456789abcdef";
    std::string lo = std::string("\\u00") + hex[c >> 4] + hex[c & 15];
    std::string up = lo;
    for (char& ch : up) ch = static_cast<char>(std::toupper(ch));
    up[1] = 'u';
    return lo == up ? g_.lit(lo) : g_.alt({g_.lit(lo), g_.lit(up)});
  }
  int literal(uint32_t c) { return chars({{c, c}}); }

  int parse_seq(bool* anchored_start, bool* anchored_end) {
    std::vector<int> parts;
    bool first = true;
    while (!at_end() && s_[pos_] != '|' && s_[pos_] != ')') {
      // Anchors only where they bound a whole top-level alternative: elsewhere (inside a group,
      // mid-sequence) dropping them would widen the language, so they are refused.
      if (s_[pos_] == '^') {
        ++pos_;
        if (!(first && anchored_start)) unsupported("'^' that does not start a top-level alternative");
        *anchored_start = true;
        continue;
      }
      if (s_[pos_] == '$') {
        ++pos_;
        if (!(anchored_end && (at_end() || s_[pos_] == '|'))) unsupported("'$' that does not end a top-level alternative");
        *anchored_end = true;
        continue;
      }
      first = false;
      int atom = parse_atom();
      parts.push_back(parse_quantifiers(atom));
    }
    return parts.empty() ? g_.empty() : g_.seq(parts);
  }

  int parse_quantifiers(int atom) {
    while (!at_end()) {
      char c = s_[pos_];
      int min, max;
      if (c == '*') { min = 0; max = kUnbounded; ++pos_; }
      else if (c == '+') { min = 1; max = kUnbounded; ++pos_; }
      else if (c == '?') { min = 0; max = 1; ++pos_; }
      else if (c == '{' && parse_braces(&min, &max)) {}
      else break;
      if (!at_end() && s_[pos_] == '?') ++pos_;  // lazy: same language
      else if (!at_end() && s_[pos_] == '+') unsupported("possessive quantifier");
      atom = g_.rep(atom, min, max);
    }
    return atom;
  }

  // {m}, {m,}, {m,n}; anything else leaves '{' as a literal (Python behaviour).
  bool parse_braces(int* min, int* max) {
    size_t p = pos_ + 1;
    auto num = [&](int* out) {
      size_t st = p;
      long v = 0;
      while (p < s_.size() && isdigit(static_cast<unsigned char>(s_[p]))) {
        v = v * 10 + (s_[p++] - '0');
        if (v > 100000) unsupported("repetition count above 100000");
      }
      *out = static_cast<int>(v);
      return p > st;
    };
    if (!num(min)) return false;
    if (p < s_.size() && s_[p] == '}') { *max = *min; pos_ = p + 1; return true; }
    if (p >= s_.size() || s_[p] != ',') return false;
    ++p;
    if (p < s_.size() && s_[p] == '}') { *max = kUnbounded; pos_ = p + 1; return true; }
    if (!num(max) || p >= s_.size() || s_[p] != '}') return false;
    check(*max >= *min, "regex: repetition {", *min, ",", *max, "} has max < min in /", s_, "/");
    pos_ = p + 1;
    return true;
  }

  int parse_atom() {
    char c = s_[pos_];
    if (c == '(') {
      ++pos_;
      if (eat('?')) {
        if (eat(':')) {
        } else if (s_.compare(pos_, 1, "<") == 0 && s_.compare(pos_, 2, "<=") != 0 && s_.compare(pos_, 2, "<!") != 0) {
          while (!at_end() && s_[pos_] != '>') ++pos_;  // named group: the name is irrelevant
          check(eat('>'), "regex: unterminated group name in /", s_, "/");
        } else if (s_.compare(pos_, 2, "P<") == 0) {
          while (!at_end() && s_[pos_] != '>') ++pos_;
          check(eat('>'), "regex: unterminated group name in /", s_, "/");
        } else if (!at_end() && (s_[pos_] == '=' || s_[pos_] == '!')) {
          unsupported("lookahead (?= / (?!");
        } else if (!at_end() && s_[pos_] == '<') {
          unsupported("lookbehind (?<= / (?<!");
        } else {
          unsupported("inline flag or group syntax (?" + s_.substr(pos_, 1));
        }
      }
      std::vector<int> alts;
      do alts.push_back(parse_seq(nullptr, nullptr));
      while (eat('|'));
      check(eat(')'), "regex: missing ')' in /", s_, "/");
      return g_.alt(alts);
    }
    if (c == '[') return parse_class();
    if (c == '.') { ++pos_; return any(); }
    if (c == '\\') return parse_escape(false, nullptr);
    if (c == '*' || c == '+' || c == '?') unsupported(std::string("quantifier '") + c + "' with nothing to repeat");
    return literal(next_codepoint(s_, pos_, "regex"));
  }

  // After a backslash. In a class, class escapes add to *ranges and return -1.
  int parse_escape(bool in_class, CodepointRanges* ranges) {
    ++pos_;
    check(!at_end(), "regex: trailing backslash in /", s_, "/");
    char c = s_[pos_++];
    CodepointRanges set;
    switch (c) {
      case 'd': set = digit_ranges(); break;
      case 'D': set = negate_ranges(digit_ranges()); break;
      case 'w': set = word_ranges(); break;
      case 'W': set = negate_ranges(word_ranges()); break;
      case 's': set = space_ranges(); break;
      case 'S': set = negate_ranges(space_ranges()); break;
      case 'b': if (in_class) { set = {{8, 8}}; break; } unsupported("word boundary \\b");
      case 'B': unsupported("word boundary \\B");
      case 'A': case 'Z': case 'z': case 'G': unsupported(std::string("anchor \\") + c);
      case 'p': case 'P': set = property_ranges(c == 'P'); break;
      case 'k': unsupported("named backreference \\k");
      case 'n': set = {{'\n', '\n'}}; break;
      case 'r': set = {{'\r', '\r'}}; break;
      case 't': set = {{'\t', '\t'}}; break;
      case 'f': set = {{'\f', '\f'}}; break;
      case 'v': set = {{'\v', '\v'}}; break;
      case '0': set = {{0, 0}}; break;
      case 'x': { uint32_t v = read_hex(s_, pos_, 2, "regex"); set = {{v, v}}; break; }
      case 'u': {
        uint32_t v;
        if (eat('{')) {
          v = 0;
          while (!at_end() && s_[pos_] != '}') v = v * 16 + read_hex(s_, pos_, 1, "regex");
          check(eat('}') && v <= kMaxCodepoint, "regex: bad \\u{...} in /", s_, "/");
        } else {
          v = read_hex(s_, pos_, 4, "regex");
        }
        set = {{v, v}};
        break;
      }
      case 'c': {
        check(!at_end() && isalpha(static_cast<unsigned char>(s_[pos_])), "regex: bad \\c in /", s_, "/");
        uint32_t v = static_cast<uint32_t>(s_[pos_++]) % 32;
        set = {{v, v}};
        break;
      }
      default:
        if (c >= '1' && c <= '9') unsupported("backreference \\" + std::string(1, c));
        if (isalnum(static_cast<unsigned char>(c))) unsupported(std::string("escape \\") + c);
        --pos_;
        { uint32_t v = next_codepoint(s_, pos_, "regex"); set = {{v, v}}; }
    }
    if (in_class) {
      ranges->insert(ranges->end(), set.begin(), set.end());
      return -1;
    }
    return chars(set);
  }

  // After \p or \P: {Name} of a general category (L Letter, M Mark, N Number, P Punctuation,
  // S Symbol, also as General_Category=/gc=), from the tokenizer's Unicode tables.
  CodepointRanges property_ranges(bool negated) {
    check(eat('{'), "regex: \\p needs {name} in /", s_, "/");
    const size_t end = s_.find('}', pos_);
    check(end != std::string::npos, "regex: missing '}' after \\p{ in /", s_, "/");
    std::string name = s_.substr(pos_, end - pos_);
    pos_ = end + 1;
    for (const char* prefix : {"General_Category=", "gc="})
      if (name.rfind(prefix, 0) == 0) name = name.substr(std::string(prefix).size());
    static const std::map<std::string, std::pair<const uint32_t (*)[2], size_t>> kCategories = {
        {"L", {kLetterRanges, std::size(kLetterRanges)}}, {"Letter", {kLetterRanges, std::size(kLetterRanges)}},
        {"M", {kMarkRanges, std::size(kMarkRanges)}}, {"Mark", {kMarkRanges, std::size(kMarkRanges)}},
        {"N", {kNumberRanges, std::size(kNumberRanges)}}, {"Number", {kNumberRanges, std::size(kNumberRanges)}},
        {"P", {kPunctRanges, std::size(kPunctRanges)}}, {"Punctuation", {kPunctRanges, std::size(kPunctRanges)}},
        {"S", {kSymbolRanges, std::size(kSymbolRanges)}}, {"Symbol", {kSymbolRanges, std::size(kSymbolRanges)}}};
    auto it = kCategories.find(name);
    if (it == kCategories.end()) unsupported("Unicode property \\p{" + name + "} (general categories L M N P S only)");
    CodepointRanges set;
    for (size_t i = 0; i < it->second.second; ++i) set.push_back({it->second.first[i][0], it->second.first[i][1]});
    return negated ? negate_ranges(set) : set;
  }

  int parse_class() {
    ++pos_;
    bool negate = eat('^');
    CodepointRanges ranges;
    bool first = true;
    while (true) {
      check(!at_end(), "regex: missing ']' in /", s_, "/");
      if (s_[pos_] == ']' && !first) break;
      first = false;
      uint32_t lo;
      if (s_[pos_] == '\\') {
        CodepointRanges one;
        parse_escape(true, &one);
        if (one.size() != 1 || one[0].first != one[0].second) {  // a class escape like \d
          ranges.insert(ranges.end(), one.begin(), one.end());
          continue;
        }
        lo = one[0].first;
      } else if (s_.compare(pos_, 2, "[:") == 0) {
        unsupported("POSIX class [:...:]");
      } else {
        lo = next_codepoint(s_, pos_, "regex");
      }
      uint32_t hi = lo;
      if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
        ++pos_;
        if (s_[pos_] == '\\') {
          CodepointRanges one;
          parse_escape(true, &one);
          check(one.size() == 1 && one[0].first == one[0].second, "regex: bad class range in /", s_, "/");
          hi = one[0].first;
        } else {
          hi = next_codepoint(s_, pos_, "regex");
        }
        check(lo <= hi, "regex: reversed class range in /", s_, "/");
      }
      ranges.push_back({lo, hi});
    }
    ++pos_;
    if (negate) ranges = negate_ranges(ranges);
    check(!ranges.empty(), "regex: empty character class in /", s_, "/");
    return chars(ranges);
  }

  Grammar& g_;
  const std::string& s_;
  bool json_;
  size_t pos_ = 0;
};

}  // namespace

int add_regex_rule(Grammar& g, const std::string& rule_name, const std::string& regex, bool json_string) {
  int r = g.declare_rule(rule_name);
  g.define_rule(r, RegexParser(g, regex, json_string).parse(json_string));
  return r;
}

Grammar regex_grammar(const std::string& regex) {
  Grammar g;
  int r = add_regex_rule(g, "root", regex, false);
  g.set_root(r);
  return g;
}

}  // namespace deepinfer::structured
