#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/weight_tile.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <cmath>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace deepinfer::cpu {

// a * b rounded to float on its own: the compiler may not fuse it with the add that follows into an FMA
// (GCC did so for hc % 4 streams of hc_collapse and not for the others; the CUDA kernel must know which).
inline float product_rn(float a, float b) {
  float p = a * b;
#if defined(__GNUC__)
  asm("" : "+m"(p));  // p leaves the register: no contraction across this point
#endif
  return p;
}

float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  for (; i < n; ++i) acc[i & 7] += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

void CpuBackend::linear(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y) {
  // Every output is dot(x row, w row): 8 interleaved partial sums (channel c into sum c % 8), combined
  // as ((0+4)+(1+5))+((2+6)+(3+7)). Computed for 8 outputs (a weight tile) x 2 rows at a time.
  constexpr int64_t J = 8, I = 2;
  parallel_for((n + J - 1) / J, [&](int64_t t0, int64_t t1) {
    std::vector<v8> tile(k);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t j0 = t * J, nj = std::min(J, n - j0);
      pack_tile(w + j0 * k, nj, k, tile.data());
      for (int64_t i0 = 0; i0 < m; i0 += I) {
        const int64_t ni = std::min(I, m - i0);
        v8 acc[I][8] = {};
        for (int64_t r = 0; r < ni; ++r) {
          const float* xr = x + (i0 + r) * k;
          for (int64_t c = 0; c < k; ++c) acc[r][c & 7] += xr[c] * tile[c];
        }
        for (int64_t r = 0; r < ni; ++r) {
          const v8* a = acc[r];
          const v8 sum = ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
          for (int64_t l = 0; l < nj; ++l) y[(i0 + r) * n + j0 + l] = sum[l];
        }
      }
    }
  }, std::max<int64_t>(1, 256 / std::max<int64_t>(1, m)));
}

void CpuBackend::rms_norm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* y,
                          bool bf16_out) {
  parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * dim;
      float* yr = y + r * dim;
      float r_inv = 1.0f / std::sqrt(dot(xr, xr, dim) / static_cast<float>(dim) + eps);
      for (int64_t i = 0; i < dim; ++i) yr[i] = weight ? weight[i] * (xr[i] * r_inv) : xr[i] * r_inv;
      if (bf16_out)
        for (int64_t i = 0; i < dim; ++i) yr[i] = round_to_bf16(yr[i]);
    }
  }, 16);
}

void CpuBackend::rope(float* x, int64_t rows, int64_t heads, int64_t dim, const int64_t* positions,
                      const ops::RopeFreqs& f, bool inverse, bool bf16_out) {
  const int64_t pairs = f.rope_dim / 2;
  parallel_for(rows, [&](int64_t r0, int64_t r1) {
    std::vector<float> cs(pairs), sn(pairs);
    for (int64_t r = r0; r < r1; ++r) {
      float pos = static_cast<float>(positions[r]);
      for (int64_t i = 0; i < pairs; ++i) {
        float angle = f.inv_freq[i] * pos;  // fp32 product, as the reference's table
        cs[i] = std::cos(angle) * f.attention_factor;
        sn[i] = std::sin(angle) * f.attention_factor * (inverse ? -1.0f : 1.0f);
      }
      for (int64_t h = 0; h < heads; ++h) {
        float* v = x + (r * heads + h) * dim + (dim - f.rope_dim);
        for (int64_t i = 0; i < pairs; ++i) {
          float a = v[2 * i], b = v[2 * i + 1];
          v[2 * i] = a * cs[i] - b * sn[i];
          v[2 * i + 1] = b * cs[i] + a * sn[i];
          if (bf16_out) v[2 * i] = round_to_bf16(v[2 * i]), v[2 * i + 1] = round_to_bf16(v[2 * i + 1]);
        }
      }
    }
  }, 4);
}

