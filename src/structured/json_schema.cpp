// JSON Schema (draft 2020-12 subset) -> grammar. Each (sub)schema becomes an expression; $ref
// targets and the generic JSON value become rules so recursion works. Unsupported keywords raise an
// Error naming the keyword; annotations are ignored.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <tuple>
#include <set>

#include "core/error.h"
#include "structured/json_one_of.h"
#include "structured/json_refs.h"
#include "structured/json_unevaluated.h"
#include "structured/number_range.h"
#include "structured/string_dfa.h"
#include "structured/structured.h"

namespace deepinfer::structured {

using Json = nlohmann::ordered_json;

namespace {

// Keywords that constrain instances. Every other keyword (annotations, vendor `x-*`, draft-04
// `id`, unknown ones) is ignored, as JSON Schema says; `normalize` keeps only these.
const std::set<std::string> kConstraining = {
    "type", "enum", "const", "anyOf", "oneOf", "allOf", "not", "$ref", "properties", "required",
    "additionalProperties", "patternProperties", "propertyNames", "minProperties", "maxProperties",
    "dependentRequired", "dependentSchemas", "dependencies", "items", "prefixItems", "additionalItems",
    "contains", "minContains", "maxContains", "minItems", "maxItems", "uniqueItems", "minLength",
    "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "multipleOf", "nullable", "if", "then", "else", "unevaluatedProperties", "unevaluatedItems",
    "$dynamicRef", "$recursiveRef", "\x01patterns", "\x01notPatterns", "\x01someKey", "\x01notMultipleOf", "\x01alsoContains", "\x01levelAps",
    kDynamicScope, kDynamicRef, kRefScope};

// Regexes for the supported `format`s, matching the string content (anchored). Dates are
// month-aware, Feb 29 only in leap years; a leap second only at 23:59:60 UTC (RFC 3339).
#define DI_DATE R"(\d{4}-((0[13578]|1[02])-(0[1-9]|[12]\d|3[01])|(0[469]|11)-(0[1-9]|[12]\d|30)|02-(0[1-9]|1\d|2[0-8]))|(\d\d(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)-02-29)"
#define DI_TIME R"((([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)|23:59:60(\.\d+)?([Zz]|[+-]00:00)))"
const std::map<std::string, std::string> kFormats = {
    {"date", "^(" DI_DATE ")$"},
    {"time", "^" DI_TIME "$"},
    {"date-time", "^(" DI_DATE ")[Tt]" DI_TIME "$"},
    {"email", R"(^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$)"},
    {"hostname", R"(^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$)"},
    {"uuid", R"(^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$)"},
    {"ipv4", R"(^((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$)"},
    {"uri", R"(^[A-Za-z][A-Za-z0-9+.-]*:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*$)"},
};
#undef DI_DATE
#undef DI_TIME

// Internal type name: a number that is not an integer (from {"not": {"type": "integer"}}).
const std::string kNonInteger = "\x01non-integer number";
// Internal keywords (arrays of regexes) for strings: more patterns that must all match (allOf
// of patterns, pattern with format), and patterns that must not match ('not' of a pattern).
const std::string kAlsoPatterns = "\x01patterns", kNotPatterns = "\x01notPatterns";
// Internal keyword for arrays: a second `contains` of an allOf (each needs an item of its own).
const std::string kAlsoContains = "\x01alsoContains";
// Internal keyword for objects ('not' of additionalProperties): a list of witnesses
// {"not_in": [names], "value": S}, each met by some member whose key is none of the names and
// whose value matches S.
const std::string kSomeKey = "\x01someKey";
// Internal keyword for numbers ('not' of multipleOf): the moduli the number is no multiple of.
const std::string kNotMultipleOf = "\x01notMultipleOf";
// Internal keyword for objects (allOf levels mixing additionalProperties and patterns): a list
// of {"names": [keys], "patterns": [regexes], "value": S}, each a level's additionalProperties:
// a key none of its names and matching none of its patterns has a value matching S.
const std::string kLevelAps = "\x01levelAps";
constexpr size_t kMaxDfaStates = 4096;
constexpr size_t kMaxKeyTrie = 8192;  // bytes of the declared names in one key DFA (1 KiB a state)
// Work units (a subschema converted or merged: 1, a product of patterns: kProductWork): in all,
// and per exact oneOf.
constexpr long kMaxWork = 100000, kOneOfWork = 5000, kProductWork = 2000;

// A (sub)schema that matches no instance: an error at the top, a dropped branch in anyOf/oneOf.
using NothingMatches = SchemaMatchesNothing;

class Converter {
 public:
  Converter(const Json& root, const SchemaArgs& opts) : root_(root), opts_(opts), draft_(draft_of(root)) {}

  Grammar run() { return run(root_, "#"); }
  // The grammar of a subschema of root_ (values_matching checks values with it).
  Grammar run(const Json& schema, const std::string& path) {
    int r = g_.declare_rule("root");
    g_.set_root(r);
    g_.define_rule(r, convert(schema, path));
    // A $ref cycle with no way out (e.g. {"$ref": "#"}, or a required property that refers back to
    // its own object) matches no finite value: refuse it now instead of failing every output.
    const std::vector<bool> productive = g_.productive_rules();
    for (auto& [ref, rule] : refs_)
      if (!productive[rule])
        fail("json schema: $ref '", ref, "' recurses into itself with no way to end (no finite JSON value matches)");
    if (!productive[r]) throw NothingMatches("json schema: no instance matches: the schema matches no finite JSON value");
    return std::move(g_);
  }

  // The generic JSON value grammar (json_object uses it directly).
  int any_value() {
    if (value_rule_ < 0) {
      value_rule_ = g_.declare_rule("value");
      int object_rule = g_.declare_rule("object"), array_rule = g_.declare_rule("array");
      int v = g_.ref(value_rule_);
      int member = g_.seq({string_expr(), ws(), g_.lit(":"), ws(), v});
      g_.define_rule(object_rule, g_.seq({g_.lit("{"), ws(), g_.opt(g_.seq({member, g_.star(g_.seq({ws(), g_.lit(","), ws(), member}))})), ws(), g_.lit("}")}));
      g_.define_rule(array_rule, g_.seq({g_.lit("["), ws(), g_.opt(g_.seq({v, g_.star(g_.seq({ws(), g_.lit(","), ws(), v}))})), ws(), g_.lit("]")}));
      g_.define_rule(value_rule_, g_.alt({g_.ref(object_rule), g_.ref(array_rule), string_expr(), number_expr(),
                                          g_.lit("true"), g_.lit("false"), g_.lit("null")}));
    }
    return g_.ref(value_rule_);
  }
  int object_rule() {
    any_value();
    return g_.ref(g_.find_rule("object"));
  }
  Grammar& grammar() { return g_; }

  // The draft named by $schema (3, 4, 6, 7, 2019, 2020); 2020-12 when absent or unknown.
  static int draft_of(const Json& root) {
    if (!root.is_object() || !root.contains("$schema") || !root["$schema"].is_string()) return 2020;
    const std::string u = root["$schema"].get<std::string>();
    for (auto [name, d] : {std::pair{"draft-03", 3}, {"draft-04", 4}, {"draft-06", 6}, {"draft-07", 7}, {"2019-09", 2019}})
      if (u.find(name) != std::string::npos) return d;
    return 2020;
  }

