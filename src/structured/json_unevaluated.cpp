// unevaluated* by cases. What a schema evaluates (the keys / items its in-place subschemas that
// succeed name) depends on the instance only through which of them succeed, so the schema is
// cut into cases: each case is a set of facts (subschemas that hold) and what is then surely
// evaluated. For every instance some case holds whose evaluated set is exactly the instance's,
// and no case claims more than the instance's (sound). The schema is then
//   anyOf over cases c: s ∧ facts(c) ∧ "what c leaves unevaluated matches U"
// which accepts x iff s accepts x and its truly unevaluated keys / items match U: a case that
// holds evaluates at most the truth (so it asks more of x), the exact case asks what U asks.
//   allOf, $ref: always hold, their cases multiply; anyOf: any subset of the branches may hold
//   (a case per subset of the branches that evaluate something, each branch a fact); oneOf: a
//   case per branch; if: (if ∧ then) or (not if ∧ else); dependentSchemas k: S holds where k
//   is present; not: evaluates nothing. A level with additionalProperties / items (or its own
//   unevaluated*) evaluates everything; contains evaluates the items that match it.
#include "structured/json_unevaluated.h"

#include <set>
#include <vector>

#include "core/error.h"
#include "structured/json_refs.h"

namespace deepinfer::structured {

using Json = nlohmann::ordered_json;

namespace {

constexpr size_t kMaxCases = 64;
constexpr int kMaxRefDepth = 16;

// What a case surely evaluates: everything, or the named keys and the keys matching the
// patterns (objects) / the first `prefix` items and the items matching a `contains` (arrays).
struct Evaluated {
  bool all = false;
  std::set<std::string> names, patterns;
  size_t prefix = 0;
  std::set<std::string> contains;  // schema texts
  bool empty() const { return !all && names.empty() && patterns.empty() && prefix == 0 && contains.empty(); }
  void add(const Evaluated& o) {
    all |= o.all;
    names.insert(o.names.begin(), o.names.end());
    patterns.insert(o.patterns.begin(), o.patterns.end());
    prefix = std::max(prefix, o.prefix);
    contains.insert(o.contains.begin(), o.contains.end());
  }
};

struct Case {
  Json facts = Json::array();
  Evaluated ev;
};
using Cases = std::vector<Case>;

class Lowering {
 public:
  Lowering(bool items, const SchemaMap& normalize, const SchemaMap& resolve, const std::string& path)
      : items_(items), normalize_(normalize), resolve_(resolve), path_(path) {}

  Cases cases(const Json& s0, int depth) {
    const Json s = normalize_(s0);
    if (!s.is_object()) return {Case{}};  // true, or false (then no instance is valid anyway)
    Case own;
    Evaluated& ev = own.ev;
    if (items_) {
      ev.all = s.contains("items") || s.contains("unevaluatedItems");
      if (s.contains("prefixItems")) ev.prefix = s["prefixItems"].size();
      if (s.contains("contains")) ev.contains.insert(s["contains"].dump());
    } else {
      ev.all = s.contains("additionalProperties") || s.contains("unevaluatedProperties");
      if (s.contains("properties")) for (auto& [k, v] : s["properties"].items()) ev.names.insert(k);
      if (s.contains("patternProperties")) for (auto& [k, v] : s["patternProperties"].items()) ev.patterns.insert(k);
    }
    Cases out{own};
    if (ev.all) return out;  // nothing more to see
    for (const char* k : {"$dynamicRef", "$recursiveRef", kDynamicRef})
      if (s.contains(k)) fail_here("'$dynamicRef' in its scope");
    if (s.contains("$ref")) {
      if (depth > kMaxRefDepth) fail_here("a cycle of in-place $refs");
      out = product(out, cases(resolve_(s["$ref"]), depth + 1));
    }
    if (s.contains("allOf"))
      for (const Json& p : s["allOf"]) out = product(out, cases(p, depth + 1));
    if (s.contains("anyOf")) out = product(out, any_cases(s["anyOf"], depth));
    if (s.contains("oneOf")) {
      Cases one{Case{}};
      for (const Json& b : s["oneOf"]) append(one, holding(b, depth));
      out = product(out, one);
    }
    if (s.contains("if")) {
      Cases alt{Case{}};
      append(alt, with_fact(product(cases(s["if"], depth + 1), cases(s.value("then", Json(true)), depth + 1)), s["if"]));
      if (s.contains("else")) append(alt, with_fact(cases(s["else"], depth + 1), Json{{"not", s["if"]}}));
      out = product(out, alt);
    }
    if (!items_ && s.contains("dependentSchemas"))
      for (auto& [k, sub] : s["dependentSchemas"].items()) {
        Cases dep{Case{}};
        append(dep, with_fact(cases(sub, depth + 1), Json{{"required", Json::array({k})}}));
        out = product(out, dep);
      }
    return out;
  }

