// unevaluatedProperties / unevaluatedItems rewritten into static keywords (json_unevaluated.cpp).
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace deepinfer::structured {

using SchemaMap = std::function<nlohmann::ordered_json(const nlohmann::ordered_json&)>;

// An equivalent of `s` (one normalized level holding unevaluatedProperties or unevaluatedItems)
// without that keyword at this level: the anyOf, over the cases of which in-place subschemas
// succeed, of `s` whose own additionalProperties / items take the keyword's schema for what that
// case leaves unevaluated. Subschemas keep theirs (they are lowered when converted). `normalize`
// rewrites one level (keeping a lone `if`: its annotations count), `resolve` a $ref's target.
// Throws deepinfer::Error naming the keyword where the cases cannot be enumerated.
nlohmann::ordered_json lower_unevaluated(const nlohmann::ordered_json& s, const SchemaMap& normalize,
                                         const SchemaMap& resolve, const std::string& path);

}  // namespace deepinfer::structured
