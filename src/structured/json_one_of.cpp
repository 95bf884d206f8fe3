// oneOf exactness by type-level reasoning. Per branch: T = the JSON types it may match (numbers
// split into integral / fractional), F = the types whose every value it matches (no keyword of
// the branch applies to them). For each pair and each type both may match:
//   - ruled out when a key required by both has disjoint values (const/enum or types), or a
//     key one requires is forbidden by the other (its schema false, or additionalProperties
//     false without patternProperties);
//   - a type in F of both is dropped from both (every such value matches both); in F of one
//     only, the other's values of it must be excluded from it: the exact negations (the caller),
//     or, in the safe subset, the type dropped from both;
//   - objects: each branch forbids a key that only the other requires (a safe subset: an
//     instance with that key but failing the other branch is rejected too);
//   - otherwise the overlap is undecidable here and the schema is rejected.
#include "structured/json_one_of.h"

#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "core/error.h"

namespace deepinfer::structured {

using Json = nlohmann::ordered_json;

namespace {

enum : unsigned { kNull = 1, kBool = 2, kObj = 4, kArr = 8, kStr = 16, kInt = 32, kFrac = 64, kAll = 127 };

unsigned type_bits(const std::string& t) {
  static const std::map<std::string, unsigned> m = {{"null", kNull}, {"boolean", kBool}, {"object", kObj}, {"array", kArr},
                                                    {"string", kStr}, {"integer", kInt}, {"number", kInt | kFrac}};
  auto it = m.find(t);
  return it == m.end() ? 0 : it->second;
}

unsigned value_bits(const Json& v) {
  if (v.is_null()) return kNull;
  if (v.is_boolean()) return kBool;
  if (v.is_object()) return kObj;
  if (v.is_array()) return kArr;
  if (v.is_string()) return kStr;
  if (v.is_number_float() && v.get<double>() != static_cast<double>(static_cast<long long>(v.get<double>()))) return kFrac;
  return kInt;
}

// Which types a keyword constrains; kAll for keywords that constrain every type (or are unknown).
unsigned applies_to(const std::string& k) {
  static const std::map<std::string, unsigned> m = {
      {"minimum", kInt | kFrac}, {"maximum", kInt | kFrac}, {"exclusiveMinimum", kInt | kFrac}, {"exclusiveMaximum", kInt | kFrac},
      {"multipleOf", kInt | kFrac}, {"minLength", kStr}, {"maxLength", kStr}, {"pattern", kStr}, {"format", kStr}, {"\x01patterns", kStr}, {"\x01notPatterns", kStr}, {"\x01alsoContains", kArr}, {"\x01someKey", kObj},
      {"properties", kObj}, {"required", kObj}, {"additionalProperties", kObj}, {"patternProperties", kObj},
      {"propertyNames", kObj}, {"minProperties", kObj}, {"maxProperties", kObj}, {"items", kArr}, {"prefixItems", kArr},
      {"minItems", kArr}, {"maxItems", kArr}, {"contains", kArr}, {"uniqueItems", kArr}, {"type", 0}, {"nullable", 0},
      {"title", 0}, {"description", 0}, {"default", 0}, {"examples", 0}, {"$comment", 0}, {"$schema", 0}, {"$defs", 0},
      {"definitions", 0}, {"$id", 0}, {"$anchor", 0}, {"$dynamicAnchor", 0}, {"\x01dynamicScope", 0}, {"\x01refScope", 0},
      {"dependentSchemas", kObj}, {"dependentRequired", kObj}, {"unevaluatedProperties", kObj}, {"unevaluatedItems", kArr},
      {"minContains", kArr}, {"maxContains", kArr}, {"\x01levelAps", kObj},
      // in-place applicators: type_sets follows them
      {"allOf", 0}, {"anyOf", 0}, {"oneOf", 0}, {"not", 0}, {"if", 0}, {"then", 0}, {"else", 0}, {"$ref", 0}};
  auto it = m.find(k);
  return it == m.end() ? kAll : it->second;
}

struct Branch {
  Json schema;              // $ref resolved one level
  unsigned t = kAll, f = 0;  // may-match and match-all type sets
  const Json* lits = nullptr;
  std::set<std::string> required;
  unsigned drop = 0;
  std::set<std::string> forbid;
};

using Resolve = std::function<const Json&(const std::string&)>;

// The types s may match (a superset) and those whose every value it matches (a subset): its own
// keywords, then its in-place applicators: allOf intersects, anyOf unites, oneOf matches a type
// entirely where exactly one branch does and no other may (and none of a type two match
// entirely), not swaps the sets, if/then/else goes by where `if` surely holds or fails, $ref
// follows its target (at most 8 deep and 256 subschemas in all: beyond, nothing is known).
std::pair<unsigned, unsigned> type_sets(const Json& s, const Resolve& resolve, int depth, int& budget) {
  if (s.is_boolean()) return s.get<bool>() ? std::pair{kAll, kAll} : std::pair{0u, 0u};
  if (!s.is_object() || depth > 8 || --budget < 0) return {kAll, 0};
  unsigned t = kAll, f;
  if (s.contains("type") && (s["type"].is_string() || s["type"].is_array())) {
    t = 0;
    for (const Json& x : s["type"].is_array() ? s["type"] : Json::array({s["type"]})) t |= x.is_string() ? type_bits(x.get<std::string>()) : 0;
  }
  if (s.value("nullable", false)) t |= kNull;
  if (s.contains("const") || (s.contains("enum") && s["enum"].is_array())) {
    unsigned lt = 0;
    for (const Json& v : s.contains("const") ? Json::array({s["const"]}) : s["enum"]) lt |= value_bits(v);
    t &= lt;
  }
  unsigned constrained = 0;
  for (auto& [k, v] : s.items()) constrained |= applies_to(k);
  f = t & ~constrained;
  auto sub = [&](const char* k) { return type_sets(s[k], resolve, depth + 1, budget); };
  if (s.contains("$ref") && s["$ref"].is_string()) {
    try {
      auto [rt, rf] = type_sets(resolve(s["$ref"].get<std::string>()), resolve, depth + 1, budget);
      t &= rt, f &= rf;
    } catch (const Error&) {  // not resolvable here (the conversion reports it): nothing known
      f = 0;
    }
  }
  if (s.contains("allOf"))
    for (const Json& x : s["allOf"]) {
      auto [xt, xf] = type_sets(x, resolve, depth + 1, budget);
      t &= xt, f &= xf;
    }
  if (s.contains("anyOf")) {
    unsigned at = 0, af = 0;
    for (const Json& x : s["anyOf"]) {
      auto [xt, xf] = type_sets(x, resolve, depth + 1, budget);
      at |= xt, af |= xf;
    }
    t &= at, f &= af;
  }
  if (s.contains("oneOf")) {
    std::vector<std::pair<unsigned, unsigned>> bs;
    unsigned ot = 0, twice = 0;
    for (const Json& x : s["oneOf"]) bs.push_back(type_sets(x, resolve, depth + 1, budget));
    for (size_t i = 0; i < bs.size(); ++i) {
      ot |= bs[i].first;
      for (size_t j = i + 1; j < bs.size(); ++j) twice |= bs[i].second & bs[j].second;
    }
    unsigned of = 0;
    for (size_t i = 0; i < bs.size(); ++i) {
      unsigned others = 0;
      for (size_t j = 0; j < bs.size(); ++j) others |= j != i ? bs[j].first : 0;
      of |= bs[i].second & ~others;
    }
    t &= ot & ~twice, f &= of;
  }
  if (s.contains("not")) {
    auto [nt, nf] = sub("not");
    t &= ~nf, f &= ~nt;
  }
  if (s.contains("if")) {
    auto [it, iff] = sub("if");
    auto [tt, tf] = s.contains("then") ? sub("then") : std::pair{kAll, kAll};
    auto [et, ef] = s.contains("else") ? sub("else") : std::pair{kAll, kAll};
    t &= (it & tt) | (~iff & et), f &= (iff & tf) | (~it & ef) | (tf & ef);
  }
  return {t & kAll, f & t & kAll};
}

Branch analyze(const Json& s0, const Resolve& resolve) {
  Branch b;
  b.schema = s0.is_object() && s0.contains("$ref") ? resolve(s0["$ref"].get<std::string>()) : s0;
  const Json& s = b.schema;
  int budget = 256;
  std::tie(b.t, b.f) = type_sets(s, resolve, 0, budget);
  if (s.is_boolean()) return b;
  if (s.contains("const")) b.lits = &s["const"];
  else if (s.contains("enum")) b.lits = &s["enum"];
  if (s.contains("required")) for (const Json& r : s["required"]) b.required.insert(r.get<std::string>());
  return b;
}

bool literal_in(const Json& v, const Branch& b) {
  if (!(value_bits(v) & b.t)) return false;
  if (!b.lits) return true;
  for (const Json& w : b.lits->is_array() && !b.schema.contains("const") ? *b.lits : Json::array({*b.lits}))
    if (w == v) return true;
  return false;
}

// Values of two property schemas can never be equal (so a key required by both discriminates).
bool disjoint_values(const Json& x, const Json& y, const std::function<const Json&(const std::string&)>& resolve) {
  Branch a = analyze(x, resolve), b = analyze(y, resolve);
  if (!(a.t & b.t)) return true;
  if (!a.lits) return false;
  for (const Json& v : a.schema.contains("const") ? Json::array({*a.lits}) : *a.lits)
    if (literal_in(v, b)) return false;
  return true;
}

const char* kNames[] = {"null", "boolean", "object", "array", "string", "integer"};

bool never(const Json& s) { return s.is_boolean() && !s.get<bool>(); }

// Whether an object matching x can never have key k: its schema false, or no schema for it and
// additionalProperties false (and no patternProperties, which might match k).
bool forbids(const Json& x, const std::string& k) {
  if (!x.is_object()) return never(x);
  if (x.contains("properties") && x["properties"].contains(k)) return never(x["properties"][k]);
  return x.contains("additionalProperties") && never(x["additionalProperties"]) && !x.contains("patternProperties");
}

// The types two branches may both match, less objects when a key tells them apart: required by
// both with disjoint values (a discriminator), or required by one and forbidden by the other.
unsigned shared_types(const Branch& a, const Branch& b, const std::function<const Json&(const std::string&)>& resolve) {
  unsigned both = a.t & b.t;
  if (a.lits && b.lits) {  // two literal sets overlap only on shared values
    both = 0;
    for (const Json& v : a.schema.contains("const") ? Json::array({*a.lits}) : *a.lits)
      if (literal_in(v, b)) both |= value_bits(v);
  }
  if (!(both & kObj)) return both;
  for (const std::string& k : a.required)
    if (forbids(b.schema, k)) return both & ~kObj;
  for (const std::string& k : b.required)
    if (forbids(a.schema, k)) return both & ~kObj;
  for (const std::string& k : a.required) {
    if (!b.required.count(k)) continue;
    const Json& pa = a.schema.contains("properties") && a.schema["properties"].contains(k) ? a.schema["properties"][k] : Json(true);
    const Json& pb = b.schema.contains("properties") && b.schema["properties"].contains(k) ? b.schema["properties"][k] : Json(true);
    if (disjoint_values(pa, pb, resolve)) return both & ~kObj;
  }
  return both;
}

}  // namespace

bool disjoint_branches(const Json& x, const Json& y, const std::function<const Json&(const std::string&)>& resolve) {
  return shared_types(analyze(x, resolve), analyze(y, resolve), resolve) == 0;
}

std::vector<Json> exclusive_one_of(const Json& branches, const std::function<const Json&(const std::string&)>& resolve,
                                   const std::string& path, bool forbid_keys) {
  std::vector<Branch> bs;
  for (const Json& s : branches) bs.push_back(analyze(s, resolve));
  auto overlap_error = [&](size_t i, size_t j, const char* why) {
    fail("json schema: unsupported oneOf at ", path, ": branches ", i, " and ", j, " may both match ", why,
         " (exclusivity cannot be enforced; use anyOf or make the branches disjoint)");
  };
  for (size_t i = 0; i < bs.size(); ++i) {
    for (size_t j = i + 1; j < bs.size(); ++j) {
      Branch &a = bs[i], &b = bs[j];
      unsigned both = shared_types(a, b, resolve);
      for (unsigned t = 1; t <= kFrac; t <<= 1) {
        if (!(both & t)) continue;
        if ((b.f | a.f) & t) {  // every value of t matches one: none of them matches the other alone
          a.drop |= t, b.drop |= t;
          // the other may match only some: where it does not, the first alone holds (exact only
          // through the negations; the safe subset drops t from both)
          if (!((a.f & b.f) & t) && !forbid_keys) overlap_error(i, j, t == kObj ? "an object" : t == kStr ? "a string" : t == kArr ? "an array" : t == kNull ? "null" : t == kBool ? "a boolean" : "a number");
          continue;
        }
        if (t != kObj) overlap_error(i, j, t == kStr ? "a string" : t == kArr ? "an array" : "a number");
        auto only = [](const Branch& x, const Branch& y) {  // a key x requires and y does not
          for (const std::string& k : x.required) if (!y.required.count(k)) return k;
          return std::string();
        };
        std::string ka = only(b, a), kb = only(a, b);
        if (!forbid_keys) overlap_error(i, j, "an object");
        if (ka.empty() || kb.empty()) overlap_error(i, j, "an object (no key required by one branch only)");
        a.forbid.insert(ka);
        b.forbid.insert(kb);
      }
    }
  }
  std::vector<Json> out;
  for (size_t i = 0; i < bs.size(); ++i) {
    Branch& b = bs[i];
    unsigned keep = b.t & ~b.drop;
    if (!keep) continue;
    if (!b.drop && b.forbid.empty()) { out.push_back(branches[i]); continue; }
    if ((keep & kFrac) && !(keep & kInt)) overlap_error(i, i, "an integer (only non-integral numbers would remain)");
    Json s = b.schema.is_boolean() ? Json::object() : b.schema;
    if (b.drop) {
      Json types = Json::array();
      for (int k = 0; k < 6; ++k) if (keep & (1u << k)) types.push_back(kNames[k]);
      if (keep & kFrac) types.push_back("number");
      s["type"] = types;
      s.erase("nullable");
    }
    for (const std::string& k : b.forbid) s["properties"][k] = false;
    out.push_back(s);
  }
  if (out.empty()) fail("json schema: unsupported oneOf at ", path, ": no instance can match exactly one branch");
  return out;
}

}  // namespace deepinfer::structured
