#include "core/json_file.h"

#include <fstream>

#include "core/error.h"

namespace deepinfer {

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  check(in.good(), path, ": cannot open");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": not valid JSON (", e.what(), ")");
  }
}

}  // namespace deepinfer
