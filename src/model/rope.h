// RoPE frequency tables (default and YaRN), computed in fp32 as the references do.
#pragma once
#include <vector>

#include "model/deepseek_v4/v4_config.h"
#include "ops/ops.h"

namespace deepinfer::model {

struct RopeTableData {
  std::vector<float> inv_freq;  // [rope_dim / 2]
  int64_t rope_dim = 0;
  float attention_factor = 1.0f;
  ops::RopeFreqs freqs() const { return {inv_freq.data(), rope_dim, attention_factor}; }
};

RopeTableData make_rope_table(const RopeTable& t, int64_t rope_dim);

}  // namespace deepinfer::model
