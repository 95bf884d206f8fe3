// Two walks over the subschemas (keywords that hold schemas only: an `$id` inside `enum`, `const`
// or an unknown keyword identifies nothing): the first indexes every resource (its absolute
// URI) and anchor by JSON pointer, the second rewrites each $ref resolved against its base URI
// (RFC 3986 reference resolution) to the pointer it names.
#include "structured/json_refs.h"

#include <map>
#include <set>
#include <string>

namespace deepinfer::structured {

using Json = nlohmann::ordered_json;

namespace {

// The base of a document without $id: relative references resolve against it like any URI.
const std::string kDefaultBase = "deepinfer:/root.json";

std::string without_fragment(const std::string& u) { return u.substr(0, u.find('#')); }

bool has_scheme(const std::string& r) {
  const size_t colon = r.find(':');
  if (colon == std::string::npos || colon == 0 || !std::isalpha(static_cast<unsigned char>(r[0]))) return false;
  for (size_t i = 1; i < colon; ++i)
    if (!std::isalnum(static_cast<unsigned char>(r[i])) && r[i] != '+' && r[i] != '-' && r[i] != '.') return false;
  return true;
}

// RFC 3986 5.2.4.
std::string remove_dots(const std::string& path) {
  std::string in = path, out;
  while (!in.empty()) {
    if (in.rfind("../", 0) == 0) in.erase(0, 3);
    else if (in.rfind("./", 0) == 0 || in.rfind("/./", 0) == 0) in.erase(0, 2);
    else if (in == "/.") in = "/";
    else if (in.rfind("/../", 0) == 0 || in == "/..") {
      in = "/" + in.substr(in == "/.." ? 3 : 4);
      out.erase(out.rfind('/') == std::string::npos ? 0 : out.rfind('/'));
    } else if (in == "." || in == "..") in.clear();
    else {
      const size_t next = in.find('/', 1);
      out += in.substr(0, next);
      in = next == std::string::npos ? "" : in.substr(next);
    }
  }
  return out;
}

// RFC 3986 5.2.2 (base is absolute; a query stays part of the path).
std::string resolve(const std::string& base, const std::string& ref) {
  if (ref.empty()) return without_fragment(base);
  if (has_scheme(ref)) return ref;
  if (ref[0] == '#') return without_fragment(base) + ref;
  const std::string b = without_fragment(base);
  const size_t colon = b.find(':');
  const std::string scheme = b.substr(0, colon + 1);
  std::string authority, path = b.substr(colon + 1);
  if (path.rfind("//", 0) == 0) {
    const size_t slash = path.find('/', 2);
    authority = path.substr(0, slash);
    path = slash == std::string::npos ? "" : path.substr(slash);
  }
  if (ref.rfind("//", 0) == 0) return scheme + ref;
  const size_t hash = ref.find('#');
  const std::string rpath = ref.substr(0, hash), frag = hash == std::string::npos ? "" : ref.substr(hash);
  std::string merged;
  if (rpath[0] == '/') merged = rpath;
  else if (!authority.empty() && path.empty()) merged = "/" + rpath;
  else merged = path.substr(0, path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1) + rpath;
  return scheme + authority + remove_dots(merged) + frag;
}

std::string pointer_token(const std::string& key) {  // ~ and / as JSON pointer escapes, % as a URI one
  std::string out;
  for (char c : key) out += c == '~' ? "~0" : c == '/' ? "~1" : c == '%' ? "%25" : std::string(1, c);
  return out;
}

class RefWalk {
 public:
  explicit RefWalk(int draft) : draft_(draft) {}
  std::map<std::string, std::string> index;  // absolute URI (resource or #anchor) -> pointer
  std::set<std::string> missing;             // documents the rewritten $refs name that index lacks

  // Walks the embedded documents of root (each with its URI as base), after root itself.
  void walk_documents(Json& root, bool rewrite) {
    if (!root.is_object() || !root.contains(kDocuments)) return;
    for (auto& [uri, doc] : root[kDocuments].items()) {
      const std::string p = "/" + pointer_token(kDocuments) + "/" + pointer_token(uri);
      if (!rewrite) index.emplace(uri, p), resources_.insert(p);
      walk(doc, p, uri, p, rewrite);
    }
  }