 private:
  int ws() {
    if (opts_.whitespace == Whitespace::kCompact) return g_.empty();
    return g_.rep(g_.cls({{' ', ' '}, {'\t', '\t'}, {'\n', '\n'}, {'\r', '\r'}}), 0, opts_.max_whitespace);
  }
  int json_char() {
    int plain = g_.cls({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}, true);
    int hex = g_.cls({{'0', '9'}, {'a', 'f'}, {'A', 'F'}});
    int esc = g_.seq({g_.lit("\\"), g_.alt({g_.cls({{'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'b', 'b'}, {'f', 'f'}, {'n', 'n'}, {'r', 'r'}, {'t', 't'}}),
                                            g_.seq({g_.lit("u"), g_.rep(hex, 4, 4)})})});
    return g_.alt({plain, esc});
  }
  int string_expr() {
    if (string_rule_ < 0) {
      string_rule_ = g_.declare_rule("string");
      g_.define_rule(string_rule_, g_.seq({g_.lit("\""), g_.star(json_char()), g_.lit("\"")}));
    }
    return g_.ref(string_rule_);
  }
  int number_expr() {
    if (number_rule_ < 0) {
      number_rule_ = g_.declare_rule("number");
      int d = g_.cls({{'0', '9'}});
      int integer = g_.seq({g_.opt(g_.lit("-")), g_.alt({g_.lit("0"), g_.seq({g_.cls({{'1', '9'}}), g_.star(d)})})});
      int frac = g_.opt(g_.seq({g_.lit("."), g_.plus(d)}));
      int exp = g_.opt(g_.seq({g_.cls({{'e', 'e'}, {'E', 'E'}}), g_.opt(g_.cls({{'+', '+'}, {'-', '-'}})), g_.plus(d)}));
      g_.define_rule(number_rule_, g_.seq({integer, frac, exp}));
    }
    return g_.ref(number_rule_);
  }
  int integer_expr() {
    if (integer_rule_ < 0) {
      integer_rule_ = g_.declare_rule("integer");
      g_.define_rule(integer_rule_, g_.seq({g_.opt(g_.lit("-")), g_.alt({g_.lit("0"), g_.seq({g_.cls({{'1', '9'}}), g_.star(g_.cls({{'0', '9'}}))})}), zero_fraction()}));
    }
    return g_.ref(integer_rule_);
  }

  // Since draft 06 a number with a zero fractional part is an integer (1.0); not in draft 04.
  // "1.0" is an integer from draft 06 on; a `number` that is a multiple of an integer may always be
  // written so (draft 04 only refuses it as an `integer`).
  int zero_fraction(bool integer = true) { return integer && draft_ <= 4 ? g_.empty() : g_.opt(g_.seq({g_.lit("."), g_.plus(g_.lit("0"))})); }

  // One level of a schema in draft 2020-12 terms: keywords that do not constrain dropped (and
  // formats we do not enforce), older drafts' spellings rewritten: `items` arrays and
  // `additionalItems`, boolean `exclusiveMinimum`/`exclusiveMaximum`, `dependencies`, draft-03
  // `required: true`, and `$ref` siblings (ignored before 2019-09). Subschemas are normalized
  // when they are converted. keep_lone_if: an `if` without then/else stays (unevaluated* sees
  // its annotations).
  Json normalize(const Json& s, bool keep_lone_if = false) const {
    if (!s.is_object()) return s;
    Json out = Json::object();
    for (auto& [k, v] : s.items())
      if (kConstraining.count(k) || (draft_ == 3 && (k == "disallow" || k == "extends" || k == "divisibleBy"))) out[k] = v;
    if (out.contains("format") && (!out["format"].is_string() || !kFormats.count(out["format"].get<std::string>()))) out.erase("format");
    if (out.contains("$ref") && draft_ < 2019) return Json{{"$ref", out["$ref"]}};
    if (out.contains("required") && out["required"].is_boolean()) out.erase("required");
    if (draft_ == 3 && out.contains("properties") && out["properties"].is_object())
      for (auto& [k, v] : out["properties"].items())
        if (v.is_object() && v.value("required", Json(false)) == Json(true)) out["required"].push_back(k);
    if (out.contains("items") && out["items"].is_array()) {
      out["prefixItems"] = out["items"];
      out.erase("items");
      if (out.contains("additionalItems")) out["items"] = out["additionalItems"];
    }
    out.erase("additionalItems");
    for (auto [ex, in] : {std::pair{"exclusiveMinimum", "minimum"}, {"exclusiveMaximum", "maximum"}}) {
      if (!out.contains(ex) || !out[ex].is_boolean()) continue;
      if (out[ex].get<bool>() && out.contains(in)) {
        out[ex] = out[in];
        out.erase(in);
      } else {
        out.erase(ex);
      }
    }
    if (out.contains("dependencies")) {
      const Json deps = out["dependencies"];  // a copy: out grows below
      out.erase("dependencies");
      for (auto& [k, v] : deps.items()) out[v.is_array() ? "dependentRequired" : "dependentSchemas"][k] = v;
    }
    // Keywords that do nothing alone: then/else without if, if without both, min/maxContains
    // without contains.
    if (!out.contains("if")) {
      out.erase("then");
      out.erase("else");
    } else if (!out.contains("then") && !out.contains("else") && !keep_lone_if) {
      out.erase("if");
    }
    if (draft_ < 2019) {  // keywords of 2019-09 on: unknown (ignored) before
      out.erase("unevaluatedProperties");
      out.erase("unevaluatedItems");
    }
    if (!out.contains("contains")) {
      out.erase("minContains");
      out.erase("maxContains");
    }
    return out;
  }

  // unevaluated* of this level rewritten by cases (json_unevaluated.cpp), normalized.
  static bool has_unevaluated(const Json& s) {
    return s.is_object() && (s.contains("unevaluatedProperties") || s.contains("unevaluatedItems"));
  }
  Json lower(const Json& s, const std::string& path) {
    const SchemaMap norm = [this](const Json& x) { return normalize(x, true); };
    const SchemaMap resolve = [&](const Json& ref) { return resolve_normalized(ref.get<std::string>(), path); };
    Json out = lower_unevaluated(normalize(s, true), norm, resolve, path);
    while (has_unevaluated(out)) out = lower_unevaluated(out, norm, resolve, path);  // the other one
    return normalize(out);
  }

  [[noreturn]] void unsupported(const std::string& path, const std::string& what) {
    fail("json schema: unsupported ", what, " at ", path);
  }
  [[noreturn]] void nothing(const std::string& path, const std::string& what) {
    throw NothingMatches("json schema: no instance matches: " + what + " at " + path);
  }

  // Undoing a branch whose conversion threw: the rules it declared, and the caches naming them.
  struct Mark {
    int rules, ref_merge_depth, merge_rounds;
  };
  Mark mark() const { return {g_.num_rules(), ref_merge_depth_, merge_rounds_}; }
  void rollback(const Mark& m) {
    g_.truncate_rules(m.rules);
    std::erase_if(refs_, [&](const auto& kv) { return kv.second >= m.rules; });
    std::erase_if(counted_strings_, [&](const auto& kv) { return kv.second >= m.rules; });
    std::erase_if(converted_, [&](const auto& kv) { return kv.second.since >= m.rules; });  // may name its rules
    std::erase_if(numeric_exprs_, [&](const auto& kv) { return kv.second.since >= m.rules; });
    for (int* r : {&key_rest_rule_, &key_off_names_rule_, &value_rule_, &string_rule_, &number_rule_, &integer_rule_})
      if (*r >= m.rules) *r = -1;
    ref_merge_depth_ = m.ref_merge_depth;
    merge_rounds_ = m.merge_rounds;
  }

  const Json& resolve_pointer(const std::string& ref, const std::string& path) {
    if (ref == "#") return root_;
    if (ref.rfind("#/", 0) != 0) unsupported(path, "$ref '" + ref + "' (a document not given: none is fetched)");
    const Json* cur = &root_;
    size_t pos = 2;
    while (pos <= ref.size()) {
      size_t next = ref.find('/', pos);
      if (next == std::string::npos) next = ref.size();
      std::string tok = ref.substr(pos, next - pos), key;
      for (size_t i = 0; i < tok.size(); ++i) {  // JSON pointer and percent escapes
        if (tok[i] == '~' && i + 1 < tok.size()) { key += tok[i + 1] == '1' ? '/' : '~'; ++i; }
        else if (tok[i] == '%' && i + 2 < tok.size()) { key += static_cast<char>(std::stoi(tok.substr(i + 1, 2), nullptr, 16)); i += 2; }
        else key += tok[i];
      }
      if (cur->is_object() && cur->contains(key)) cur = &(*cur)[key];
      else if (cur->is_array() && !key.empty() && std::all_of(key.begin(), key.end(), ::isdigit) && std::stoul(key) < cur->size()) cur = &(*cur)[std::stoul(key)];
      else fail("json schema: $ref '", ref, "' at ", path, " does not resolve");
      pos = next + 1;
    }
    return *cur;
  }

  void charge(long work, const std::string& path) {
    if ((work_ += work) > work_limit_)
      fail("json schema: unsupported schema at ", path.substr(0, 200), ": its expansion (oneOf exclusivity, 'not' complements) is too large");
  }

  const Json& resolve_normalized(const std::string& ref, const std::string& path) {  // cached
    auto it = normalized_refs_.find(ref);
    if (it == normalized_refs_.end()) it = normalized_refs_.emplace(ref, normalize(resolve_pointer(ref, path))).first;
    return it->second;
  }

  int ref_rule(const std::string& ref, const std::string& path) {
    auto it = refs_.find(ref + dynamic_key_);
    if (it != refs_.end()) return g_.ref(it->second);
    int r = g_.declare_rule("ref" + std::to_string(refs_.size()));
    refs_[ref + dynamic_key_] = r;
    g_.define_rule(r, convert(resolve_pointer(ref, path), ref));
    return g_.ref(r);
  }

  // The types both lists allow (an integer is a number); an empty list matches nothing.
  static Json intersect_types(const Json& a, const Json& b) {
    auto list = [](const Json& t) { return t.is_array() ? t : Json::array({t}); };
    Json out = Json::array();
    for (const Json& x : list(a))
      for (const Json& y : list(b)) {
        Json t = x == y ? x : (x == "number" && y == "integer") || (x == "integer" && y == "number") ? Json("integer")
               : (x == "number" && y == kNonInteger) || (x == kNonInteger && y == "number") ? Json(kNonInteger) : Json();
        if (!t.is_null() && std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
      }
    return out;
  }
  static bool integral(const Json& v) {
    return v.is_number_integer() || (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()) && std::abs(v.get<double>()) < 1e15);
  }
  static inline const std::set<std::string> kLowerBounds = {"minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties"};
  static inline const std::set<std::string> kUpperBounds = {"maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties"};

  // allOf of simple parts: merge the keyword maps, failing on conflicting values.
  Json merge_all_of(const Json& schema, const std::string& path) {
    charge(1, path);
    std::vector<Json> levels{Json::object()};
    for (auto& [k, v] : schema.items()) if (k != "allOf") levels[0][k] = v;
    for (const Json& part0 : schema["allOf"]) {
      Json part = has_unevaluated(normalize(part0)) ? lower(part0, path) : normalize(part0);  // before it meets cousins
      if (part.is_boolean()) {
        if (!part.get<bool>()) nothing(path, "allOf containing false (matches nothing)");
        continue;
      }
      for (const char* k : {kDynamicScope, kRefScope})
        if (part.contains(k) && bound(part[k])) part.erase(k);
      if (part.contains(kRefScope) || (part.contains(kDynamicScope) && !(schema["allOf"].size() == 1 && levels[0].empty())))
        unsupported(path, "$ref into a resource with $dynamicAnchors next to other keywords");  // its bindings are not theirs
      if (part.contains("$ref")) {
        Json target = normalize(resolve_pointer(part["$ref"].get<std::string>(), path));
        if (target.is_object() && target.contains(kDynamicScope) && bound(target[kDynamicScope])) target.erase(kDynamicScope);
        if (target.is_boolean() && !target.get<bool>()) nothing(path, "allOf containing false (matches nothing)");
        const bool alone = part.size() == 1 && schema["allOf"].size() == 1 && levels[0].empty();
        if (target.is_object() && target.contains(kDynamicScope) && !alone)  // its bindings are not the siblings
          unsupported(path, "$ref with sibling keywords to a resource with $dynamicAnchors");
        part.erase("$ref");  // the siblings of $ref (2019-09 on) apply too
        if (target.is_object()) part = part.empty() ? target : merge_all_of(Json{{"allOf", Json::array({part, target})}}, path);
        if (part.empty()) continue;
        if (has_unevaluated(part)) part = lower(part, path);  // the target's own
      }
      if (part.contains("allOf")) part = merge_all_of(part, path);
      levels.push_back(part);
    }
    // additionalProperties only sees its own level's properties (and patterns): a key declared at
    // another level gets it too, so each declared key collects the additionalProperties of the
    // levels that do not declare it; the merged one is their allOf (for keys no level declares).
    // Where patterns of one level meet additionalProperties of another, each additionalProperties
    // becomes a kLevelAps entry (its level's names and patterns with it), applied per key.
    Json level_aps = Json::array();
    bool mixed = false;
    for (Json& a : levels) {
      if (a.contains(kLevelAps)) for (const Json& e : a[kLevelAps]) level_aps.push_back(e);
      a.erase(kLevelAps);
      if (!a.contains("additionalProperties") || is_always(a["additionalProperties"])) continue;
      for (const Json& b : levels)
        mixed |= &a != &b && (b.contains("patternProperties") || (a.contains("patternProperties") && b.contains("properties")));
    }
    for (Json& a : levels) {
      if (!mixed || !a.contains("additionalProperties")) continue;
      Json e = {{"names", Json::array()}, {"patterns", Json::array()}, {"value", a["additionalProperties"]}};
      if (a.contains("properties")) for (auto& [k, v] : a["properties"].items()) e["names"].push_back(k);
      if (a.contains("patternProperties")) for (auto& [k, v] : a["patternProperties"].items()) e["patterns"].push_back(k);
      if (!is_always(e["value"])) level_aps.push_back(e);
      a.erase("additionalProperties");
    }
    Json key_aps = Json::object();  // key -> additionalProperties it also gets
    for (const Json& a : levels) {
      if (!a.contains("additionalProperties") || is_always(a["additionalProperties"])) continue;
      for (const Json& b : levels) {
        if (&a == &b || !b.contains("properties")) continue;
        for (auto& [k, v] : b["properties"].items())
          if (!(a.contains("properties") && a["properties"].contains(k))) key_aps[k].push_back(a["additionalProperties"]);
      }
    }
    merge_item_lists(levels);
    bool has_if = false;  // the first if/then/else stays; later ones become their anyOf
    for (Json& part : levels) {
      if (!part.contains("if")) continue;
      if (!has_if) { has_if = true; continue; }
      Json alts = Json::array({Json{{"allOf", Json::array({part["if"], part.value("then", Json(true))})}},
                               Json{{"allOf", Json::array({Json{{"not", part["if"]}}, part.value("else", Json(true))})}}});
      for (const char* k : {"if", "then", "else"}) part.erase(k);
      if (part.contains("anyOf")) part["allOf"] = Json::array({Json{{"anyOf", part["anyOf"]}}});
      part["anyOf"] = alts;
      if (part.contains("allOf")) part = merge_all_of(part, path);
    }
    for (Json& part : levels) {  // const is a one-value enum, so the two intersect below
      if (!part.contains("const")) continue;
      if (!part.contains("enum")) part["enum"] = Json::array({part["const"]});
      else if (std::find(part["enum"].begin(), part["enum"].end(), part["const"]) == part["enum"].end()) part["enum"] = Json::array();
      else part["enum"] = Json::array({part["const"]});
      part.erase("const");
    }
    Json merged = Json::object();
    Json deferred = Json::array();  // levels merged in a second round (the negated nots)
    for (const Json& part : levels) {
      for (auto& [k, v] : part.items()) {
        if (!merged.contains(k)) { merged[k] = v; continue; }
        if (merged[k] == v) continue;  // the same keyword twice: once is enough
        if (k == "properties") {  // a key forbidden at one level is forbidden
          for (auto& [pk, pv] : v.items()) {
            if (!merged[k].contains(pk)) merged[k][pk] = pv;
            else if (is_never(merged[k][pk]) || is_never(pv)) merged[k][pk] = false;
            else if (merged[k][pk] != pv) merged[k][pk] = Json{{"allOf", Json::array({merged[k][pk], pv})}};
          }
        } else if (k == "required") {
          for (auto& r : v) if (std::find(merged[k].begin(), merged[k].end(), r) == merged[k].end()) merged[k].push_back(r);
        } else if (k == "type") {
          merged[k] = intersect_types(merged[k], v);
        } else if (k == "enum" && v.is_array() && merged[k].is_array()) {
          Json both = Json::array();
          for (const Json& x : merged[k]) if (std::find(v.begin(), v.end(), x) != v.end()) both.push_back(x);
          if (both.empty()) nothing(path, "allOf whose enums have no common value (matches nothing)");
          merged[k] = both;
        } else if (k == "not") {  // not A and not B: one not of the union, or B spelled positively
          const Json a = normalize(merged[k]), b = normalize(v);
          auto only = [](const Json& x, const char* key) { return x.is_object() && x.size() == 1 && x.contains(key); };
          auto values = [](const Json& x) { return x.contains("const") ? Json::array({x["const"]}) : x["enum"]; };
          auto types = [](const Json& x) { return x["type"].is_array() ? x["type"] : Json::array({x["type"]}); };
          if ((only(a, "enum") || only(a, "const")) && (only(b, "enum") || only(b, "const"))) {
            Json u = values(a);
            for (const Json& x : values(b)) u.push_back(x);
            merged[k] = Json{{"enum", u}};
          } else if (only(a, "type") && only(b, "type")) {
            Json u = types(a);
            for (const Json& x : types(b)) u.push_back(x);
            merged[k] = Json{{"type", u}};
          } else {
            Json pos = negate(b, path);
            if (pos.is_object() && pos.contains("not")) pos = positive_not(pos["not"], path);
            deferred.push_back(pos);
          }
        } else if (k == "anyOf") {  // (A1 or A2) and (B1 or B2) = A1 and B1 or A1 and B2 ...
          if (merged[k].size() * v.size() > 64) unsupported(path, "allOf of anyOfs with more than 64 combinations");
          Json alts = Json::array();
          for (const Json& a : merged[k])
            for (const Json& b : v)
              if (!is_never(a) && !is_never(b)) alts.push_back(Json{{"allOf", Json::array({a, b})}});
          if (alts.empty()) nothing(path, "allOf of anyOfs whose branches all match nothing");
          merged[k] = alts;
        } else if (k == "oneOf") {  // exactly one of A, and exactly one of B: B joins every A
          Json alts = Json::array();
          for (const Json& a : merged[k]) alts.push_back(Json{{"allOf", Json::array({a, Json{{"oneOf", v}}})}});
          merged[k] = alts;
        } else if (k == "additionalProperties") {
          merged[k] = is_never(merged[k]) || is_never(v) ? Json(false) : is_always(v) ? merged[k]
                    : is_always(merged[k]) ? v : Json{{"allOf", Json::array({merged[k], v})}};
        } else if (k == "items" && !v.is_array() && !merged[k].is_array()) {  // every item matches both
          merged[k] = is_never(merged[k]) || is_never(v) ? Json(false) : is_always(v) ? merged[k]
                    : is_always(merged[k]) ? v : Json{{"allOf", Json::array({merged[k], v})}};
        } else if (k == "patternProperties") {  // each level's patterns hold: their union
          for (auto& [pk, pv] : v.items()) {
            if (!merged[k].contains(pk)) merged[k][pk] = pv;
            else if (merged[k][pk] != pv) merged[k][pk] = Json{{"allOf", Json::array({merged[k][pk], pv})}};
          }
        } else if (k == "pattern" || k == "format") {  // both must match: the second joins kAlsoPatterns
          if (merged[k] != v) merged[kAlsoPatterns].push_back(k == "pattern" ? v : Json(kFormats.at(v.get<std::string>())));
        } else if (k == "contains") {  // some item matches each: the second joins kAlsoContains
          Json& also = merged[kAlsoContains];
          if (!also.is_array() || std::find(also.begin(), also.end(), v) == also.end()) also.push_back(v);  // once each
        } else if (k == "multipleOf" && integral(merged[k]) && integral(v)) {  // multiples of both: of their lcm
          merged[k] = std::lcm(merged[k].get<long>(), v.get<long>());
        } else if (k == kAlsoPatterns || k == kNotPatterns || k == kSomeKey || k == kNotMultipleOf || k == kAlsoContains) {
          for (const Json& p : v) merged[k].push_back(p);
        } else if (merged[k].is_number() && v.is_number() && (kLowerBounds.count(k) || kUpperBounds.count(k))) {
          const bool lower = kLowerBounds.count(k) > 0;  // keep the tighter bound
          if (lower == (v.get<double>() > merged[k].get<double>())) merged[k] = v;
        } else if (merged[k] != v) {
          unsupported(path, "allOf with conflicting '" + k + "'");
        }
      }
    }
    if (merged.contains(kAlsoContains) && (merged.contains("minContains") || merged.contains("maxContains")))
      unsupported(path, "allOf of several 'contains' with minContains/maxContains");
    for (auto& [k, aps] : key_aps.items()) {
      Json all = Json::array({merged["properties"][k]});
      for (const Json& x : aps) all.push_back(x);
      const bool never = std::any_of(all.begin(), all.end(), [&](const Json& x) { return is_never(x); });
      merged["properties"][k] = never ? Json(false) : Json{{"allOf", all}};
    }
    if (!level_aps.empty()) {
      merged[kLevelAps] = level_aps;
      merged["additionalProperties"] = true;  // the levels' own are in kLevelAps
    }
    if (!deferred.empty()) {
      if (++merge_rounds_ > 16) unsupported(path, "allOf with conflicting 'not' (nested too deep)");
      merged["allOf"] = deferred;
      merged = merge_all_of(merged, path);
      --merge_rounds_;
    }
    return merged;
  }

  // items only sees its own level's prefixItems: where levels hold several lists, or items next
  // to another level's list, entry i becomes the allOf of every level's entry i (its items past
  // its own list, true without one), items the allOf of the levels' items; they move to levels[0].
  void merge_item_lists(std::vector<Json>& levels) const {
    size_t n = 0, lists = 0, items = 0;
    for (const Json& a : levels) {
      if (a.contains("prefixItems")) n = std::max(n, a["prefixItems"].size()), ++lists;
      items += a.contains("items") && !a.contains("prefixItems");
    }
    if (lists == 0 || (lists == 1 && items == 0)) return;
    Json prefix = Json::array(), rest = Json::array();
    for (size_t i = 0; i < n; ++i) {
      Json all = Json::array();
      for (const Json& a : levels) {
        const Json e = a.contains("prefixItems") && i < a["prefixItems"].size() ? a["prefixItems"][i] : a.value("items", Json(true));
        if (!is_always(e)) all.push_back(e);
      }
      prefix.push_back(all.empty() ? Json(true) : all.size() == 1 ? all[0] : Json{{"allOf", all}});
    }
    for (Json& a : levels) {
      if (a.contains("items") && !is_always(a["items"])) rest.push_back(a["items"]);
      a.erase("prefixItems");
      a.erase("items");
    }
    levels[0]["prefixItems"] = prefix;
    if (!rest.empty()) levels[0]["items"] = rest.size() == 1 ? rest[0] : Json{{"allOf", rest}};
  }

  // A subschema met again (a $ref'd definition inlined next to siblings, the same branch of
  // several oneOfs) reuses its expression: a WashingtonPost schema converted 576 distinct
  // subschemas 3,517 times. The result depends only on the schema (the path only names errors).
  int convert(const Json& schema0, const std::string& path) {
    std::string key = schema0.dump() + dynamic_key_;  // a $dynamicRef inside may bind otherwise
    if (auto it = converted_.find(key); it != converted_.end()) return it->second.expr;
    const int since = g_.num_rules();
    int e = convert_uncached(schema0, path);
    // A large value (an enum of 250 countries, a product of number automata) becomes a rule of
    // its own: each use is then one reference instead of a copy that the subset construction
    // determinizes again (transcend's schema repeats such enums in dozens of members).
    if (g_.expr_size(e, kHoistStates) >= kHoistStates) {
      const int r = g_.declare_rule("value" + std::to_string(g_.num_rules()));
      g_.define_rule(r, e);
      e = g_.ref(r);
    }
    converted_.emplace(std::move(key), Converted{e, since});
    return e;
  }
  static constexpr size_t kHoistStates = 512;
  int convert_uncached(const Json& schema0, const std::string& path) {
    // Bounds the recursion (a deep schema must not overflow the stack) with a reason that says so.
    struct Depth {
      int& d;
      explicit Depth(int& x) : d(++x) {}
      ~Depth() { --d; }
    } depth(depth_);
    if (depth_ > kMaxSchemaDepth)
      fail("json schema: nested deeper than ", kMaxSchemaDepth, " levels at ", path.substr(0, 200),
           path.size() > 200 ? "..." : "");
    charge(1, path);
    const Json schema = normalize(schema0);
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) nothing(path, "schema 'false' (matches nothing)");
      return any_value();
    }
    if (is_never(schema)) nothing(path, "schema that matches nothing ('not' of a schema matching everything)");
    if (!schema.is_object()) fail("json schema: expected an object or boolean at ", path);
    for (const char* k : {kDynamicScope, kRefScope})
      if (schema.contains(k) && bound(schema[k])) return convert(without(schema, k), path);
    if (schema.contains(kDynamicScope)) return in_scope(schema, kDynamicScope, path);
    if (schema.contains(kRefScope)) {
      if (schema.size() != 2 || !schema.contains("$ref")) unsupported(path, "$ref with sibling keywords into a resource with $dynamicAnchors");
      return in_scope(schema, kRefScope, path);
    }
    if (schema.contains(kDynamicRef)) {  // the outermost resource entered that binds the name, else the default
      const Json& d = schema[kDynamicRef];
      auto it = dynamic_scope_.find(d["name"].get<std::string>());
      Json rest = schema;
      rest.erase(kDynamicRef);
      if (rest.contains("$ref")) unsupported(path, "$dynamicRef next to $ref");
      rest["$ref"] = it != dynamic_scope_.end() ? it->second : d["default"].get<std::string>();
      if (it == dynamic_scope_.end()) rest[kRefScope] = d["scope"];
      return convert(rest, path);
    }
    if (has_unevaluated(schema)) return convert(lower(schema0, path), path);
    if (schema.contains("allOf")) return convert(merge_all_of(schema, path), path);
    for (auto& [k, v] : schema.items()) {
      static const std::set<std::string> known = {
          "type", "enum", "const", "anyOf", "oneOf", "$ref", "properties", "required", "additionalProperties",
          "items", "prefixItems", "minItems", "maxItems", "minLength", "maxLength", "pattern", "format",
          "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "nullable", "minProperties", "maxProperties",
          "uniqueItems", "not", "multipleOf", "dependentRequired", "propertyNames", "patternProperties",
          "dependentSchemas", "contains", "minContains", "maxContains", "if", "then", "else", kAlsoPatterns, kNotPatterns, kSomeKey, kNotMultipleOf, kAlsoContains, kLevelAps,
          kDynamicScope, kDynamicRef, kRefScope};
      if (!known.count(k)) unsupported(path, "keyword '" + k + "'");
    }
    if (schema.contains("$ref")) {
      bool siblings = false;
      for (auto& [k, v] : schema.items()) siblings |= k != "$ref";
      if (!siblings) return ref_rule(schema["$ref"].get<std::string>(), path);
      // $ref next to other keywords (draft 2020-12): both apply, i.e. allOf [{$ref}, rest],
      // merged like any allOf (the target is inlined; refs inside it stay rules).
      if (++ref_merge_depth_ > 32) unsupported(path, "$ref with sibling keywords through a cycle of $refs");
      Json s = Json::object();
      Json parts = Json::array({Json{{"$ref", schema["$ref"]}}});
      for (auto& [k, v] : schema.items()) {
        if (k == "$ref") continue;
        if (k == "allOf") for (auto& p : v) parts.push_back(p);
        else s[k] = v;
      }
      s["allOf"] = parts;
      int e = convert(s, path);
      --ref_merge_depth_;
      return e;
    }
    if (schema.contains("dependentSchemas")) return dependent_schemas(schema, path);
    if (schema.contains("if")) {  // (if and then) or (not if and else)
      Json rest = schema;
      for (const char* k : {"if", "then", "else"}) rest.erase(k);
      const Json& a = schema["if"];
      const Json not_a = negate(a, path), then = schema.value("then", Json(true)), other = schema.value("else", Json(true));
      Json alts = Json::array();
      if (!is_never(a) && !is_never(then)) alts.push_back(Json{{"allOf", Json::array({rest, a, then})}});
      if (!is_never(not_a) && !is_never(other)) alts.push_back(Json{{"allOf", Json::array({rest, not_a, other})}});
      if (alts.empty()) nothing(path, "schema that matches nothing (if/then/else)");
      return convert(Json{{"anyOf", alts}}, path);
    }
    // `not` of literals next to anyOf / oneOf is a sibling of each branch (not X ∧ anyOf B = anyOf
    // (not X ∧ B), the same for oneOf): left to them.
    if (schema.contains("not") && !(literals_only(schema["not"]) && (schema.contains("anyOf") || schema.contains("oneOf"))))
      return convert_not(schema, path);
    std::vector<std::string> types;
    if (schema.contains("type")) {
      const Json& t = schema["type"];
      if (t.is_string()) types.push_back(t.get<std::string>());
      else for (auto& x : t) types.push_back(x.get<std::string>());
      if (types.empty()) nothing(path, "empty 'type' list (matches nothing)");
    } else {
      types = {"null", "boolean", "object", "array", "number", "string"};
    }
    if (schema.value("nullable", false)) types.push_back("null");
    if (schema.contains("const") || schema.contains("enum")) return literals(schema, types, path);
    if (schema.contains("anyOf") || schema.contains("oneOf")) {
      // With both, the anyOf is a sibling of the oneOf (it applies to every branch).
      const char* key = schema.contains("oneOf") ? "oneOf" : "anyOf";
      // Sibling keywords apply to every branch: {S, anyOf [A, B]} = anyOf [S and A, S and B], and
      // likewise for oneOf (S holds and exactly one of A, B iff exactly one of S and A, S and B).
      // Each branch is merged with S like an allOf; one that can match nothing is dropped.
      Json siblings = schema;
      siblings.erase(key);
      Json branches_in = Json::array(), raw = Json::array();  // raw: each kept branch without S
      if (siblings.empty()) {
        branches_in = raw = normalized_all(schema[key]);
      } else {
        if (++ref_merge_depth_ > 32) unsupported(path, std::string(key) + " with sibling keywords through a cycle of $refs");
        for (const Json& b : schema[key]) {
          if (is_never(b)) continue;
          Json s = siblings;
          s["allOf"] = Json::array({b});
          Json m;
          const Mark mk = mark();
          try {
            m = merge_all_of(s, path);
          } catch (const NothingMatches&) {  // this branch matches nothing: dropped
            rollback(mk);
            continue;
          }
          if (m.contains("type") && m["type"].is_array() && m["type"].empty()) continue;
          branches_in.push_back(m);
          raw.push_back(normalize(b));
        }
      }
      std::vector<Json> branches(branches_in.begin(), branches_in.end());
      if (branches.size() > 1 && std::string(key) == "oneOf") {
        auto resolve = [&](const std::string& ref) -> const Json& { return resolve_normalized(ref, path); };
        try {
          branches = exclusive_one_of(branches_in, resolve, path, false);
        } catch (const Error& overlap) {
          // Overlapping branches: exactly one = some S and B_i and not each B_j that may
          // overlap it (S holds already, so B_j is negated without it), where the negations
          // can be spelled (at most 4 per branch); else the safe subset below, else the error.
          std::string why = overlap.what();
          Json alts = Json::array();
          for (size_t i = 0; i < branches.size() && alts.size() == i; ++i) {
            Json all = Json::array({branches[i]});
            for (size_t j = 0; j < branches.size(); ++j)
              if (j != i && !disjoint_branches(branches[i], branches[j], resolve)) all.push_back(Json{{"not", raw[j]}});
            if (all.size() <= 5) alts.push_back(Json{{"allOf", all}});
          }
          if (alts.size() == branches.size()) {
            const Mark m = mark();
            const long limit = work_limit_;
            work_limit_ = std::min(limit, work_ + kOneOfWork);
            try {
              const int e = convert(Json{{"anyOf", alts}}, path);
              work_limit_ = limit;
              if (!siblings.empty()) --ref_merge_depth_;
              return e;
            } catch (const NothingMatches&) {
              work_limit_ = limit;
              throw;
            } catch (const Error& e) {
              work_limit_ = limit;
              rollback(m);
              why += std::string("; as one branch and not the others: ") + e.what();
            }
          }
          try {  // the safe subset: object branches forbid each other's own required keys
            branches = exclusive_one_of(branches_in, resolve, path, true);
          } catch (const Error&) {
            fail(why);
          }
        }
      }
      std::vector<int> alts;
      int i = 0;
      for (const Json& sub : branches) {  // a branch that matches nothing is dropped
        const Mark m = mark();
        try {
          alts.push_back(convert(sub, path + "/" + key + "/" + std::to_string(i++)));
        } catch (const NothingMatches&) {
          rollback(m);
        }
      }
      if (!siblings.empty()) --ref_merge_depth_;
      if (alts.empty()) nothing(path, std::string(key) + " whose branches all match nothing");
      return g_.alt(alts);
    }
    // A type whose keywords admit no value of it is dropped (required a key that is forbidden
    // rules out objects only); the schema matches nothing when every type is.
    std::vector<int> alts;
    std::string none_why;
    for (const std::string& t : types) {
      const Mark m = mark();
      try {
        if (t == "null") alts.push_back(g_.lit("null"));
        else if (t == "boolean") alts.push_back(g_.alt({g_.lit("true"), g_.lit("false")}));
        else if (t == "string") alts.push_back(string_schema(schema, path));
        else if (t == "integer") alts.push_back(numeric(schema, path, true));
        else if (t == "number") alts.push_back(numeric(schema, path, false));
        else if (t == kNonInteger) alts.push_back(non_integer(schema, path));
        else if (t == "object") alts.push_back(object_schema(schema, path));
        else if (t == "array") alts.push_back(array_schema(schema, path));
        else fail("json schema: unknown type '", t, "' at ", path);
      } catch (const NothingMatches& e) {
        rollback(m);
        none_why = e.what();
      }
    }
    if (alts.empty()) throw NothingMatches(none_why);
    return g_.alt(alts);
  }

  // Whether every name of a scope is bound already (entering it changes nothing).
  bool bound(const Json& scope) const {
    for (auto& [name, ptr] : scope.items())
      if (!dynamic_scope_.count(name)) return false;
    return true;
  }
  static Json without(Json s, const char* key) {
    s.erase(key);
    return s;
  }
  // Entering a resource with $dynamicAnchors (json_refs.h: lexically, or by a $ref into it): its
  // names still free are bound while the rest converts.
  int in_scope(const Json& schema, const char* key, const std::string& path) {
    const auto saved = dynamic_scope_;
    const std::string saved_key = dynamic_key_;
    for (auto& [name, ptr] : schema[key].items())
      if (dynamic_scope_.emplace(name, ptr.get<std::string>()).second) dynamic_key_ += "\x02" + name + "=" + ptr.get<std::string>();
    Json rest = schema;
    rest.erase(key);
    struct Restore {
      Converter& c;
      const std::map<std::string, std::string>& scope;
      const std::string& key;
      ~Restore() { c.dynamic_scope_ = scope, c.dynamic_key_ = key; }
    } restore{*this, saved, saved_key};
    return convert(rest, path);
  }

  bool literals_only(const Json& n0) const {
    const Json n = normalize(n0);
    return n.is_object() && n.size() == 1 && (n.contains("enum") || n.contains("const"));
  }

  Json normalized_all(const Json& list) const {
    Json out = Json::array();
    for (const Json& x : list) out.push_back(normalize(x));
    return out;
  }

  // The grammar of s, or -1 where no instance matches it (a forbidden key, an item past the end).
  int convert_or_none(const Json& s, const std::string& path) {
    if (matches_nothing(s, path)) return -1;
    const Mark m = mark();
    try {
      return convert(s, path);
    } catch (const NothingMatches&) {
      rollback(m);
      return -1;
    }
  }

  // is_never, or an allOf whose types have nothing in common.
  bool matches_nothing(const Json& s, const std::string& path) {
    if (is_never(s)) return true;
    if (!s.is_object() || !s.contains("allOf")) return false;
    const Mark mk = mark();
    try {
      const Json m = merge_all_of(s, path);
      return m.contains("type") && m["type"].is_array() && m["type"].empty();
    } catch (const NothingMatches&) {  // the merge itself found no instance (allOf with false...)
      rollback(mk);
      return true;
    }
  }

  // Schemas that match every / no instance ({} and true; false and {"not": {}}, recursively).
  bool is_always(const Json& s0) const {
    const Json s = normalize(s0);
    if (s.is_boolean()) return s.get<bool>();
    if (!s.is_object()) return false;
    for (auto& [k, v] : s.items())
      if (!(k == "not" && is_never(v))) return false;
    return true;
  }
  bool is_never(const Json& s0) const {
    const Json s = normalize(s0);
    if (s.is_boolean()) return !s.get<bool>();
    return s.is_object() && s.contains("not") && is_always(s["not"]);
  }

  // `not`: only what reduces to a type complement ({"not": {"type": ...}}), or to nothing
  // ({"not": false} and friends). Anything else would need a grammar complement: rejected.
  int convert_not(const Json& schema, const std::string& path) {
    const Json n = normalize(schema["not"]);
    Json rest = schema;
    rest.erase("not");
    if (is_never(n)) return convert(rest, path);
    if (is_always(n)) nothing(path, "schema that matches nothing ('not' of a schema matching everything)");
    auto only = [&](std::initializer_list<const char*> keys) {
      for (auto it = n.begin(); it != n.end(); ++it) {  // no structured binding: clang 14 cannot capture one
        const std::string& k = it.key();
        if (std::none_of(keys.begin(), keys.end(), [&](const char* x) { return k == x; })) return false;
      }
      return true;
    };
    if (only({"not"})) {  // not not X = X
      rest["allOf"] = Json::array({n["not"]});
      return convert(rest, path);
    }
    if (only({"required"}) && n["required"].is_array()) return not_required(rest, n["required"], path);
    if (only({"enum"}) || only({"const"})) return not_literals(rest, n.contains("const") ? Json::array({n["const"]}) : n["enum"], path);
    bool only_type = n.is_object() && n.contains("type") && only({"type", "nullable"});
    if (!only_type) {  // the complement spelled in supported keywords (negate), if it can be
      rest["allOf"] = Json::array({negate(n, path)});
      return convert(rest, path);
    }
    std::set<std::string> out;
    if (n["type"].is_string()) out.insert(n["type"].get<std::string>());
    else for (auto& x : n["type"]) out.insert(x.get<std::string>());
    if (n.value("nullable", false)) out.insert("null");
    std::vector<std::string> cur;
    if (!rest.contains("type")) cur = {"null", "boolean", "object", "array", "number", "string"};
    else if (rest["type"].is_string()) cur.push_back(rest["type"].get<std::string>());
    else for (auto& x : rest["type"]) cur.push_back(x.get<std::string>());
    if (rest.value("nullable", false)) cur.push_back("null");
    rest.erase("nullable");
    Json types = Json::array();
    for (const std::string& t : cur) {
      if (out.count(t) || (t == "integer" && out.count("number"))) continue;
      types.push_back(t == "number" && out.count("integer") ? kNonInteger : t);
    }
    if (types.empty()) nothing(path, "schema that matches nothing ('not' of every allowed type)");
    rest["type"] = types;
    return convert(rest, path);
  }

  // dependentSchemas {k: S}: k absent, or k present and S holds: anyOf [{rest, k forbidden},
  // allOf [rest, S, required k]] (for non-objects the first branch alone decides). One key at
  // a time, the others stay in rest.
  int dependent_schemas(const Json& schema, const std::string& path) {
    Json rest = schema;
    Json deps = rest["dependentSchemas"];
    if (deps.size() > 4) unsupported(path, "dependentSchemas with more than 4 keys (2^n branches)");
    rest.erase("dependentSchemas");
    for (auto& [k, v] : deps.items()) {
      if (is_always(v)) continue;
      Json later = deps;
      later.erase(k);
      if (!later.empty()) rest["dependentSchemas"] = later;
      Json alts = Json::array();
      Json absent = rest;  // where k is required, this leaves the non-objects (objects are dropped)
      absent["properties"][k] = false;
      alts.push_back(absent);
      if (!is_never(v)) alts.push_back(Json{{"allOf", Json::array({rest, v, Json{{"required", Json::array({k})}}})}});
      return convert(Json{{"anyOf", alts}}, path);
    }
    return convert(rest, path);
  }

  // A schema matching exactly the instances s does not (s normalized or not), in keywords the
  // converter supports: type / required / enum / const stay `not` (convert_not handles them),
  // numeric, length and count bounds flip (the other types satisfy a bound, so they drop out),
  // properties become "some key present with a value its schema rejects", anyOf / allOf swap,
  // several keywords (a conjunction) become the anyOf of their negations. Anything else (a
  // pattern, items, ...) needs a grammar complement: an error naming it.
  // anyOf of alts without those that match nothing (false when none is left).
  Json any_of(const Json& alts) const {
    Json kept = Json::array();
    for (const Json& a : alts) if (!is_never(a)) kept.push_back(a);
    return kept.empty() ? Json(false) : kept.size() == 1 ? kept[0] : Json{{"anyOf", kept}};
  }

  Json negate(const Json& s0, const std::string& path, int depth = 0) {
    if (depth > 16) unsupported(path, "'not' nested too deep");
    Json s = has_unevaluated(normalize(s0)) ? lower(s0, path) : normalize(s0);
    if (s.is_boolean()) return Json(!s.get<bool>());
    if (s.contains("$ref")) {
      if (s.size() > 1) unsupported(path, "'not' of $ref with sibling keywords");
      return negate(resolve_pointer(s["$ref"].get<std::string>(), path), path, depth + 1);
    }
    if (s.empty()) return Json(false);
    if (s.contains("additionalProperties")) {  // a declared key's value rejected, or an extra key's
      if (s.contains("patternProperties")) unsupported(path, "'not' of 'additionalProperties' with 'patternProperties'");
      Json names = Json::array(), alts = Json::array();
      if (s.contains("properties")) {
        for (auto& [name, sub] : s["properties"].items()) names.push_back(name);
        alts.push_back(negate(Json{{"properties", s["properties"]}}, path, depth + 1));
      }
      const Json bad = negate(s["additionalProperties"], path, depth + 1);
      if (!is_never(bad)) alts.push_back(Json{{"type", "object"}, {kSomeKey, Json::array({Json{{"not_in", names}, {"value", bad}}})}});
      for (auto& [k, v] : s.items())
        if (k != "properties" && k != "additionalProperties") alts.push_back(negate(Json{{k, v}}, path, depth + 1));
      return any_of(alts);
    }
    if (s.contains("if")) {  // (if and not then) or (not if and not else), or a sibling rejected
      Json rest = s, alts = Json::array();
      for (const char* k : {"if", "then", "else"}) rest.erase(k);
      const Json no_then = negate(s.value("then", Json(true)), path, depth + 1), no_else = negate(s.value("else", Json(true)), path, depth + 1);
      if (!is_never(no_then)) alts.push_back(Json{{"allOf", Json::array({s["if"], no_then})}});
      if (!is_never(no_else)) alts.push_back(Json{{"allOf", Json::array({negate(s["if"], path, depth + 1), no_else})}});
      if (!rest.empty()) alts.push_back(negate(rest, path, depth + 1));
      return any_of(alts);
    }
    if (s.size() > 1) {
      for (auto [a, b] : {std::pair{"prefixItems", "items"}, {"properties", "patternProperties"}, {"contains", "minContains"},
                          {"contains", "maxContains"}})
        if (s.contains(a) && s.contains(b)) unsupported(path, std::string("'not' of '") + a + "' with '" + b + "'");
      Json alts = Json::array();
      for (auto& [k, v] : s.items()) alts.push_back(negate(Json{{k, v}}, path, depth + 1));
      return any_of(alts);
    }
    const std::string k = s.begin().key();
    const Json& v = s.begin().value();
    if (k == "type" || k == "required" || k == "enum" || k == "const") return Json{{"not", s}};
    if (k == "not") return v;
    if (k == "anyOf" || k == "allOf") {
      Json parts = Json::array();
      for (const Json& x : v) parts.push_back(negate(x, path, depth + 1));
      return Json{{k == "anyOf" ? "allOf" : "anyOf", parts}};
    }
    if (k == "properties") {
      Json alts = Json::array();
      for (auto& [name, sub] : v.items()) {
        Json bad = negate(sub, path, depth + 1);
        if (is_never(bad)) continue;
        alts.push_back(Json{{"type", "object"}, {"required", Json::array({name})}, {"properties", Json{{name, bad}}}});
      }
      return alts.empty() ? Json(false) : Json{{"anyOf", alts}};
    }
    if (k == "oneOf") {  // none of the branches, or two of them (pairs that may overlap)
      Json none = Json::array(), alts = Json::array();
      for (const Json& x : v) none.push_back(negate(x, path, depth + 1));
      alts.push_back(Json{{"allOf", none}});
      auto resolve = [&](const std::string& ref) -> const Json& { return resolve_normalized(ref, path); };
      for (size_t i = 0; i < v.size(); ++i)
        for (size_t j = i + 1; j < v.size(); ++j)
          if (!disjoint_branches(normalize(v[i]), normalize(v[j]), resolve)) alts.push_back(Json{{"allOf", Json::array({v[i], v[j]})}});
      return Json{{"anyOf", alts}};
    }
    if (k == "dependentSchemas" || k == "dependentRequired") {  // a trigger present, its dependency broken
      Json alts = Json::array();
      for (auto& [key, dep] : v.items()) {
        const Json trigger{{"type", "object"}, {"required", Json::array({key})}};
        if (k == "dependentSchemas") {
          alts.push_back(Json{{"allOf", Json::array({trigger, negate(dep, path, depth + 1)})}});
        } else {
          for (const Json& d : dep) {
            Json t = trigger;
            t["properties"][d.get<std::string>()] = false;
            alts.push_back(t);
          }
        }
      }
      return alts.empty() ? Json(false) : Json{{"anyOf", alts}};
    }
    if (k == "multipleOf") return Json{{"type", "number"}, {kNotMultipleOf, Json::array({v})}};
    if (k == "patternProperties") {  // some key matching a pattern whose value it rejects: only where none can
      for (auto& [pattern, sub] : v.items())
        if (!is_never(negate(sub, path, depth + 1))) unsupported(path, "'not' of 'patternProperties' (a key matching '" + pattern + "' with a value its schema rejects)");
      return Json(false);
    }
    if (k == "propertyNames") return not_property_names(normalize(v), path);
    if (k == "contains") return Json{{"type", "array"}, {"items", negate(v, path, depth + 1)}};  // no item matches
    if (k == "prefixItems") {  // some item i its entry rejects (the array has at least i + 1)
      Json alts = Json::array(), prefix = Json::array();
      for (const Json& e : v) {
        Json p = prefix, bad = negate(e, path, depth + 1);
        p.push_back(bad);
        if (!is_never(bad)) alts.push_back(Json{{"type", "array"}, {"minItems", prefix.size() + 1}, {"prefixItems", p}});
        prefix.push_back(true);
      }
      return any_of(alts);
    }
    if (k == "items" && !v.is_array())  // some item its schema rejects
      return Json{{"type", "array"}, {"contains", negate(v, path, depth + 1)}};
    if (k == "pattern" || k == "format")  // strings the regex does not match
      return Json{{"type", "string"}, {kNotPatterns, Json::array({k == "pattern" ? v : Json(kFormats.at(v.get<std::string>()))})}};
    static const std::map<std::string, std::pair<std::string, std::string>> numeric = {  // -> (type, flipped keyword)
        {"minimum", {"number", "exclusiveMaximum"}}, {"exclusiveMinimum", {"number", "maximum"}},
        {"maximum", {"number", "exclusiveMinimum"}}, {"exclusiveMaximum", {"number", "minimum"}}};
    if (auto it = numeric.find(k); it != numeric.end()) return Json{{"type", it->second.first}, {it->second.second, v}};
    static const std::map<std::string, std::pair<std::string, std::string>> counts = {
        {"minLength", {"string", "maxLength"}}, {"maxLength", {"string", "minLength"}}, {"minItems", {"array", "maxItems"}},
        {"maxItems", {"array", "minItems"}}, {"minProperties", {"object", "maxProperties"}}, {"maxProperties", {"object", "minProperties"}}};
    if (auto it = counts.find(k); it != counts.end() && v.is_number()) {
      const long n = static_cast<long>(v.get<double>());
      const bool is_min = k.rfind("min", 0) == 0;
      if (is_min && n <= 0) return Json(false);
      return Json{{"type", it->second.first}, {it->second.second, is_min ? n - 1 : n + 1}};
    }
    unsupported(path, "'not' of '" + k + "' (its complement is not supported)");
  }

  // `not` of propertyNames P: an object with a key P rejects. P false: any key; P an enum (or
  // const): a key none of its strings; P the `not` of one: a key among its strings.
  Json not_property_names(const Json& pn, const std::string& path) {
    if (is_always(pn)) return Json(false);
    if (is_never(pn)) return Json{{"type", "object"}, {"minProperties", 1}};
    auto names = [](const Json& x) {
      Json out = Json::array();
      for (const Json& v : x.contains("const") ? Json::array({x["const"]}) : x["enum"]) if (v.is_string()) out.push_back(v);
      return out;
    };
    auto literals = [](const Json& x) { return x.is_object() && x.size() == 1 && (x.contains("enum") || x.contains("const")); };
    if (literals(pn)) return Json{{"type", "object"}, {kSomeKey, Json::array({Json{{"not_in", names(pn)}, {"value", true}}})}};
    if (pn.is_object() && pn.size() == 1 && pn.contains("not") && literals(normalize(pn["not"]))) {
      Json alts = Json::array();
      for (const Json& n : names(normalize(pn["not"]))) alts.push_back(Json{{"type", "object"}, {"required", Json::array({n})}});
      return alts.empty() ? Json(false) : Json{{"anyOf", alts}};
    }
    unsupported(path, "'not' of 'propertyNames' (only false, enum/const, or the 'not' of enum/const)");
  }

  // `not` of a single type / required keyword spelled positively: the other types, or an object
  // without one of the keys (`required` holds for non-objects, so they drop out).
  Json positive_not(const Json& n, const std::string& path) {
    if (n.contains("required")) {
      Json alts = Json::array();
      for (const Json& k : n["required"]) alts.push_back(Json{{"type", "object"}, {"properties", Json{{k.get<std::string>(), false}}}});
      return alts.empty() ? Json(false) : Json{{"anyOf", alts}};
    }
    if (!n.contains("type")) unsupported(path, "allOf with conflicting 'not'");
    const std::vector<std::string> out = types_of(n);
    auto has = [&](const char* t) { return std::find(out.begin(), out.end(), t) != out.end(); };
    Json types = Json::array();
    for (const char* t : {"null", "boolean", "object", "array", "string"})
      if (!has(t)) types.push_back(t);
    if (!has("number")) types.push_back(has("integer") ? kNonInteger : "number");
    return Json{{"type", types}};
  }

  std::vector<std::string> types_of(const Json& s) const {
    std::vector<std::string> t;
    if (!s.contains("type")) t = {"null", "boolean", "object", "array", "number", "string"};
    else if (s["type"].is_string()) t.push_back(s["type"].get<std::string>());
    else for (auto& x : s["type"]) t.push_back(x.get<std::string>());
    if (s.value("nullable", false)) t.push_back("null");
    return t;
  }

  // {"not": {"required": K}}: an object without one of K (`required` holds for non-objects, so
  // its negation rejects them): anyOf, per key k of K, the object with k forbidden.
  int not_required(Json rest, const Json& keys, const std::string& path) {
    Json alts = Json::array();
    std::vector<std::string> types = types_of(rest);
    rest.erase("nullable");
    const Json req = rest.value("required", Json::array());
    if (std::find(types.begin(), types.end(), "object") != types.end())
      for (const Json& k : keys) {
        if (std::find(req.begin(), req.end(), k) != req.end()) continue;  // required here: never absent
        Json s = rest;
        s["type"] = "object";
        s["properties"][k.get<std::string>()] = false;
        alts.push_back(s);
      }
    if (alts.empty()) nothing(path, "schema that matches nothing ('not' of 'required' keys the schema requires)");
    return convert(Json{{"anyOf", alts}}, path);
  }

  // {"not": {"enum": V}}: null and booleans drop out of their types, strings become "a string
  // none of V" (key_not_in's trie), numbers cut the range into the open intervals between them
  // (by value, so 2.0 goes with 2); objects or arrays in V are unsupported where the schema
  // allows them.
  // A numeric schema s without the values `nums`: the anyOf of s in each open interval between
  // them (an empty one matches nothing and is dropped).
  Json excluding_numbers(const Json& s, std::vector<Json> nums) const {
    std::sort(nums.begin(), nums.end(), [](const Json& a, const Json& b) { return a.get<double>() < b.get<double>(); });
    nums.erase(std::unique(nums.begin(), nums.end(), [](const Json& a, const Json& b) { return a.get<double>() == b.get<double>(); }),
               nums.end());
    Json alts = Json::array();
    for (size_t i = 0; i <= nums.size(); ++i) {
      Json interval = Json::object();
      if (i > 0) interval["exclusiveMinimum"] = nums[i - 1];
      if (i < nums.size()) interval["exclusiveMaximum"] = nums[i];
      alts.push_back(Json{{"allOf", Json::array({s, interval})}});
    }
    return Json{{"anyOf", alts}};
  }

  int not_literals(const Json& rest, const Json& values, const std::string& path) {
    if (rest.contains("enum") || rest.contains("const")) {  // a finite set: drop the values
      Json s = rest, keep = Json::array();
      for (const Json& v : rest.contains("const") ? Json::array({rest["const"]}) : rest["enum"])
        if (std::find(values.begin(), values.end(), v) == values.end()) keep.push_back(v);
      s.erase("const");
      s["enum"] = keep;
      if (keep.empty()) nothing(path, "schema that matches nothing ('not' of every allowed value)");
      return convert(s, path);
    }
    std::vector<std::string> types = types_of(rest), strs;
    std::vector<Json> nums;
    bool no_null = false, no_true = false, no_false = false;
    auto allows = [&](const char* t) { return std::find(types.begin(), types.end(), t) != types.end(); };
    for (const Json& v : values) {
      if (v.is_string()) strs.push_back(Json(v).dump().substr(1, Json(v).dump().size() - 2));
      else if (v.is_null()) no_null = true;
      else if (v.is_boolean()) (v.get<bool>() ? no_true : no_false) = true;
      else if (v.is_number()) nums.push_back(v);
      else if (allows(v.is_object() ? "object" : "array"))
        unsupported(path, "'not' of enum/const with an object or array the schema allows");
    }
    std::vector<int> alts;
    Json base = rest;
    base.erase("nullable");
    for (const std::string& t : types) {
      if (t == "null") {
        if (!no_null) alts.push_back(g_.lit("null"));
      } else if (t == "boolean") {
        if (!no_true) alts.push_back(g_.lit("true"));
        if (!no_false) alts.push_back(g_.lit("false"));
      } else if (t == "string" && !strs.empty()) {
        for (const std::string k : {"minLength", "maxLength", "pattern", "format", kAlsoPatterns.c_str(), kNotPatterns.c_str()})
          if (rest.contains(k)) unsupported(path, "'not' of enum/const strings together with '" + k + "'");
        std::sort(strs.begin(), strs.end());
        strs.erase(std::unique(strs.begin(), strs.end()), strs.end());
        alts.push_back(key_not_in(strs));
      } else if ((t == "integer" || t == "number") && !nums.empty()) {
        Json s = base;
        s["type"] = t;
        const int e = convert_or_none(excluding_numbers(s, nums), path);
        if (e >= 0) alts.push_back(e);
      } else {
        Json s = base;
        s["type"] = t;
        const int e = convert_or_none(s, path);  // a type none of whose values fits is dropped
        if (e >= 0) alts.push_back(e);
      }
    }
    if (alts.empty()) nothing(path, "schema that matches nothing ('not' of every allowed value)");
    return g_.alt(alts);
  }

  // A number that is not an integer: a nonzero fractional digit, no exponent (a safe subset:
  // 1.5e0 is such a number too).
  int non_integer(const Json& s, const std::string& path) {
    // Integral moduli: no non-integer is a multiple of one (and each is a non-multiple).
    if (s.contains("multipleOf") && integral(s["multipleOf"])) nothing(path, "multipleOf on a non-integer number (matches nothing)");
    for (const char* k : {"multipleOf"})
      if (s.contains(k)) unsupported(path, std::string("keyword '") + k + "' on a non-integer number ('not' integer)");
    if (s.contains(kNotMultipleOf))
      for (const Json& m : s[kNotMultipleOf])
        if (!integral(m)) unsupported(path, "'not' of a fractional multipleOf on a non-integer number");
    std::optional<Bound> lo, hi;
    for (auto [key, excl, b] : {std::tuple{"minimum", false, &lo}, {"exclusiveMinimum", true, &lo}, {"maximum", false, &hi}, {"exclusiveMaximum", true, &hi}})
      if (s.contains(key)) {
        if (*b) unsupported(path, "both inclusive and exclusive bounds on a non-integer number ('not' integer)");
        *b = Bound{s[key].dump(), excl};
      }
    if (lo || hi) {
      const ByteDfa d = non_integer_dfa(lo, hi);
      if (d.size() == 0) nothing(path, "non-integer number in an empty range (matches nothing)");
      return g_.dfa(d);
    }
    int d = g_.cls({{'0', '9'}});
    return g_.seq({g_.opt(g_.lit("-")), g_.alt({g_.lit("0"), g_.seq({g_.cls({{'1', '9'}}), g_.star(d)})}), g_.lit("."),
                   g_.star(d), g_.cls({{'1', '9'}}), g_.star(d)});
  }

  // Whether v is of one of the types (before draft 06 a number with a fraction part, 1.0 too, is
  // not an integer).
  bool has_type(const Json& v, const std::vector<std::string>& types) const {
    const bool integral = v.is_number_integer() ||
                          (draft_ > 4 && v.is_number_float() && v.get<double>() == std::floor(v.get<double>()));
    for (const std::string& t : types) {
      if (t == kNonInteger && v.is_number() && !integral) return true;
      if ((t == "null" && v.is_null()) || (t == "boolean" && v.is_boolean()) || (t == "string" && v.is_string()) ||
          (t == "object" && v.is_object()) || (t == "array" && v.is_array()) || (t == "number" && v.is_number()) ||
          (t == "integer" && integral))
        return true;
    }
    return false;
  }

  // The values `schema` accepts: each one's compact JSON text parsed with the schema's grammar.
  // Under JSON Schema's own semantics even in the strict mode: every key of a literal is named by
  // the schema (its enum/const), so no key of it is one the strict mode keeps out.
  std::vector<Json> values_matching(const std::vector<Json>& values, const Json& schema, const std::string& path) {
    std::shared_ptr<const Automaton>& cached = value_checkers_[schema.dump()];  // the same one recurs (a $ref'd 'not')
    if (!cached) {
      SchemaArgs o = opts_;
      o.whitespace = Whitespace::kCompact;
      o.strict_additional_properties = false;
      Converter sub(root_, o);
      sub.depth_ = depth_;  // bounds nesting across converters too
      try {
        cached = std::make_shared<const Automaton>(build_automaton(sub.run(schema, path)));
      } catch (...) {
        value_checkers_.erase(schema.dump());
        throw;
      }
    }
    const Automaton& a = *cached;
    std::vector<Json> out;
    for (const Json& v : values) {
      EarleyParser p(&a);
      p.reset(a.rule_start[a.root_rule]);
      bool ok = true;
      for (unsigned char c : v.dump()) if (!(ok = p.advance(c))) break;
      if (ok && p.root_done()) out.push_back(v);
    }
    return out;
  }

  // enum / const; other keywords beside them keep the values they accept.
  int literals(const Json& schema, const std::vector<std::string>& types, const std::string& path) {
    std::vector<Json> values;
    if (schema.contains("const")) values.push_back(schema["const"]);
    else for (auto& v : schema["enum"]) values.push_back(v);
    if (schema.contains("const") && schema.contains("enum") &&
        std::find(schema["enum"].begin(), schema["enum"].end(), schema["const"]) == schema["enum"].end())
      values.clear();
    Json rest = schema;
    for (const char* k : {"enum", "const", "type", "nullable"}) rest.erase(k);
    if (!rest.empty()) values = values_matching(values, rest, path);
    std::vector<int> alts;
    std::set<std::string> seen;
    for (const Json& v : values) {
      if (v.is_object() || v.is_array()) {  // members in any order, numbers in either spelling
        if (has_type(v, types)) alts.push_back(literal_container(v, path));
        continue;
      }
      // 1.0 and 1 are the same JSON-schema value: either spelling whose own type is allowed (under
      // draft 04 with type integer, 1 only).
      std::vector<std::pair<std::string, Json>> forms{{v.dump(-1, ' ', false, Json::error_handler_t::strict), v}};
      if (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()) && std::fabs(v.get<double>()) < 1e15)
        forms.emplace_back(std::to_string(static_cast<long long>(v.get<double>())), Json(static_cast<long long>(v.get<double>())));
      if (v.is_number_integer()) forms.emplace_back(v.dump() + ".0", Json(v.get<double>()));
      for (auto& [f, x] : forms)
        if (has_type(x, types) && seen.insert(f).second) alts.push_back(g_.lit(f));
    }
    if (alts.empty()) nothing(path, "enum/const with no value of the allowed type (matches nothing)");
    return g_.alt(alts);
  }

