// Internal to the CUDA backend's sources: the backend's state (Impl), the status checks and small
// device helpers shared by cuda_backend.cu, memory.cu and the op files.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/kernels/fp_formats.cuh"
#include "core/error.h"

namespace deepinfer::cuda {

inline void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("CUDA error in ", what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}
inline void check_cublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    fail("cuBLAS error in ", what, ": ", cublasGetStatusName(s), " (", cublasGetStatusString(s), ")");
}
// After each launch: configuration errors show at once; execution errors show at synchronize().
inline void check_launch(const char* kernel) { check_cuda(cudaGetLastError(), kernel); }
inline void check_sizes(bool ok, const char* op) { check(ok, "cuda ", op, ": invalid sizes"); }
inline unsigned grid_for(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

constexpr float kInf = std::numeric_limits<float>::infinity();

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = v < w ? w : v;
  }
  return v;
}

// Block-wide sum; every thread gets the result. `red` holds 32 floats. blockDim.x is a multiple of 32.
__device__ __forceinline__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // red may still be read by a previous call
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < warps ? red[lane] : 0.0f;
  return warp_sum(v);
}

// exp / log1p through double, rounded once to float: the correctly rounded results, as glibc's expf and
// log1pf (the CPU backend's) give in all but vanishingly rare cases. For the few serial transcendentals
// whose 1-ulp differences decide discrete things (the routing's top-k, the mHC weights, the Engram gate), and
// the CUDA-core kernels of the exact paths, so that their transcendentals are the CPU libm's (CUDA's expf
// is within 2 ulp). That did not close the exact-mode gap it was written for (docs/performance.md).
__device__ __forceinline__ float expf_cr(float x) { return static_cast<float>(exp(static_cast<double>(x))); }
__device__ __forceinline__ float log1pf_cr(float x) { return static_cast<float>(log1p(static_cast<double>(x))); }

struct CudaBackend::Impl {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  int max_smem_optin = 48 * 1024;
  int sms = 1;  // streaming multiprocessors
  int attention_kernel = CudaBackend::kAttnAuto;
  bool linear_gemv = true;
  bool batch_invariant = false;  // fixed reduction orders (fp8_gemm never splits K)
  bool exact_gemm = false;  // DEEPINFER_FP8_GEMM=exact: linear_quant dequantizes, sums in the CPU's orders (its bits)
  bool exact_attention = false;  // DEEPINFER_ATTENTION=exact: sparse_attention_online stays on the fp32 kernel
  cudaEvent_t marks[DeviceMemory::kMarks] = {};  // DeviceMemory::mark's time points, made on first use
  void* scratch = nullptr;  // workspace of the ops that need one (the top-k rows), grown on demand
  size_t scratch_bytes = 0;

  // Makes this backend's GPU current for the calling thread (a process may hold one backend per GPU).
  void bind() const {
    int cur = -1;
    check_cuda(cudaGetDevice(&cur), "cudaGetDevice");
    if (cur != device) check_cuda(cudaSetDevice(device), "cudaSetDevice");
  }
  // Checks that `smem` bytes of dynamic shared memory fit one block here (else an Error of `what...`) and
  // lets `kernel` take them past the 48 KB default; `attr` names the attribute call in CUDA's errors.
  template <typename Kernel, typename... What>
  void allow_smem(Kernel kernel, size_t smem, const char* attr, const What&... what) {
    check(smem <= static_cast<size_t>(max_smem_optin), what...);
    if (smem > 48 * 1024)
      check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)), attr);
  }
  // A workspace of at least `bytes`, valid for the ops enqueued until the next call (stream order).
  void* workspace(size_t bytes) {
    if (bytes <= scratch_bytes) return scratch;
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize (workspace)");  // earlier ops may use it
    if (scratch) check_cuda(cudaFree(scratch), "cudaFree (workspace)");
    scratch = nullptr;
    scratch_bytes = 0;
    check_cuda(cudaMalloc(&scratch, bytes), "cudaMalloc (workspace)");
    scratch_bytes = bytes;
    return scratch;
  }
};

// bf16 round trip (RNE, NaN -> canonical NaN), bit for bit core/dtype.h's round_to_bf16.
__device__ __forceinline__ float bf16_round(float x) {
  if (isnan(x)) return __uint_as_float(0x7fc00000u);
  uint32_t u = __float_as_uint(x);
  u += 0x7fff + ((u >> 16) & 1);
  return __uint_as_float(u & 0xffff0000u);
}
// bf16 bits widened (exact).
__device__ __forceinline__ float bf16_widen(uint16_t b) { return __uint_as_float(uint32_t{b} << 16); }

}  // namespace deepinfer::cuda
