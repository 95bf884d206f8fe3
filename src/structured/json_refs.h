// $ref by URI: $id, $anchor and relative references resolved within the document (json_refs.cpp).
#pragma once
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace deepinfer::structured {

// A copy of `root` whose every $ref that resolves inside the document (against the base URI
// its $id's set, to a resource, a JSON pointer in one, or an $anchor / $dynamicAnchor / draft-07
// plain-name `$id`) is rewritten as the JSON pointer "#/..." from the root. A $ref to another
// document is resolved against `documents` (absolute URI -> schema, as the caller registered them;
// nothing is fetched): each document referred to, transitively, is embedded under
// root[kDocuments][uri] with that URI as its base, and refs into it become pointers too; a $ref
// to a document not registered is left as it is (refused later). `draft` as in json_schema.cpp
// (4, 6, 7, 2019, 2020).
// A $dynamicRef the dynamic scope decides (it lands on a $dynamicAnchor whose name several
// resources use) becomes kDynamicRef {"name", "default": "#pointer"}, and each resource with
// $dynamicAnchors gets kDynamicScope {name: "#pointer"}: the converter binds each name to the
// outermost resource entered that has it, the default where none does. A $ref into a resource
// with $dynamicAnchors gets kRefScope {name: "#pointer"} (following it enters that resource).
nlohmann::ordered_json with_local_refs(const nlohmann::ordered_json& root, int draft,
                                       const std::map<std::string, nlohmann::ordered_json>& documents = {});
inline constexpr const char* kDocuments = "\x01documents";
inline constexpr const char* kDynamicScope = "\x01dynamicScope";
inline constexpr const char* kDynamicRef = "\x01dynamicRef";
inline constexpr const char* kRefScope = "\x01refScope";

}  // namespace deepinfer::structured
