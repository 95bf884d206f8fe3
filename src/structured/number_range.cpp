#include "structured/number_range.h"

#include <cmath>
#include <climits>
#include <cstdlib>
#include <cstdio>

#include "core/error.h"

namespace deepinfer::structured {

namespace {

using u64 = unsigned long long;
constexpr u64 kInf = ~0ull;

int digit(Grammar& g, int lo, int hi) { return g.cls({{uint32_t('0' + lo), uint32_t('0' + hi)}}); }
int digits(Grammar& g, int n) { return g.rep(digit(g, 0, 9), n, n); }

// Non-negative integers without leading zeros whose decimal strings a and b have equal length.
int same_len(Grammar& g, const std::string& a, const std::string& b) {
  size_t n = a.size();
  if (n == 1) return digit(g, a[0] - '0', b[0] - '0');
  if (a[0] == b[0]) return g.seq({g.lit(a.substr(0, 1)), same_len(g, a.substr(1), b.substr(1))});
  if (a.substr(1) == std::string(n - 1, '0') && b.substr(1) == std::string(n - 1, '9'))
    return g.seq({digit(g, a[0] - '0', b[0] - '0'), digits(g, static_cast<int>(n - 1))});
  std::vector<int> alts{g.seq({g.lit(a.substr(0, 1)), same_len(g, a.substr(1), std::string(n - 1, '9'))})};
  if (a[0] + 1 <= b[0] - 1) alts.push_back(g.seq({digit(g, a[0] - '0' + 1, b[0] - '0' - 1), digits(g, static_cast<int>(n - 1))}));
  alts.push_back(g.seq({g.lit(b.substr(0, 1)), same_len(g, std::string(n - 1, '0'), b.substr(1))}));
  return g.alt(alts);
}

// Natural numbers in [lo, hi] (hi == kInf: unbounded); -1 when empty.
int nat_range(Grammar& g, u64 lo, u64 hi) {
  if (hi != kInf && lo > hi) return -1;
  std::string a = std::to_string(lo);
  std::vector<int> alts;
  while (true) {
    std::string top(a.size(), '9');
    bool last = hi != kInf && std::to_string(hi).size() == a.size();
    alts.push_back(same_len(g, a, last ? std::to_string(hi) : top));
    if (last) break;
    if (hi == kInf) {  // every longer length
      alts.push_back(g.seq({digit(g, 1, 9), g.rep(digit(g, 0, 9), static_cast<int>(a.size()), kUnbounded)}));
      break;
    }
    a = "1" + std::string(a.size(), '0');
  }
  return g.alt(alts);
}

struct Decimal {  // |value| = int_part . frac (frac without trailing zeros)
  bool negative = false;
  u64 int_part = 0;
  std::string frac;
};

Decimal parse_decimal(const std::string& text) {
  Decimal d;
  double v = std::strtod(text.c_str(), nullptr);
  check(std::isfinite(v) && std::fabs(v) < 1e18, "json schema: numeric bound ", text, " is out of range");
  std::string s = text;
  if (s.find_first_of("eE") != std::string::npos) {  // normalise exponents through a fixed print
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.12f", v);
    s = buf;
  }
  if (!s.empty() && s[0] == '-') { d.negative = true; s = s.substr(1); }
  size_t dot = s.find('.');
  d.int_part = std::stoull(s.substr(0, dot));
  if (dot != std::string::npos) d.frac = s.substr(dot + 1);
  while (!d.frac.empty() && d.frac.back() == '0') d.frac.pop_back();
  if (d.int_part == 0 && d.frac.empty()) d.negative = false;
  return d;
}

int frac_any(Grammar& g) { return g.opt(g.seq({g.lit("."), g.plus(digit(g, 0, 9))})); }

// Fraction suffixes (including none) whose value is >= (or >) .f
int frac_ge(Grammar& g, const std::string& f, bool strict) {
  if (f.empty())
    return strict ? g.seq({g.lit("."), g.star(g.lit("0")), digit(g, 1, 9), g.star(digit(g, 0, 9))}) : frac_any(g);
  std::vector<int> alts;
  for (size_t i = 0; i < f.size(); ++i)
    if (f[i] < '9') alts.push_back(g.seq({g.lit(f.substr(0, i)), digit(g, f[i] - '0' + 1, 9), g.star(digit(g, 0, 9))}));
  if (strict) alts.push_back(g.seq({g.lit(f), g.star(g.lit("0")), digit(g, 1, 9), g.star(digit(g, 0, 9))}));
  else alts.push_back(g.seq({g.lit(f), g.star(digit(g, 0, 9))}));
  return g.seq({g.lit("."), g.alt(alts)});
}

// Fraction suffixes (including none) whose value is <= (or <) .f; -1 when empty.
int frac_le(Grammar& g, const std::string& f, bool strict) {
  if (f.empty()) return strict ? -1 : g.opt(g.seq({g.lit("."), g.plus(g.lit("0"))}));
  std::vector<int> alts;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] > '0') alts.push_back(g.seq({g.lit(f.substr(0, i)), digit(g, 0, f[i] - '0' - 1), g.star(digit(g, 0, 9))}));
    if (i > 0) alts.push_back(g.seq({g.lit(f.substr(0, i)), g.star(g.lit("0"))}));
  }
  if (!strict) alts.push_back(g.seq({g.lit(f), g.star(g.lit("0"))}));
  return g.opt(g.seq({g.lit("."), g.alt(alts)}));
}

int alt_valid(Grammar& g, std::vector<int> parts) {
  std::vector<int> ok;
  for (int p : parts) if (p >= 0) ok.push_back(p);
  return ok.empty() ? -1 : g.alt(ok);
}
int seq_valid(Grammar& g, int a, int b) { return a < 0 || b < 0 ? -1 : g.seq({a, b}); }

