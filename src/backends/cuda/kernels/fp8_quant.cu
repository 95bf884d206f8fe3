// Activation quantization to e4m3 with UE8M0 scales per 1 x blk (see fp8_gemm.h): each thread takes 8
// consecutive channels (one 16-byte load of bf16, two of fp32), blk / 8 neighbouring lanes share a
// block's amax by shuffles.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "backends/cuda/kernels/fp8_gemm.h"
#include "core/error.h"

namespace deepinfer::cuda {
namespace {

// Eight consecutive channels of row `row` as fp32 (bf16 widens exactly).
__device__ __forceinline__ void load8(const uint16_t* p, float* v) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = __uint_as_float(w[i] << 16);
    v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
__device__ __forceinline__ void load8(const float* p, float* v) {
  const float4 a = *reinterpret_cast<const float4*>(p), b = *reinterpret_cast<const float4*>(p + 4);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

template <int BLK, typename T>
__global__ void quantize_act_kernel(const T* x, int64_t ldx, int m, int k, uint8_t* q, int64_t ldq,
                                    uint8_t* scale, int64_t ld_s) {
  const int kc = k / 8;
  const int64_t total = static_cast<int64_t>(m) * kc;
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const bool live = c < total;  // no early return: the whole warp takes part in the shuffles
  const int row = live ? static_cast<int>(c / kc) : 0, c8 = live ? static_cast<int>(c % kc) : 0;
  float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  if (live) load8(x + static_cast<int64_t>(row) * ldx + c8 * 8, v);
  float amax = 1e-4f;  // the reference's floor
#pragma unroll
  for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[i]));
#pragma unroll
  for (int o = 1; o < BLK / 8; o *= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  // 2^ceil(log2(amax / 448)) on the fp32 bits: exponent + 1 when any mantissa bit is set.
  const uint32_t r = __float_as_uint(amax / 448.0f);
  const uint32_t byte = (r >> 23) + ((r & 0x7fffffu) != 0);
  const float inv_s = __uint_as_float((254u - byte) << 23);  // 1 / s exactly, so x * inv_s == x / s
  uint32_t out[2] = {0, 0};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float t = fminf(fmaxf(v[i] * inv_s, -448.0f), 448.0f);
    const uint32_t b = __nv_cvt_float_to_fp8(t, __NV_SATFINITE, __NV_E4M3);
    out[i / 4] |= b << (8 * (i % 4));
  }
  if (!live) return;
  *reinterpret_cast<uint2*>(q + static_cast<int64_t>(row) * ldq + c8 * 8) = make_uint2(out[0], out[1]);
  if (c8 % (BLK / 8) == 0) scale[static_cast<int64_t>(c8 * 8 / BLK) * ld_s + row] = static_cast<uint8_t>(byte);
}

template <typename T>
void quantize_act(const T* x, int64_t ldx, int64_t m, int64_t k, int blk, uint8_t* q, int64_t ldq, uint8_t* scale,
                  int64_t ld_s, void* stream) {
  check(blk == 32 || blk == 128, "fp8_quantize_act: blk must be 32 or 128, got ", blk);
  check(m >= 1 && k >= blk && k % blk == 0 && m * (k / 8) < (int64_t{1} << 31),
        "fp8_quantize_act: need m >= 1, k a multiple of blk (m ", m, ", k ", k, ")");
  check(ldx % 8 == 0 && ldq % 8 == 0 && ldx >= k && ldq >= k && ld_s >= m, "fp8_quantize_act: bad strides");
  check(reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(q) % 8 == 0,
        "fp8_quantize_act: x must be 16-byte and q 8-byte aligned");
  const int64_t total = m * (k / 8);
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>((total + threads - 1) / threads);
  auto s = static_cast<cudaStream_t>(stream);
  if (blk == 32)
    quantize_act_kernel<32><<<blocks, threads, 0, s>>>(x, ldx, static_cast<int>(m), static_cast<int>(k), q, ldq, scale, ld_s);
  else
    quantize_act_kernel<128><<<blocks, threads, 0, s>>>(x, ldx, static_cast<int>(m), static_cast<int>(k), q, ldq, scale, ld_s);
  const cudaError_t e = cudaGetLastError();
  check(e == cudaSuccess, "fp8_quantize_act: launch failed: ", cudaGetErrorString(e));
}

}  // namespace

void fp8_quantize_act(const uint16_t* x, int64_t ldx, int64_t m, int64_t k, int blk, uint8_t* q, int64_t ldq,
                      uint8_t* scale, int64_t ld_s, void* stream) {
  quantize_act(x, ldx, m, k, blk, q, ldq, scale, ld_s, stream);
}

void fp8_quantize_act(const float* x, int64_t ldx, int64_t m, int64_t k, int blk, uint8_t* q, int64_t ldq,
                      uint8_t* scale, int64_t ld_s, void* stream) {
  quantize_act(x, ldx, m, k, blk, q, ldq, scale, ld_s, stream);
}

}  // namespace deepinfer::cuda
