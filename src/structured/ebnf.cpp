// EBNF front end for the GBNF / XGrammar dialect: `name ::= body`, alternation, grouping,
// * + ? {m} {m,} {m,n}, "strings" and [classes] with escapes, # comments, root rule `root`.
#include <cctype>
#include <map>

#include "structured/structured.h"
#include "structured/text_util.h"

namespace deepinfer::structured {

namespace {

class EbnfParser {
 public:
  explicit EbnfParser(const std::string& s) : s_(s) {}

  Grammar parse(const std::string& root) {
    skip_space();
    while (!at_end()) {
      size_t at = pos_;
      std::string name = parse_name();
      check(!name.empty(), "ebnf: expected a rule name at ", where(at));
      check(s_.compare(pos_, 3, "::=") == 0 || (skip_space(), s_.compare(pos_, 3, "::=") == 0),
            "ebnf: expected '::=' after rule name '", name, "' at ", where(pos_));
      pos_ += 3;
      int r = rule(name);
      check(!defined_[r], "ebnf: rule '", name, "' is defined twice");
      defined_[r] = true;
      g_.define_rule(r, parse_alt());
      skip_space();
    }
    for (auto& [name, r] : rules_)
      check(defined_[r], "ebnf: rule '", name, "' is referenced but not defined");
    auto it = rules_.find(root);
    check(it != rules_.end(), "ebnf: the grammar has no root rule '", root, "'");
    g_.set_root(it->second);
    return std::move(g_);
  }