 private:
  [[noreturn]] void fail_here(const std::string& why) const {
    fail("json schema: unsupported ", items_ ? "unevaluatedItems" : "unevaluatedProperties", " with ", why, " at ", path_);
  }

  // The cases of b where it holds (b a fact), none if b evaluates nothing.
  Cases holding(const Json& b, int depth) {
    Cases c = cases(b, depth + 1);
    bool evaluates = false;
    for (const Case& x : c) evaluates |= !x.ev.empty();
    return evaluates ? with_fact(c, b) : Cases{};
  }
  // anyOf: every subset of the branches that evaluate something may hold together.
  Cases any_cases(const Json& branches, int depth) {
    std::vector<Cases> parts;
    for (const Json& b : branches)
      if (Cases c = holding(b, depth); !c.empty()) parts.push_back(std::move(c));
    if (parts.size() > 6) fail_here("more than 6 anyOf branches that evaluate");
    Cases out;
    for (size_t subset = 0; subset < (size_t{1} << parts.size()); ++subset) {
      Cases cur{Case{}};
      for (size_t i = 0; i < parts.size(); ++i)
        if (subset >> i & 1) cur = product(cur, parts[i]);
      append(out, cur);
    }
    return out;
  }
  static Cases with_fact(Cases c, const Json& fact) {
    for (Case& x : c) x.facts.push_back(fact);
    return c;
  }
  void append(Cases& a, const Cases& b) {
    a.insert(a.end(), b.begin(), b.end());
    if (a.size() > kMaxCases) fail_here("more than 64 cases of what is evaluated");
  }
  Cases product(const Cases& a, const Cases& b) {
    Cases out;
    for (const Case& x : a)
      for (const Case& y : b) {
        Case z = x;
        for (const Json& f : y.facts) z.facts.push_back(f);
        z.ev.add(y.ev);
        out.push_back(std::move(z));
        if (out.size() > kMaxCases) fail_here("more than 64 cases of what is evaluated");
      }
    return out;
  }

  const bool items_;
  const SchemaMap& normalize_;
  const SchemaMap& resolve_;
  const std::string& path_;
};

// s itself, with what the case leaves unevaluated valued by u (its own level has no
// additionalProperties / items, else the case evaluates everything).
Json with_rest(Json s, const Evaluated& ev, const Json& u, bool items) {
  if (ev.all) return s;
  if (items) {
    Json prefix = s.value("prefixItems", Json::array());
    while (prefix.size() < ev.prefix) prefix.push_back(true);
    if (!prefix.empty()) s["prefixItems"] = prefix;
    Json any = Json::array({u});
    for (const std::string& c : ev.contains) any.push_back(Json::parse(c));
    s["items"] = any.size() == 1 ? u : Json{{"anyOf", any}};
  } else {
    for (const std::string& n : ev.names)
      if (!s.contains("properties") || !s["properties"].contains(n)) s["properties"][n] = true;
    for (const std::string& p : ev.patterns)
      if (!s.contains("patternProperties") || !s["patternProperties"].contains(p)) s["patternProperties"][p] = true;
    s["additionalProperties"] = u;
  }
  return s;
}

}  // namespace

Json lower_unevaluated(const Json& s, const SchemaMap& normalize, const SchemaMap& resolve, const std::string& path) {
  const bool items = s.contains("unevaluatedItems");
  const char* key = items ? "unevaluatedItems" : "unevaluatedProperties";
  const Json u = s[key];
  Json base = s;
  base.erase(key);
  if (u == Json(true) || u == Json::object()) return base;
  Cases cs = Lowering(items, normalize, resolve, path).cases(base, 0);
  Json alts = Json::array();
  std::set<std::string> seen;
  for (const Case& c : cs) {
    Json level = with_rest(base, c.ev, u, items);
    Json alt = c.facts.empty() ? level : Json{{"allOf", Json::array({level})}};
    for (const Json& f : c.facts) alt["allOf"].push_back(f);
    if (seen.insert(alt.dump()).second) alts.push_back(alt);
  }
  return alts.size() == 1 ? alts[0] : Json{{"anyOf", alts}};
}

}  // namespace deepinfer::structured
