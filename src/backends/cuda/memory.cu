// The CUDA backend's memory (DeviceMemory) and its data-movement ops, as cpu_data_ops.cpp defines them.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backends/cuda/cuda_internal.cuh"
#include "core/random_bytes.h"

namespace deepinfer::cuda {
namespace {

// One block per row i; the block's threads copy the row's `width` floats.
__global__ void copy_rows_kernel(const float* __restrict__ src, const int32_t* __restrict__ src_idx, int64_t width,
                                 float* __restrict__ dst, const int32_t* __restrict__ dst_idx) {
  const int64_t i = blockIdx.x;
  const int64_t s = src_idx ? src_idx[i] : i, d = dst_idx ? dst_idx[i] : i;
  if (s < 0 || d < 0) return;
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x) dst[d * width + c] = src[s * width + c];
}

// quantize_rows: one thread per scale block of one row (core/row_format.cpp's quantize_row: the amax
// floor, the scale, codes of v / s clamped to the format's range).
__global__ void quantize_rows_kernel(const float* __restrict__ src, const int32_t* __restrict__ src_idx, int64_t n,
                                     int64_t width, RowFormat f, uint8_t* __restrict__ dst, int64_t block_bytes,
                                     const int32_t* __restrict__ dst_idx) {
  const bool fp4 = f != RowFormat::kFp8E8m0x32, e4m3_scale = f == RowFormat::kFp4E4m3x16;
  const int B = e4m3_scale ? 16 : 32;
  const int64_t nb = width / B, e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= n * nb) return;
  const int64_t i = e / nb, b = e % nb;
  const int64_t s = src_idx ? src_idx[i] : i, d = dst_idx ? dst_idx[i] : i;
  if (s < 0 || d < 0) return;
  const float* v = src + s * width + b * B;
  uint8_t* row = dst + paged_row_offset_d(d, row_bytes_d(f, width), block_bytes);
  float amax = !fp4 ? 1e-4f : e4m3_scale ? 6.0f * 0.001953125f : 6.0f * 1.1754943508222875e-38f;
  for (int k = 0; k < B; ++k) {
    const float a = fabsf(v[k]);
    amax = amax < a ? a : amax;  // std::max(amax, a)
  }
  const float qmax = fp4 ? 6.0f : 448.0f;
  uint32_t sb;
  float sc;
  if (e4m3_scale) {
    const float ratio = __fdiv_rn(amax, 6.0f);
    sb = float_to_e4m3_d(448.0f < ratio ? 448.0f : ratio);  // std::min(ratio, 448)
    sc = e4m3_to_float_d(sb);
  } else {
    sb = ue8m0_ceil_byte_d(__fdiv_rn(amax, qmax));
    sc = e8m0_to_float_d(sb);
  }
  row[(fp4 ? width / 2 : width) + b] = static_cast<uint8_t>(sb);
  for (int k = 0; k < B; k += 2) {
    float q[2];
    for (int h = 0; h < 2; ++h) {
      const float x = __fdiv_rn(v[k + h], sc);
      q[h] = x < -qmax ? -qmax : (qmax < x ? qmax : x);  // std::clamp
    }
    if (fp4) {
      row[(b * B + k) / 2] = static_cast<uint8_t>(float_to_e2m1_d(q[0]) | (float_to_e2m1_d(q[1]) << 4));
    } else {
      row[b * B + k] = static_cast<uint8_t>(float_to_e4m3_d(q[0]));
      row[b * B + k + 1] = static_cast<uint8_t>(float_to_e4m3_d(q[1]));
    }
  }
}

// copy_rows_kernel from bf16 rows, widened exactly.
__global__ void copy_rows_from_bf16_kernel(const uint16_t* __restrict__ src, const int32_t* __restrict__ src_idx,
                                           int64_t width, float* __restrict__ dst, const int32_t* __restrict__ dst_idx) {
  const int64_t i = blockIdx.x;
  const int64_t s = src_idx ? src_idx[i] : i, d = dst_idx ? dst_idx[i] : i;
  if (s < 0 || d < 0) return;
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x)
    dst[d * width + c] = bf16_widen(src[s * width + c]);
}

// One thread per 8 bytes: core random_bytes' words in closed form (random_word), masked.
__global__ void random_fill_kernel(uint8_t* dst, size_t bytes, uint64_t stream, uint8_t and_mask, uint8_t or_mask) {
  const size_t w = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (w * 8 >= bytes) return;
  const uint64_t r = random_word(stream, w);
  if (w * 8 + 8 <= bytes && reinterpret_cast<uintptr_t>(dst) % 8 == 0) {
    uint64_t out = 0;
    for (int j = 0; j < 8; ++j) out |= static_cast<uint64_t>(((r >> (8 * j)) & and_mask) | or_mask) << (8 * j);
    reinterpret_cast<uint64_t*>(dst)[w] = out;
    return;
  }
  for (size_t j = 0; j < 8 && w * 8 + j < bytes; ++j) dst[w * 8 + j] = static_cast<uint8_t>((r >> (8 * j)) & and_mask) | or_mask;
}