  int literal_container(const Json& v, const std::string& path) {
    if (v.is_object()) {
      Json s{{"properties", Json::object()}, {"required", Json::array()}, {"additionalProperties", false}};
      for (auto& [k, x] : v.items()) {
        s["properties"][k] = Json{{"const", x}};
        s["required"].push_back(k);
      }
      return object_schema(s, path);
    }
    std::vector<int> parts{g_.lit("["), ws()};
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) parts.insert(parts.end(), {ws(), g_.lit(","), ws()});
      parts.push_back(convert(Json{{"const", v[i]}}, path + "/" + std::to_string(i)));
    }
    parts.insert(parts.end(), {ws(), g_.lit("]")});
    return g_.seq(parts);
  }

  int string_schema(const Json& s, const std::string& path) {
    int min = s.value("minLength", 0);
    int max = s.contains("maxLength") ? s["maxLength"].get<int>() : kUnbounded;
    if (min < 0 || (max != kUnbounded && max < min)) nothing(path, "minLength/maxLength bounds (no string fits)");
    // Length bounds are counted by the parser (grammar.h CountedRule): no unrolling, so any
    // bound compiles in the same time.
    std::vector<std::string> yes, no;  // regexes that must match / must not
    if (s.contains("pattern")) yes.push_back(s["pattern"].get<std::string>());
    if (s.contains("format")) yes.push_back(kFormats.at(s["format"].get<std::string>()));
    for (const Json& p : s.value(kAlsoPatterns, Json::array())) yes.push_back(p.get<std::string>());
    for (const Json& p : s.value(kNotPatterns, Json::array())) no.push_back(p.get<std::string>());
    if (!yes.empty() || !no.empty()) {
      const std::string name = "pattern" + std::to_string(g_.num_rules());
      int r = -1;
      if (yes.size() == 1 && no.empty()) {
        r = add_regex_rule(g_, name, yes[0], true);
      } else {
        r = g_.declare_rule(name);
        g_.define_rule(r, g_.dfa(regex_combination(yes, no, path)));
      }
      if (s.value("format", "") == "hostname" && (max == kUnbounded || max > 253)) max = 253;  // RFC 1123 length
      if (min != 0 || max != kUnbounded) g_.add_counted({r, min, max});
      return g_.seq({g_.lit("\""), g_.ref(r), g_.lit("\"")});
    }
    if (min == 0 && max == kUnbounded) return string_expr();
    auto [it, fresh] = counted_strings_.emplace(std::pair{min, max}, -1);
    if (fresh) {
      it->second = g_.declare_rule("chars" + std::to_string(g_.num_rules()));
      g_.define_rule(it->second, g_.star(json_char()));
      g_.add_counted({it->second, min, max});
    }
    return g_.seq({g_.lit("\""), g_.ref(it->second), g_.lit("\"")});
  }

