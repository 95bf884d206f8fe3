// CudaBackend::linear_quant: weights stay in their stored format on the device (FP8 e4m3 blocks, MXFP4);
// a call dequantizes the weight into scratch and runs the CPU reference's order (fake_quant_fp8 of a
// copy of x, then linear_kblocked), so the result is bitwise the CPU's. The tensor-core FP8 GEMM
// (kernels/fp8_gemm.h) replaces this behind the same op once its numerics are matched to the goldens.
#include "backends/cuda/cuda_internal.cuh"
#include "ops/ops.h"

namespace deepinfer::cuda {
namespace {

__global__ void dequant_fp8_block_kernel(const uint8_t* __restrict__ q, const float* __restrict__ scale, int64_t n,
                                         int64_t k, int64_t block, float* __restrict__ out) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= n * k) return;
  const int64_t r = e / k, c = e % k, gk = (k + block - 1) / block;
  out[e] = __fmul_rn(e4m3_to_float_d(q[e]), scale[(r / block) * gk + c / block]);
}

__global__ void dequant_mxfp4_kernel(const uint8_t* __restrict__ q, const float* __restrict__ scale, int64_t n,
                                     int64_t k, float* __restrict__ out) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;  // one byte = two values
  if (e >= n * k / 2) return;
  const int64_t r = (2 * e) / k, c = (2 * e) % k;
  const float s = scale[r * (k / 32) + c / 32];
  out[2 * e] = __fmul_rn(e2m1_to_float_d(q[e] & 0xf), s);
  out[2 * e + 1] = __fmul_rn(e2m1_to_float_d(q[e] >> 4), s);
}

}  // namespace

void CudaBackend::linear_quant(const float* x, int64_t m, const ops::QWeight& w, int64_t act_block, float* y) {
  impl_->bind();
  check_sizes(m >= 0 && w.n >= 0 && w.k >= 0 && m * w.k <= INT32_MAX * int64_t{16}, "linear_quant");
  if (m == 0 || w.n == 0) return;
  const bool stored = w.type != ops::WeightType::kF32;
  check(!stored || w.block > 0, "cuda linear_quant: a stored weight needs its scale block");
  check(w.type != ops::WeightType::kMxfp4 || w.k % 32 == 0, "cuda linear_quant: MXFP4 needs k % 32 == 0");
  const size_t xbytes = static_cast<size_t>(m * w.k) * sizeof(float);
  const size_t wbytes = stored ? static_cast<size_t>(w.n * w.k) * sizeof(float) : 0;
  char* ws = static_cast<char*>(impl_->workspace((xbytes + 255) / 256 * 256 + wbytes));
  float* xq = reinterpret_cast<float*>(ws);
  const float* wf = static_cast<const float*>(w.data);
  if (stored) {
    float* d = reinterpret_cast<float*>(ws + (xbytes + 255) / 256 * 256);
    const auto* q = static_cast<const uint8_t*>(w.data);
    if (w.type == ops::WeightType::kFp8Block) {
      dequant_fp8_block_kernel<<<grid_for(w.n * w.k, 256), 256, 0, impl_->stream>>>(q, w.scale, w.n, w.k, w.block, d);
      check_launch("dequant_fp8_block_kernel");
    } else {
      dequant_mxfp4_kernel<<<grid_for(w.n * w.k / 2, 256), 256, 0, impl_->stream>>>(q, w.scale, w.n, w.k, d);
      check_launch("dequant_mxfp4_kernel");
    }
    wf = d;
  }
  check_cuda(cudaMemcpyAsync(xq, x, xbytes, cudaMemcpyDeviceToDevice, impl_->stream), "cudaMemcpyAsync (linear_quant)");
  fake_quant_fp8(xq, m, w.k, act_block);
  linear_kblocked(xq, m, w.k, wf, w.n, 32, y);  // FP8/FP4 kernels walk K in blocks of 32
}

}  // namespace deepinfer::cuda