__global__ void fill_kernel(float* x, int64_t n, float value) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e < n) x[e] = value;
}
__global__ void scale_kernel(float* x, int64_t n, float s) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e < n) x[e] = __fmul_rn(x[e], s);
}
__global__ void add_kernel(float* x, const float* __restrict__ y, int64_t n) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e < n) x[e] = __fadd_rn(x[e], y[e]);
}

// std::max_element's answer: index 0 when x[0] is NaN (nothing compares above it), else the first
// index of the largest non-NaN value (a NaN later never compares above the running maximum). That is
// a reduction over (value, index) with NaNs ignored, so one block per row reduces it in any order.
constexpr int kArgmaxThreads = 256;
__global__ void argmax_kernel(const float* __restrict__ x, int64_t n, int32_t* out) {
  __shared__ float val[kArgmaxThreads];
  __shared__ int64_t idx[kArgmaxThreads];
  const float* row = x + blockIdx.x * n;
  float best = -kInf;
  int64_t bi = -1;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    if (row[j] > best || (bi < 0 && row[j] == row[j])) best = row[j], bi = j;  // j ascends per thread
  val[threadIdx.x] = best;
  idx[threadIdx.x] = bi;
  __syncthreads();
  for (int s = kArgmaxThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      const float v2 = val[threadIdx.x + s];
      const int64_t i2 = idx[threadIdx.x + s];
      const int64_t i1 = idx[threadIdx.x];
      if (i2 >= 0 && (i1 < 0 || v2 > val[threadIdx.x] || (v2 == val[threadIdx.x] && i2 < i1))) {
        val[threadIdx.x] = v2;
        idx[threadIdx.x] = i2;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = static_cast<int32_t>(row[0] != row[0] || idx[0] < 0 ? 0 : idx[0]);
}

}  // namespace

Device CudaBackend::device() const { return Device{DeviceKind::kCuda, impl_->device}; }

void* CudaBackend::allocate(size_t bytes) {
  impl_->bind();
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 256));  // cudaMalloc aligns to 256 bytes
  if (e != cudaSuccess) {
    cudaGetLastError();  // an out-of-memory error is not sticky: clear it so later calls do not see it
    fail("cuda:", impl_->device, ": out of device memory allocating ", bytes, " bytes (", cudaGetErrorString(e), ")");
  }
  return p;
}

void CudaBackend::release(void* p) {
  if (!p) return;
  // At process exit the runtime may be unloading before objects in statics free their buffers: the
  // memory goes with the process, so that is not an error.
  int cur = -1;
  cudaError_t e = cudaGetDevice(&cur);
  if (e == cudaSuccess && cur != impl_->device) e = cudaSetDevice(impl_->device);
  if (e == cudaSuccess) e = cudaFree(p);  // waits for the device: no op still reads p
  if (e == cudaErrorCudartUnloading) return;
  check_cuda(e, "cudaFree");
}

void CudaBackend::upload(void* dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  impl_->bind();
  // From pageable memory CUDA copies the source to a staging buffer before returning, so the caller
  // may reuse host_src at once; from pinned memory the copy is asynchronous (keep it until a sync).
  check_cuda(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, impl_->stream), "upload");
}

void CudaBackend::download(void* host_dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  impl_->bind();
  // Pageable: a pinned two-chunk bounce was tried and measured slower (66 MB of logits in 12.1 ms against
  // 7.6 ms, docs/performance.md); what a large read costs beyond that is the destination's first touch.
  check_cuda(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, impl_->stream), "download");
  check_cuda(cudaStreamSynchronize(impl_->stream), "download (cudaStreamSynchronize)");
}

void CudaBackend::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  impl_->bind();
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, impl_->stream), "copy");
}

void CudaBackend::zero(void* dst, size_t bytes) {
  if (bytes == 0) return;
  impl_->bind();
  check_cuda(cudaMemsetAsync(dst, 0, bytes, impl_->stream), "zero");
}

void CudaBackend::fill_bytes(void* dst, size_t bytes, uint8_t value) {
  if (bytes == 0) return;
  impl_->bind();
  check_cuda(cudaMemsetAsync(dst, value, bytes, impl_->stream), "fill_bytes");
}

void CudaBackend::random_fill(void* dst, size_t bytes, uint64_t stream, uint8_t and_mask, uint8_t or_mask) {
  if (bytes == 0) return;
  impl_->bind();
  const size_t words = (bytes + 7) / 8;
  random_fill_kernel<<<static_cast<unsigned>((words + 255) / 256), 256, 0, impl_->stream>>>(
      static_cast<uint8_t*>(dst), bytes, stream, and_mask, or_mask);
  check_launch("random_fill_kernel");
}

