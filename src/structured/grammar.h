// Grammar IR shared by every front end (EBNF, regex, JSON schema, choice): rules whose bodies are
// expression trees over Unicode codepoints. fsm.h lowers each rule body to a byte-level DFA.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace deepinfer::structured {

using CodepointRanges = std::vector<std::pair<uint32_t, uint32_t>>;  // inclusive, sorted, disjoint

constexpr uint32_t kMaxCodepoint = 0x10FFFF;
constexpr int kUnbounded = -1;

// A deterministic automaton over bytes, used as an expression (string_dfa.h builds them: pattern
// intersections and complements, classes of object keys). State 0 starts; every state can reach
// an accepting one, so no byte leads into a dead end.
struct ByteDfa {
  static constexpr uint32_t kNone = UINT32_MAX;
  std::vector<std::array<uint32_t, 256>> next;  // kNone: no edge
  std::vector<uint8_t> accepting;
  size_t size() const { return next.size(); }
};

struct Expr {
  enum class Kind : uint8_t { kEmpty, kBytes, kClass, kSeq, kAlt, kRepeat, kRef, kDfa };
  Kind kind = Kind::kEmpty;
  std::string bytes;        // kBytes: literal UTF-8 bytes
  CodepointRanges ranges;   // kClass: the set of codepoints (negation already applied)
  std::vector<int> kids;    // kSeq, kAlt; kRepeat has one kid
  int min = 0, max = 0;     // kRepeat; max == kUnbounded for no upper bound
  int rule = -1;            // kRef; kDfa: index into Grammar::dfa
};

// A permutation rule (JSON object members in any order): each member index may complete at most
// once per instance of `rule` (through any rule of member_rules[i], referenced from `rule`'s body),
// and the instance completes only once every required member did. The Earley parser tracks the set
// of seen members per item, so n properties cost O(n) grammar instead of 2^n subset rules.
struct PermRule {
  int rule = -1;
  std::vector<std::vector<int>> member_rules;
  std::vector<bool> required;
  // dependentRequired: when member i was seen, every member of depends[i] must be too.
  std::vector<std::vector<int>> depends;
  // min/maxProperties: bounds on the number of members, counting extra_rules (repeatable,
  // uncounted members: additional properties) too. max_count < 0: unbounded.
  int min_count = 0, max_count = -1;
  std::vector<int> extra_rules;
};

// A counted rule (JSON string length bounds without unrolling): `rule`'s body reads the content
// of a JSON string (escaped, no sub-rules) and may stop after min..max characters. The Earley
// item of the rule counts characters in its `seen` field. The rule must only be followed by the
// closing quote (which no character starts with), so a token that stays inside the rule has no
// other parse: its mask is the rule's accepted tokens with at most max - count characters.
struct CountedRule {
  int rule = -1;
  int min = 0, max = kUnbounded;
};

class Grammar {
 public:
  // Rules are declared first (so bodies can refer to them, recursion included), then defined.
  int declare_rule(const std::string& name);
  void define_rule(int rule, int body);
  int find_rule(const std::string& name) const;  // -1 when absent
  // Drops the rules from n on (with their perm and counted entries): undoes a failed attempt.
  void truncate_rules(int n);
  int num_rules() const { return static_cast<int>(names_.size()); }
  const std::string& rule_name(int r) const { return names_[r]; }
  int rule_body(int r) const { return bodies_[r]; }
  int root() const { return root_; }
  void set_root(int r) { root_ = r; }

  const Expr& expr(int e) const { return exprs_[e]; }
  // The NFA states expression e lowers to (fsm.cpp; repeats unrolled, a sub-rule one), counted
  // up to `cap` (a larger size returns cap: shared subexpressions are counted per use).
  size_t expr_size(int e, size_t cap) const;

  int empty();
  int lit(const std::string& utf8);
  int cls(CodepointRanges ranges, bool negate = false);
  int any_char();
  int seq(std::vector<int> kids);
  int alt(std::vector<int> kids);
  int rep(int kid, int min, int max);
  int opt(int kid) { return rep(kid, 0, 1); }
  int star(int kid) { return rep(kid, 0, kUnbounded); }
  int plus(int kid) { return rep(kid, 1, kUnbounded); }
  int ref(int rule);
  int dfa(ByteDfa d);  // d must be non-empty (trimmed, see ByteDfa)
  const ByteDfa& dfa_at(int i) const { return dfas_[i]; }

  void add_perm(PermRule p) { perms_.push_back(std::move(p)); }
  const std::vector<PermRule>& perms() const { return perms_; }
  void add_counted(CountedRule c) { counted_.push_back(c); }
  const std::vector<CountedRule>& counted() const { return counted_; }

  // For debugging and docs; re-parsable by parse_ebnf (perm rules print as '# perm' comments and
  // their plain bodies, which allow repeats and any subset), except DFA bodies (`<dfa: N states>`).
  std::string to_ebnf() const;
  void check_complete() const;  // every declared rule has a body, the root exists
  // Per rule: whether it derives at least one finite string (a rule that only recurses into itself,
  // like a $ref cycle with nothing else, does not: no output could ever complete it).
  std::vector<bool> productive_rules() const;

 private:
  int add(Expr e);
  std::vector<Expr> exprs_;
  std::vector<std::string> names_;
  std::vector<int> bodies_;
  std::vector<PermRule> perms_;
  std::vector<CountedRule> counted_;
  std::vector<ByteDfa> dfas_;
  int root_ = -1;
};

CodepointRanges normalize_ranges(CodepointRanges r);
CodepointRanges negate_ranges(const CodepointRanges& r);
void append_utf8(std::string& out, uint32_t cp);

}  // namespace deepinfer::structured
