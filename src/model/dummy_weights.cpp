#include "model/dummy_weights.h"

#include <cmath>
#include <cstring>

#include "core/random_bytes.h"
#include "core/thread_pool.h"

namespace deepinfer::model {
namespace {

constexpr size_t kChunk = kRandomChunk;  // floats: chunks of kChunk elements, one splitmix output each

uint64_t splitmix(uint64_t& s) { return splitmix_mix(s += kSplitmixGamma); }

uint64_t stream_of(uint64_t seed, const std::string& name) { return random_stream(seed, name.data(), name.size()); }

// The power of two nearest 1/sqrt(k), as a float.
float inv_sqrt_pow2(int64_t k) { return std::ldexp(1.0f, -static_cast<int>(std::lround(0.5 * std::log2(static_cast<double>(k))))); }

}  // namespace

std::vector<uint8_t> dummy_bytes(uint64_t seed, const std::string& name, size_t n, uint8_t and_mask, uint8_t or_mask) {
  std::vector<uint8_t> out(n);
  random_bytes(stream_of(seed, name), out.data(), n, and_mask, or_mask);
  return out;
}

std::vector<float> dummy_floats(uint64_t seed, const std::string& name, const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const bool norm = name.size() >= 11 && name.compare(name.size() - 11, 11, "norm.weight") == 0;
  if (norm) return std::vector<float>(n, 1.0f);
  const float a = shape.empty() ? 1.0f : 1.0f / std::sqrt(static_cast<float>(std::max<int64_t>(1, shape.back())));
  std::vector<float> out(n);
  const uint64_t base = stream_of(seed, name);
  const int64_t chunks = (n + static_cast<int64_t>(kChunk) - 1) / static_cast<int64_t>(kChunk);
  parallel_for(chunks, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      uint64_t s = base + static_cast<uint64_t>(c) * kRandomStride;
      for (int64_t i = c * static_cast<int64_t>(kChunk); i < std::min(n, (c + 1) * static_cast<int64_t>(kChunk)); ++i)
        out[i] = a * (static_cast<float>(splitmix(s) >> 40) * 0x1p-23f - 1.0f);  // uniform [-a, a)
    }
  });
  return out;
}

StoredMatrix dummy_matrix_spec(uint64_t seed, const std::string& base, int64_t n, int64_t k, int64_t block) {
  StoredMatrix m;
  m.n = n;
  m.k = k;
  m.generated_later = true;
  m.random_stream = stream_of(seed, base + ".weight");
  if (block > 0) {  // e4m3 codes 0x00..0x3f with either sign: |v| <= 1.875, never NaN
    m.type = ops::WeightType::kFp8Block;
    m.block = block;
    m.and_mask = 0xbf;
    m.scale_value = inv_sqrt_pow2(k);
  } else {  // e2m1 pairs, any code (|v| <= 6): a quarter of the scale for the larger values
    m.type = ops::WeightType::kMxfp4;
    m.block = 32;
    m.scale_value = inv_sqrt_pow2(k) * 0.25f;
  }
  return m;
}

StoredMatrix dummy_matrix(uint64_t seed, const std::string& base, int64_t n, int64_t k, int64_t block) {
  StoredMatrix m = dummy_matrix_spec(seed, base, n, k, block);
  m.generated_later = false;
  m.owned.resize(m.byte_count());
  random_bytes(m.random_stream, m.owned.data(), m.owned.size(), m.and_mask, m.or_mask);
  m.scale.assign(m.scale_count(), m.scale_value);
  m.bytes = m.owned.data();
  return m;
}

}  // namespace deepinfer::model