  // The contents matching every regex of `yes` and none of `no`, as one DFA.
  ByteDfa regex_combination(const std::vector<std::string>& yes, const std::vector<std::string>& no, const std::string& path) {
    charge(kProductWork, path);
    std::vector<ByteDfa> dfas{content_dfa()};
    for (const auto* list : {&yes, &no})
      for (const std::string& re : *list) dfas.push_back(pattern_dfa(re));
    std::vector<const ByteDfa*> parts;
    for (const ByteDfa& d : dfas) parts.push_back(&d);
    const ProductDfa p = product_dfa(parts, kMaxDfaStates, "combination of patterns");
    const uint64_t want = ((1ull << yes.size()) - 1) << 1 | 1, mask = (1ull << parts.size()) - 1;
    ByteDfa d = select_dfa(p, [&](uint64_t acc) { return (acc & mask) == want; });
    if (d.size() == 0) nothing(path, "combination of patterns that no string matches");
    return d;
  }

  // The distinct elements of a JSON array, as sorted text (the key of a set of values).
  static std::string sorted_set_text(const Json& a) {
    std::vector<std::string> items;
    for (const Json& x : a) items.push_back(x.dump());
    std::sort(items.begin(), items.end());
    items.erase(std::unique(items.begin(), items.end()), items.end());
    std::string out;
    for (const std::string& x : items) out += x + ",";
    return out;
  }

