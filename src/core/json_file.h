// Reading a JSON file with errors that name the file (config.json, tokenizer_config.json, ...).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace deepinfer {

// Throws deepinfer::Error "<path>: cannot open" / "<path>: not valid JSON (...)".
nlohmann::json read_json_file(const std::string& path);

}  // namespace deepinfer
