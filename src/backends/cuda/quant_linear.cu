// CudaBackend::linear_quant: weights stay in their stored format on the device (FP8 e4m3 blocks, MXFP4).
// Fast path: the activations are quantized to e4m3 with UE8M0 scales per 1 x act_block
// (fp8_quantize_act, bit-identical to fake_quant_fp8) and the tensor-core block-scaled GEMM
// (kernels/fp8_gemm.h) writes bf16, widened into y. It needs the weight's scales as UE8M0 bytes
// (QWeight::scale_ue8m0), k % 128 == 0, act_block equal to the weight's block (32 or 128; MXFP4: 32) and
// n even (MXFP4: n % 128 == 0). Anything else (small test models, fp32 scales) takes the exact path:
// the weight dequantized into scratch and the CPU reference's order, bitwise the CPU's; so does every
// shape under DEEPINFER_FP8_GEMM=exact (verification against the goldens).
// CudaBackend::linear_plain on bf16 weights (the release's BF16 projections and head, kept bf16): x
// rounded to bf16 (the reference's values), cuBLAS's bf16 GEMM with fp32 accumulation (the GEMV up
// to m = 4); batch invariant: the GEMV, whose order does not depend on m, over chunks of rows; exact:
// the weight widened and linear()'s CPU order.
#include <algorithm>

#include "backends/cuda/cuda_internal.cuh"
#include "backends/cuda/gemv.h"
#include "backends/cuda/kernels/fp8_gemm.h"
#include "backends/cuda/linear_f32.h"
#include "ops/ops.h"

namespace deepinfer::cuda {
namespace {

// The weight's scales: its UE8M0 bytes in the GEMM's layout where it has them (the model then uploads no
// fp32 copy), else the fp32 scales. A UE8M0 byte b is 2^(b - 127), exactly the fp32 scale it came from.
struct DequantScales {
  const float* f32;     // [ceil(n / block), ceil(k / block)] (FP8) or [n, k / 32] (MXFP4)
  const uint8_t* ue8m0; // the same FP8 layout, or MXFP4 K-block-major [k / 32, ld]
  int64_t ld;
};
__device__ __forceinline__ float ue8m0_to_float_d(uint32_t b) { return ldexpf(1.0f, static_cast<int>(b) - 127); }

__global__ void dequant_fp8_block_kernel(const uint8_t* __restrict__ q, DequantScales sc, int64_t n, int64_t k,
                                         int64_t block, float* __restrict__ out) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= n * k) return;
  const int64_t r = e / k, c = e % k, gk = (k + block - 1) / block, i = (r / block) * gk + c / block;
  out[e] = __fmul_rn(e4m3_to_float_d(q[e]), sc.ue8m0 ? ue8m0_to_float_d(sc.ue8m0[i]) : sc.f32[i]);
}

__global__ void dequant_mxfp4_kernel(const uint8_t* __restrict__ q, DequantScales sc, int64_t n, int64_t k,
                                     float* __restrict__ out) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;  // one byte = two values
  if (e >= n * k / 2) return;
  const int64_t r = (2 * e) / k, c = (2 * e) % k;
  const float s = sc.ue8m0 ? ue8m0_to_float_d(sc.ue8m0[(c / 32) * sc.ld + r]) : sc.f32[r * (k / 32) + c / 32];
  out[2 * e] = __fmul_rn(e2m1_to_float_d(q[e] & 0xf), s);
  out[2 * e + 1] = __fmul_rn(e2m1_to_float_d(q[e] >> 4), s);
}

__global__ void widen_bf16_kernel(const uint16_t* __restrict__ in, int64_t n, float* __restrict__ out) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e < n) out[e] = __uint_as_float(static_cast<uint32_t>(in[e]) << 16);
}

__global__ void to_bf16_kernel(const float* __restrict__ in, int64_t n, uint16_t* __restrict__ out) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e < n) out[e] = static_cast<uint16_t>(__float_as_uint(bf16_round(in[e])) >> 16);
}

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

