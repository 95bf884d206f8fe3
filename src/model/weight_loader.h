// Reads model weights from a checkpoint as fp32 for the CPU backend, whatever their stored format:
// float (F32/BF16/F16), FP8 e4m3 with UE8M0 block scales (`<name>.scale`), or MXFP4 (I8/U8 packed
// two per byte, low nibble first, with one UE8M0 scale per 32 along K). Names are the released ones;
// a checkpoint saved by transformers is read through `NameMap` (see v4_names.h).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "ops/ops.h"

namespace deepinfer::model {

// A matrix as the checkpoint stores it: fp32 values (float formats, widened), or FP8 / MXFP4 bytes
// (pointing into the memory-mapped checkpoint) with their scales widened to fp32.
struct StoredMatrix {
  ops::WeightType type = ops::WeightType::kF32;
  std::vector<float> f32;          // kF32
  const uint8_t* bytes = nullptr;  // kFp8Block: [n, k]; kMxfp4: [n, k / 2]
  std::vector<float> scale;
  int64_t n = 0, k = 0, block = 0;
  size_t byte_count() const { return type == ops::WeightType::kMxfp4 ? n * k / 2 : n * k; }
  ops::QWeight view() const {  // host pointers
    return {type, type == ops::WeightType::kF32 ? static_cast<const void*>(f32.data()) : bytes, scale.data(), n, k, block};
  }
};

class WeightLoader {
 public:
  // translate: released name -> the name in this checkpoint (identity for released checkpoints).
  WeightLoader(const io::Checkpoint& ckpt, int64_t fp8_block_n, int64_t fp8_block_k,
               std::function<std::string(const std::string&)> translate);

  bool has(const std::string& name) const;
  // A [n, k] matrix `<base>.weight`, dequantized when stored as FP8 or MXFP4.
  std::vector<float> matrix(const std::string& base, int64_t n, int64_t k) const;
  // The same matrix in its stored format (values checked finite).
  StoredMatrix stored(const std::string& base, int64_t n, int64_t k) const;
  // A float tensor of the given shape (norm weights, biases, mHC parameters, ...).
  std::vector<float> floats(const std::string& name, const std::vector<int64_t>& shape) const;
  // An integer tensor (I32/I64) of the given shape, e.g. tid2eid.
  std::vector<int32_t> ints(const std::string& name, const std::vector<int64_t>& shape) const;
  const io::Checkpoint& checkpoint() const { return ckpt_; }
  std::string resolve(const std::string& name) const { return translate_(name); }

 private:
  const io::Checkpoint& ckpt_;
  int64_t block_n_, block_k_;
  std::function<std::string(const std::string&)> translate_;
};

// The CPU backend holds weights as fp32 (FP4-packed I8 tensors unpack to two values a byte); tables
// named in `mapped` (e.g. V4.1's Engram, read row by row from the map) stay out. Throws a clear Error
// when that exceeds 90% of `available_bytes` (default: the machine's physical memory), instead of
// letting the process be killed halfway through loading.
void check_fits_in_memory(const io::Checkpoint& ckpt, const std::vector<std::string>& mapped = {},
                          int64_t available_bytes = 0);

}  // namespace deepinfer::model
