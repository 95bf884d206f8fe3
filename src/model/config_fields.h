// Strict reading of config.json fields: a value of the wrong type, outside its range or naming an
// unsupported behaviour is a deepinfer::Error "config: <path> = <value>: <what is allowed>" (the
// loader puts the file name in front). nlohmann's own conversions would silently turn 128.5 into 128
// and true into 1; these do not. Unknown keys are never looked at, so they stay harmless.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace deepinfer::model {

// A field's key and, optionally, its other spelling (flat reference name vs transformers' name).
struct Key {
  const char* first;
  const char* second = nullptr;
  Key(const char* k) : first(k) {}  // NOLINT: a plain key converts
  Key(const char* a, const char* b) : first(a), second(b) {}
};

// One object of the file (the root, text_config, quantization_config, ...), named by its path.
class ConfigFields {
 public:
  ConfigFields(const nlohmann::json& object, std::string path);

  // The value under the first spelling present and not null, or nullptr.
  const nlohmann::json* find(Key keys) const;
  bool has(Key keys) const { return find(keys) != nullptr; }
  std::string name(Key keys) const;  // path.key as present (else the first)

  // An integer-valued number in [lo, hi]. Absent: the fallback, or an error when there is none.
  int64_t integer(Key keys, int64_t lo, int64_t hi,
                  std::optional<int64_t> fallback = std::nullopt) const;
  // A finite number in [lo, hi] (lo excluded when lo_open).
  double real(Key keys, double lo, double hi, std::optional<double> fallback,
              bool lo_open = false) const;
  bool boolean(Key keys, std::optional<bool> fallback) const;
  // A string that must be one of `allowed` (the first is the default when absent and no fallback given).
  std::string choice(Key keys, std::initializer_list<const char*> allowed,
                     bool required = false) const;
  // A list of integers in [lo, hi], at most max_len long.
  std::vector<int64_t> integers(Key keys, int64_t lo, int64_t hi, size_t max_len,
                                std::optional<std::vector<int64_t>> fallback = std::nullopt) const;
  // A nested object (absent or null: nullptr; anything else but an object: an error).
  const nlohmann::json* object(Key keys) const;

  // Throws "config: <path.key> = <value>: <allowed>".
  [[noreturn]] void bad(Key keys, const std::string& allowed) const;

 private:
  const nlohmann::json& j_;
  std::string path_;
};

// "config: <field> = <value>: <allowed>" for relations between fields checked after reading.
[[noreturn]] void bad_field(const std::string& field, const std::string& value, const std::string& allowed);
std::string show(const nlohmann::json& value);  // the value as written, cut to 80 characters

}  // namespace deepinfer::model
