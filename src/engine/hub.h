// Model resolution: a local folder, or a Hugging Face repo id found through
// DEEPINFER_HF_MODEL_DIR, then the Hugging Face cache layout (HF_HUB_CACHE / HF_HOME,
// models--org--name/snapshots/<commit>/), then downloaded into that cache (resumable, size and
// hash checked; HF_HUB_OFFLINE=1 forbids it).
#pragma once
#include <string>

namespace deepinfer::engine {

// The folder holding the model's config.json. Throws deepinfer::Error saying what was tried.
std::string resolve_model(const std::string& name_or_path, const std::string& revision = "main");

std::string hf_cache_dir();                       // HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/...
bool looks_like_repo_id(const std::string& name); // "org/name"

}  // namespace deepinfer::engine