bool CudaBackend::memory_info(size_t* free_bytes, size_t* total_bytes) const {
  impl_->bind();
  check_cuda(cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo");
  return true;
}

void CudaBackend::copy_rows(const float* src, const int32_t* src_idx, int64_t n, int64_t width, float* dst,
                            const int32_t* dst_idx) {
  check_sizes(n >= 0 && width >= 0 && n <= INT32_MAX, "copy_rows");
  if (n == 0 || width == 0) return;
  impl_->bind();
  copy_rows_kernel<<<static_cast<unsigned>(n), width >= 256 ? 256 : 64, 0, impl_->stream>>>(src, src_idx, width, dst,
                                                                                           dst_idx);
  check_launch("copy_rows_kernel");
}

void CudaBackend::quantize_rows(const float* src, const int32_t* src_idx, int64_t n, int64_t width, RowFormat format,
                                uint8_t* dst, int64_t dst_block_bytes, const int32_t* dst_idx) {
  check(format == RowFormat::kFp8E8m0x32 || format == RowFormat::kFp4E4m3x16 || format == RowFormat::kFp4E8m0x32,
        "quantize_rows: ", row_format_name(format), " is not a quantized row format");
  check_sizes(n >= 0 && row_format_ok(format, width) && dst_block_bytes >= 0 &&
                  (dst_block_bytes == 0 || dst_block_bytes >= row_bytes(format, width)),
              "quantize_rows");
  const int64_t blocks = n * (width / (format == RowFormat::kFp4E4m3x16 ? 16 : 32));
  if (blocks == 0) return;
  impl_->bind();
  quantize_rows_kernel<<<grid_for(blocks, 128), 128, 0, impl_->stream>>>(src, src_idx, n, width, format, dst,
                                                                         dst_block_bytes, dst_idx);
  check_launch("quantize_rows_kernel");
}

void CudaBackend::copy_rows_from_bf16(const uint16_t* src, const int32_t* src_idx, int64_t n, int64_t width,
                                      float* dst, const int32_t* dst_idx) {
  check_sizes(n >= 0 && width >= 0 && n <= INT32_MAX, "copy_rows_from_bf16");
  if (n == 0 || width == 0) return;
  impl_->bind();
  copy_rows_from_bf16_kernel<<<static_cast<unsigned>(n), width >= 256 ? 256 : 64, 0, impl_->stream>>>(
      src, src_idx, width, dst, dst_idx);
  check_launch("copy_rows_from_bf16_kernel");
}

void CudaBackend::copy_2d(const float* src, int64_t src_ld, int64_t rows, int64_t width, float* dst, int64_t dst_ld) {
  check_sizes(rows >= 0 && width >= 0 && (rows <= 1 || (src_ld >= width && dst_ld >= width)), "copy_2d");
  if (rows == 0 || width == 0) return;
  impl_->bind();
  const size_t w = static_cast<size_t>(width) * sizeof(float);
  const size_t sp = rows == 1 ? w : static_cast<size_t>(src_ld) * sizeof(float);
  const size_t dp = rows == 1 ? w : static_cast<size_t>(dst_ld) * sizeof(float);
  check_cuda(cudaMemcpy2DAsync(dst, dp, src, sp, w, static_cast<size_t>(rows), cudaMemcpyDeviceToDevice,
                               impl_->stream),
             "copy_2d (cudaMemcpy2DAsync)");
}

void CudaBackend::fill(float* x, int64_t n, float value) {
  check_sizes(n >= 0, "fill");
  if (n == 0) return;
  impl_->bind();
  fill_kernel<<<grid_for(n, 256), 256, 0, impl_->stream>>>(x, n, value);
  check_launch("fill_kernel");
}

void CudaBackend::scale(float* x, int64_t n, float s) {
  check_sizes(n >= 0, "scale");
  if (n == 0) return;
  impl_->bind();
  scale_kernel<<<grid_for(n, 256), 256, 0, impl_->stream>>>(x, n, s);
  check_launch("scale_kernel");
}

void CudaBackend::add(float* x, const float* y, int64_t n) {
  check_sizes(n >= 0, "add");
  if (n == 0) return;
  impl_->bind();
  add_kernel<<<grid_for(n, 256), 256, 0, impl_->stream>>>(x, y, n);
  check_launch("add_kernel");
}

void CudaBackend::argmax(const float* x, int64_t rows, int64_t n, int32_t* out) {
  check_sizes(rows >= 0 && n >= 0 && rows <= INT32_MAX && n <= INT32_MAX, "argmax");
  if (rows == 0) return;
  impl_->bind();
  if (n == 0) return check_cuda(cudaMemsetAsync(out, 0, rows * sizeof(int32_t), impl_->stream), "argmax (n 0)");
  argmax_kernel<<<static_cast<unsigned>(rows), kArgmaxThreads, 0, impl_->stream>>>(x, n, out);
  check_launch("argmax_kernel");
}

}  // namespace deepinfer::cuda
