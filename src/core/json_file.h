// Reading a JSON file with errors that name the file (config.json, tokenizer_config.json, ...).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace deepinfer {

// Throws deepinfer::Error "<path>: cannot open" / "<path>: not valid JSON (...)".
nlohmann::json read_json_file(const std::string& path);

// parse(read_json_file(path)), with the path in front of any error `parse` raises.
template <typename Parse>
auto parse_json_file(const std::string& path, Parse parse) {
  const nlohmann::json j = read_json_file(path);
  try {
    return parse(j);
  } catch (const Error& e) {
    fail(path, ": ", e.what());
  }
}

}  // namespace deepinfer