  // Numbers of s's numeric keywords. The same keywords recur in many branches (the products of
  // an allOf of oneOfs: allone1 built one 870-state product 64 times, finding it empty), so a
  // result that declares no rule (a plain expression, DFAs included) or matches nothing is kept
  // by those keywords' text.
  int numeric(const Json& s, const std::string& path, bool integer) {
    std::string key(1, integer ? 'i' : 'n');
    for (const std::string& k : {std::string("minimum"), std::string("exclusiveMinimum"), std::string("maximum"),
                                 std::string("exclusiveMaximum"), std::string("multipleOf"), kNotMultipleOf})
      if (s.contains(k)) key += k + "=" + (k == kNotMultipleOf ? sorted_set_text(s[k]) : s[k].dump()) + ";";
    if (auto it = numeric_exprs_.find(key); it != numeric_exprs_.end()) {
      if (it->second.expr < 0) nothing(path, it->second.nothing);
      return it->second.expr;
    }
    const int rules = g_.num_rules();
    int e;
    try {
      e = numeric_uncached(s, path, integer);
    } catch (const NothingMatches& x) {
      const std::string prefix = "json schema: unsupported ", suffix = " at " + path, what = x.what();
      if (g_.num_rules() == rules && what.starts_with(prefix) && what.ends_with(suffix))
        numeric_exprs_.emplace(std::move(key), NumericResult{-1, rules, what.substr(prefix.size(), what.size() - prefix.size() - suffix.size())});
      throw;
    }
    if (g_.num_rules() == rules) numeric_exprs_.emplace(std::move(key), NumericResult{e, rules, {}});
    return e;
  }

  int numeric_uncached(const Json& s, const std::string& path, bool integer) {
    std::optional<Bound> lo, hi;
    auto bound = [&](const char* key, bool excl, std::optional<Bound>& b) {
      if (!s.contains(key)) return;
      if (!s[key].is_number()) fail("json schema: '", key, "' must be a number at ", path);
      Bound nb{s[key].dump(), excl};
      if (!b) { b = nb; return; }
      // Both inclusive and exclusive given: keep the tighter one.
      double a = std::stod(b->text), c = std::stod(nb.text);
      bool tighter = std::string(key).find("inimum") != std::string::npos ? (c > a || (c == a && excl)) : (c < a || (c == a && excl));
      if (tighter) b = nb;
    };
    bound("minimum", false, lo);
    bound("exclusiveMinimum", true, lo);
    bound("maximum", false, hi);
    bound("exclusiveMaximum", true, hi);
    if (lo && hi) {  // an empty range matches nothing (a dropped branch, not an error)
      const double a = std::stod(lo->text), b = std::stod(hi->text);
      const bool empty = integer ? (lo->exclusive ? std::floor(a) + 1 : std::ceil(a)) > (hi->exclusive ? std::ceil(b) - 1 : std::floor(b))
                                 : a > b || (a == b && (lo->exclusive || hi->exclusive));
      if (empty) nothing(path, "empty numeric range (matches nothing)");
    }
    if (s.contains(kNotMultipleOf)) return not_multiple(s, integer, lo, hi, path);
    if (s.contains("multipleOf") && !integer) {
      if (const int j = decimal_places(s["multipleOf"]); j > 0) {  // 10^-j: at most j fractional digits
        const auto places = [j](Grammar& g) {
          const int d = g.cls({{'0', '9'}});
          const int whole = g.seq({g.opt(g.lit("-")), g.alt({g.lit("0"), g.seq({g.cls({{'1', '9'}}), g.star(d)})})});
          return g.seq({whole, g.opt(g.seq({g.lit("."), g.rep(d, 1, j), g.star(g.lit("0"))}))});
        };
        if (!lo && !hi) return places(g_);
        Grammar both;  // the range's DFA times the digits' (numbers without exponent: a safe subset)
        const int r = both.declare_rule("range"), p = both.declare_rule("places");
        both.define_rule(r, number_in_range(both, lo, hi));
        both.define_rule(p, places(both));
        both.set_root(r);
        const ByteDfa in_range = rule_dfa(both, r), digits = rule_dfa(both, p);
        const ProductDfa prod = product_dfa({&in_range, &digits}, kMaxDfaStates, "multipleOf together with minimum/maximum");
        const ByteDfa d = select_dfa(prod, [](uint64_t acc) { return acc == 3; });
        if (d.size() == 0) nothing(path, "multipleOf with no multiple between minimum and maximum (matches nothing)");
        return g_.dfa(d);
      }
    }
    if (auto [digits, exp] = s.contains("multipleOf") ? decimal_digits(s["multipleOf"], path) : std::pair{std::string(), 0L};
        !integer && exp < 0) {  // a fractional multipleOf on numbers: 1.5, 0.25
      const long a = digits.size() <= 7 ? std::stol(digits) : 0;
      if (a == 0 || static_cast<size_t>(a) * (2 - exp) + 3 > kMaxDfaStates)
        unsupported(path, "multipleOf " + s["multipleOf"].dump() + " on numbers (its automaton passes 4096 states)");
      Grammar range;
      const int rule = range.declare_rule("range");
      range.define_rule(rule, lo || hi ? number_in_range(range, lo, hi) : range.seq({range.opt(range.lit("-")), range.plus(range.cls({{'0', '9'}})), range.opt(range.seq({range.lit("."), range.plus(range.cls({{'0', '9'}}))}))}));
      range.set_root(rule);
      const ByteDfa in_range = rule_dfa(range, rule), multiple = decimal_multiple_dfa(a, static_cast<int>(-exp));
      const ByteDfa d = select_dfa(product_dfa({&in_range, &multiple}, kMaxDfaStates, "multipleOf together with minimum/maximum"),
                                   [](uint64_t acc) { return acc == 3; });
      if (d.size() == 0) nothing(path, "multipleOf with no multiple between minimum and maximum (matches nothing)");
      return g_.dfa(d);
    }
    if (s.contains("multipleOf")) {
      const long n = integer_modulus(s["multipleOf"], integer, path);
      if (n > 1 || !integer) {
        if (!lo && !hi) return g_.seq({multiple_of(n), zero_fraction(integer)});
        // With bounds: the range's DFA times the remainder automaton's.
        Grammar range;
        const int body = integer ? integer_in_range(range, lo, hi) : number_in_range(range, lo, hi);
        const int rule = range.declare_rule("range");
        range.define_rule(rule, body);
        range.set_root(rule);
        const ByteDfa in_range = rule_dfa(range, rule), multiple = multiple_dfa(n);
        const ProductDfa both = product_dfa({&in_range, &multiple}, kMaxDfaStates, "multipleOf together with minimum/maximum");
        const ByteDfa d = select_dfa(both, [](uint64_t acc) { return acc == 3; });
        if (d.size() == 0) nothing(path, "multipleOf with no multiple between minimum and maximum (matches nothing)");
        return g_.seq({g_.dfa(d), zero_fraction(integer)});
      }
    }
    if (!lo && !hi) return integer ? integer_expr() : number_expr();
    return integer ? g_.seq({integer_in_range(g_, lo, hi), zero_fraction()}) : number_in_range(g_, lo, hi);
  }

  // j where multipleOf is 10^-j (0.1, 0.01, 1e-3, ... up to 10^-12), else 0: its multiples are
  // the numbers with at most j fractional digits.
  static int decimal_places(const Json& m) {
    if (!m.is_number() || m.get<double>() <= 0 || m.get<double>() >= 1) return 0;
    for (int j = 1; j <= 12; ++j)
      if (Json::parse("1e-" + std::to_string(j)).get<double>() == m.get<double>()) return j;
    return 0;
  }