void CpuBackend::sparse_attention(const float* q, int64_t tokens, int64_t heads, int64_t dim, const float* pool,
                                  const int32_t* idx, int64_t k, const float* sink, float scale, float* out) {
  parallel_for(tokens * heads, [&](int64_t a0, int64_t a1) {
    std::vector<float> s(k);
    for (int64_t a = a0; a < a1; ++a) {
      int64_t t = a / heads, h = a % heads;
      const float* qv = q + a * dim;
      const int32_t* it = idx + t * k;
      float m = sink[h];
      for (int64_t j = 0; j < k; ++j) {
        s[j] = it[j] >= 0 ? scale * dot(qv, pool + static_cast<int64_t>(it[j]) * dim, dim)
                          : -std::numeric_limits<float>::infinity();
        m = std::max(m, s[j]);
      }
      float z = std::exp(sink[h] - m);
      for (int64_t j = 0; j < k; ++j) {
        s[j] = it[j] >= 0 ? std::exp(s[j] - m) : 0.0f;
        z += s[j];
      }
      float* o = out + a * dim;
      std::fill(o, o + dim, 0.0f);
      for (int64_t j = 0; j < k; ++j) {
        if (it[j] < 0) continue;
        const float* v = pool + static_cast<int64_t>(it[j]) * dim;
        float p = s[j] / z;
        for (int64_t c = 0; c < dim; ++c) o[c] += p * v[c];
      }
    }
  }, 4);
}

namespace {
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
}  // namespace

void CpuBackend::hc_weights(const float* x, int64_t rows, int64_t hc, int64_t dim, const float* fn,
                            const float* base, const float* scale, float rms_eps, float hc_eps,
                            int64_t sinkhorn_iters, float* pre, float* post, float* comb) {
  const int64_t width = hc * dim;
  const int64_t outs = comb ? (2 + hc) * hc : hc;
  parallel_for(rows, [&](int64_t r0, int64_t r1) {
    std::vector<float> m(outs), normed(width);
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * width;
      float r_inv = 1.0f / std::sqrt(dot(xr, xr, width) / static_cast<float>(width) + rms_eps);
      for (int64_t o = 0; o < outs; ++o) m[o] = dot(xr, fn + o * width, width) * r_inv;
      for (int64_t i = 0; i < hc; ++i) pre[r * hc + i] = sigmoid(m[i] * scale[0] + base[i]) + hc_eps;
      if (!comb) continue;
      for (int64_t i = 0; i < hc; ++i) post[r * hc + i] = 2.0f * sigmoid(m[hc + i] * scale[1] + base[hc + i]);
      float* c = comb + r * hc * hc;
      for (int64_t j = 0; j < hc; ++j) {  // softmax over each row j, then + eps
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t k = 0; k < hc; ++k) {
          c[j * hc + k] = m[2 * hc + j * hc + k] * scale[2] + base[2 * hc + j * hc + k];
          mx = std::max(mx, c[j * hc + k]);
        }
        float z = 0;
        for (int64_t k = 0; k < hc; ++k) z += (c[j * hc + k] = std::exp(c[j * hc + k] - mx));
        for (int64_t k = 0; k < hc; ++k) c[j * hc + k] = c[j * hc + k] / z + hc_eps;
      }
      auto normalize_columns = [&] {
        for (int64_t k = 0; k < hc; ++k) {
          float s = 0;
          for (int64_t j = 0; j < hc; ++j) s += c[j * hc + k];
          for (int64_t j = 0; j < hc; ++j) c[j * hc + k] /= (s + hc_eps);
        }
      };
      normalize_columns();
      for (int64_t it = 1; it < sinkhorn_iters; ++it) {
        for (int64_t j = 0; j < hc; ++j) {
          float s = 0;
          for (int64_t k = 0; k < hc; ++k) s += c[j * hc + k];
          for (int64_t k = 0; k < hc; ++k) c[j * hc + k] /= (s + hc_eps);
        }
        normalize_columns();
      }
    }
  }, 4);
}

void CpuBackend::softmax_pool(const float* kv, const float* gate, int64_t windows, int64_t slots, int64_t channels,
                              float* z) {
  parallel_for(windows, [&](int64_t w0, int64_t w1) {
    for (int64_t w = w0; w < w1; ++w) {
      for (int64_t c = 0; c < channels; ++c) {
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t s = 0; s < slots; ++s) mx = std::max(mx, gate[(w * slots + s) * channels + c]);
        float denom = 0, acc = 0;
        for (int64_t s = 0; s < slots; ++s) {
          float g = gate[(w * slots + s) * channels + c];
          float e = std::isinf(g) && g < 0 ? 0.0f : std::exp(g - mx);
          denom += e;
          acc += e * kv[(w * slots + s) * channels + c];
        }
        z[w * channels + c] = acc / denom;
      }
    }
  });
}

