#include "model/load.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/env.h"
#include "core/error.h"
#include "core/json_file.h"
#include "model/deepseek_v4/v4_model.h"
#include "model/deepseek_v41/v41_model.h"

namespace deepinfer::model {

namespace {

// config.json's model_type, with errors that name the file.
std::string model_type_of(const std::string& dir) {
  namespace fs = std::filesystem;
  check(fs::is_directory(dir), "model: '", dir, "' is not a folder");
  const std::string config_path = dir + "/config.json";
  check(fs::exists(config_path), "model: '", dir, "' has no config.json");
  const nlohmann::json j = read_json_file(config_path);
  check(j.is_object(), config_path, ": config: the file must be a JSON object, got a JSON ", j.type_name());
  const auto it = j.find("model_type");
  const std::string type = it != j.end() && it->is_string() ? it->get<std::string>() : "";
  check(type == "deepseek_v4" || type == "deepseek_v41", config_path, ": config: model_type = ",
        it == j.end() ? "(absent)" : it->dump(), ": not supported (supported: \"deepseek_v4\", \"deepseek_v41\")");
  return type;
}

}  // namespace

std::unique_ptr<CausalLM> load_causal_lm(const std::string& dir, const std::string& device,
                                         const std::string& load_format,
                                         std::shared_ptr<parallel::ExpertParallel> expert_parallel,
                                         std::shared_ptr<parallel::ContextParallel> context_parallel) {
  const std::string type = model_type_of(dir);
  V41Options options = V41Options::from_env();
  options.device = Device::resolve(device);
  const std::string format = load_format.empty() ? env_string("DEEPINFER_LOAD_FORMAT") : load_format;
  check(format.empty() || format == "auto" || format == "dummy", "load_format = '", format,
        "': not supported (auto: the checkpoint; dummy: random weights)");
  options.dummy_weights = format == "dummy";
  options.expert_parallel = std::move(expert_parallel);
  options.context_parallel = std::move(context_parallel);
  check(!options.dummy_weights || type == "deepseek_v41", dir, ": load_format = dummy is for DeepSeek-V4.1 configs");
  if (type == "deepseek_v4") {
    check(!options.expert_parallel, dir, ": expert parallelism is built for DeepSeek-V4.1 only, this is a V4 checkpoint");
    check(!options.context_parallel, dir, ": context parallelism is built for DeepSeek-V4.1 only, this is a V4 checkpoint");
    V4LoadOptions v4;
    v4.device = options.device;
    return V4Model::load(dir, v4);
  }
  return V41Model::load(dir, options);
}

void check_servable(const std::string& dir) {
  if (model_type_of(dir) != "deepseek_v41") return;
  const V41Config c = V41Config::from_file(dir + "/config.json");
  check(c.engram_layer_ids.empty() || std::filesystem::exists(dir + "/tokenizer.json"), dir,
        ": this V4.1 model has Engram layers, which hash token strings from the model's own tokenizer.json; "
        "the folder has none, so every request would fail");
}

int64_t checkpoint_context_length(const std::string& dir) {
  if (model_type_of(dir) == "deepseek_v4") return V4Config::from_file(dir + "/config.json").max_position_embeddings;
  return V41Config::from_file(dir + "/config.json").max_position_embeddings;
}

}  // namespace deepinfer::model