  // rewrite: false indexes, true rewrites the $refs of s (at pointer p, inside base).
  // resource: the pointer of the resource s is in.
  void walk(Json& s, const std::string& p, std::string base, std::string resource, bool rewrite) {
    if (!s.is_object()) return;
    const char* id_key = draft_ >= 6 ? "$id" : "id";
    const bool ids = draft_ >= 2019 || !s.contains("$ref");  // before 2019-09 $ref's siblings are ignored
    if (ids && s.contains(id_key) && s[id_key].is_string()) {
      const std::string id = s[id_key].get<std::string>(), r = resolve(base, id);
      base = without_fragment(r);
      if (!id.empty() && id[0] != '#') resource = p;
      if (!rewrite && !id.empty() && id[0] != '#') index.emplace(base, p), resources_.insert(p);  // a resource
      if (!rewrite && r.size() > base.size() + 1 && draft_ < 2019) index.emplace(r, p);  // a plain-name anchor
    }
    if (!rewrite && draft_ >= 2019)
      for (const char* a : {"$anchor", "$dynamicAnchor"})
        if (s.contains(a) && s[a].is_string()) {
          const std::string name = s[a].get<std::string>();
          index.emplace(base + "#" + name, p);
          if (a[1] == 'd') dynamic_uris_.insert(base + "#" + name), ++dynamic_names_[name], anchors_[resource][name] = "#" + p;
        }
    if (rewrite && s.contains("$ref") && s["$ref"].is_string()) {
      const std::string r = resolve(base, s["$ref"].get<std::string>());
      const std::string u = without_fragment(r), frag = r.size() > u.size() ? r.substr(u.size() + 1) : "";
      auto res = index.find(u), anchor = index.find(r);
      if (res != index.end() && (frag.empty() || frag[0] == '/')) s["$ref"] = "#" + res->second + frag;
      else if (!frag.empty() && anchor != index.end()) s["$ref"] = "#" + anchor->second;
      else if (res == index.end()) missing.insert(u);
    }
    // $dynamicRef is a $ref unless it lands on a $dynamicAnchor whose name another one shares
    // (then the dynamic scope would decide: left as it is, refused).
    if (rewrite && s.contains("$dynamicRef") && s["$dynamicRef"].is_string() && !s.contains("$ref")) {
      const std::string r = resolve(base, s["$dynamicRef"].get<std::string>());
      const std::string u = without_fragment(r), frag = r.size() > u.size() ? r.substr(u.size() + 1) : "";
      const bool pointer = frag.empty() || frag[0] == '/';
      auto res = index.find(u), anchor = index.find(r);
      if (res == index.end()) missing.insert(u);
      if (pointer && res != index.end()) s["$ref"] = "#" + res->second + frag;
      else if (!pointer && anchor != index.end() && (!dynamic_uris_.count(r) || dynamic_names_[frag] == 1)) s["$ref"] = "#" + anchor->second;
      else if (!pointer && anchor != index.end())  // with the scope its default enters
        s[kDynamicRef] = Json{{"name", frag}, {"default", "#" + anchor->second}, {"scope", anchors_[resource_of(anchor->second)]}};
      if (s.contains("$ref") || s.contains(kDynamicRef)) s.erase("$dynamicRef");
    }
    if (rewrite && s.contains("$ref") && s["$ref"].is_string()) {  // following it enters the target's resource
      const std::string& target = s["$ref"].get_ref<const std::string&>();
      if (target[0] == '#' && anchors_.count(resource_of(target.substr(1)))) s[kRefScope] = anchors_[resource_of(target.substr(1))];
    }
    if (rewrite && resource == p && anchors_.count(p)) s[kDynamicScope] = anchors_[p];
    static const char* kOne[] = {"additionalProperties", "additionalItems", "items", "contains", "propertyNames", "not",
                                 "if", "then", "else", "unevaluatedProperties", "unevaluatedItems"};
    static const char* kMaps[] = {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"};
    static const char* kLists[] = {"allOf", "anyOf", "oneOf", "prefixItems", "items"};
    for (const char* k : kOne)
      if (s.contains(k) && s[k].is_object()) walk(s[k], p + "/" + k, base, resource, rewrite);
    for (const char* k : kMaps)
      if (s.contains(k) && s[k].is_object())
        for (auto& [name, sub] : s[k].items()) walk(sub, p + "/" + pointer_token(k) + "/" + pointer_token(name), base, resource, rewrite);
    for (const char* k : kLists)
      if (s.contains(k) && s[k].is_array())
        for (size_t i = 0; i < s[k].size(); ++i) walk(s[k][i], p + "/" + k + "/" + std::to_string(i), base, resource, rewrite);
  }

 private:
  const int draft_;
  std::set<std::string> dynamic_uris_;        // URIs that a $dynamicAnchor names
  std::map<std::string, int> dynamic_names_;  // $dynamicAnchor name -> how many resources use it
  std::map<std::string, std::map<std::string, std::string>> anchors_;  // resource -> its dynamic anchors
  std::set<std::string> resources_{""};                                // their pointers

  // The innermost resource holding the subschema at pointer p.
  std::string resource_of(std::string p) const {
    while (!resources_.count(p)) p = p.substr(0, p.rfind('/') == std::string::npos ? 0 : p.rfind('/'));
    return p;
  }
};

}  // namespace

Json with_local_refs(const Json& root, int draft, const std::map<std::string, Json>& documents) {
  Json out = root;
  for (;;) {  // each round embeds the registered documents that the refs so far name
    RefWalk w(draft);
    w.index.emplace(kDefaultBase, "");
    w.walk(out, "", kDefaultBase, "", false);
    w.walk_documents(out, false);
    Json rewritten = out;
    w.walk(rewritten, "", kDefaultBase, "", true);
    w.walk_documents(rewritten, true);
    bool more = false;
    for (const std::string& u : w.missing)
      if (auto it = documents.find(u); it != documents.end() && out.is_object()) out[kDocuments][u] = it->second, more = true;
    if (!more) return rewritten;
  }
}

}  // namespace deepinfer::structured