bool tensor_core_path(const ops::QWeight& w, int64_t act_block) {
  const bool fp4 = w.type == ops::WeightType::kMxfp4;
  return w.scale_ue8m0 && (w.groups == 1 || (fp4 ? w.scale_ld == 0 : w.n % w.block == 0)) && w.k % 128 == 0 && reinterpret_cast<uintptr_t>(w.data) % 16 == 0 &&
         (fp4 ? act_block == 32 && w.n % 128 == 0 : w.block == act_block && (w.block == 32 || w.block == 128) && w.n % 2 == 0);
}

}  // namespace

// The tensor-core path: activations quantized, then fp8_gemm (grouped over w.groups when offsets is set).
void CudaBackend::gemm_tensor_cores(const float* x, int64_t m, const ops::QWeight& w, const int32_t* offsets,
                                    int64_t max_rows, float* y) {
  const bool fp4 = w.type == ops::WeightType::kMxfp4;
  const int blk = fp4 ? 32 : static_cast<int>(w.block);
  const int64_t ld_as = static_cast<int64_t>(round_up(m, 16));
  Fp8GemmArgs a;
  a.lda = w.k, a.ld_as = ld_as;
  a.w = static_cast<const uint8_t*>(w.data), a.ldw = fp4 ? w.k / 2 : w.k;
  a.w_scale = w.scale_ue8m0, a.ld_ws = fp4 ? (w.scale_ld ? w.scale_ld : w.groups * w.n) : w.k / blk;
  a.ldy = w.n, a.m = m, a.n = w.n, a.k = w.k, a.blk = blk;
  a.wfmt = fp4 ? WeightFormat::kMxfp4 : WeightFormat::kFp8Block;
  a.batch_invariant = impl_->batch_invariant;
  if (offsets) a.groups = static_cast<int>(w.groups), a.group_offsets = offsets, a.max_group_rows = std::min(max_rows, m);
  const size_t qbytes = round_up(m * w.k, 256), sbytes = round_up((w.k / blk) * ld_as, 256),
               ybytes = round_up(m * w.n * 2, 256), gbytes = round_up(fp8_gemm_workspace_bytes(a), 256);
  auto* ws = static_cast<uint8_t*>(impl_->workspace(qbytes + sbytes + ybytes + gbytes));
  uint8_t *aq = ws, *as = ws + qbytes;
  auto* yb = reinterpret_cast<uint16_t*>(ws + qbytes + sbytes);
  fp8_quantize_act(x, w.k, m, w.k, blk, aq, w.k, as, ld_as, impl_->stream);
  a.a = aq, a.a_scale = as;
  if (fp4) a.y = yb;  // the MXFP4 kernels write bf16: widened below
  else a.y_f32 = y;
  fp8_gemm(a, gbytes ? ws + qbytes + sbytes + ybytes : nullptr, impl_->stream);
  if (!fp4) return;
  widen_bf16_kernel<<<grid_for(m * w.n, 256), 256, 0, impl_->stream>>>(yb, m * w.n, y);
  check_launch("widen_bf16_kernel");
}

void CudaBackend::linear_quant_grouped(const float* x, int64_t m, const ops::QWeight& w, const int32_t* offsets,
                                       int64_t max_rows, int64_t act_block, float* y) {
  impl_->bind();
  check_sizes(m >= 0 && w.groups >= 1 && max_rows >= 0, "linear_quant_grouped");
  if (m == 0 || w.n == 0) return;
  if (w.type != ops::WeightType::kF32 && !impl_->exact_gemm && w.groups <= 512 && tensor_core_path(w, act_block) &&
      reinterpret_cast<uintptr_t>(x) % 16 == 0)
    return gemm_tensor_cores(x, m, w, offsets, max_rows, y);
  ops::Backend::linear_quant_grouped(x, m, w, offsets, max_rows, act_block, y);  // group by group
}

