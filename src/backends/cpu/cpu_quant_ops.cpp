// The CPU backend's quantized linear: the reference's act_quant + block-scaled GEMM on dequantized
// weights. The CPU keeps weights dequantized (weight_format: kF32); a stored-format QWeight is
// dequantized for the call.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "core/error.h"

namespace deepinfer::cpu {

void dequantize(const ops::QWeight& w, float* out) {
  const int64_t n = w.n, k = w.k;
  switch (w.type) {
    case ops::WeightType::kF32:
      std::memcpy(out, w.data, static_cast<size_t>(n * k) * sizeof(float));
      return;
    case ops::WeightType::kBf16: {
      const auto* bits = static_cast<const uint16_t*>(w.data);
      for (int64_t i = 0; i < n * k; ++i) out[i] = bf16_to_float(bits[i]);
      return;
    }
    case ops::WeightType::kFp8Block: {
      const auto* q = static_cast<const uint8_t*>(w.data);
      const int64_t gk = (k + w.block - 1) / w.block;
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < k; ++c)
          out[r * k + c] = e4m3_to_float(q[r * k + c]) * w.scale[(r / w.block) * gk + c / w.block];
      return;
    }
    case ops::WeightType::kMxfp4: {
      const auto* q = static_cast<const uint8_t*>(w.data);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < k; c += 2) {
          const uint8_t byte = q[r * (k / 2) + c / 2];
          const float s = w.scale[r * (k / 32) + c / 32];
          out[r * k + c] = e2m1_to_float(byte & 0xf) * s;
          out[r * k + c + 1] = e2m1_to_float(byte >> 4) * s;
        }
      return;
    }
  }
  fail("dequantize: unknown weight type");
}

void CpuBackend::linear_plain(const float* x, int64_t m, const ops::QWeight& w, float* y) {
  if (w.type != ops::WeightType::kBf16) return ops::Backend::linear_plain(x, m, w, y);
  thread_local std::vector<float> wf;  // the CPU keeps float weights as fp32; bf16 ones come from tests
  wf.resize(w.n * w.k);
  dequantize(w, wf.data());
  linear(x, m, w.k, wf.data(), w.n, y);
}

void CpuBackend::linear_block_diag(const float* x, int64_t m, const ops::QWeight& w, int64_t groups, bool bf16_out,
                                   float* y) {
  check(groups > 0 && w.n % groups == 0, "linear_block_diag: ", w.n, " rows do not split into ", groups, " groups");
  const int64_t G = groups, R = w.n / G, k = w.k;
  thread_local std::vector<float> xg, yg;  // one group's columns, contiguous
  xg.resize(m * k);
  yg.resize(m * R);
  ops::QWeight stack = w;
  stack.n = R;
  stack.groups = G;
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t i = 0; i < m; ++i) std::copy_n(x + (i * G + g) * k, k, xg.data() + i * k);
    linear_plain(xg.data(), m, stack.group(g), yg.data());
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < R; ++j) y[(i * G + g) * R + j] = bf16_out ? round_to_bf16(yg[i * R + j]) : yg[i * R + j];
  }
}

void CpuBackend::linear_quant(const float* x, int64_t m, const ops::QWeight& w, int64_t act_block, float* y) {
  thread_local std::vector<float> xq, wf;  // reused: no allocation per call once warm
  xq.assign(x, x + m * w.k);
  fake_quant_fp8(xq.data(), m, w.k, act_block);
  const float* wd = static_cast<const float*>(w.data);
  if (w.type != ops::WeightType::kF32) {  // a stored weight (tests; the model's are dequantized at load)
    wf.resize(w.n * w.k);
    dequantize(w, wf.data());
    wd = wf.data();
  }
  linear_kblocked(xq.data(), m, w.k, wd, w.n, 32, y);  // FP8/FP4 kernels walk K in blocks of 32
  round_bf16(y, m * w.n);
}

}  // namespace deepinfer::cpu

namespace deepinfer::ops {

std::vector<uint8_t> gemm_scale_bytes(const QWeight& w) {
  if (w.type == WeightType::kF32 || !w.scale) return {};
  const bool fp4 = w.type == WeightType::kMxfp4;
  const int64_t rows = fp4 ? w.n : (w.n + w.block - 1) / w.block, cols = fp4 ? w.k / 32 : (w.k + w.block - 1) / w.block;
  std::vector<uint8_t> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float s = w.scale[r * cols + c];
      int e = 0;
      if (!(s > 0) || std::frexp(s, &e) != 0.5f || e - 1 < -127 || e - 1 > 127) return {};  // s = 2^(e-1)
      out[fp4 ? c * rows + r : r * cols + c] = static_cast<uint8_t>(e - 1 + 127);
    }
  return out;
}

}  // namespace deepinfer::ops
