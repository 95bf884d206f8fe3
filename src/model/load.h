// Opens a model folder (config.json + safetensors) as the CausalLM its config names.
#pragma once
#include <memory>
#include <string>

#include "model/causal_lm.h"

namespace deepinfer::parallel {
class ContextParallel;
class ExpertParallel;
}

namespace deepinfer::model {

// Dispatches on config.json's model_type (deepseek_v4). Errors name the folder and the problem.
// device: "cpu", "cuda", "cuda:N", or empty for DEEPINFER_DEVICE (V4 runs on the CPU only).
// load_format: "auto" (the checkpoint), "dummy" (random weights, V4.1 only); empty: DEEPINFER_LOAD_FORMAT.
// expert_parallel: this rank's MoE expert parallelism (V4.1 only; it loads the rank's experts).
// context_parallel: this rank's context parallelism (V4.1 only; model/context_parallel_lm.h runs the ranks).
std::unique_ptr<CausalLM> load_causal_lm(const std::string& model_dir, const std::string& device = "",
                                         const std::string& load_format = "",
                                         std::shared_ptr<parallel::ExpertParallel> expert_parallel = nullptr,
                                         std::shared_ptr<parallel::ContextParallel> context_parallel = nullptr);

// The context the checkpoint was trained for: max_position_embeddings wherever the released layout
// keeps it (V4: the root; V4.1: text_config), validated with the rest of the config.
int64_t checkpoint_context_length(const std::string& model_dir);

// Throws when the folder loads but could not serve a request (V4.1 Engram without tokenizer.json).
void check_servable(const std::string& model_dir);

}  // namespace deepinfer::model