void CudaBackend::linear_quant(const float* x, int64_t m, const ops::QWeight& w, int64_t act_block, float* y) {
  impl_->bind();
  check_sizes(m >= 0 && w.n >= 0 && w.k >= 0 && m * w.k <= INT32_MAX * int64_t{16}, "linear_quant");
  if (m == 0 || w.n == 0) return;
  const bool stored = w.type != ops::WeightType::kF32;
  check(!stored || w.block > 0, "cuda linear_quant: a stored weight needs its scale block");
  check(!stored || w.scale || w.scale_ue8m0, "cuda linear_quant: a stored weight needs its scales");
  check(w.type != ops::WeightType::kMxfp4 || w.k % 32 == 0, "cuda linear_quant: MXFP4 needs k % 32 == 0");
  if (stored && !impl_->exact_gemm && tensor_core_path(w, act_block) && reinterpret_cast<uintptr_t>(x) % 16 == 0)
    return gemm_tensor_cores(x, m, w, nullptr, m, y);
  const size_t xbytes = static_cast<size_t>(m * w.k) * sizeof(float);
  const size_t wbytes = stored ? static_cast<size_t>(w.n * w.k) * sizeof(float) : 0;
  char* ws = static_cast<char*>(impl_->workspace((xbytes + 255) / 256 * 256 + wbytes));
  float* xq = reinterpret_cast<float*>(ws);
  const float* wf = static_cast<const float*>(w.data);
  if (stored) {
    float* d = reinterpret_cast<float*>(ws + (xbytes + 255) / 256 * 256);
    const auto* q = static_cast<const uint8_t*>(w.data);
    const DequantScales sc{w.scale, w.scale_ue8m0, w.scale_ld ? w.scale_ld : w.groups * w.n};
    if (w.type == ops::WeightType::kFp8Block) {
      dequant_fp8_block_kernel<<<grid_for(w.n * w.k, 256), 256, 0, impl_->stream>>>(q, sc, w.n, w.k, w.block, d);
      check_launch("dequant_fp8_block_kernel");
    } else {
      dequant_mxfp4_kernel<<<grid_for(w.n * w.k / 2, 256), 256, 0, impl_->stream>>>(q, sc, w.n, w.k, d);
      check_launch("dequant_mxfp4_kernel");
    }
    wf = d;
  }
  check_cuda(cudaMemcpyAsync(xq, x, xbytes, cudaMemcpyDeviceToDevice, impl_->stream), "cudaMemcpyAsync (linear_quant)");
  fake_quant_fp8(xq, m, w.k, act_block);
  linear_kblocked(xq, m, w.k, wf, w.n, 32, y);  // FP8/FP4 kernels walk K in blocks of 32
  round_bf16(y, m * w.n);
}

void CudaBackend::linear_plain(const float* x, int64_t m, const ops::QWeight& w, float* y) {
  if (w.type != ops::WeightType::kBf16) return ops::Backend::linear_plain(x, m, w, y);
  impl_->bind();
  check_sizes(m >= 0 && w.n >= 0 && w.k >= 0 && m <= INT32_MAX && w.n <= INT32_MAX && w.k <= INT32_MAX, "linear_plain");
  if (m == 0 || w.n == 0) return;
  const auto* wb = static_cast<const uint16_t*>(w.data);
  const bool invariant_gemv = impl_->batch_invariant && gemv_fits(wb, 1, w.k, wb, w.n, 2);
  if (impl_->exact_gemm || (impl_->batch_invariant && !invariant_gemv)) {
    auto* wf = static_cast<float*>(impl_->workspace(static_cast<size_t>(w.n * w.k) * sizeof(float)));
    widen_bf16_kernel<<<grid_for(w.n * w.k, 256), 256, 0, impl_->stream>>>(wb, w.n * w.k, wf);
    check_launch("widen_bf16_kernel");
    return linear(x, m, w.k, wf, w.n, y);
  }
  auto* xb = static_cast<uint16_t*>(impl_->workspace(round_up(static_cast<size_t>(m * w.k) * 2, 256)));
  to_bf16_kernel<<<grid_for(m * w.k, 256), 256, 0, impl_->stream>>>(x, m * w.k, xb);
  check_launch("to_bf16_kernel");
  if (!invariant_gemv) return linear_bf16(xb, m, w.k, wb, w.n, y);
  for (int64_t r = 0; r < m; r += kGemvMaxM)  // the same order for every row, whatever m
    gemv_bf16(xb + r * w.k, std::min<int64_t>(kGemvMaxM, m - r), w.k, wb, w.n, y + r * w.n, impl_->stream);
}