  // m = digits * 10^exp, the digits without leading zeros, and without trailing ones when exp < 0.
  static std::pair<std::string, long> decimal_digits(const Json& m, const std::string& path) {
    if (!m.is_number() || m.get<double>() <= 0) fail("json schema: 'multipleOf' must be a positive number at ", path);
    std::string t = m.dump();
    long exp = 0;
    if (size_t e = t.find_first_of("eE"); e != std::string::npos) {
      exp = std::stol(t.substr(e + 1));
      t = t.substr(0, e);
    }
    std::string digits;
    for (char c : t) {
      if (c == '.') exp -= static_cast<long>(t.size() - t.find('.') - 1);
      else digits += c;
    }
    while (exp < 0 && digits.size() > 1 && digits.back() == '0') { digits.pop_back(); ++exp; }
    digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size() - 1));
    return {digits, exp};
  }

  // Numbers (no exponent: a safe subset) that are multiples of m = a / 10^j, i.e. x * 10^j is an
  // integer divisible by a: at most j fractional digits (then zeros), and the digits read with j
  // places a multiple of a. States: start, '-', a lone 0, the integer part's remainders, then
  // (remainder, fractional digits read) for 0..j digits. Trimmed (some remainders cannot end).
  static ByteDfa decimal_multiple_dfa(long a, int j) {
    const uint32_t frac0 = static_cast<uint32_t>(3 + a);
    auto F = [&](long r, int p) { return static_cast<uint32_t>(frac0 + p * a + r); };
    auto ends = [&](long r, int places) {  // r * 10^places divisible by a
      for (int i = 0; i < places; ++i) r = r * 10 % a;
      return r % a == 0;
    };
    ByteDfa d;
    d.next.assign(frac0 + static_cast<size_t>(a) * (j + 1), {});
    for (auto& row : d.next) row.fill(ByteDfa::kNone);
    d.accepting.assign(d.next.size(), 0);
    d.next[0]['-'] = 1;
    for (uint32_t from : {0u, 1u}) {
      d.next[from]['0'] = 2;
      for (int c = 1; c <= 9; ++c) d.next[from]['0' + c] = static_cast<uint32_t>(3 + c % a);
    }
    d.accepting[2] = 1;
    d.next[2]['.'] = F(0, 0);
    for (long r = 0; r < a; ++r) {
      d.accepting[3 + r] = ends(r, j);
      d.next[3 + r]['.'] = F(r, 0);
      for (int c = 0; c <= 9; ++c) d.next[3 + r]['0' + c] = static_cast<uint32_t>(3 + (10 * r + c) % a);
      for (int p = 0; p < j; ++p)
        for (int c = 0; c <= 9; ++c) d.next[F(r, p)]['0' + c] = F((10 * r + c) % a, p + 1);
      for (int p = 1; p <= j; ++p) d.accepting[F(r, p)] = ends(r, j - p);
      d.next[F(r, j)]['0'] = F(r, j);
    }
    return d;
  }

  // multipleOf m on integers: k is a multiple of m = a / 10^j iff a / gcd(a, 10^j) divides k.
  // Returns that integer modulus; numbers (not only integers) need m itself integral (their
  // multiples are then integers, written without exponent: a safe subset).
  long integer_modulus(const Json& m, bool integer, const std::string& path) {
    auto [digits, exp] = decimal_digits(m, path);
    const long kMax = 1000;
    if (digits.size() > 7 || exp > 3) unsupported(path, "multipleOf " + m.dump() + " (integer moduli up to 1000 only)");
    long a = std::stol(digits);
    for (; exp > 0; --exp) a *= 10;
    if (exp < 0 && !integer) unsupported(path, "multipleOf " + m.dump() + " on numbers (only integral multipleOf, or type integer)");
    for (long j = -exp; j > 0; --j) {  // divide out the 2s and 5s that 10^j shares with a
      if (a % 2 == 0) a /= 2;
      if (a % 5 == 0) a /= 5;
    }
    if (a > kMax) unsupported(path, "multipleOf " + m.dump() + " (integer moduli up to 1000 only)");
    return a;
  }

  // Numbers that are multiples of multipleOf (when given) and of none of kNotMultipleOf's moduli:
  // integers by the remainder automaton modulo the lcm (times the range's DFA); for `number`
  // without multipleOf also the non-integers in range (they are multiples of no integer).
  int not_multiple(const Json& s, bool integer, const std::optional<Bound>& lo, const std::optional<Bound>& hi, const std::string& path) {
    const long n0 = s.contains("multipleOf") ? integer_modulus(s["multipleOf"], integer, path) : 1;
    std::vector<long> all, ks;
    for (const Json& m : s[kNotMultipleOf]) all.push_back(integer_modulus(m, integer, path));
    // A modulus that divides multipleOf's leaves nothing; one that another divides adds nothing
    // (merged allOfs repeat them: [5,11,7,7,10] is [5,7,11]).
    for (long k : all)
      if (n0 % k == 0) nothing(path, "number that is no multiple of 'not' multipleOf in range (matches nothing)");
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
    for (long k : all)
      if (std::none_of(ks.begin(), ks.end(), [&](long d) { return k % d == 0; })) ks.push_back(k);
    long l = n0;
    for (long k : ks) {
      l = std::lcm(l, k);
      if (l > static_cast<long>(kMaxDfaStates)) unsupported(path, "'not' of multipleOf (the moduli's lcm passes 4096)");
    }
    const ByteDfa rem = multiple_dfa(l, [&](long r) {
      return r % n0 == 0 && std::none_of(ks.begin(), ks.end(), [&](long k) { return r % k == 0; });
    });
    std::vector<int> alts;
    Grammar range;
    const int rule = range.declare_rule("range");
    range.define_rule(rule, lo || hi ? integer_in_range(range, lo, hi) : range.seq({range.opt(range.lit("-")), range.plus(range.cls({{'0', '9'}}))}));
    range.set_root(rule);
    const ByteDfa in_range = rule_dfa(range, rule);
    const ByteDfa ints = select_dfa(product_dfa({&in_range, &rem}, kMaxDfaStates, "'not' of multipleOf with minimum/maximum"),
                                    [](uint64_t acc) { return acc == 3; });
    if (ints.size() > 0) alts.push_back(g_.seq({g_.dfa(ints), zero_fraction(integer)}));
    if (!integer && !s.contains("multipleOf")) {
      const ByteDfa frac = non_integer_dfa(lo, hi);
      if (frac.size() > 0) alts.push_back(g_.dfa(frac));
    }
    if (alts.empty()) nothing(path, "number that is no multiple of 'not' multipleOf in range (matches nothing)");
    return g_.alt(alts);
  }

  // Non-integers within the bounds: a nonzero fractional digit, no exponent (a safe subset).
  static ByteDfa non_integer_dfa(const std::optional<Bound>& lo, const std::optional<Bound>& hi) {
    Grammar g;
    const int range = g.declare_rule("range"), frac = g.declare_rule("frac");
    int d = g.cls({{'0', '9'}});
    g.define_rule(range, lo || hi ? number_in_range(g, lo, hi) : g.seq({g.opt(g.lit("-")), g.plus(d), g.opt(g.seq({g.lit("."), g.plus(d)}))}));
    g.define_rule(frac, g.seq({g.opt(g.lit("-")), g.alt({g.lit("0"), g.seq({g.cls({{'1', '9'}}), g.star(d)})}), g.lit("."),
                               g.star(d), g.cls({{'1', '9'}}), g.star(d)}));
    g.set_root(range);
    const ByteDfa a = rule_dfa(g, range), b = rule_dfa(g, frac);
    return select_dfa(product_dfa({&a, &b}, kMaxDfaStates, "a non-integer number with minimum/maximum"), [](uint64_t acc) { return acc == 3; });
  }

  // The same language as multiple_of(n), as a DFA: start, after '-', after a lone 0, remainders;
  // `accept` picks the remainders that end a number (0 for multiples of n).
  static ByteDfa multiple_dfa(long n, const std::function<bool(long)>& accept = [](long r) { return r == 0; }) {
    ByteDfa d;
    d.next.assign(3 + n, {});
    for (auto& row : d.next) row.fill(ByteDfa::kNone);
    d.accepting.assign(3 + n, 0);
    d.accepting[2] = accept(0);
    for (long r = 0; r < n; ++r) d.accepting[3 + r] = accept(r);
    d.next[0]['-'] = 1;
    for (uint32_t from : {0u, 1u}) {
      d.next[from]['0'] = 2;
      for (int c = 1; c <= 9; ++c) d.next[from]['0' + c] = static_cast<uint32_t>(3 + c % n);
    }
    for (long r = 0; r < n; ++r)
      for (int c = 0; c <= 9; ++c) d.next[3 + r]['0' + c] = static_cast<uint32_t>(3 + (10 * r + c) % n);
    return d;
  }

  // Integers divisible by n (no fraction): a digit automaton over the remainder, one rule each.
  int multiple_of(long n) {
    if (n == 1) return g_.seq({g_.opt(g_.lit("-")), g_.alt({g_.lit("0"), g_.seq({g_.cls({{'1', '9'}}), g_.star(g_.cls({{'0', '9'}}))})})});
    const int base = g_.num_rules();
    for (long r = 0; r < n; ++r) g_.declare_rule("mod" + std::to_string(n) + "_" + std::to_string(base) + "_" + std::to_string(r));
    auto digit_alts = [&](long r, char from) {
      std::map<long, CodepointRanges> by_next;
      for (char d = from; d <= '9'; ++d) by_next[(10 * r + (d - '0')) % n].push_back({uint32_t(d), uint32_t(d)});
      std::vector<int> alts;
      for (auto& [next, ranges] : by_next) alts.push_back(g_.seq({g_.cls(ranges), g_.ref(base + static_cast<int>(next))}));
      return alts;
    };
    for (long r = 0; r < n; ++r) {
      std::vector<int> alts = digit_alts(r, '0');
      if (r == 0) alts.push_back(g_.empty());
      g_.define_rule(base + static_cast<int>(r), g_.alt(alts));
    }
    std::vector<int> first = digit_alts(0, '1');
    first.push_back(g_.lit("0"));
    return g_.seq({g_.opt(g_.lit("-")), g_.alt(first)});
  }

  // dependentRequired k -> [.., d, ..] where d cannot appear (schema false, or undeclared with
  // no extra keys): k cannot appear either. Repeated until nothing changes.
  Json forbid_unsatisfiable_triggers(Json s) const {
    if (!s.contains("dependentRequired")) return s;
    const bool no_extra = s.contains("additionalProperties") ? is_never(s["additionalProperties"]) : opts_.strict_additional_properties;
    auto absent = [&](const std::string& k) {
      if (s.contains("properties") && s["properties"].contains(k)) return is_never(s["properties"][k]);
      return no_extra && !s.contains("patternProperties");
    };
    for (bool changed = true; changed;) {
      changed = false;
      for (auto& [k, deps] : s["dependentRequired"].items()) {
        if (absent(k) || !deps.is_array()) continue;
        for (const Json& d : deps)
          if (d.is_string() && absent(d.get<std::string>())) {
            s["properties"][k] = false;
            changed = true;
            break;
          }
        if (changed) break;  // s["properties"] may have moved
      }
    }
    return s;
  }

  // Witnesses less those another implies: any value (true) under a key none of names N, where
  // another's key is none of a superset of N (`not` of two unevaluatedProperties cases).
  static Json implied_witnesses_dropped(const Json& ws) {
    auto names = [](const Json& w) {
      std::set<std::string> n;
      for (const Json& x : w["not_in"]) n.insert(x.get<std::string>());
      return n;
    };
    Json kept = Json::array();
    for (size_t i = 0; i < ws.size(); ++i) {
      bool implied = false;
      for (size_t j = 0; j < ws.size() && !implied; ++j) {
        if (j == i || !(ws[i]["value"] == Json(true) || ws[i] == ws[j])) continue;
        const std::set<std::string> a = names(ws[i]), b = names(ws[j]);
        implied = std::includes(b.begin(), b.end(), a.begin(), a.end()) && (ws[i] != ws[j] || j < i);
      }
      if (!implied) kept.push_back(ws[i]);
    }
    return kept;
  }

  // An object with witnesses (kSomeKey): the anyOf of "declared key k present, its value also
  // matching the witness's" for each declared k the witness may name, and "one more extra
  // member valued by additionalProperties and the witness" (a required member of the perm rule).
  int some_key(const Json& s, const std::string& path) {
    Json rest = s, witnesses = implied_witnesses_dropped(s[kSomeKey]);
    rest.erase(kSomeKey);
    const Json w = witnesses[0];
    witnesses.erase(0);
    if (!witnesses.empty()) rest[kSomeKey] = witnesses;
    if (s.contains("patternProperties") || s.contains("propertyNames"))
      unsupported(path, "'not' of 'additionalProperties' next to patternProperties/propertyNames");
    std::set<std::string> not_in, declared;
    for (const Json& n : w["not_in"]) not_in.insert(n.get<std::string>());
    if (s.contains("properties"))
      for (auto& [k, v] : s["properties"].items()) if (!is_never(v)) declared.insert(k);
    if (s.contains("required")) for (const Json& r : s["required"]) declared.insert(r.get<std::string>());
    const Json ap = s.contains("additionalProperties") ? s["additionalProperties"] : Json(!opts_.strict_additional_properties);
    std::vector<int> alts;
    auto attempt = [&](auto&& make) {
      const Mark m = mark();
      try {
        alts.push_back(make());
      } catch (const NothingMatches&) {
        rollback(m);
      }
    };
    for (const std::string& k : declared) {
      if (not_in.count(k)) continue;
      attempt([&] {
        Json t = rest;
        const Json own = s.contains("properties") && s["properties"].contains(k) ? s["properties"][k] : s.contains("additionalProperties") ? ap : Json(true);
        t["properties"][k] = Json{{"allOf", Json::array({own, w["value"]})}};
        if (std::find(t["required"].begin(), t["required"].end(), Json(k)) == t["required"].end()) t["required"].push_back(k);
        return object_schema(t, path);
      });
    }
    if (!is_never(ap)) {
      if (!witnesses.empty()) unsupported(path, "several 'not' of 'additionalProperties' where extra keys are allowed");
      for (const std::string& k : declared) not_in.insert(k);
      attempt([&] {
        Json extra{{"not_in", Json(std::vector<std::string>(not_in.begin(), not_in.end()))},
                   {"value", Json{{"allOf", Json::array({ap, w["value"]})}}}};
        return object_schema(rest, path, &extra);
      });
    }
    if (alts.empty()) nothing(path, "object whose 'not' of 'additionalProperties' cannot hold (matches nothing)");
    return g_.alt(alts);
  }

  int object_schema(const Json& s0, const std::string& path, const Json* witness = nullptr) {
    if (s0.contains(kSomeKey)) return some_key(s0, path);
    const Json s = forbid_unsatisfiable_triggers(s0);
    std::vector<std::pair<std::string, int>> props;  // key literal (JSON-encoded), value expr
    std::vector<bool> required;
    std::set<std::string> req;
    std::vector<std::string> req_order, names;  // names: every declared key, never an extra one
    if (s.contains("required"))
      for (auto& r : s["required"])
        if (req.insert(r.get<std::string>()).second) req_order.push_back(r.get<std::string>());
    // patternProperties: a key's value must match the schema of every pattern the key matches
    // (declared keys too); keys matching none are valued by additionalProperties. A pattern
    // whose schema says what additionalProperties says changes nothing and is dropped.
    Json ap = s.contains("additionalProperties") ? s["additionalProperties"] : Json(!opts_.strict_additional_properties);
    if (is_never(ap)) ap = Json(false);
    std::vector<std::pair<std::string, Json>> patterns;
    const Json level_aps = s.value(kLevelAps, Json::array());  // they name the patterns: all stay
    if (s.contains("patternProperties")) {
      for (auto& [p, v] : s["patternProperties"].items())
        if (!level_aps.empty() || (!(is_always(v) && is_always(ap)) && !(is_never(v) && ap == Json(false)))) patterns.push_back({p, v});
      if (!patterns.empty() && s.contains("propertyNames")) unsupported(path, "patternProperties together with propertyNames");
    }
    // The schema of a named key: its declared one (or none) and every matching pattern's, else
    // additionalProperties.
    std::vector<ByteDfa> pattern_dfas;
    for (auto& pv : patterns) pattern_dfas.push_back(pattern_dfa(pv.first));
    auto matched_bits = [&](const std::string& k) {
      uint64_t bits = 0;
      const std::string content = Json(k).dump().substr(1, Json(k).dump().size() - 2);
      for (size_t i = 0; i < patterns.size(); ++i)
        if (dfa_matches(pattern_dfas[i], content)) bits |= uint64_t{1} << i;
      return bits;
    };
    auto matched = [&](const std::string& k) { return pattern_values(patterns, matched_bits(k)); };
    auto key_schema = [&](const std::string& k, const Json* declared) {
      Json all = matched(k);
      if (declared) all.insert(all.begin(), *declared);
      if (all.empty() && level_aps.empty()) return ap;
      if (all.empty()) all.push_back(ap);
      add_level_aps(all, level_aps, patterns, matched_bits(k), &k);
      return all.size() == 1 ? all[0] : Json{{"allOf", all}};
    };
    if (s.contains("properties")) {
      for (auto& [k, v0] : s["properties"].items()) {
        const Json v = key_schema(k, &v0);
        names.push_back(Json(k).dump().substr(1, Json(k).dump().size() - 2));
        const int value = convert_or_none(v, path + "/properties/" + k);  // none: the key is forbidden
        if (value < 0) {
          if (req.count(k)) nothing(path, "required property '" + k + "' whose schema matches nothing");
          continue;
        }
        props.push_back({Json(k).dump(), value});
        required.push_back(req.count(k) > 0);
      }
    }
    for (const std::string& r : req_order) {
      bool declared = s.contains("properties") && s["properties"].contains(r);
      if (declared) continue;
      // A required key without a declared schema: valued by its patterns or additionalProperties
      // (any value where only the strict mode's default forbids extra keys).
      Json v = key_schema(r, nullptr);
      if (matched(r).empty() && ap == Json(false) && !s.contains("additionalProperties")) v = Json(true);
      if (is_never(v)) nothing(path, "required key '" + r + "' that additionalProperties/patternProperties forbid (matches nothing)");
      props.push_back({Json(r).dump(), is_always(v) ? any_value() : convert(v, path + "/additionalProperties")});
      required.push_back(true);
    }
    // dependentRequired: its keys become counted members (undeclared ones valued by
    // additionalProperties); the perm rule completes only if each seen trigger's keys were seen.
    std::vector<std::vector<int>> depends;
    if (s.contains("dependentRequired")) {
      auto index_of = [&](const std::string& k) -> int {
        const std::string lit = Json(k).dump();
        for (size_t i = 0; i < props.size(); ++i)
          if (props[i].first == lit) return static_cast<int>(i);
        if (s.contains("properties") && s["properties"].contains(k)) return -1;  // schema false
        const Json v = key_schema(k, nullptr);
        if (is_never(v)) return -1;
        props.push_back({lit, is_always(v) ? any_value() : convert(v, path + "/additionalProperties")});
        required.push_back(false);
        return static_cast<int>(props.size()) - 1;
      };
      for (auto& [k, deps] : s["dependentRequired"].items()) {
        if (!deps.is_array()) fail("json schema: dependentRequired values must be arrays at ", path);
        if (deps.empty()) continue;
        const int t = index_of(k);
        if (t < 0) continue;  // the trigger key cannot appear
        std::vector<int> d;
        for (auto& dep : deps) {
          const int x = index_of(dep.get<std::string>());
          if (x < 0) unsupported(path, "dependentRequired naming key '" + dep.get<std::string>() + "' that cannot appear");
          d.push_back(x);
        }
        if (depends.size() < props.size()) depends.resize(props.size());
        depends[t].insert(depends[t].end(), d.begin(), d.end());
      }
    }
    // propertyNames: a string schema for the keys, enforced by the extra-key grammar; only for
    // objects without declared keys (the key grammar can't also exclude declared names).
    int key_expr = -1;
    if (s.contains("propertyNames") && !is_always(s["propertyNames"])) {
      const Json pn = normalize(s["propertyNames"]);
      if (!props.empty() || !names.empty()) unsupported(path, "propertyNames together with properties/required/dependentRequired");
      if (is_never(pn)) {
        ap = Json(false);
      } else {
        if (!pn.is_object()) fail("json schema: propertyNames must be a schema at ", path);
        static const std::set<std::string> ok = {"minLength", "maxLength", "pattern", "format", "const", "enum", "type"};
        for (auto& [k, v] : pn.items())
          if (!ok.count(k)) unsupported(path, "propertyNames with keyword '" + k + "'");
        if (pn.contains("type") && pn["type"] != Json("string")) unsupported(path, "propertyNames with a non-string type");
        Json ks = pn;
        ks["type"] = "string";
        if (!(ap.is_boolean() && !ap.get<bool>())) key_expr = convert(ks, path + "/propertyNames");
      }
    }
    int extra = -1;  // expression for one additional "key":value member, or -1
    if (!patterns.empty() || !level_aps.empty()) {
      for (auto& p : props) names.push_back(p.first.substr(1, p.first.size() - 2));
      extra = pattern_members(names, patterns, pattern_dfas, ap, level_aps, path);
    } else if (!(ap.is_boolean() && !ap.get<bool>())) {
      int value = ap.is_boolean() ? any_value() : convert(ap, path + "/additionalProperties");
      for (auto& p : props) names.push_back(p.first.substr(1, p.first.size() - 2));
      std::sort(names.begin(), names.end());
      names.erase(std::unique(names.begin(), names.end()), names.end());
      extra = g_.seq({key_expr >= 0 ? key_expr : names.empty() ? string_expr() : key_not_in(names), ws(), g_.lit(":"), ws(), value});
    }
    int witness_body = -1;  // one extra member that must be there (some_key)
    if (witness) {
      std::vector<std::string> keys = names;
      for (auto& p : props) keys.push_back(p.first.substr(1, p.first.size() - 2));
      for (const Json& n : (*witness)["not_in"]) keys.push_back(Json(n).dump().substr(1, Json(n).dump().size() - 2));
      std::sort(keys.begin(), keys.end());
      keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
      witness_body = g_.seq({key_not_in(keys), ws(), g_.lit(":"), ws(), convert((*witness)["value"], path + "/additionalProperties")});
      required.push_back(true);
    }
    // Members in any order, each declared one at most once: a perm rule (grammar.h) whose first
    // member is M_i and later ones A_i = sep M_i, so no separator is left dangling.
    const int sep = g_.seq({ws(), g_.lit(","), ws()});
    const std::string base = "obj" + std::to_string(g_.num_rules());
    const int perm = g_.declare_rule(base);
    PermRule info{perm, {}, required};
    info.depends = depends;
    std::vector<int> firsts, afters;
    auto member = [&](const std::string& name, int body, bool counted) {
      int m = g_.declare_rule(base + "_" + name), a = g_.declare_rule(base + "_a" + name);
      g_.define_rule(m, body);
      g_.define_rule(a, g_.seq({sep, g_.ref(m)}));
      firsts.push_back(g_.ref(m));
      afters.push_back(g_.ref(a));
      if (counted) info.member_rules.push_back({m, a});
      else info.extra_rules = {m, a};
    };
    for (size_t k = 0; k < props.size(); ++k)
      member(std::to_string(k), g_.seq({g_.lit(props[k].first), ws(), g_.lit(":"), ws(), props[k].second}), true);
    if (witness_body >= 0) member("w", witness_body, true);
    if (extra >= 0) member("x", extra, false);
    // min/maxProperties: without declared keys, repetitions of the extra member; with them, the
    // perm rule counts every member (declared ones in its seen set, extra ones as a number).
    const long lo = s.contains("minProperties") ? static_cast<long>(s["minProperties"].get<double>()) : 0;
    const long hi = s.contains("maxProperties") ? static_cast<long>(s["maxProperties"].get<double>()) : -1;
    if ((hi >= 0 && lo > hi) || (lo > 0 && firsts.empty())) nothing(path, "object with minProperties above the members it can hold (matches nothing)");
    if (lo > 4096 || hi > 4096) unsupported(path, "minProperties/maxProperties bounds above 4096");
    int members = -1;
    if ((lo > 0 || hi >= 0) && (!props.empty() || witness_body >= 0)) {
      info.min_count = static_cast<int>(lo);
      info.max_count = static_cast<int>(hi);
      if (hi != 0) members = g_.seq({g_.alt(firsts), g_.star(g_.alt(afters))});
      g_.define_rule(perm, members < 0 ? g_.empty() : g_.opt(members));
      g_.add_perm(std::move(info));
      return g_.seq({g_.lit("{"), ws(), g_.ref(perm), ws(), g_.lit("}")});
    }
    if (!firsts.empty() && hi != 0)
      members = g_.seq({g_.alt(firsts), g_.rep(g_.alt(afters), std::max(0L, lo - 1), hi < 0 ? kUnbounded : static_cast<int>(hi - 1))});
    g_.define_rule(perm, members < 0 ? g_.empty() : lo > 0 ? members : g_.opt(members));
    g_.add_perm(std::move(info));
    return g_.seq({g_.lit("{"), ws(), g_.ref(perm), ws(), g_.lit("}")});
  }

  // One extra member of an object with patternProperties: its keys (none of `names`) fall into
  // classes by the patterns they match, each class valued by the allOf of those patterns'
  // schemas (additionalProperties for the keys matching none); -1 when no key may be extra.
  int pattern_members(const std::vector<std::string>& names, const std::vector<std::pair<std::string, Json>>& patterns,
                      const std::vector<ByteDfa>& pattern_dfas, const Json& ap, const Json& level_aps, const std::string& path) {
    if (patterns.size() > 16) unsupported(path, "more than 16 patternProperties");
    const ByteDfa all = content_dfa(), declared = literal_dfa(names);
    std::vector<const ByteDfa*> parts{&all, &declared};
    for (const ByteDfa& d : pattern_dfas) parts.push_back(&d);
    const ProductDfa prod = product_dfa(parts, kMaxDfaStates, "patternProperties (keys by pattern)");
    std::set<uint64_t> classes;  // pattern bits of the keys that may appear, one per class
    for (uint64_t acc : prod.accepts)
      if ((acc & 3) == 1) classes.insert(acc >> 2);
    std::vector<int> alts;
    for (uint64_t c : classes) {
      Json all = pattern_values(patterns, c);
      if (all.empty()) all.push_back(ap);
      add_level_aps(all, level_aps, patterns, c, nullptr);
      const Json value = all.size() == 1 ? all[0] : Json{{"allOf", all}};
      if (matches_nothing(value, path)) continue;
      const ByteDfa keys = select_dfa(prod, [&](uint64_t acc) { return acc == (c << 2 | 1); });
      if (keys.size() == 0) continue;
      const int key = g_.seq({g_.lit("\""), g_.dfa(keys), g_.lit("\"")});
      alts.push_back(g_.seq({key, ws(), g_.lit(":"), ws(), is_always(value) ? any_value() : convert(value, path + "/patternProperties")}));
    }
    return alts.empty() ? -1 : g_.alt(alts);
  }

  static Json pattern_values(const std::vector<std::pair<std::string, Json>>& patterns, uint64_t bits) {
    Json all = Json::array();
    for (size_t i = 0; i < patterns.size(); ++i)
      if (bits >> i & 1) all.push_back(patterns[i].second);
    return all;
  }
  // The kLevelAps values a key gets (`bits`: the patterns it matches; name: a declared key's).
  static void add_level_aps(Json& all, const Json& level_aps, const std::vector<std::pair<std::string, Json>>& patterns,
                            uint64_t bits, const std::string* name) {
    for (const Json& e : level_aps) {
      bool exempt = name && std::find(e["names"].begin(), e["names"].end(), Json(*name)) != e["names"].end();
      for (size_t i = 0; i < patterns.size(); ++i)
        exempt |= (bits >> i & 1) && std::find(e["patterns"].begin(), e["patterns"].end(), Json(patterns[i].first)) != e["patterns"].end();
      if (!exempt) all.push_back(e["value"]);
    }
  }

  // A JSON string (with quotes) whose canonical content is none of `names` (JSON-encoded, no
  // quotes): one DFA, the product of every canonical content with the names' trie (a trie of
  // rules cost about 27 automaton nodes per trie node: Kubernetes schemas had 110k of them).
  // Above kMaxKeyTrie bytes of names, a trie of rules instead.
  int key_not_in(const std::vector<std::string>& names) {
    size_t chars = 0;
    for (const std::string& n : names) chars += n.size();
    if (chars <= kMaxKeyTrie) {
      // A rule of its own: the DFA's states past the names reach no other rule, so their token
      // classes are the same in every grammar (compiled_grammar.cpp, SharedClasses).
      const int r = g_.declare_rule("keys" + std::to_string(g_.num_rules()));
      g_.define_rule(r, g_.seq({g_.lit("\""), g_.dfa(contents_except(names)), g_.lit("\"")}));
      return g_.ref(r);
    }
    return key_trie_not_in(names);
  }
  int key_trie_not_in(const std::vector<std::string>& names) {
    struct Node { std::map<std::string, int> kids; bool terminal = false; };
    std::vector<Node> trie(1);
    for (const std::string& n : names) {
      int t = 0;
      for (size_t i = 0; i < n.size();) {
        size_t len = n[i] == '\\' ? (n[i + 1] == 'u' ? 6 : 2) : 1;
        while (len == 1 && i + len < n.size() && (static_cast<unsigned char>(n[i + len]) & 0xC0) == 0x80) ++len;
        std::string unit = n.substr(i, len);
        i += len;
        auto it = trie[t].kids.find(unit);
        if (it == trie[t].kids.end()) {
          trie.push_back({});
          it = trie[t].kids.emplace(unit, static_cast<int>(trie.size()) - 1).first;
        }
        t = it->second;
      }
      trie[t].terminal = true;
    }
    if (key_rest_rule_ < 0) {  // shared by every trie node: one set of precomputed masks
      key_rest_rule_ = g_.declare_rule("key_rest");
      g_.define_rule(key_rest_rule_, g_.seq({g_.star(json_char()), g_.lit("\"")}));
    }
    int rest = g_.ref(key_rest_rule_);
    int base = g_.num_rules();
    for (size_t t = 0; t < trie.size(); ++t) g_.declare_rule("key" + std::to_string(base) + "_" + std::to_string(t));
    for (size_t t = 0; t < trie.size(); ++t) {
      std::vector<int> alts;
      if (!trie[t].terminal) alts.push_back(g_.lit("\""));
      CodepointRanges excluded{{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
      bool u_child = false;
      std::set<char> esc_children;
      for (auto& [unit, child] : trie[t].kids) {
        alts.push_back(g_.seq({g_.lit(unit), g_.ref(base + child)}));
        if (unit[0] == '\\') {
          if (unit[1] == 'u') u_child = true; else esc_children.insert(unit[1]);
        } else {
          size_t pos = 0;
          uint32_t cp = static_cast<unsigned char>(unit[0]);
          if (cp >= 0x80) {  // decode the one codepoint of the unit
            int n = cp >= 0xF0 ? 3 : cp >= 0xE0 ? 2 : 1;
            cp &= 0x3F >> n;
            for (pos = 1; pos <= static_cast<size_t>(n); ++pos) cp = (cp << 6) | (unit[pos] & 0x3F);
          }
          excluded.push_back({cp, cp});
        }
      }
      // Escapes only where JSON needs them (the names are in that form too): "\/" or "\u00e9"
      // would spell a name in another way, so they are not offered (a safe subset).
      if (esc_children.empty() && !u_child && std::all_of(excluded.begin(), excluded.end(), [](auto r) { return r.second < 0x80; })) {
        // Only ASCII units here: every escape and non-ASCII character leaves the names, through
        // one rule shared by such nodes (its ~20 automaton nodes once, not per trie node).
        excluded.push_back({0x80, kMaxCodepoint});
        alts.push_back(g_.seq({g_.cls(excluded, true), rest}));
        alts.push_back(g_.ref(key_off_names_rule()));
      } else {
        std::vector<int> other{g_.cls(excluded, true)};
        for (char e : std::string("\"\\bfnrt"))
          if (!esc_children.count(e)) other.push_back(g_.lit(std::string("\\") + e));
        if (!u_child) other.push_back(g_.seq({g_.lit("\\u00"), g_.cls({{'0', '1'}}), g_.cls({{'0', '9'}, {'a', 'f'}, {'A', 'F'}})}));
        alts.push_back(g_.seq({g_.alt(other), rest}));
      }
      g_.define_rule(base + static_cast<int>(t), g_.alt(alts));
    }
    return g_.seq({g_.lit("\""), g_.ref(base)});
  }

  // A key character no ASCII unit of the names starts (an escape or a non-ASCII character), then
  // any rest of the key.
  int key_off_names_rule() {
    if (key_off_names_rule_ < 0) {
      if (key_rest_rule_ < 0) fail("json schema: internal: key_rest before key_off_names");
      key_off_names_rule_ = g_.declare_rule("key_off_names");
      std::vector<int> other{g_.cls({{0x80, kMaxCodepoint}})};
      for (char e : std::string("\"\\bfnrt")) other.push_back(g_.lit(std::string("\\") + e));
      other.push_back(g_.seq({g_.lit("\\u00"), g_.cls({{'0', '1'}}), g_.cls({{'0', '9'}, {'a', 'f'}, {'A', 'F'}})}));
      g_.define_rule(key_off_names_rule_, g_.seq({g_.alt(other), g_.ref(key_rest_rule_)}));
    }
    return key_off_names_rule_;
  }

  // contains C (minContains n >= 1, no maxContains, no prefixItems or maxItems): any items
  // around n items that also match C; ambiguous where several do, which the parser allows.
  int contains_array(const Json& s, const std::string& path) {
    const long n = count_of(s, "minContains", 1);
    if (s.contains("maxContains")) return counted_contains(s, n, path);
    if (n == 0) {
      Json t = s;
      t.erase("contains");
      t.erase("minContains");
      return array_schema(t, path);
    }
    if (s.contains("maxItems") && s["maxItems"].is_number() && s["maxItems"].get<double>() < static_cast<double>(n))
      nothing(path, "contains with maxItems below minContains (matches nothing)");
    if (s.contains("prefixItems") && n == 1 && !s.contains(kAlsoContains)) return contains_with_prefix(s, path);
    for (const char* k : {"prefixItems", "maxItems", "uniqueItems"})
      if (s.contains(k) && !(std::string(k) == "uniqueItems" && s[k] == Json(false))) unsupported(path, std::string("contains together with '") + k + "'");
    if (n > 16 || s.value("minItems", 0L) > n) unsupported(path, "contains with minContains above 16 or minItems above minContains");
    const Json items = s.contains("items") ? s["items"] : Json(true);
    if (is_never(items)) nothing(path, "schema that matches nothing (contains with items false)");
    const int item = convert(items, path + "/items");
    const int hit = convert(Json{{"allOf", Json::array({items, s["contains"]})}}, path + "/contains");
    const int sep = g_.seq({ws(), g_.lit(","), ws()});
    if (s.contains(kAlsoContains)) {  // two contains: one item matching both, or one each in either order
      if (n != 1 || s[kAlsoContains].size() > 3) unsupported(path, "allOf of more than four 'contains', or several with minContains");
      if (s[kAlsoContains].size() > 1) return several_contains(s, items, item, path);
      const int other = convert(Json{{"allOf", Json::array({items, s[kAlsoContains][0]})}}, path + "/contains");
      const int any = g_.star(g_.seq({sep, item}));
      std::vector<int> hits{g_.seq({hit, any, sep, other}), g_.seq({other, any, sep, hit})};
      const int both = convert_or_none(Json{{"allOf", Json::array({items, s["contains"], s[kAlsoContains][0]})}}, path + "/contains");
      if (both >= 0) hits.push_back(both);
      return g_.seq({g_.lit("["), ws(), g_.star(g_.seq({item, sep})), g_.alt(hits), any, ws(), g_.lit("]")});
    }
    return g_.seq({g_.lit("["), ws(), hits_among(n, hit, item), ws(), g_.lit("]")});
  }
  // contains C (one item) with prefixItems P: the anyOf of "entry i also matches C" (the array has
  // at least i + 1 items) and "every entry present, then any items around one that matches
  // items and C". Ambiguous where several items match C, which the parser allows; exact.
  int contains_with_prefix(const Json& s, const std::string& path) {
    for (const char* k : {"maxItems", "uniqueItems"})
      if (s.contains(k) && !(std::string(k) == "uniqueItems" && s[k] == Json(false))) unsupported(path, std::string("contains together with 'prefixItems' and '") + k + "'");
    const Json& prefix = s["prefixItems"];
    const long min_items = count_of(s, "minItems", 0);
    if (min_items > static_cast<long>(prefix.size()) + 1) unsupported(path, "contains with prefixItems and minItems past them");
    Json plain = s;
    plain.erase("contains");
    plain.erase("minContains");
    plain["type"] = "array";  // this converts the array branch only
    std::vector<int> alts;
    for (size_t i = 0; i < prefix.size(); ++i) {  // entry i is the hit
      Json t = plain;
      t["prefixItems"][i] = Json{{"allOf", Json::array({prefix[i], s["contains"]})}};
      t["minItems"] = std::max<long>(min_items, static_cast<long>(i) + 1);
      if (const int e = convert_or_none(t, path); e >= 0) alts.push_back(e);
    }
    const Json items = s.contains("items") ? s["items"] : Json(true);
    const int sep = g_.seq({ws(), g_.lit(","), ws()});
    std::vector<int> body{g_.lit("["), ws()};
    bool tail = !is_never(items);
    for (size_t i = 0; i < prefix.size() && tail; ++i) {  // every entry present, then the hit after them
      const int e = convert_or_none(prefix[i], path + "/prefixItems/" + std::to_string(i));
      if (e < 0) tail = false;
      else body.insert(body.end(), {e, sep});
    }
    const int hit = tail ? convert_or_none(Json{{"allOf", Json::array({items, s["contains"]})}}, path + "/contains") : -1;
    if (hit >= 0) {
      body.insert(body.end(), {hits_among(1, hit, convert(items, path + "/items")), ws(), g_.lit("]")});
      alts.push_back(g_.seq(body));
    }
    if (alts.empty()) nothing(path, "contains that no item matches");
    return g_.alt(alts);
  }

  // An item for each of k contains (one item may serve several): rules A_S by the set S of those
  // met so far, A_S = (sep item A_S | sep hit_T A_{S|T} for T adding to S), A_all = (sep item)*.
  // Ambiguous where items serve several ways, which the parser allows; exact.
  int several_contains(const Json& s, const Json& items, int item, const std::string& path) {
    Json cs = Json::array({s["contains"]});
    for (const Json& c : s[kAlsoContains]) cs.push_back(c);
    const uint32_t all = (1u << cs.size()) - 1;
    std::vector<int> hit(all + 1, -1), rule(all + 1);
    for (uint32_t t = 1; t <= all; ++t) {
      Json parts = Json::array({items});
      for (size_t i = 0; i < cs.size(); ++i)
        if (t >> i & 1) parts.push_back(cs[i]);
      hit[t] = convert_or_none(Json{{"allOf", parts}}, path + "/contains");
    }
    for (size_t i = 0; i < cs.size(); ++i)  // a hit for several needs one for each: all is reachable
      if (hit[1u << i] < 0) nothing(path, "contains that no item matches");
    const int sep = g_.seq({ws(), g_.lit(","), ws()});
    for (uint32_t m = 0; m <= all; ++m) rule[m] = g_.declare_rule("contains" + std::to_string(g_.num_rules()));
    auto steps = [&](uint32_t m, bool first) {  // the next item (after sep unless first), then the rest
      std::vector<int> alts;
      if (!first) alts.push_back(g_.seq({sep, item, g_.ref(rule[m])}));
      else alts.push_back(g_.seq({item, g_.ref(rule[m])}));
      for (uint32_t t = 1; t <= all; ++t)
        if ((t & ~m) && hit[t] >= 0) alts.push_back(first ? g_.seq({hit[t], g_.ref(rule[m | t])}) : g_.seq({sep, hit[t], g_.ref(rule[m | t])}));
      return g_.alt(alts);
    };
    g_.define_rule(rule[all], g_.star(g_.seq({sep, item})));
    for (uint32_t m = 0; m < all; ++m) g_.define_rule(rule[m], steps(m, false));
    return g_.seq({g_.lit("["), ws(), steps(0, true), ws(), g_.lit("]")});
  }
  // k >= 1 hits with `other` items around them: (other ,)* hit ((, other)* , hit){k-1} (, other)*
  int hits_among(long k, int hit, int other) {
    const int sep = g_.seq({ws(), g_.lit(","), ws()});
    const int before = other < 0 ? g_.empty() : g_.star(g_.seq({other, sep}));
    const int after = other < 0 ? g_.empty() : g_.star(g_.seq({sep, other}));
    std::vector<int> body{before, hit};
    for (long i = 1; i < k; ++i) body.insert(body.end(), {after, sep, hit});
    body.push_back(after);
    return g_.seq(body);
  }
  static long count_of(const Json& s, const char* key, long absent) {
    return s.contains(key) && s[key].is_number() ? static_cast<long>(s[key].get<double>()) : absent;
  }
  // minContains n .. maxContains m items matching C, every other item matching not C (so each
  // item is a hit or a miss, never both: exact). At most 16 counted.
  int counted_contains(const Json& s, long n, const std::string& path) {
    const long m = count_of(s, "maxContains", 0);
    for (const std::string k : {"prefixItems", "maxItems", "uniqueItems", "minItems", kAlsoContains.c_str()})
      if (s.contains(k) && !(s[k] == Json(false) || s[k] == Json(0))) unsupported(path, "maxContains together with '" + k + "'");
    if (m > 16) unsupported(path, "maxContains above 16");
    const Json items = s.value("items", Json(true)), c = s["contains"];
    const int hit = convert_or_none(Json{{"allOf", Json::array({items, c})}}, path + "/contains");
    const int miss = convert_or_none(Json{{"allOf", Json::array({items, negate(c, path + "/contains")})}}, path + "/items");
    std::vector<int> alts;
    for (long k = n; k <= m && (k == 0 || hit >= 0); ++k)
      alts.push_back(k > 0 ? hits_among(k, hit, miss) : miss < 0 ? g_.empty() : g_.opt(g_.seq({miss, g_.star(g_.seq({g_.seq({ws(), g_.lit(","), ws()}), miss}))})));
    if (alts.empty()) nothing(path, "contains whose minContains no array can meet below maxContains");
    return g_.seq({g_.lit("["), ws(), g_.alt(alts), ws(), g_.lit("]")});
  }

  // uniqueItems true over enumerable items (enum/const, or only booleans and null): each value
  // at most once, in any order, minItems..maxItems of them.
  // The values an item schema accepts where it enumerates them (enum/const, or only booleans and null).
  std::optional<std::vector<Json>> enumerable(const Json& items0, const std::string& path) {
    const Json items = normalize(items0);
    std::vector<Json> values;
    const std::vector<std::string> types = items.is_object() && items.contains("type") ? types_of(items) : std::vector<std::string>{};
    if (items.is_object() && items.contains("const")) values.push_back(items["const"]);
    else if (items.is_object() && items.contains("enum")) values.assign(items["enum"].begin(), items["enum"].end());
    else if (!types.empty() && std::all_of(types.begin(), types.end(), [](const std::string& t) { return t == "boolean" || t == "null"; }))
      values = {Json(true), Json(false), Json(nullptr)};
    else return std::nullopt;
    return values_matching(values, items, path);
  }
  int unique_items(const Json& s, long lo, long hi, const std::string& path) {
    const std::optional<std::vector<Json>> values = enumerable(s.value("items", Json(true)), path);
    if (!values) unsupported(path, "keyword 'uniqueItems' (true, with more than one item possible, items not enumerable)");
    std::vector<Json> distinct;  // 1 and 1.0 are one value
    for (const Json& v : *values)
      if (std::find(distinct.begin(), distinct.end(), v) == distinct.end()) distinct.push_back(v);
    if (distinct.size() > 64) unsupported(path, "uniqueItems over more than 64 values");
    if (lo > static_cast<long>(distinct.size())) nothing(path, "minItems above the number of distinct items (matches nothing)");
    const int sep = g_.seq({ws(), g_.lit(","), ws()});
    const std::string base = "uniq" + std::to_string(g_.num_rules());
    const int perm = g_.declare_rule(base);
    PermRule info{perm, {}, std::vector<bool>(distinct.size(), false)};
    info.min_count = static_cast<int>(lo);
    info.max_count = static_cast<int>(hi);
    std::vector<int> firsts, afters;
    for (size_t i = 0; i < distinct.size(); ++i) {
      int mr = g_.declare_rule(base + "_" + std::to_string(i)), ar = g_.declare_rule(base + "_a" + std::to_string(i));
      g_.define_rule(mr, convert(Json{{"const", distinct[i]}}, path + "/items"));
      g_.define_rule(ar, g_.seq({sep, g_.ref(mr)}));
      firsts.push_back(g_.ref(mr));
      afters.push_back(g_.ref(ar));
      info.member_rules.push_back({mr, ar});
    }
    g_.define_rule(perm, distinct.empty() || hi == 0 ? g_.empty() : g_.opt(g_.seq({g_.alt(firsts), g_.star(g_.alt(afters))})));
    g_.add_perm(std::move(info));
    return g_.seq({g_.lit("["), ws(), g_.ref(perm), ws(), g_.lit("]")});
  }

  // uniqueItems true over at most the prefixItems' entries, each enumerable: the enum of every
  // array of distinct values lo..hi long (at most 256 of them).
  int unique_tuples(const Json& s, long lo, long hi, const std::string& path) {
    std::vector<std::vector<Json>> per;
    for (long i = 0; i < hi; ++i) {
      std::optional<std::vector<Json>> v = enumerable(s["prefixItems"][i], path + "/prefixItems");
      if (!v) unsupported(path, "keyword 'uniqueItems' (true, with prefixItems that are not enumerable)");
      per.push_back(std::move(*v));
    }
    Json arrays = Json::array(), cur = Json::array();
    std::function<void()> grow = [&] {
      if (static_cast<long>(cur.size()) >= lo) arrays.push_back(cur);
      if (arrays.size() > 256) unsupported(path, "uniqueItems over more than 256 arrays of prefixItems");
      if (static_cast<long>(cur.size()) == hi) return;
      for (const Json& v : per[cur.size()]) {
        if (std::find(cur.begin(), cur.end(), v) != cur.end()) continue;
        cur.push_back(v);
        grow();
        cur.erase(cur.end() - 1);
      }
    };
    grow();
    if (arrays.empty()) nothing(path, "uniqueItems over prefixItems with no array of distinct values");
    return convert(Json{{"enum", arrays}}, path);
  }

  int array_schema(const Json& s, const std::string& path) {
    if (s.contains("contains")) return contains_array(s, path);
    std::vector<int> prefix;
    bool cut = false;  // a prefix item no value matches: the array ends before it
    if (s.contains("prefixItems")) {
      for (auto& p : s["prefixItems"]) {
        const int e = convert_or_none(p, path + "/prefixItems/" + std::to_string(prefix.size()));
        if (e < 0) { cut = true; break; }
        prefix.push_back(e);
      }
    }
    long lo = s.value("minItems", 0L);
    long hi = s.contains("maxItems") ? s["maxItems"].get<long>() : -1;
    int item = -1;
    if (cut) item = -1;
    else if (!s.contains("items")) item = any_value();
    else if (is_always(s["items"])) item = any_value();
    else item = convert_or_none(s["items"], path + "/items");
    const long m = static_cast<long>(prefix.size());
    if (item < 0) hi = hi < 0 ? m : std::min(hi, m);
    if (hi >= 0 && lo > hi) nothing(path, "minItems greater than the possible number of items");
    // uniqueItems: false is a no-op; true holds trivially with at most one item, and is a perm
    // rule over the values where the items are enumerable.
    if (s.contains("uniqueItems") && s["uniqueItems"] == Json(true) && (hi < 0 || hi > 1)) {
      if (m > 0 && (hi < 0 || hi > m)) unsupported(path, "keyword 'uniqueItems' (true, with prefixItems and more items)");
      return m > 0 ? unique_tuples(s, lo, hi, path) : unique_items(s, lo, hi, path);
    }
    if (lo > 4096 || hi > 4096) unsupported(path, "minItems/maxItems above 4096");
    int sep = g_.seq({ws(), g_.lit(","), ws()});
    // rest(k): the members after the first k (k >= 1 already emitted).
    std::function<int(long)> rest = [&](long k) -> int {
      if (k < m) {
        std::vector<int> alts;
        if (hi < 0 || k < hi) alts.push_back(g_.seq({sep, prefix[k], rest(k + 1)}));
        if (k >= lo) alts.push_back(g_.empty());
        return g_.alt(alts);
      }
      if (item < 0) return g_.empty();
      long need = std::max(0L, lo - k);
      return g_.rep(g_.seq({sep, item}), static_cast<int>(need), hi < 0 ? kUnbounded : static_cast<int>(hi - k));
    };
    std::vector<int> body;
    if (lo == 0) body.push_back(g_.empty());
    if (hi != 0) body.push_back(g_.seq({m > 0 ? prefix[0] : item, rest(1)}));
    return g_.seq({g_.lit("["), ws(), g_.alt(body), ws(), g_.lit("]")});
  }

  const Json& root_;
  SchemaArgs opts_;
  int draft_;
  Grammar g_;
  std::map<std::string, int> refs_;
  std::map<std::string, Json> normalized_refs_;
  std::map<std::string, std::string> dynamic_scope_;  // $dynamicAnchor name -> "#pointer" bound
  std::string dynamic_key_;                            // the bindings as text (cache keys)
  std::map<std::pair<int, int>, int> counted_strings_;  // (minLength, maxLength) -> rule  // $ref targets normalized (for oneOf analysis)
  std::map<std::string, std::shared_ptr<const Automaton>> value_checkers_;  // values_matching's, by schema text
  struct Converted {
    int expr, since;  // since: the rule count when its conversion started
  };
  std::unordered_map<std::string, Converted> converted_;  // convert's results, by schema text
  struct NumericResult {
    int expr, since;      // expr -1: matches nothing, for the reason `nothing`
    std::string nothing;
  };
  std::unordered_map<std::string, NumericResult> numeric_exprs_;  // numeric's results declaring no rule, by keywords
  int ref_merge_depth_ = 0, merge_rounds_ = 0;
  // Work bound on the spelled complements (exact oneOf, 'not'): converted subschemas so far and
  // the count past which the current attempt gives up (their products can grow exponentially).
  long work_ = 0, work_limit_ = kMaxWork;
  static constexpr int kMaxSchemaDepth = 64;
  int depth_ = 0;
  int key_rest_rule_ = -1, key_off_names_rule_ = -1, value_rule_ = -1, string_rule_ = -1, number_rule_ = -1, integer_rule_ = -1;
};

}  // namespace

