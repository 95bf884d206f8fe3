#include "structured/grammar.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace deepinfer::structured {

CodepointRanges normalize_ranges(CodepointRanges r) {
  std::sort(r.begin(), r.end());
  CodepointRanges out;
  for (auto [lo, hi] : r) {
    if (lo > hi) continue;
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.push_back({lo, hi});
    }
  }
  return out;
}

CodepointRanges negate_ranges(const CodepointRanges& r) {
  CodepointRanges out;
  uint32_t next = 0;
  for (auto [lo, hi] : normalize_ranges(r)) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCodepoint) out.push_back({next, kMaxCodepoint});
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

int Grammar::declare_rule(const std::string& name) {
  names_.push_back(name);
  bodies_.push_back(-1);
  return static_cast<int>(names_.size()) - 1;
}

void Grammar::define_rule(int rule, int body) { bodies_[rule] = body; }

int Grammar::find_rule(const std::string& name) const {
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) return static_cast<int>(i);
  return -1;
}

void Grammar::truncate_rules(int n) {
  names_.resize(n);
  bodies_.resize(n);
  std::erase_if(perms_, [&](const PermRule& p) { return p.rule >= n; });
  std::erase_if(counted_, [&](const CountedRule& c) { return c.rule >= n; });
  if (root_ >= n) root_ = -1;
}

size_t Grammar::expr_size(int id, size_t cap) const {
  const Expr& e = exprs_[id];
  switch (e.kind) {
    case Expr::Kind::kEmpty: case Expr::Kind::kRef: return 1;
    case Expr::Kind::kBytes: return std::min(cap, e.bytes.size() + 1);
    case Expr::Kind::kClass: return std::min(cap, 2 * e.ranges.size() + 1);
    case Expr::Kind::kDfa: return std::min(cap, dfas_[e.rule].size() + 1);
    case Expr::Kind::kSeq: case Expr::Kind::kAlt: {
      size_t n = 1;
      for (int k : e.kids)
        if ((n += expr_size(k, cap - std::min(n, cap))) >= cap) return cap;
      return n;
    }
    case Expr::Kind::kRepeat: {
      const size_t copies = std::max<size_t>(1, e.max == kUnbounded ? size_t(e.min) + 1 : size_t(e.max));
      const size_t one = expr_size(e.kids[0], cap);
      return one >= cap || copies >= cap ? cap : std::min(cap, one * copies + 2);
    }
  }
  return cap;
}

int Grammar::add(Expr e) {
  exprs_.push_back(std::move(e));
  return static_cast<int>(exprs_.size()) - 1;
}

int Grammar::empty() { return add(Expr{}); }

int Grammar::lit(const std::string& utf8) {
  if (utf8.empty()) return empty();
  Expr e;
  e.kind = Expr::Kind::kBytes;
  e.bytes = utf8;
  return add(std::move(e));
}

int Grammar::cls(CodepointRanges ranges, bool negate) {
  Expr e;
  e.kind = Expr::Kind::kClass;
  e.ranges = negate ? negate_ranges(ranges) : normalize_ranges(std::move(ranges));
  return add(std::move(e));
}

int Grammar::any_char() { return cls({{0, kMaxCodepoint}}); }

int Grammar::seq(std::vector<int> kids) {
  if (kids.size() == 1) return kids[0];
  Expr e;
  e.kind = kids.empty() ? Expr::Kind::kEmpty : Expr::Kind::kSeq;
  e.kids = std::move(kids);
  return add(std::move(e));
}

int Grammar::alt(std::vector<int> kids) {
  if (kids.size() == 1) return kids[0];
  check(!kids.empty(), "grammar: empty alternation");
  Expr e;
  e.kind = Expr::Kind::kAlt;
  e.kids = std::move(kids);
  return add(std::move(e));
}

int Grammar::rep(int kid, int min, int max) {
  check(min >= 0 && (max == kUnbounded || max >= min), "grammar: invalid repetition {", min, ",",
        max, "}");
  if (min == 1 && max == 1) return kid;
  Expr e;
  e.kind = Expr::Kind::kRepeat;
  e.kids = {kid};
  e.min = min;
  e.max = max;
  return add(std::move(e));
}

int Grammar::ref(int rule) {
  Expr e;
  e.kind = Expr::Kind::kRef;
  e.rule = rule;
  return add(std::move(e));
}

int Grammar::dfa(ByteDfa d) {
  check(d.size() > 0, "grammar: empty DFA");
  dfas_.push_back(std::move(d));
  Expr e;
  e.kind = Expr::Kind::kDfa;
  e.rule = static_cast<int>(dfas_.size()) - 1;
  return add(std::move(e));
}

void Grammar::check_complete() const {
  check(root_ >= 0, "grammar: no root rule");
  for (size_t i = 0; i < names_.size(); ++i)
    check(bodies_[i] >= 0, "grammar: rule '", names_[i], "' is used but never defined");
}