// The fast path: x to bf16 once, then one launch for every group: the block-diagonal GEMV at decode sizes
// (the rounding in its epilogue), else cuBLAS's strided batched bf16 GEMM. The CPU's order (exact, or
// batch-invariant past the GEMV, or float weights): the weight widened once, each group's columns through
// linear()'s CPU-order kernel on strided rows.
void CudaBackend::linear_block_diag(const float* x, int64_t m, const ops::QWeight& w, int64_t groups, bool bf16_out,
                                    float* y) {
  impl_->bind();
  check(groups > 0 && w.n % groups == 0, "linear_block_diag: ", w.n, " rows do not split into ", groups, " groups");
  check_sizes(m >= 0 && w.n >= 0 && w.k >= 0 && m <= INT32_MAX && w.n <= INT32_MAX && groups * w.k <= INT32_MAX,
              "linear_block_diag");
  if (m == 0 || w.n == 0) return;
  check(w.type == ops::WeightType::kBf16 || w.type == ops::WeightType::kF32,
        "cuda linear_block_diag: float weights only (kF32, kBf16)");
  const int64_t G = groups, R = w.n / G, k = w.k, width = G * k;
  const auto* wb = static_cast<const uint16_t*>(w.data);
  const bool bf16 = w.type == ops::WeightType::kBf16;
  const bool gemv = impl_->linear_gemv && bf16 && gemv_fits(wb, 1, k, wb, w.n, 2);
  if (bf16 && !impl_->exact_gemm && (!impl_->batch_invariant || gemv)) {
    auto* xb = static_cast<uint16_t*>(impl_->workspace(round_up(static_cast<size_t>(m * width) * 2, 256)));
    to_bf16_kernel<<<grid_for(m * width, 256), 256, 0, impl_->stream>>>(x, m * width, xb);
    check_launch("to_bf16_kernel");
    if (gemv && (impl_->batch_invariant || m <= kLinearBf16GemvMaxM)) {
      for (int64_t r = 0; r < m; r += kGemvMaxM)  // batch invariant: the same order for every row, whatever m
        gemv_bf16_block_diag(xb + r * width, std::min<int64_t>(kGemvMaxM, m - r), k, G, wb, R, bf16_out,
                             y + r * w.n, impl_->stream);
      return;
    }
    // Row-major y_g [m, R] (ld G R) = x_g [m, k] (ld G k) w_g [R, k]^T, column-major as in linear_bf16.
    const float one = 1.0f, zero = 0.0f;
    check_cublas(cublasGemmStridedBatchedEx(impl_->blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(R), static_cast<int>(m),
                                            static_cast<int>(k), &one, wb, CUDA_R_16BF, static_cast<int>(k), R * k, xb,
                                            CUDA_R_16BF, static_cast<int>(width), k, &zero, y, CUDA_R_32F,
                                            static_cast<int>(w.n), R, static_cast<int>(G), CUBLAS_COMPUTE_32F,
                                            CUBLAS_GEMM_DEFAULT),
                 "linear_block_diag (cublasGemmStridedBatchedEx bf16)");
  } else {
    const float* wf = static_cast<const float*>(w.data);
    if (bf16) {
      auto* d = static_cast<float*>(impl_->workspace(static_cast<size_t>(w.n * k) * sizeof(float)));
      widen_bf16_kernel<<<grid_for(w.n * k, 256), 256, 0, impl_->stream>>>(wb, w.n * k, d);
      check_launch("widen_bf16_kernel");
      wf = d;
    }
    for (int64_t g = 0; g < G; ++g)
      linear_cpu_order_strided(x + g * k, width, m, k, wf + g * R * k, R, y + g * R, w.n, impl_->stream);
  }
  if (bf16_out) round_bf16(y, m * w.n);
}

void CudaBackend::set_batch_invariant(bool on) { impl_->batch_invariant = on; }

}  // namespace deepinfer::cuda