void CpuBackend::swiglu(const float* g, const float* u, int64_t rows, int64_t dim, float limit,
                        const float* row_scale, float* h, bool bf16_out) {
  for (int64_t r = 0; r < rows; ++r) {
    float s = row_scale ? row_scale[r] : 1.0f;
    for (int64_t i = 0; i < dim; ++i) {
      float gv = g[r * dim + i], uv = u[r * dim + i];
      if (limit > 0) {
        gv = std::min(gv, limit);
        uv = std::clamp(uv, -limit, limit);
      }
      const float v = gv / (1.0f + std::exp(-gv)) * uv * s;
      h[r * dim + i] = bf16_out ? round_to_bf16(v) : v;
    }
  }
}

namespace {
// In-place fake quantization per `block` channels of each row: scale_of(amax) gives the block's scale
// (amax already floored at `floor_amax`), round(v) the value on the target grid.
template <typename ScaleOf, typename Round>
void fake_quant_blocks(float* x, int64_t rows, int64_t dim, int64_t block, float floor_amax, ScaleOf scale_of,
                       Round round) {
  parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t b = 0; b < dim; b += block) {
        float* v = x + r * dim + b;
        const int64_t n = std::min(block, dim - b);
        float amax = floor_amax;
        for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(v[i]));
        const float s = scale_of(amax);
        for (int64_t i = 0; i < n; ++i) v[i] = round(v[i] / s) * s;
      }
  }, 8);
}

// Every e4m3 byte's value (a table: the decode is on the hot path of activation quantization).
const std::array<float, 256>& e4m3_values() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int b = 0; b < 256; ++b) t[b] = e4m3_to_float(static_cast<uint8_t>(b));
    return t;
  }();
  return table;
}

float round_e4m3(float q) { return e4m3_values()[float_to_e4m3(std::clamp(q, -kE4M3Max, kE4M3Max))]; }
float round_e2m1(float q) { return e2m1_to_float(float_to_e2m1(std::clamp(q, -kE2M1Max, kE2M1Max))); }
}  // namespace

void CpuBackend::fake_quant_fp8(float* x, int64_t rows, int64_t dim, int64_t block) {
  fake_quant_blocks(x, rows, dim, block, 1e-4f,
                    [](float amax) { return e8m0_to_float(ue8m0_ceil_byte(amax / kE4M3Max)); }, round_e4m3);
}

void CpuBackend::fake_quant_fp4(float* x, int64_t rows, int64_t dim, int64_t block) {
  fake_quant_blocks(x, rows, dim, block, 6.0f * std::ldexp(1.0f, -126),
                    [](float amax) { return e8m0_to_float(ue8m0_ceil_byte(amax / kE2M1Max)); }, round_e2m1);
}

// V4.1's compressed KV: E4M3 (not power-of-two) scales.
void CpuBackend::fake_quant_fp4_e4m3(float* x, int64_t rows, int64_t dim, int64_t block) {
  fake_quant_blocks(x, rows, dim, block, 6.0f * std::ldexp(1.0f, -9),
                    [](float amax) { return e4m3_to_float(float_to_e4m3(std::min(amax / kE2M1Max, kE4M3Max))); },
                    round_e2m1);
}

void CpuBackend::hc_collapse(const float* x, const float* mix, int64_t rows, int64_t hc, int64_t dim, bool bf16_out,
                             float* y) {
  parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t t = r0; t < r1; ++t)
      for (int64_t d = 0; d < dim; ++d) {
        float acc = 0;  // each product rounded, then added in stream order (the reference's (pre * x).sum())
        for (int64_t k = 0; k < hc; ++k) acc += product_rn(mix[t * hc + k], x[(t * hc + k) * dim + d]);
        y[t * dim + d] = bf16_out ? round_to_bf16(acc) : acc;
      }
  }, 4);
}

