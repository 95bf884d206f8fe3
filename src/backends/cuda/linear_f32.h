// The CUDA backend's fp32 linear in the CPU reference's summation order (internal; see linear_f32.cu).
#pragma once
#include <cstdint>

namespace deepinfer::cuda {

// y[m, n] = x[m, k] w[n, k]^T on `stream` (a cudaStream_t); sizes within int32 (checked by the caller).
void linear_cpu_order(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y, void* stream);

}  // namespace deepinfer::cuda