Grammar json_schema_grammar(const std::string& schema, const SchemaArgs& opts) {
  Json j;
  try {
    j = Json::parse(schema);
  } catch (const std::exception& e) {
    fail("json schema: not valid JSON: ", e.what());
  }
  std::map<std::string, Json> documents;
  for (const auto& [uri, text] : opts.documents) {
    const std::string u = uri.substr(0, uri.find('#'));
    try {
      documents[u] = Json::parse(text);
    } catch (const std::exception& e) {
      fail("json schema: document '", u, "' is not valid JSON: ", e.what());
    }
  }
  try {
    const int draft = Converter::draft_of(j);
    Json root = with_local_refs(j, draft, documents);
    if (root.is_object() && root.contains(kDocuments))
      for (auto& [u, doc] : root[kDocuments].items())
        if (doc.is_object() && doc.contains("$schema") && Converter::draft_of(doc) != draft)
          fail("json schema: $ref into document '", u, "' of another draft than the schema's");
    return Converter(root, opts).run();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // a keyword of the wrong JSON type, a malformed $ref escape, ...
    fail("json schema: malformed schema (", e.what(), ")");
  }
}

Grammar json_object_grammar(const SchemaArgs& opts) {
  Json empty = Json::object();
  Converter c(empty, opts);
  int root = c.grammar().declare_rule("root");
  c.grammar().define_rule(root, c.object_rule());
  c.grammar().set_root(root);
  return std::move(c.grammar());
}

}  // namespace deepinfer::structured
