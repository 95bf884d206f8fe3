// The CUDA backend's fp32 linear in the CPU reference's summation order (internal; see linear_f32.cu).
#pragma once
#include <cstdint>

namespace deepinfer::cuda {

// y[m, n] = x[m, k] w[n, k]^T on `stream` (a cudaStream_t); sizes within int32 (checked by the caller).
void linear_cpu_order(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y, void* stream);
// The same with row strides: x row i at x + i * ldx, y row i at y + i * ldy (a group of a block-diagonal linear).
void linear_cpu_order_strided(const float* x, int64_t ldx, int64_t m, int64_t k, const float* w, int64_t n, float* y,
                              int64_t ldy, void* stream);

}  // namespace deepinfer::cuda
