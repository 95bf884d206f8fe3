#include "model/rope.h"

#include <algorithm>
#include <cmath>

namespace deepinfer::model {

RopeTableData make_rope_table(const RopeTable& t, int64_t dim) {
  RopeTableData out;
  out.rope_dim = dim;
  out.attention_factor = static_cast<float>(t.attention_factor);
  const int64_t pairs = dim / 2;
  std::vector<float> pos_freq(pairs), base_freq(pairs);  // theta^(2i/dim) in fp32, like torch's arange/pow
  for (int64_t i = 0; i < pairs; ++i) {
    pos_freq[i] = std::pow(static_cast<float>(t.theta), static_cast<float>(2 * i) / static_cast<float>(dim));
    base_freq[i] = 1.0f / pos_freq[i];
  }
  if (!t.yarn) {
    out.inv_freq = base_freq;
    return out;
  }
  // YaRN (frequency part only): pairs below `low` keep their frequency, above `high` are divided by
  // `factor`, a linear ramp in between. The correction range is computed in double, as the references.
  auto correction_dim = [&](double rotations) {
    return dim * std::log(static_cast<double>(t.original_max_position) / (rotations * 2 * M_PI)) /
           (2 * std::log(t.theta));
  };
  double low = std::max(std::floor(correction_dim(t.beta_fast)), 0.0);
  double high = std::min(std::ceil(correction_dim(t.beta_slow)), static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  out.inv_freq.resize(pairs);
  for (int64_t i = 0; i < pairs; ++i) {
    float ramp = std::clamp((static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low), 0.0f, 1.0f);
    float extrapolation = 1.0f - ramp;
    float interpolated = 1.0f / (static_cast<float>(t.factor) * pos_freq[i]);
    out.inv_freq[i] = interpolated * (1.0f - extrapolation) + base_freq[i] * extrapolation;
  }
  return out;
}

}  // namespace deepinfer::model