void CpuBackend::hc_expand(const float* x, const float* sub, const float* post, const float* comb, int64_t rows,
                           int64_t hc, int64_t dim, bool bf16_out, float* out) {
  parallel_for(rows, [&](int64_t r0, int64_t r1) {
    thread_local std::vector<float> row;  // row t's new streams: out may be x
    row.resize(hc * dim);
    for (int64_t t = r0; t < r1; ++t) {
      for (int64_t k = 0; k < hc; ++k)
        for (int64_t d = 0; d < dim; ++d) {
          float acc = 0;
          for (int64_t j = 0; j < hc; ++j) acc += comb[(t * hc + j) * hc + k] * x[(t * hc + j) * dim + d];
          const float v = post[t * hc + k] * sub[t * dim + d] + acc;
          row[k * dim + d] = bf16_out ? round_to_bf16(v) : v;
        }
      std::copy(row.begin(), row.end(), out + t * hc * dim);
    }
  }, 4);
}

void CpuBackend::round_bf16(float* x, int64_t n) {
  parallel_for(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) x[i] = round_to_bf16(x[i]);
  }, 16384);
}

void CpuBackend::sparse_attention_online(const float* q, int64_t tokens, int64_t heads, int64_t dim,
                                         const uint8_t* pool, int64_t pool_block_bytes, const uint8_t* fresh,
                                         const int32_t* idx, int64_t k, int64_t window, const float* sink, float scale,
                                         int64_t block, float* out) {
  const int64_t win_bytes = row_bytes(RowFormat::kFp8E8m0x32, dim), ckv_bytes = row_bytes(RowFormat::kFp4E4m3x16, dim);
  parallel_for(tokens * heads, [&](int64_t a0, int64_t a1) {
    std::vector<float> s(block), acc(dim), rows;  // rows: token t's k rows decoded to fp32, for all its heads
    int64_t widened = -1;                         // the token whose rows `rows` holds
    for (int64_t a = a0; a < a1; ++a) {
      const int64_t t = a / heads, h = a % heads;
      const float* qv = q + a * dim;
      const int32_t* it = idx + t * k;
      if (t != widened) {
        rows.resize(k * dim);
        for (int64_t j = 0; j < k; ++j) {
          const int32_t r = it[j];
          if (r == -1) continue;
          const bool win = j < window;
          const RowFormat f = win ? RowFormat::kFp8E8m0x32 : RowFormat::kFp4E4m3x16;
          const int64_t rb = win ? win_bytes : ckv_bytes;
          const uint8_t* row = r >= 0 ? pool + paged_row_offset(r, rb, pool_block_bytes)
                                      : fresh + ops::fresh_row_index(r) * rb;
          dequantize_row(row, dim, f, rows.data() + j * dim);
        }
        widened = t;
      }
      float m = -1e30f, z = 0.0f;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j0 = 0; j0 < k; j0 += block) {
        const int64_t n = std::min(block, k - j0);
        const float* blk = rows.data() + j0 * dim;
        float bm = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < n; ++j) {
          const int32_t r = it[j0 + j];
          s[j] = r != -1 ? dot(qv, blk + j * dim, dim) * scale : -std::numeric_limits<float>::infinity();
          bm = std::max(bm, s[j]);
        }
        const float m_new = std::max(m, bm), rescale = std::exp(m - m_new);
        float psum = 0.0f;
        for (int64_t c = 0; c < dim; ++c) acc[c] *= rescale;
        for (int64_t j = 0; j < n; ++j) {
          const int32_t r = it[j0 + j];
          const float p = r != -1 ? std::exp(s[j] - m_new) : 0.0f;
          psum += p;
          if (r == -1) continue;
          const float pb = bf16_to_float(float_to_bf16(p));
          const float* v = blk + j * dim;
          for (int64_t c = 0; c < dim; ++c) acc[c] += pb * v[c];
        }
        z = z * rescale + psum;
        m = m_new;
      }
      z += std::exp(sink[h] - m);
      float* o = out + a * dim;
      for (int64_t c = 0; c < dim; ++c) o[c] = acc[c] / z;
    }
  }, 4);
}

}  // namespace deepinfer::cpu

namespace deepinfer::ops {
Backend& cpu_backend() {
  static auto* backend = new cpu::CpuBackend;  // never destroyed (see backend_for)
  return *backend;
}
}  // namespace deepinfer::ops
