// Weights of the DeepSeek models on a backend's device, shared by V4 and V4.1: a parameter (a float
// tensor) and a projection in the format the backend keeps it (ops::QWeight).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/weight_loader.h"
#include "ops/ops.h"

namespace deepinfer::model {

// A float parameter on the backend's device.
struct Param {
  Buffer buf;
  int64_t size = 0;
  float* data() const { return static_cast<float*>(buf.data()); }
  bool empty() const { return size == 0; }
};

Param to_param(DeviceMemory& mem, const std::vector<float>& host);

// A lookup table [rows, width] (the token embedding) on the backend's device: its stored BF16 where the
// values are bf16s (the release's dtype: half the bytes and no fp32 copy), else fp32.
struct RowTable {
  Buffer buf;
  int64_t rows = 0, width = 0;
  bool bf16 = false;
  // dst row i = table row idx[i] (device I32; < 0 skips), widened to fp32.
  void gather(ops::Backend& be, const int32_t* idx, int64_t n, float* dst) const;
};

RowTable row_table(ops::Backend& be, const std::vector<float>& f32, int64_t rows, int64_t width);

// A projection: quant = stored FP8/FP4 and run as the reference's quantized linear (activations
// FP8-quantized first). w holds the backend's format (ops::Backend::weight_format): the stored bytes
// with `scale` (the GPU), or fp32 values (the CPU, and every plain linear); q is what the ops read.
struct QLinear {
  Param w, scale;
  Buffer scale_ue8m0;  // the scales in the tensor-core GEMM's layout (ops::gemm_scale_bytes), when stored
  ops::QWeight q;
  int64_t n = 0, k = 0;
  bool quant = false;
};

// `<base>.weight` [n, k] onto the backend. plain: run without activation quantization whatever the
// stored format (dequantized at load; kept bf16 where the backend keeps bf16 and the values are bf16s).
QLinear load_linear(ops::Backend& be, const WeightLoader& w, const std::string& base, int64_t n, int64_t k,
                    bool plain = false);
// A float [n, k] matrix from the host (values as given: fp32, or bf16 where exact and the backend keeps bf16).
QLinear plain_linear(ops::Backend& be, std::vector<float> f32, int64_t n, int64_t k);

// The matrices `bases` [n, k] each (a layer's routed experts) stacked in one allocation: q.groups = the
// count, q.group(g) one of them (the grouped GEMM walks them by offset). plain: as load_linear.
QLinear load_stacked(ops::Backend& be, const WeightLoader& w, const std::vector<std::string>& bases, int64_t n, int64_t k,
                     bool plain = false);

}  // namespace deepinfer::model
