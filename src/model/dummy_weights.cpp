#include "model/dummy_weights.h"

#include <cmath>
#include <cstring>

#include "core/thread_pool.h"

namespace deepinfer::model {
namespace {

constexpr size_t kChunk = size_t{1} << 20;

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t stream_of(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull ^ seed;  // FNV-1a of the name, keyed by the seed
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

// The power of two nearest 1/sqrt(k), as a float.
float inv_sqrt_pow2(int64_t k) { return std::ldexp(1.0f, -static_cast<int>(std::lround(0.5 * std::log2(static_cast<double>(k))))); }

}  // namespace

std::vector<uint8_t> dummy_bytes(uint64_t seed, const std::string& name, size_t n, uint8_t and_mask, uint8_t or_mask) {
  std::vector<uint8_t> out(n);
  const uint64_t base = stream_of(seed, name);
  const int64_t chunks = static_cast<int64_t>((n + kChunk - 1) / kChunk);
  parallel_for(chunks, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      uint64_t s = base + static_cast<uint64_t>(c) * 0x632be59bd9b4e019ull;
      const size_t b0 = static_cast<size_t>(c) * kChunk, b1 = std::min(n, b0 + kChunk);
      for (size_t i = b0; i < b1; i += 8) {
        const uint64_t r = splitmix(s);
        for (size_t j = 0; j < 8 && i + j < b1; ++j) out[i + j] = static_cast<uint8_t>((r >> (8 * j)) & and_mask) | or_mask;
      }
    }
  });
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
      uint64_t s = base + static_cast<uint64_t>(c) * 0x632be59bd9b4e019ull;
      for (int64_t i = c * static_cast<int64_t>(kChunk); i < std::min(n, (c + 1) * static_cast<int64_t>(kChunk)); ++i)
        out[i] = a * (static_cast<float>(splitmix(s) >> 40) * 0x1p-23f - 1.0f);  // uniform [-a, a)
    }
  });
  return out;
}

StoredMatrix dummy_matrix(uint64_t seed, const std::string& base, int64_t n, int64_t k, int64_t block) {
  StoredMatrix m;
  m.n = n;
  m.k = k;
  if (block > 0) {  // e4m3 codes 0x00..0x3f with either sign: |v| <= 1.875, never NaN
    m.type = ops::WeightType::kFp8Block;
    m.block = block;
    m.owned = dummy_bytes(seed, base + ".weight", static_cast<size_t>(n * k), 0xbf, 0);
    m.scale.assign(((n + block - 1) / block) * ((k + block - 1) / block), inv_sqrt_pow2(k));
  } else {  // e2m1 pairs, any code (|v| <= 6): a quarter of the scale for the larger values
    m.type = ops::WeightType::kMxfp4;
    m.block = 32;
    m.owned = dummy_bytes(seed, base + ".weight", static_cast<size_t>(n * k / 2), 0xff, 0);
    m.scale.assign(n * (k / 32), inv_sqrt_pow2(k) * 0.25f);
  }
  m.bytes = m.owned.data();
  return m;
}

}  // namespace deepinfer::model
