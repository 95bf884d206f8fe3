// Random tensors for load_format="dummy" (see DummyWeights in weight_loader.h): deterministic in
// (seed, name), filled in parallel in independent 1 MiB chunks, so any thread count gives the same bytes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/weight_loader.h"

namespace deepinfer::model {

// n bytes: (random & and_mask) | or_mask.
std::vector<uint8_t> dummy_bytes(uint64_t seed, const std::string& name, size_t n, uint8_t and_mask, uint8_t or_mask);
// Norm weights (names ending in "norm.weight") are 1; the rest uniform in +-1/sqrt(last dim).
std::vector<float> dummy_floats(uint64_t seed, const std::string& name, const std::vector<int64_t>& shape);
// base.weight [n, k]: FP8 e4m3 with block x block scales (block > 0), else MXFP4 (k % 32 == 0).
StoredMatrix dummy_matrix(uint64_t seed, const std::string& base, int64_t n, int64_t k, int64_t block);
// The same, generated_later: its type, shape, block, random stream, masks and scale value only.
StoredMatrix dummy_matrix_spec(uint64_t seed, const std::string& base, int64_t n, int64_t k, int64_t block);

}  // namespace deepinfer::model
