// Opens a model folder (config.json + safetensors) as the CausalLM its config names.
#pragma once
#include <memory>
#include <string>

#include "model/causal_lm.h"

namespace deepinfer::model {

// Dispatches on config.json's model_type (deepseek_v4). Errors name the folder and the problem.
std::unique_ptr<CausalLM> load_causal_lm(const std::string& model_dir);

}  // namespace deepinfer::model
