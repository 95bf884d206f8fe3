// oneOf made exact where it is decidable at compile time (see json_one_of.cpp).
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace deepinfer::structured {

// Rewrites the branches of `oneOf` so that no instance can match two of them (then anyOf of the
// result is exactly oneOf, or a safe subset of it); branches left matching nothing are dropped.
// Throws deepinfer::Error naming oneOf when overlaps cannot be removed. `resolve` follows a $ref.
// forbid_keys: two overlapping object branches may each forbid a key only the other requires
// (a safe subset, used only where the exact form cannot be spelled).
std::vector<nlohmann::ordered_json> exclusive_one_of(
    const nlohmann::ordered_json& branches, const std::function<const nlohmann::ordered_json&(const std::string&)>& resolve,
    const std::string& path, bool forbid_keys);

// Whether no instance can match both x and y, decided the same way (false when unsure).
bool disjoint_branches(const nlohmann::ordered_json& x, const nlohmann::ordered_json& y,
                       const std::function<const nlohmann::ordered_json&(const std::string&)>& resolve);

}  // namespace deepinfer::structured
