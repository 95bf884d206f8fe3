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
  std::vector<uint8_t> owned;      // the bytes when they are not in a memory map (dummy weights)
  std::vector<float> scale;
  int64_t n = 0, k = 0, block = 0;
  // Dummy weights not generated yet (WeightLoader::stored_spec): no bytes and no scales here; the bytes
  // are random_bytes(random_stream) masked, every scale is scale_value. A backend that keeps the stored
  // format generates them in place (DeviceMemory::random_fill).
  bool generated_later = false;
  uint64_t random_stream = 0;
  uint8_t and_mask = 0xff, or_mask = 0;
  float scale_value = 0;
  size_t byte_count() const { return type == ops::WeightType::kMxfp4 ? n * k / 2 : n * k; }
  size_t scale_count() const {  // scale grid: FP8 [ceil(n / block), ceil(k / block)], MXFP4 [n, k / 32]
    return type == ops::WeightType::kMxfp4 ? n * (k / 32) : ((n + block - 1) / block) * ((k + block - 1) / block);
  }
  ops::QWeight view() const {  // host pointers
    return {type, type == ops::WeightType::kF32 ? static_cast<const void*>(f32.data()) : bytes, scale.data(), n, k, block};
  }
};

// load_format="dummy": random weights in the released formats instead of a checkpoint, for
// benchmarks of shapes no checkpoint here has (vLLM's --load-format dummy). Projections are FP8 e4m3
// with UE8M0 scales per fp8 block (codes of magnitude <= 1.875, scale ~ 1 / sqrt(k)); names with
// `fp4_infix` (the routed experts) are MXFP4, those with a `float_infixes` entry float; norm weights are 1; other float tensors uniform in
// +-1/sqrt(last dim), rounded to bf16 as the release stores them (but the mHC parameters, attn_sink, gate biases: F32). Deterministic in (seed, name), generated in parallel on the host.
struct DummyWeights {
  uint64_t seed = 0;
  std::string fp4_infix = ".ffn.experts.";  // empty: no MXFP4
  // Projections the release stores as BF16 (spec §7.2's precision map): float matrices here.
  // Their values are bf16s (the release's dtype). "head" also names the LM head.
  std::vector<std::string> float_infixes = {".compressor.", ".indexer.wk", ".indexer.weights_proj", ".markov_head.",
                                            ".confidence_head.", "head", ".ffn.gate."};
};

class WeightLoader {
 public:
  // translate: released name -> the name in this checkpoint (identity for released checkpoints).
  WeightLoader(const io::Checkpoint& ckpt, int64_t fp8_block_n, int64_t fp8_block_k,
               std::function<std::string(const std::string&)> translate);
  // Dummy weights (no checkpoint): every name asked for exists.
  WeightLoader(DummyWeights dummy, int64_t fp8_block);
  bool dummy() const { return ckpt_ == nullptr; }

  bool has(const std::string& name) const;
  // A [n, k] matrix `<base>.weight`, dequantized when stored as FP8 or MXFP4.
  std::vector<float> matrix(const std::string& base, int64_t n, int64_t k) const;
  // The same matrix in its stored format (values checked finite).
  StoredMatrix stored(const std::string& base, int64_t n, int64_t k) const;
  // stored(), but dummy FP8 / MXFP4 matrices come back generated_later (no host bytes).
  StoredMatrix stored_spec(const std::string& base, int64_t n, int64_t k) const;
  // A float tensor of the given shape (norm weights, biases, mHC parameters, ...).
  std::vector<float> floats(const std::string& name, const std::vector<int64_t>& shape) const;
  // An integer tensor (I32/I64) of the given shape, e.g. tid2eid.
  std::vector<int32_t> ints(const std::string& name, const std::vector<int64_t>& shape) const;
  // Raw bytes of a tensor of `dtype` and `shape` read in place (memory-mapped tables such as Engram's):
  // a pointer into the checkpoint, or (dummy) random bytes that `keep` owns.
  const uint8_t* raw(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                     std::vector<std::vector<uint8_t>>& keep) const;
  std::string resolve(const std::string& name) const { return translate_(name); }
  const io::Checkpoint& checkpoint() const;  // throws for dummy weights

 private:
  const io::Checkpoint* ckpt_ = nullptr;
  DummyWeights dummy_;
  int64_t block_n_, block_k_;
  std::function<std::string(const std::string&)> translate_;
};

// The CPU backend holds weights as fp32 (FP4-packed I8 tensors unpack to two values a byte); tables
// named in `mapped` (e.g. V4.1's Engram, read row by row from the map) stay out. Throws a clear Error
// when that exceeds 90% of `available_bytes` (default: the machine's physical memory), instead of
// letting the process be killed halfway through loading.
void check_fits_in_memory(const io::Checkpoint& ckpt, const std::vector<std::string>& mapped = {},
                          int64_t available_bytes = 0);
// A backend that keeps weights stored (FP8 / FP4 bytes as they are, float tensors as fp32): throws a clear
// Error naming the bytes needed and free when the weights outside `mapped` cannot fit on `mem`'s device.
void check_fits_on_device(const io::Checkpoint& ckpt, const std::vector<std::string>& mapped, const DeviceMemory& mem);

}  // namespace deepinfer::model
