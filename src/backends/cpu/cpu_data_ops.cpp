// The CPU backend's memory (host memory) and its data-movement ops.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/token_draw.h"

namespace deepinfer::cpu {

void* CpuBackend::allocate(size_t bytes) { return host_memory().allocate(bytes); }
void CpuBackend::release(void* p) { host_memory().release(p); }
void CpuBackend::upload(void* dst, const void* src, size_t bytes) { host_memory().upload(dst, src, bytes); }
void CpuBackend::download(void* dst, const void* src, size_t bytes) { host_memory().download(dst, src, bytes); }
void CpuBackend::copy(void* dst, const void* src, size_t bytes) { host_memory().copy(dst, src, bytes); }
void CpuBackend::zero(void* dst, size_t bytes) { host_memory().zero(dst, bytes); }

void CpuBackend::copy_rows(const float* src, const int32_t* src_idx, int64_t n, int64_t width, float* dst,
                           const int32_t* dst_idx) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = src_idx ? src_idx[i] : i, d = dst_idx ? dst_idx[i] : i;
    if (s >= 0 && d >= 0) std::memcpy(dst + d * width, src + s * width, width * sizeof(float));
  }
}

void CpuBackend::quantize_rows(const float* src, const int32_t* src_idx, int64_t n, int64_t width, RowFormat format,
                               uint8_t* dst, int64_t dst_block_bytes, const int32_t* dst_idx) {
  check(format == RowFormat::kFp8E8m0x32 || format == RowFormat::kFp4E4m3x16 || format == RowFormat::kFp4E8m0x32,
        "quantize_rows: ", row_format_name(format), " is not a quantized row format");
  const int64_t rb = row_bytes(format, width);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = src_idx ? src_idx[i] : i, d = dst_idx ? dst_idx[i] : i;
    if (s >= 0 && d >= 0) quantize_row(src + s * width, width, format, dst + paged_row_offset(d, rb, dst_block_bytes));
  }
}

void CpuBackend::copy_rows_from_bf16(const uint16_t* src, const int32_t* src_idx, int64_t n, int64_t width,
                                     float* dst, const int32_t* dst_idx) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = src_idx ? src_idx[i] : i, d = dst_idx ? dst_idx[i] : i;
    if (s >= 0 && d >= 0)
      for (int64_t c = 0; c < width; ++c) dst[d * width + c] = bf16_to_float(src[s * width + c]);
  }
}

void CpuBackend::copy_2d(const float* src, int64_t src_ld, int64_t rows, int64_t width, float* dst, int64_t dst_ld) {
  for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * dst_ld, src + r * src_ld, width * sizeof(float));
}

void CpuBackend::fill(float* x, int64_t n, float value) { std::fill_n(x, n, value); }
void CpuBackend::scale(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}
void CpuBackend::add(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void CpuBackend::argmax(const float* x, int64_t rows, int64_t n, int32_t* out) {
  for (int64_t r = 0; r < rows; ++r)
    out[r] = static_cast<int32_t>(std::max_element(x + r * n, x + (r + 1) * n) - (x + r * n));
}

void CpuBackend::draw_tokens(const float* x, int64_t vocab, const int32_t* rows, int64_t n, const ops::DrawRow* param,
                             const ops::DrawAdjust* adjust, const uint32_t* mask, float* work, int32_t* token,
                             float* logprob) {
  const int64_t words = (vocab + 31) / 32;
  std::vector<float> scratch;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = x + static_cast<int64_t>(rows[i]) * vocab;
    const ops::DrawRow& r = param[i];
    const int32_t tok = ops::draw_row(row, vocab, r, adjust, r.mask >= 0 ? mask + r.mask * words : nullptr, scratch);
    token[i] = tok;
    logprob[i] = tok >= 0                ? static_cast<float>(row[tok] - ops::log_normalizer(row, vocab))
                 : tok == ops::kDrawNaN ? std::numeric_limits<float>::quiet_NaN()
                                         : -std::numeric_limits<float>::infinity();
  }
}

}  // namespace deepinfer::cpu