// Unsigned magnitudes m >= d (strict: >).
int mag_ge(Grammar& g, const Decimal& d, bool strict) {
  return alt_valid(g, {seq_valid(g, nat_range(g, d.int_part + 1, kInf), frac_any(g)),
                       seq_valid(g, g.lit(std::to_string(d.int_part)), frac_ge(g, d.frac, strict))});
}
// Unsigned magnitudes m <= d (strict: <).
int mag_le(Grammar& g, const Decimal& d, bool strict) {
  int below = d.int_part == 0 ? -1 : seq_valid(g, nat_range(g, 0, d.int_part - 1), frac_any(g));
  return alt_valid(g, {below, seq_valid(g, g.lit(std::to_string(d.int_part)), frac_le(g, d.frac, strict))});
}
int mag_any(Grammar& g) { return seq_valid(g, nat_range(g, 0, kInf), frac_any(g)); }
int neg(Grammar& g, int e) { return e < 0 ? -1 : g.seq({g.lit("-"), e}); }

// Magnitudes lo..hi with inclusivity, any fraction allowed strictly between the integer parts.
int mag_between(Grammar& g, const Decimal& lo, bool lo_incl, const Decimal& hi, bool hi_incl) {
  if (lo.int_part > hi.int_part) return -1;
  if (lo.int_part == hi.int_part) {
    check(lo.frac.empty() && hi.frac.empty(), "json schema: number bounds with the same integer part and a fraction "
          "are unsupported (between ", lo.int_part, ".", lo.frac, " and ", hi.int_part, ".", hi.frac, ")");
    return lo_incl && hi_incl ? seq_valid(g, g.lit(std::to_string(lo.int_part)), frac_le(g, "", false)) : -1;
  }
  int at_lo = seq_valid(g, g.lit(std::to_string(lo.int_part)), frac_ge(g, lo.frac, !lo_incl));
  int mid = lo.int_part + 1 <= hi.int_part - 1 ? seq_valid(g, nat_range(g, lo.int_part + 1, hi.int_part - 1), frac_any(g)) : -1;
  int at_hi = seq_valid(g, g.lit(std::to_string(hi.int_part)), frac_le(g, hi.frac, !hi_incl));
  return alt_valid(g, {at_lo, mid, at_hi});
}

}  // namespace

int integer_in_range(Grammar& g, const std::optional<Bound>& lo_b, const std::optional<Bound>& hi_b) {
  // Work in [lo, hi] over long doubles rounded inward to integers.
  long long lo = LLONG_MIN, hi = LLONG_MAX;
  if (lo_b) {
    double v = std::strtod(lo_b->text.c_str(), nullptr);
    check(std::fabs(v) < 9e15, "json schema: integer bound ", lo_b->text, " is out of range");
    double c = std::ceil(v);
    lo = static_cast<long long>(c) + (lo_b->exclusive && c == v ? 1 : 0);
  }
  if (hi_b) {
    double v = std::strtod(hi_b->text.c_str(), nullptr);
    check(std::fabs(v) < 9e15, "json schema: integer bound ", hi_b->text, " is out of range");
    double f = std::floor(v);
    hi = static_cast<long long>(f) - (hi_b->exclusive && f == v ? 1 : 0);
  }
  check(lo <= hi, "json schema: integer range [", lo, ", ", hi, "] is empty");
  std::vector<int> alts;
  if (lo < 0) {  // negatives -1 .. lo, as "-" magnitude in [max(1, -hi), -lo]
    u64 mlo = hi < 0 ? static_cast<u64>(-hi) : 1, mhi = lo == LLONG_MIN ? kInf : static_cast<u64>(-lo);
    alts.push_back(neg(g, nat_range(g, mlo, mhi)));
  }
  if (hi >= 0) alts.push_back(nat_range(g, lo < 0 ? 0 : lo, hi == LLONG_MAX ? kInf : static_cast<u64>(hi)));
  return g.alt(alts);
}

int number_in_range(Grammar& g, const std::optional<Bound>& lo_b, const std::optional<Bound>& hi_b) {
  std::optional<Decimal> lo, hi;
  if (lo_b) lo = parse_decimal(lo_b->text);
  if (hi_b) hi = parse_decimal(hi_b->text);
  int e = -1;
  if (lo && !hi) {
    e = !lo->negative ? mag_ge(g, *lo, lo_b->exclusive)
                      : alt_valid(g, {mag_any(g), neg(g, mag_le(g, *lo, lo_b->exclusive))});
  } else if (hi && !lo) {
    e = !hi->negative ? alt_valid(g, {neg(g, mag_any(g)), mag_le(g, *hi, hi_b->exclusive)})
                      : neg(g, mag_ge(g, *hi, hi_b->exclusive));
  } else {
    bool li = !lo_b->exclusive, hi_i = !hi_b->exclusive;
    std::vector<int> parts;
    if (!hi->negative) parts.push_back(lo->negative ? mag_le(g, *hi, !hi_i) : mag_between(g, *lo, li, *hi, hi_i));
    if (lo->negative) parts.push_back(neg(g, hi->negative ? mag_between(g, *hi, hi_i, *lo, li) : mag_le(g, *lo, !li)));
    e = alt_valid(g, parts);
  }
  check(e >= 0, "json schema: the number range is empty");
  // -0 is 0: the magnitudes above only spell it under a negative lower bound.
  const bool zero_lo = lo && lo->int_part == 0 && lo->frac.empty() && !lo_b->exclusive;
  if (zero_lo && (!hi || !hi->negative)) e = g.alt({e, g.seq({g.lit("-0"), g.opt(g.seq({g.lit("."), g.plus(g.lit("0"))}))})});
  return e;
}

}  // namespace deepinfer::structured
