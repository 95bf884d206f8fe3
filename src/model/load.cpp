#include "model/load.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_file.h"
#include "model/deepseek_v4/v4_model.h"
#include "model/deepseek_v41/v41_model.h"

namespace deepinfer::model {

std::unique_ptr<CausalLM> load_causal_lm(const std::string& dir) {
  namespace fs = std::filesystem;
  check(fs::is_directory(dir), "model: '", dir, "' is not a folder");
  const std::string config_path = dir + "/config.json";
  check(fs::exists(config_path), "model: '", dir, "' has no config.json");
  const nlohmann::json j = read_json_file(config_path);
  const std::string type = j.value("model_type", "");
  if (type == "deepseek_v4") return V4Model::load(dir);
  if (type == "deepseek_v41") return V41Model::load(dir);
  fail(config_path, ": model_type '", type, "' is not supported (supported: deepseek_v4, deepseek_v41)");
}

}  // namespace deepinfer::model
