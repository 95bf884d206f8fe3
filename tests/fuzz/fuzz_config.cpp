// Fuzz target: config.json for DeepSeek-V4 and V4.1. Any value of any field is accepted with its
// meaning or refused with deepinfer::Error; nothing else may escape (no crash, no bad_alloc).
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/deepseek_v4/v4_config.h"
#include "model/deepseek_v41/v41_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto j = nlohmann::json::parse(data, data + size, nullptr, false);
  if (j.is_discarded()) return 0;
  try {
    deepinfer::model::V4Config::from_json(j);
  } catch (const deepinfer::Error&) {
  }
  try {
    auto c = deepinfer::model::V41Config::from_json(j);
    (void)c.packed_bytes_per_token();
    (void)c.packed_ring_bytes();
    for (int64_t l = 0; l < c.n_layers; ++l) (void)c.role(l);
  } catch (const deepinfer::Error&) {
  }
  return 0;
}