 private:
  bool at_end() const { return pos_ >= s_.size(); }
  std::string where(size_t p) const {
    int line = 1;
    for (size_t i = 0; i < p && i < s_.size(); ++i) line += s_[i] == '\n';
    return "line " + std::to_string(line);
  }
  void skip_space() {
    while (!at_end()) {
      if (isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
      else if (s_[pos_] == '#') while (!at_end() && s_[pos_] != '\n') ++pos_;
      else break;
    }
  }
  static bool name_char(char c) { return isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'; }
  std::string parse_name() {
    size_t st = pos_;
    while (!at_end() && name_char(s_[pos_])) ++pos_;
    return s_.substr(st, pos_ - st);
  }
  int rule(const std::string& name) {
    auto [it, inserted] = rules_.emplace(name, 0);
    if (inserted) {
      it->second = g_.declare_rule(name);
      defined_.push_back(false);
    }
    return it->second;
  }
  // True when the text at pos_ starts the next rule (`name ::=`).
  bool at_rule_start() {
    size_t save = pos_;
    std::string name = parse_name();
    skip_space();
    bool yes = !name.empty() && s_.compare(pos_, 3, "::=") == 0;
    pos_ = save;
    return yes;
  }

  int parse_alt() {
    std::vector<int> alts{parse_seq()};
    while (true) {
      skip_space();
      if (at_end() || s_[pos_] != '|') break;
      ++pos_;
      alts.push_back(parse_seq());
    }
    return g_.alt(alts);
  }

  int parse_seq() {
    std::vector<int> parts;
    while (true) {
      skip_space();
      if (at_end() || s_[pos_] == '|' || s_[pos_] == ')' || at_rule_start()) break;
      parts.push_back(parse_quantified());
    }
    return parts.empty() ? g_.empty() : g_.seq(parts);
  }

  int parse_quantified() {
    int atom = parse_atom();
    while (!at_end()) {
      char c = s_[pos_];
      if (c == '*') { ++pos_; atom = g_.star(atom); }
      else if (c == '+') { ++pos_; atom = g_.plus(atom); }
      else if (c == '?') { ++pos_; atom = g_.opt(atom); }
      else if (c == '{') {
        size_t at = pos_++;
        skip_space();
        auto num = [&]() {
          check(!at_end() && isdigit(static_cast<unsigned char>(s_[pos_])), "ebnf: repetition needs a lower bound at ", where(at));
          long v = 0;
          while (!at_end() && isdigit(static_cast<unsigned char>(s_[pos_]))) {
            v = v * 10 + (s_[pos_++] - '0');
            check(v <= 100000, "ebnf: repetition count above 100000 at ", where(at));
          }
          skip_space();
          return static_cast<int>(v);
        };
        int min = num(), max = min;
        if (!at_end() && s_[pos_] == ',') {
          ++pos_;
          skip_space();
          max = !at_end() && s_[pos_] == '}' ? kUnbounded : num();
        }
        check(!at_end() && s_[pos_] == '}', "ebnf: unterminated repetition at ", where(at));
        ++pos_;
        check(max == kUnbounded || max >= min, "ebnf: repetition max < min at ", where(at));
        atom = g_.rep(atom, min, max);
      } else {
        break;
      }
      check(at_end() || (s_[pos_] != '*' && s_[pos_] != '+' && s_[pos_] != '?'),
            "ebnf: double quantifier at ", where(pos_));
    }
    return atom;
  }

  int parse_atom() {
    char c = s_[pos_];
    if (c == '(') {
      ++pos_;
      skip_space();
      check(at_end() || s_[pos_] != '=', "ebnf: lookahead assertion (= ...) is unsupported at ", where(pos_));
      int body = parse_alt();
      skip_space();
      check(!at_end() && s_[pos_] == ')', "ebnf: missing ')' at ", where(pos_));
      ++pos_;
      return body;
    }
    if (c == '"' || c == '\'') return parse_string(c);
    if (c == '[') return parse_class();
    size_t at = pos_;
    std::string name = parse_name();
    check(!name.empty(), "ebnf: unexpected '", std::string(1, c), "' at ", where(at));
    check(at_end() || s_[pos_] != '(', "ebnf: macro '", name, "(...)' is unsupported at ", where(at));
    return g_.ref(rule(name));
  }

  uint32_t parse_char(bool in_class) {
    if (s_[pos_] != '\\') return next_codepoint(s_, pos_, "ebnf");
    ++pos_;
    check(!at_end(), "ebnf: trailing backslash");
    char c = s_[pos_++];
    switch (c) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case 'b': return '\b';
      case 'f': return '\f';
      case 'a': return '\a';
      case 'v': return '\v';
      case '0': return 0;
      case 'e': return 0x1B;
      case 'x': return read_hex(s_, pos_, 2, "ebnf");
      case 'u': return read_hex(s_, pos_, 4, "ebnf");
      case 'U': return read_hex(s_, pos_, 8, "ebnf");
      case '"': case '\\': case '/': case '\'': case '?': case '[': case ']': case '-': case '^': return c;
      default:
        fail("ebnf: unsupported escape \\", std::string(1, c), in_class ? " in a character class" : "",
             " at ", where(pos_));
    }
  }

  int parse_string(char quote) {
    size_t at = pos_++;
    std::string out;
    while (true) {
      check(!at_end(), "ebnf: unterminated string at ", where(at));
      if (s_[pos_] == quote) break;
      append_utf8(out, parse_char(false));
    }
    ++pos_;
    return g_.lit(out);
  }

  int parse_class() {
    size_t at = pos_++;
    bool negate = !at_end() && s_[pos_] == '^';
    if (negate) ++pos_;
    CodepointRanges ranges;
    while (true) {
      check(!at_end(), "ebnf: unterminated character class at ", where(at));
      if (s_[pos_] == ']') break;
      uint32_t lo = parse_char(true), hi = lo;
      if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
        ++pos_;
        hi = parse_char(true);
        check(lo <= hi, "ebnf: reversed range in character class at ", where(at));
      }
      ranges.push_back({lo, hi});
    }
    ++pos_;
    if (negate) ranges = negate_ranges(ranges);  // [^] = any character
    check(!ranges.empty(), "ebnf: empty character class at ", where(at));
    return g_.cls(ranges);
  }

  const std::string& s_;
  size_t pos_ = 0;
  Grammar g_;
  std::map<std::string, int> rules_;
  std::vector<bool> defined_;
};

}  // namespace

Grammar parse_ebnf(const std::string& text, const std::string& root) { return EbnfParser(text).parse(root); }

}  // namespace deepinfer::structured