std::vector<bool> Grammar::productive_rules() const {
  std::vector<bool> ok(names_.size(), false);
  // Whether expression e derives a finite string, given the rules known productive so far.
  auto derives = [&](auto& self, int e) -> bool {
    const Expr& x = exprs_[e];
    switch (x.kind) {
      case Expr::Kind::kEmpty: case Expr::Kind::kBytes: case Expr::Kind::kDfa: return true;
      case Expr::Kind::kClass: return !x.ranges.empty();
      case Expr::Kind::kRef: return ok[x.rule];
      case Expr::Kind::kRepeat: return x.min == 0 || self(self, x.kids[0]);
      case Expr::Kind::kSeq:
        for (int k : x.kids) if (!self(self, k)) return false;
        return true;
      case Expr::Kind::kAlt:
        for (int k : x.kids) if (self(self, k)) return true;
        return false;
    }
    return false;
  };
  // A permutation rule also needs each required member to be completable.
  std::vector<const PermRule*> perm(names_.size(), nullptr);
  for (const PermRule& p : perms_) perm[p.rule] = &p;
  auto members_ok = [&](int r) {
    if (!perm[r]) return true;
    for (size_t i = 0; i < perm[r]->member_rules.size(); ++i) {
      if (!perm[r]->required[i]) continue;
      bool any = false;
      for (int m : perm[r]->member_rules[i]) any = any || ok[m];
      if (!any) return false;
    }
    return true;
  };
  for (bool changed = true; changed;) {  // fixpoint: at most one pass per rule
    changed = false;
    for (size_t r = 0; r < names_.size(); ++r)
      if (!ok[r] && bodies_[r] >= 0 && members_ok(static_cast<int>(r)) && derives(derives, bodies_[r]))
        ok[r] = changed = true;
  }
  return ok;
}

namespace {

void print_cp(std::string& out, uint32_t cp, bool in_class) {
  char buf[16];
  if (cp == '\\' || cp == '"' || (in_class && (cp == ']' || cp == '-' || cp == '^'))) {
    out += '\\';
    out += static_cast<char>(cp);
  } else if (cp < 0x20 || cp == 0x7F || (cp >= 0xD800 && cp <= 0xDFFF)) {
    std::snprintf(buf, sizeof buf, "\\x%02X", cp);
    out += buf;
  } else if (cp > 0xFFFF) {
    std::snprintf(buf, sizeof buf, "\\U%08X", cp);
    out += buf;
  } else {
    append_utf8(out, cp);
  }
}

void print_expr(const Grammar& g, int id, std::string& out) {
  const Expr& e = g.expr(id);
  switch (e.kind) {
    case Expr::Kind::kEmpty: out += "\"\""; break;
    case Expr::Kind::kBytes:
      out += '"';
      for (unsigned char c : e.bytes) {
        if (c < 0x80) print_cp(out, c, false); else out += static_cast<char>(c);
      }
      out += '"';
      break;
    case Expr::Kind::kClass:
      out += '[';
      for (auto [lo, hi] : e.ranges) {
        print_cp(out, lo, true);
        if (hi != lo) { out += '-'; print_cp(out, hi, true); }
      }
      out += ']';
      break;
    case Expr::Kind::kSeq:
    case Expr::Kind::kAlt:
      out += '(';
      for (size_t i = 0; i < e.kids.size(); ++i) {
        if (i) out += e.kind == Expr::Kind::kSeq ? " " : " | ";
        print_expr(g, e.kids[i], out);
      }
      out += ')';
      break;
    case Expr::Kind::kRepeat:
      print_expr(g, e.kids[0], out);
      if (e.min == 0 && e.max == kUnbounded) out += '*';
      else if (e.min == 1 && e.max == kUnbounded) out += '+';
      else if (e.min == 0 && e.max == 1) out += '?';
      else {
        out += '{' + std::to_string(e.min) + ',';
        if (e.max != kUnbounded) out += std::to_string(e.max);
        out += '}';
      }
      break;
    case Expr::Kind::kRef: out += g.rule_name(e.rule); break;
    case Expr::Kind::kDfa: out += "<dfa: " + std::to_string(g.dfa_at(e.rule).size()) + " states>"; break;
  }
}

}  // namespace

std::string Grammar::to_ebnf() const {
  std::string out;
  for (size_t r = 0; r < names_.size(); ++r) {
    out += names_[r] + " ::= ";
    if (bodies_[r] >= 0) print_expr(*this, bodies_[r], out);
    out += '\n';
  }
  for (const PermRule& p : perms_) {
    out += "# perm " + names_[p.rule] + ": each member at most once; required:";
    for (size_t i = 0; i < p.required.size(); ++i)
      if (p.required[i]) out += " " + names_[p.member_rules[i][0]];
    out += '\n';
  }
  return out;
}

}  // namespace deepinfer::structured
