// $ref by URI: $id, $anchor and relative references resolved within the document (json_refs.cpp).
#pragma once
#include <nlohmann/json.hpp>

namespace deepinfer::structured {

// A copy of `root` whose every $ref that resolves inside the document (against the base URI
// its $id's set, to a resource, a JSON pointer in one, or an $anchor / $dynamicAnchor / draft-07
// plain-name `$id`) is rewritten as the JSON pointer "#/..." from the root. Other $refs (remote
// documents) are left as they are. `draft` as in json_schema.cpp (4, 6, 7, 2019, 2020).
nlohmann::ordered_json with_local_refs(const nlohmann::ordered_json& root, int draft);

}  // namespace deepinfer::structured
