// CUDA kernels for the op interface (src/ops/ops.h). Semantics follow the CPU reference
// (src/backends/cpu/cpu_backend.cpp) op by op; fp32 throughout, fake-quant bit-exact with src/core/dtype.h.
#include "backends/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "backends/cuda/cuda_internal.cuh"
#include "backends/cuda/gemv.h"
#include "backends/cuda/kernels/sparse_attention.h"
#include "backends/cuda/linear_f32.h"
#include "core/env.h"
#include "core/error.h"

namespace deepinfer::cuda {
namespace {

// ---------------------------------------------------------------- rms_norm
constexpr int kSumsqChunk = 2048;

// The sum of squares of xr[0, n) in cpu::dot's order (bitwise the CPU): 8 partial sums, channel i into
// sum i % 8 by fused multiply-add, then ((s0 + s4) + (s1 + s5)) + ((s2 + s6) + (s3 + s7)). The block
// stages the row in chunks through shared memory (coalesced), where threads 0..7 run the 8 chains; every
// thread gets the total. `stage` holds kSumsqChunk floats, `part` 8.
__device__ float sumsq_cpu_order(const float* xr, int64_t n, float* stage, float* part) {
  float acc = 0.0f;
  for (int64_t c0 = 0; c0 < n; c0 += kSumsqChunk) {  // chunks start at multiples of 8: the chains stay
    const int len = static_cast<int>(min(static_cast<int64_t>(kSumsqChunk), n - c0));
    __syncthreads();  // the previous chunk is consumed
    for (int i = threadIdx.x; i < len; i += blockDim.x) stage[i] = xr[c0 + i];
    __syncthreads();
    if (threadIdx.x < 8) {  // 8 loads issued before their 8 serial FMAs (a load per step was the cost)
      int i = threadIdx.x;
      for (; i + 56 < len; i += 64) {
        float v[8];
#pragma unroll
        for (int q = 0; q < 8; ++q) v[q] = stage[i + 8 * q];
#pragma unroll
        for (int q = 0; q < 8; ++q) acc = fmaf(v[q], v[q], acc);
      }
      for (; i < len; i += 8) acc = fmaf(stage[i], stage[i], acc);
    }
  }
  if (threadIdx.x < 8) part[threadIdx.x] = acc;
  __syncthreads();
  return ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
}

// The sum of squares of a row: the CPU's order (above) under DEEPINFER_FP8_GEMM=exact, else a block tree
// (each thread a strided slice, then block_sum): the CPU's chains are serial, 20,480 channels of an mHC row
// took ~45 us that way. Both depend on the row only (batch-invariant). Every thread gets the total.
__device__ float sumsq_row(const float* xr, int64_t n, bool cpu_order, float* stage, float* part) {
  if (cpu_order) return sumsq_cpu_order(xr, n, stage, part);
  // Four independent loads in flight per thread: one row is latency-bound (one block), not bandwidth-bound.
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const int64_t bd = blockDim.x;
  int64_t i = threadIdx.x;
  if (reinterpret_cast<uintptr_t>(xr) % 16 == 0 && n % 4 == 0) {
    const float4* v = reinterpret_cast<const float4*>(xr);
    const int64_t n4 = n / 4;
    auto add = [&](float4 q, float& a) { a = fmaf(q.x, q.x, fmaf(q.y, q.y, fmaf(q.z, q.z, fmaf(q.w, q.w, a)))); };
    for (; i + 3 * bd < n4; i += 4 * bd) {
      const float4 q0 = v[i], q1 = v[i + bd], q2 = v[i + 2 * bd], q3 = v[i + 3 * bd];
      add(q0, acc[0]), add(q1, acc[1]), add(q2, acc[2]), add(q3, acc[3]);
    }
    for (; i < n4; i += bd) add(v[i], acc[0]);
  } else {
    for (; i < n; i += bd) acc[0] = fmaf(xr[i], xr[i], acc[0]);
  }
  return block_sum((acc[0] + acc[1]) + (acc[2] + acc[3]), stage);
}

// One block per row. Up to kNormVec float4 a thread, the row and the weight are loaded into registers
// before the sum of squares, so the scaling pass waits on no load (it re-read x and weight one store
// after another — y may alias x — which was most of a decode row's ~5 us).
constexpr int kNormVec = 4;
__global__ void rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ weight, int64_t dim, float eps,
                                bool cpu_order, bool bf16_out, float* y) {
  __shared__ float stage[kSumsqChunk], part[8];
  const float* xr = x + blockIdx.x * dim;
  float* yr = y + blockIdx.x * dim;
  const int64_t n4 = dim / 4, bd = blockDim.x;
  const bool vec = dim % 4 == 0 && n4 <= kNormVec * bd && reinterpret_cast<uintptr_t>(xr) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(yr) % 16 == 0 && reinterpret_cast<uintptr_t>(weight) % 16 == 0;
  float4 xv[kNormVec], wv[kNormVec];
  if (vec) {
#pragma unroll
    for (int q = 0; q < kNormVec; ++q) {
      const int64_t i = threadIdx.x + q * bd;
      if (i < n4) {
        xv[q] = reinterpret_cast<const float4*>(xr)[i];
        wv[q] = weight ? reinterpret_cast<const float4*>(weight)[i] : float4{1.0f, 1.0f, 1.0f, 1.0f};
      }
    }
  }
  const float total = sumsq_row(xr, dim, cpu_order, stage, part);  // every read of x is done: in-place is safe
  const float r_inv = 1.0f / sqrtf(total / static_cast<float>(dim) + eps);
  auto out = [&](float xi, float wi) {
    const float v = weight ? wi * (xi * r_inv) : xi * r_inv;
    return bf16_out ? bf16_round(v) : v;
  };
  if (vec) {
#pragma unroll
    for (int q = 0; q < kNormVec; ++q) {
      const int64_t i = threadIdx.x + q * bd;
      if (i < n4)
        reinterpret_cast<float4*>(yr)[i] = float4{out(xv[q].x, wv[q].x), out(xv[q].y, wv[q].y),
                                                  out(xv[q].z, wv[q].z), out(xv[q].w, wv[q].w)};
    }
    return;
  }
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = out(xr[i], weight ? weight[i] : 1.0f);
}

// ---------------------------------------------------------------- rope
// Block (r, c): the cos/sin table of row r's position in shared memory, then elements [c * 256, c * 256 +
// 256) of the row's heads x pairs, one a thread. Spreading a row over blocks matters at decode, where one
// block per row ran its heads' read-modify-writes one after another (x may alias: no load runs ahead).
constexpr int kRopeThreads = 256;
__global__ void __launch_bounds__(kRopeThreads) rope_kernel(float* x, int64_t heads, int64_t dim,
                                                            const int64_t* __restrict__ positions,
                                                            const float* __restrict__ inv_freq, int64_t rope_dim,
                                                            float attention_factor, float sign, bool bf16_out) {
  extern __shared__ float tab[];  // cs[pairs], sn[pairs]
  const int64_t pairs = rope_dim / 2, r = blockIdx.x;
  float* cs = tab;
  float* sn = tab + pairs;
  const float pos = static_cast<float>(positions[r]);
  for (int64_t i = threadIdx.x; i < pairs; i += blockDim.x) {
    const float angle = inv_freq[i] * pos;
    cs[i] = static_cast<float>(cos(static_cast<double>(angle))) * attention_factor;  // correctly rounded, as the CPU's libm
    sn[i] = static_cast<float>(sin(static_cast<double>(angle))) * attention_factor * sign;
  }
  __syncthreads();
  const int64_t e = static_cast<int64_t>(blockIdx.y) * kRopeThreads + threadIdx.x;
  if (e >= heads * pairs) return;
  const int64_t h = e / pairs, i = e % pairs;
  float* v = x + (r * heads + h) * dim + (dim - rope_dim);
  const float a = v[2 * i], b = v[2 * i + 1];
  const float r0 = a * cs[i] - b * sn[i], r1 = b * cs[i] + a * sn[i];
  v[2 * i] = bf16_out ? bf16_round(r0) : r0;
  v[2 * i + 1] = bf16_out ? bf16_round(r1) : r1;
}

// ---------------------------------------------------------------- sparse_attention
// One block per (token, head); each warp runs an fp32 online softmax over its share of the k indices,
// then the warps' partial states merge with the sink. The sink only enlarges the denominator.
constexpr int kAttnWarps = 4;

// Merges the warps' (m, l) and their accumulators acc[w][c] (in shared memory) into out.
__device__ void attn_merge(const float* m_w, const float* l_w, const float* acc, int64_t acc_stride, float sink,
                           int64_t dim, float* o) {
  float M = sink;
  for (int w = 0; w < kAttnWarps; ++w) M = M < m_w[w] ? m_w[w] : M;
  float f[kAttnWarps];
  float L = expf_cr(sink - M);
  for (int w = 0; w < kAttnWarps; ++w) {
    f[w] = m_w[w] == -kInf ? 0.0f : expf_cr(m_w[w] - M);
    L += l_w[w] * f[w];
  }
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
    float s = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) s += f[w] * acc[w * acc_stride + c];
    o[c] = s / L;
  }
}

// The tiled kernel's transposing reduction: lane L ends with the full sum of element L of 32
// per-lane partial vectors.
// One butterfly stage of the transposing reduction over d[0 .. 2*OFF).
template <int OFF>
__device__ __forceinline__ void transpose_reduce_stage(float (&d)[32], int lane) {
  const bool upper = lane & OFF;
#pragma unroll
  for (int i = 0; i < OFF; ++i) {
    const float send = upper ? d[i] : d[i + OFF];
    const float keep = upper ? d[i + OFF] : d[i];
    d[i] = keep + __shfl_xor_sync(0xffffffffu, send, OFF);
  }
}

// Tiled path (run 4): one block per (token, W * HPW heads), W warps of HPW heads each. The gathered
// rows pass through shared memory in stages of kTiledStageRows rows, fetched with cp.async
// S - 1 stages ahead of their use, after the token's indices were copied to shared memory
// once; empty indices (-1) and rows past k are zero-filled and masked. Runs 1-3 left the gather
// unpipelined (each row waited for its index, then its own L2/DRAM round trip, before the next was
// issued), which held every earlier kernel near 7 ms. Per sub-tile of R = 32 / HPW rows, each lane
// forms 32 partial dots (R rows x HPW heads over its 4 * NV channels, q from shared memory: in
// registers it spilled at NV 4), one transposing butterfly leaves lane L with the full score of
// (head L / R, row L % R), the online softmax runs once per sub-tile and each staged float4 feeds HPW
// heads in both the dot and the P.V update (HPW 4: 16 FMAs per 16-byte shared-memory read).
constexpr int kTiledStageRows = 16;

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

template <int NV, int HPW, int W, int S>
__global__ void __launch_bounds__(W * 32, 1) sparse_attention_tiled_kernel(
    const float* __restrict__ q, int64_t heads, const float* __restrict__ pool, const int32_t* __restrict__ idx,
    int64_t k, const float* __restrict__ sink, float scale, float* __restrict__ out) {
  constexpr int R = 32 / HPW, SR = kTiledStageRows, V4 = 32 * NV, G = W * HPW, THREADS = W * 32;
  constexpr int64_t dim = 128 * NV;
  static_assert(HPW * R == 32 && SR % R == 0 && (SR * V4) % THREADS == 0, "tile shape");
  extern __shared__ float4 smem4[];
  float4* tiles = smem4;                                                       // [S][SR][V4]
  float4* q_s = smem4 + S * SR * V4;                                          // [W][HPW][V4]
  int32_t* idx_s = reinterpret_cast<int32_t*>(smem4 + S * SR * V4 + G * V4);  // [ntiles * SR]
  const int64_t groups = heads / G;
  const int64_t t = blockIdx.x / groups, h0 = (blockIdx.x % groups) * G;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int my_h = lane / R, my_r = lane % R;  // the (head, row) whose score this lane ends up holding
  const int32_t* it = idx + t * k;
  const int64_t ntiles = (k + SR - 1) / SR;
  for (int64_t j = threadIdx.x; j < ntiles * SR; j += THREADS) idx_s[j] = j < k ? it[j] : -1;
  __syncthreads();
  auto load_stage = [&](int64_t tile) {
    float4* dst = tiles + (tile % S) * (SR * V4);
#pragma unroll
    for (int n = 0; n < SR * V4 / THREADS; ++n) {
      const int e = threadIdx.x + n * THREADS, r = e / V4, c = e % V4;
      const int32_t row = idx_s[tile * SR + r];
      const float4* src = reinterpret_cast<const float4*>(pool + static_cast<int64_t>(row < 0 ? 0 : row) * dim) + c;
      cp_async16(dst + r * V4 + c, src, row >= 0);
    }
  };
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < ntiles) load_stage(s);
    cp_async_commit();
  }
  float4 acc[HPW][NV];
  float m[HPW], l[HPW];  // identical in every lane
#pragma unroll
  for (int hh = 0; hh < HPW; ++hh) {
    const float4* qv = reinterpret_cast<const float4*>(q + ((t * heads) + h0 + warp * HPW + hh) * dim);
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      q_s[(warp * HPW + hh) * V4 + lane + 32 * i] = qv[lane + 32 * i];  // read back by this warp only
      acc[hh][i] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    m[hh] = -kInf;
    l[hh] = 0.0f;
  }
  for (int64_t tile = 0; tile < ntiles; ++tile) {
    cp_async_wait<S - 2>();  // this thread's copies of `tile` have landed
    __syncthreads();         // everyone's have, and the buffer refilled next is no longer read
    if (tile + S - 1 < ntiles) load_stage(tile + S - 1);
    cp_async_commit();
    const float4* tl = tiles + (tile % S) * (SR * V4);
#pragma unroll 1
    for (int sub = 0; sub < SR / R; ++sub) {
      const float4* tr = tl + sub * (R * V4);
      const int64_t j0 = tile * SR + sub * R;
      float d[32];  // d[hh * R + r]: this lane's partial of <q_hh, row r>
#pragma unroll
      for (int e = 0; e < 32; ++e) d[e] = 0.0f;
#pragma unroll 1  // q from shared memory, one channel slice at a time (q in registers spilled at NV 4)
      for (int i = 0; i < NV; ++i) {
        float4 qv[HPW];
#pragma unroll
        for (int hh = 0; hh < HPW; ++hh) qv[hh] = q_s[(warp * HPW + hh) * V4 + lane + 32 * i];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const float4 v = tr[r * V4 + lane + 32 * i];
#pragma unroll
          for (int hh = 0; hh < HPW; ++hh)
            d[hh * R + r] =
                fmaf(qv[hh].x, v.x, fmaf(qv[hh].y, v.y, fmaf(qv[hh].z, v.z, fmaf(qv[hh].w, v.w, d[hh * R + r]))));
        }
      }
      transpose_reduce_stage<16>(d, lane);
      transpose_reduce_stage<8>(d, lane);
      transpose_reduce_stage<4>(d, lane);
      transpose_reduce_stage<2>(d, lane);
      transpose_reduce_stage<1>(d, lane);
      const bool valid = idx_s[j0 + my_r] >= 0;  // false past k too
      const float sc = valid ? scale * d[0] : -kInf;
      float tm = sc;  // the sub-tile's max per head, over the R lanes of that head
#pragma unroll
      for (int o = R / 2; o > 0; o >>= 1) {
        const float w = __shfl_xor_sync(0xffffffffu, tm, o);
        tm = tm < w ? w : tm;
      }
      float corr[HPW], mine = 0.0f;
#pragma unroll
      for (int hh = 0; hh < HPW; ++hh) {
        const float th = __shfl_sync(0xffffffffu, tm, hh * R);
        const float mn = m[hh] < th ? th : m[hh];
        corr[hh] = mn == -kInf ? 1.0f : expf_cr(m[hh] - mn);  // nothing valid yet: keep the zeros
        m[hh] = mn;
        if (hh == my_h) mine = mn;
      }
      const float p = valid ? expf_cr(sc - mine) : 0.0f;
      float ps = p;
#pragma unroll
      for (int o = R / 2; o > 0; o >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, o);
#pragma unroll
      for (int hh = 0; hh < HPW; ++hh) {
        l[hh] = l[hh] * corr[hh] + __shfl_sync(0xffffffffu, ps, hh * R);
#pragma unroll
        for (int i = 0; i < NV; ++i) {
          acc[hh][i].x *= corr[hh];
          acc[hh][i].y *= corr[hh];
          acc[hh][i].z *= corr[hh];
          acc[hh][i].w *= corr[hh];
        }
      }
      // Empty rows are zero-filled and have p = 0, so they add +0 (no branch).
#pragma unroll 2
      for (int r = 0; r < R; ++r) {
        float4 v[NV];
#pragma unroll
        for (int i = 0; i < NV; ++i) v[i] = tr[r * V4 + lane + 32 * i];
#pragma unroll
        for (int hh = 0; hh < HPW; ++hh) {
          const float pr = __shfl_sync(0xffffffffu, p, hh * R + r);
#pragma unroll
          for (int i = 0; i < NV; ++i) {
            acc[hh][i].x = fmaf(pr, v[i].x, acc[hh][i].x);
            acc[hh][i].y = fmaf(pr, v[i].y, acc[hh][i].y);
            acc[hh][i].z = fmaf(pr, v[i].z, acc[hh][i].z);
            acc[hh][i].w = fmaf(pr, v[i].w, acc[hh][i].w);
          }
        }
      }
    }
  }
  cp_async_wait<0>();
#pragma unroll
  for (int hh = 0; hh < HPW; ++hh) {
    const int64_t h = h0 + warp * HPW + hh;
    const float sk = sink[h];
    const float M = sk < m[hh] ? m[hh] : sk;
    const float f = m[hh] == -kInf ? 0.0f : expf_cr(m[hh] - M);
    const float g = f / (l[hh] * f + expf_cr(sk - M));
    float4* o = reinterpret_cast<float4*>(out + (t * heads + h) * dim);
#pragma unroll
    for (int i = 0; i < NV; ++i)
      o[lane + 32 * i] = make_float4(acc[hh][i].x * g, acc[hh][i].y * g, acc[hh][i].z * g, acc[hh][i].w * g);
  }
}

// Any dim: q and the warps' accumulators in dynamic shared memory [(1 + warps) * dim].
__global__ void __launch_bounds__(kAttnWarps * 32) sparse_attention_generic_kernel(
    const float* __restrict__ q, int64_t heads, int64_t dim, const float* __restrict__ pool,
    const int32_t* __restrict__ idx, int64_t k, const float* __restrict__ sink, float scale, float* __restrict__ out) {
  extern __shared__ float sm[];
  __shared__ float m_s[kAttnWarps], l_s[kAttnWarps];
  const int64_t a = blockIdx.x, t = a / heads, h = a % heads;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* qs = sm;
  float* accw = sm + dim + warp * dim;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) qs[c] = q[a * dim + c];
  for (int64_t c = lane; c < dim; c += 32) accw[c] = 0.0f;
  __syncthreads();
  const int32_t* it = idx + t * k;
  float m = -kInf, l = 0.0f;
  for (int64_t j = warp; j < k; j += kAttnWarps) {
    const int32_t row = it[j];
    if (row < 0) continue;
    const float* pv = pool + static_cast<int64_t>(row) * dim;
    float d = 0.0f;
    for (int64_t c = lane; c < dim; c += 32) d += qs[c] * pv[c];
    const float s = scale * warp_sum(d);
    const float m_new = m < s ? s : m;
    const float corr = expf_cr(m - m_new);
    const float p = expf_cr(s - m_new);
    l = l * corr + p;
    for (int64_t c = lane; c < dim; c += 32) accw[c] = accw[c] * corr + p * pv[c];
    m = m_new;
  }
  if (lane == 0) {
    m_s[warp] = m;
    l_s[warp] = l;
  }
  __syncthreads();
  attn_merge(m_s, l_s, sm + dim, dim, sink[h], dim, out + a * dim);
}

// ---------------------------------------------------------------- hc_weights
__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf_cr(-x)); }

// dots [splits, rows, outs] holds x . fn (linear: a GEMM across rows, not one block per row re-reading fn;
// the CPU's order under DEEPINFER_FP8_GEMM=exact). One block per row. Thread o < outs loads output o's
// splits, its base and the scales before the block computes x . x (sumsq_row: the CPU's order when exact),
// so those loads' latency hides under the row's; then each such thread finishes its output (the splits
// added in order) — one chain of dependent loads on warp 0 per output was most of this kernel's 24 us.
// Warp 0 then runs the small Sinkhorn tail with one lane per matrix element (hc x hc <= 256, up to
// 8 a lane): each lane sums its row or column from shared memory in the CPU's order, so the bits are the
// CPU's, and the 20 iterations' divisions run side by side instead of on one thread. Up to 32 elements
// (hc <= 5, the models' 4) the matrix stays in registers, a lane an element, the sums through shuffles in
// the same order: no shared-memory round trip and no barrier per phase.
constexpr int kHcThreads = 512, kHcMax = 16, kHcPerLane = kHcMax * kHcMax / 32, kHcMaxSplits = 8;
__global__ void __launch_bounds__(kHcThreads) hc_weights_tail_kernel(
    const float* __restrict__ x, int hc, int64_t dim, const float* __restrict__ dots,
    const float* __restrict__ base, const float* __restrict__ scale, float rms_eps, float hc_eps,
    int64_t sinkhorn_iters, bool cpu_order, int splits, float* pre, float* post, float* comb) {
  __shared__ float stage[kSumsqChunk], part[8], c[kHcMax * kHcMax];
  const int64_t r = blockIdx.x, rows = gridDim.x;
  const int n = hc * hc, lane = threadIdx.x, o = threadIdx.x;
  const int64_t width = hc * dim, outs = comb ? (2 + hc) * hc : hc;
  float d[kHcMaxSplits], b = 0.0f, sc = 0.0f;
  if (o < outs) {  // every load issued before the first use
#pragma unroll
    for (int s = 0; s < kHcMaxSplits; ++s) d[s] = s < splits ? dots[(s * rows + r) * outs + o] : 0.0f;
    b = base[o];
    sc = scale[o < hc ? 0 : o < 2 * hc ? 1 : 2];
  }
  const float ss = sumsq_row(x + r * width, width, cpu_order, stage, part);
  const float r_inv = 1.0f / sqrtf(ss / static_cast<float>(width) + rms_eps);
  if (o < outs) {  // (x . fn) * rsqrt(mean x^2 + eps), the reference's order
    float dot = d[0];
#pragma unroll
    for (int s = 1; s < kHcMaxSplits; ++s)
      if (s < splits) dot += d[s];
    const float v = dot * r_inv * sc + b;
    if (o < hc) pre[r * hc + o] = sigmoidf_(v) + hc_eps;
    else if (o < 2 * hc) post[r * hc + o - hc] = 2.0f * sigmoidf_(v);
    else c[o - 2 * hc] = v;
  }
  if (!comb) return;
  __syncthreads();  // c holds the mixing logits
  if (threadIdx.x >= 32) return;
  if (n <= 32) {  // every lane shuffles; lanes >= n compute values nobody keeps
    const int j = lane / hc, k = lane % hc;
    float v = lane < n ? c[lane] : 0.0f;
    auto at = [&](int jj, int kk) { return __shfl_sync(0xffffffffu, v, (jj * hc + kk) & 31); };
    auto row_sum = [&] {
      float z = 0.0f;
      for (int kk = 0; kk < hc; ++kk) z += at(j, kk);
      return z;
    };
    auto col_sum = [&] {
      float z = 0.0f;
      for (int jj = 0; jj < hc; ++jj) z += at(jj, k);
      return z;
    };
    float mx = -kInf;  // softmax over each row j (max, then exp), then + eps
    for (int kk = 0; kk < hc; ++kk) {
      const float w = at(j, kk);
      mx = mx < w ? w : mx;
    }
    v = expf_cr(v - mx);
    v = v / row_sum() + hc_eps;
    v = v / (col_sum() + hc_eps);
    for (int64_t it = 1; it < sinkhorn_iters; ++it) {
      v = v / (row_sum() + hc_eps);
      v = v / (col_sum() + hc_eps);
    }
    if (lane < n) comb[r * n + lane] = v;
    return;
  }
  float v[kHcPerLane];
  // Every lane computes its elements' new values from c, then all write them back.
  auto phase = [&](auto&& value) {
    for (int q = 0, e = lane; e < n; e += 32, ++q) v[q] = value(e / hc, e % hc);
    __syncwarp();
    for (int q = 0, e = lane; e < n; e += 32, ++q) c[e] = v[q];
    __syncwarp();
  };
  auto row_sum = [&](int j) {
    float z = 0.0f;
    for (int k = 0; k < hc; ++k) z += c[j * hc + k];
    return z;
  };
  auto col_sum = [&](int k) {
    float z = 0.0f;
    for (int j = 0; j < hc; ++j) z += c[j * hc + k];
    return z;
  };
  phase([&](int j, int k) {  // softmax over each row j (max, then exp), then + eps
    float mx = -kInf;
    for (int kk = 0; kk < hc; ++kk) mx = mx < c[j * hc + kk] ? c[j * hc + kk] : mx;
    return expf_cr(c[j * hc + k] - mx);
  });
  phase([&](int j, int k) { return c[j * hc + k] / row_sum(j) + hc_eps; });
  phase([&](int j, int k) { return c[j * hc + k] / (col_sum(k) + hc_eps); });
  for (int64_t it = 1; it < sinkhorn_iters; ++it) {
    phase([&](int j, int k) { return c[j * hc + k] / (row_sum(j) + hc_eps); });
    phase([&](int j, int k) { return c[j * hc + k] / (col_sum(k) + hc_eps); });
  }
  for (int e = lane; e < n; e += 32) comb[r * n + e] = c[e];
}

// ---------------------------------------------------------------- hc_collapse / hc_expand
__device__ __forceinline__ float round_bf16_hc(float x) {  // float_to_bf16 then back, as dtype.cpp
  if (isnan(x)) return __uint_as_float(0x7fc00000u);
  const unsigned u = __float_as_uint(x);
  return __uint_as_float((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
}

__global__ void hc_collapse_kernel(const float* __restrict__ x, const float* __restrict__ mix, int64_t rows, int64_t hc,
                                   int64_t dim, bool bf16_out, float* __restrict__ y) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= rows * dim) return;
  const int64_t t = e / dim, d = e % dim;
  float acc = 0.0f;  // the CPU's order: each product rounded, then added (no FMA)
  for (int64_t k = 0; k < hc; ++k) acc = __fadd_rn(acc, __fmul_rn(mix[t * hc + k], x[(t * hc + k) * dim + d]));
  y[e] = bf16_out ? round_bf16_hc(acc) : acc;
}

// One thread per (row, channel): its hc stream values read once into registers, then every output stream,
// each summed as before (so out may be x: all reads of a channel come before its writes).
constexpr int kExpandMaxHc = 16;
__global__ void hc_expand_kernel(const float* x, const float* __restrict__ sub, const float* __restrict__ post,
                                 const float* __restrict__ comb, int64_t rows, int64_t hc, int64_t dim, bool bf16_out,
                                 float* out) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= rows * dim) return;
  const int64_t t = e / dim, d = e % dim;
  float xs[kExpandMaxHc];
  for (int64_t j = 0; j < hc; ++j) xs[j] = x[(t * hc + j) * dim + d];
  for (int64_t k = 0; k < hc; ++k) {
    float acc = 0.0f;
    for (int64_t j = 0; j < hc; ++j) acc += comb[(t * hc + j) * hc + k] * xs[j];
    const float v = post[t * hc + k] * sub[t * dim + d] + acc;
    out[(t * hc + k) * dim + d] = bf16_out ? round_bf16_hc(v) : v;
  }
}

// ---------------------------------------------------------------- softmax_pool
__global__ void softmax_pool_kernel(const float* __restrict__ kv, const float* __restrict__ gate, int64_t windows,
                                    int64_t slots, int64_t channels, float* __restrict__ z) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= windows * channels) return;
  const int64_t w = e / channels, c = e % channels;
  const float* g = gate + w * slots * channels + c;
  const float* v = kv + w * slots * channels + c;
  float mx = -kInf;
  for (int64_t s = 0; s < slots; ++s) mx = mx < g[s * channels] ? g[s * channels] : mx;
  float denom = 0.0f, acc = 0.0f;
  for (int64_t s = 0; s < slots; ++s) {
    const float gv = g[s * channels];
    const float ex = (isinf(gv) && gv < 0) ? 0.0f : expf_cr(gv - mx);
    denom += ex;
    acc += ex * v[s * channels];
  }
  z[e] = acc / denom;
}

// ---------------------------------------------------------------- swiglu
__global__ void swiglu_kernel(const float* __restrict__ g, const float* __restrict__ u, int64_t rows, int64_t dim,
                              float limit, const float* __restrict__ row_scale, bool bf16_out, float* __restrict__ h) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= rows * dim) return;
  const float s = row_scale ? row_scale[e / dim] : 1.0f;
  float gv = g[e], uv = u[e];
  if (limit > 0) {
    gv = limit < gv ? limit : gv;                                // std::min(gv, limit)
    uv = uv < -limit ? -limit : (limit < uv ? limit : uv);       // std::clamp(uv, -limit, limit)
  }
  const float v = gv / (1.0f + expf_cr(-gv)) * uv * s;
  h[e] = bf16_out ? bf16_round(v) : v;
}

// ---------------------------------------------------------------- fake quantization
__device__ __forceinline__ float clampf_(float v, float lo, float hi) { return v < lo ? lo : (hi < v ? hi : v); }

// One warp per quantization block of `block` channels of one row. kFp8: e4m3 values (else e2m1);
// kE4M3Scale: an e4m3 scale min(amax/qmax, 448) rounded to e4m3 (else a UE8M0 power of two).
template <bool kFp8, bool kE4M3Scale = false>
__global__ void fake_quant_kernel(float* x, int64_t rows, int64_t dim, int64_t block, int64_t blocks_per_row,
                                  float floor_amax, float qmax) {
  const int64_t q = blockIdx.x * static_cast<int64_t>(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (q >= rows * blocks_per_row) return;
  const int lane = threadIdx.x & 31;
  const int64_t r = q / blocks_per_row, b = (q % blocks_per_row) * block;
  float* v = x + r * dim + b;
  const int64_t n = block < dim - b ? block : dim - b;
  float amax = floor_amax;
  for (int64_t i = lane; i < n; i += 32) {
    const float a = fabsf(v[i]);
    amax = amax < a ? a : amax;  // std::max(amax, a)
  }
  amax = warp_max(amax);  // max is exact: order does not matter
  float s;
  if (kE4M3Scale) {
    const float ratio = __fdiv_rn(amax, qmax);
    s = e4m3_to_float_d(float_to_e4m3_d(448.0f < ratio ? 448.0f : ratio));  // std::min(ratio, 448)
  } else {
    s = e8m0_to_float_d(ue8m0_ceil_byte_d(__fdiv_rn(amax, qmax)));
  }
  for (int64_t i = lane; i < n; i += 32) {
    const float c = clampf_(__fdiv_rn(v[i], s), -qmax, qmax);
    v[i] = kFp8 ? __fmul_rn(e4m3_to_float_d(float_to_e4m3_d(c)), s) : __fmul_rn(e2m1_to_float_d(float_to_e2m1_d(c)), s);
  }
}

// ---------------------------------------------------------------- linear_kblocked
// y[i, j] = sum over K blocks (in order) of a sequential fp32 sum within the block, each product
// rounded before it is added: bitwise the CPU's (linear_kblocked.cpp is compiled without contraction).
// Tiles: 16 rows of x by 64 rows of w per 256-thread block; K streams through shared memory in chunks
// of 32; each thread owns one output column j and 4 rows i, summing its k in order.
constexpr int kKbTm = 16, kKbTn = 64, kKbTk = 32;

__global__ void __launch_bounds__(256) linear_kblocked_kernel(const float* __restrict__ x, int64_t m, int64_t k,
                                                              const float* __restrict__ w, int64_t n, int64_t block,
                                                              float* __restrict__ y) {
  __shared__ float xs[kKbTm][kKbTk];
  __shared__ float ws[kKbTk][kKbTn + 1];
  const int tx = threadIdx.x % kKbTn, ty = threadIdx.x / kKbTn;  // ty in 0..3: rows ty, ty+4, ...
  const int64_t i0 = blockIdx.y * static_cast<int64_t>(kKbTm), j0 = blockIdx.x * static_cast<int64_t>(kKbTn);
  float acc[4] = {0.f, 0.f, 0.f, 0.f}, part[4] = {0.f, 0.f, 0.f, 0.f};
  for (int64_t c0 = 0; c0 < k; c0 += kKbTk) {
    for (int e = threadIdx.x; e < kKbTm * kKbTk; e += blockDim.x) {
      const int r = e / kKbTk, c = e % kKbTk;
      xs[r][c] = (i0 + r < m && c0 + c < k) ? x[(i0 + r) * k + c0 + c] : 0.0f;
    }
    for (int e = threadIdx.x; e < kKbTn * kKbTk; e += blockDim.x) {
      const int r = e / kKbTk, c = e % kKbTk;
      ws[c][r] = (j0 + r < n && c0 + c < k) ? w[(j0 + r) * k + c0 + c] : 0.0f;
    }
    __syncthreads();
    const int cn = k - c0 < kKbTk ? static_cast<int>(k - c0) : kKbTk;
    for (int c = 0; c < cn; ++c) {
      const float wv = ws[c][tx];
#pragma unroll
      for (int r = 0; r < 4; ++r) part[r] = __fadd_rn(part[r], __fmul_rn(xs[ty + 4 * r][c], wv));  // no FMA, as the CPU
      const int64_t kk = c0 + c + 1;
      if (kk % block == 0 || kk == k) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          acc[r] += part[r];
          part[r] = 0.0f;
        }
      }
    }
    __syncthreads();
  }
  if (j0 + tx >= n) return;
#pragma unroll
  for (int r = 0; r < 4; ++r)
    if (i0 + ty + 4 * r < m) y[(i0 + ty + 4 * r) * n + j0 + tx] = acc[r];
}

// ---------------------------------------------------------------- bf16 rounding
__device__ __forceinline__ float round_bf16_d(float x) {  // float_to_bf16 then back, as dtype.cpp
  if (isnan(x)) return __uint_as_float(0x7fc00000u);
  uint32_t u = __float_as_uint(x);
  u += 0x7fff + ((u >> 16) & 1);
  return __uint_as_float(u & 0xffff0000u);
}

__global__ void round_bf16_kernel(float* x, int64_t n) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e < n) x[e] = round_bf16_d(x[e]);
}

// ---------------------------------------------------------------- sparse_attention_online
// V4.1 kernel numerics, exactly the CPU's block structure: indices in blocks of `block`; per block the
// scores (warps split the indices), the block max, the running max m (from -1e30, sink excluded),
// p = exp(s - m) summed in fp32 for the denominator and rounded to bf16 for the P.V product.
// One block per (token, head); q, the per-warp accumulators and the block's scores in shared memory:
// [dim] q, [kAttnWarps][dim] acc, [block] p. Rows decoded per value (row_value_d).
__device__ __forceinline__ const uint8_t* attn_row(const uint8_t* pool, int64_t block_bytes, const uint8_t* fresh,
                                                   int32_t r, bool win, int64_t dim) {
  const int64_t rb = row_bytes_d(win ? RowFormat::kFp8E8m0x32 : RowFormat::kFp4E4m3x16, dim);
  return r >= 0 ? pool + paged_row_offset_d(r, rb, block_bytes) : fresh + (-2 - static_cast<int64_t>(r)) * rb;
}

__global__ void __launch_bounds__(kAttnWarps * 32) sparse_attention_online_kernel(
    const float* __restrict__ q, int64_t heads, int64_t dim, const uint8_t* __restrict__ pool, int64_t block_bytes,
    const uint8_t* __restrict__ fresh, const int32_t* __restrict__ idx, int64_t k, int64_t window,
    const float* __restrict__ sink, float scale, int64_t block, float* __restrict__ out) {
  extern __shared__ float sm[];
  __shared__ float red[32];
  const int64_t a = blockIdx.x, t = a / heads, h = a % heads;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* qs = sm;
  float* acc_all = sm + dim;
  float* accw = acc_all + warp * dim;
  float* ps = acc_all + kAttnWarps * dim;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) qs[c] = q[a * dim + c];
  for (int64_t c = lane; c < dim; c += 32) accw[c] = 0.0f;
  __syncthreads();
  const int32_t* it = idx + t * k;
  float m = -1e30f, z = 0.0f;
  for (int64_t j0 = 0; j0 < k; j0 += block) {
    const int64_t n = block < k - j0 ? block : k - j0;
    for (int64_t j = warp; j < n; j += kAttnWarps) {
      const int32_t r = it[j0 + j];
      float d = 0.0f;
      if (r != -1) {
        const bool win = j0 + j < window;
        const RowFormat f = win ? RowFormat::kFp8E8m0x32 : RowFormat::kFp4E4m3x16;
        const uint8_t* pv = attn_row(pool, block_bytes, fresh, r, win, dim);
        for (int64_t c = lane; c < dim; c += 32) d += qs[c] * row_value_d(pv, f, dim, c);
      }
      d = warp_sum(d);
      if (lane == 0) ps[j] = r != -1 ? d * scale : -kInf;
    }
    __syncthreads();
    float bm = -kInf;
    for (int64_t j = lane; j < n; j += 32) bm = bm < ps[j] ? ps[j] : bm;
    bm = warp_max(bm);  // every warp computes the same block max
    const float m_new = m < bm ? bm : m;
    const float rescale = expf_cr(m - m_new);
    __syncthreads();  // all warps have read the scores
    float psum = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const float p = it[j0 + j] != -1 ? expf_cr(ps[j] - m_new) : 0.0f;
      psum += p;
      ps[j] = p;
    }
    psum = block_sum(psum, red);  // ends with a barrier: ps holds the probabilities
    z = z * rescale + psum;
    m = m_new;
    for (int64_t c = lane; c < dim; c += 32) accw[c] *= rescale;
    for (int64_t j = warp; j < n; j += kAttnWarps) {
      const int32_t r = it[j0 + j];
      if (r == -1) continue;
      const float pb = round_bf16_d(ps[j]);
      const bool win = j0 + j < window;
      const RowFormat f = win ? RowFormat::kFp8E8m0x32 : RowFormat::kFp4E4m3x16;
      const uint8_t* pv = attn_row(pool, block_bytes, fresh, r, win, dim);
      for (int64_t c = lane; c < dim; c += 32) accw[c] += pb * row_value_d(pv, f, dim, c);
    }
    __syncthreads();  // ps is rewritten by the next block
  }
  z += expf_cr(sink[h] - m);
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
    float sacc = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) sacc += acc_all[w * dim + c];
    out[a * dim + c] = sacc / z;
  }
}

}  // namespace

// ================================================================ CudaBackend

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state
    return 0;
  }
  return n;
}

bool device_available() { return device_count() > 0; }

CudaBackend::CudaBackend(int device) : impl_(std::make_unique<Impl>()) {
  if (device >= 0) check_cuda(cudaSetDevice(device), "cudaSetDevice");
  check_cuda(cudaGetDevice(&impl_->device), "cudaGetDevice");
  const int dev = impl_->device;
  check_cuda(cudaDeviceGetAttribute(&impl_->max_smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
             "cudaDeviceGetAttribute");
  check_cuda(cudaDeviceGetAttribute(&impl_->sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
  check_cuda(cudaStreamCreate(&impl_->stream), "cudaStreamCreate");
  check_cublas(cublasCreate(&impl_->blas), "cublasCreate");
  check_cublas(cublasSetStream(impl_->blas, impl_->stream), "cublasSetStream");
  // fp32 math only: the default mode never takes TF32 for CUBLAS_COMPUTE_32F (only _FAST_TF32 or
  // CUBLAS_TF32_TENSOR_OP_MATH would), so linear() stays a true fp32 GEMM.
  check_cublas(cublasSetMathMode(impl_->blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  impl_->batch_invariant = env_bool("DEEPINFER_BATCH_INVARIANT");
  const std::string gemm = env_string("DEEPINFER_FP8_GEMM");
  check(gemm == "tensor" || gemm == "exact", "DEEPINFER_FP8_GEMM = '", gemm, "': not tensor or exact");
  impl_->exact_gemm = gemm == "exact";
  const std::string attn = env_string("DEEPINFER_ATTENTION");
  check(attn == "tensor" || attn == "exact", "DEEPINFER_ATTENTION = '", attn, "': not tensor or exact");
  impl_->exact_attention = attn == "exact";
}

CudaBackend::~CudaBackend() {
  if (impl_->scratch) cudaFree(impl_->scratch);
  for (cudaEvent_t e : impl_->marks)
    if (e) cudaEventDestroy(e);
  if (impl_->blas) cublasDestroy(impl_->blas);
  if (impl_->stream) cudaStreamDestroy(impl_->stream);
}

void CudaBackend::set_attention_kernel(int kind) { impl_->attention_kernel = kind; }
void CudaBackend::set_linear_gemv(bool on) { impl_->linear_gemv = on; }

void* CudaBackend::stream() const { return impl_->stream; }
void* CudaBackend::cublas_handle() const { return impl_->blas; }

void CudaBackend::synchronize() { check_cuda(cudaStreamSynchronize(impl_->stream), "cudaStreamSynchronize"); }

void CudaBackend::mark(int point) {
  check(point >= 0 && point < kMarks, "cuda mark: time point ", point, " out of range");
  impl_->bind();
  cudaEvent_t& e = impl_->marks[point];
  if (!e) check_cuda(cudaEventCreate(&e), "cudaEventCreate");
  check_cuda(cudaEventRecord(e, impl_->stream), "cudaEventRecord");
}

double CudaBackend::marked_ms(int from, int to) {
  check(from >= 0 && from < kMarks && to >= 0 && to < kMarks, "cuda marked_ms: time point out of range");
  if (!impl_->marks[from] || !impl_->marks[to]) return -1;
  float ms = 0;
  const cudaError_t e = cudaEventElapsedTime(&ms, impl_->marks[from], impl_->marks[to]);
  if (e != cudaSuccess) {
    cudaGetLastError();  // not reached yet: no figure, not an error of the stream
    return -1;
  }
  return ms;
}

void CudaBackend::linear(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y) {
  impl_->bind();
  check_sizes(m >= 0 && k >= 0 && n >= 0 && m <= INT32_MAX && k <= INT32_MAX && n <= INT32_MAX, "linear");
  if (m == 0 || n == 0) return;
  // The CPU's bits (exact) or one order for every m (batch-invariant: the GEMV over chunks of 8 rows
  // where it fits) are slow paths; the default takes the GEMV at decode sizes, else cuBLAS.
  if (impl_->exact_gemm) return linear_cpu_order(x, m, k, w, n, y, impl_->stream);
  const bool gemv = impl_->linear_gemv && gemv_fits(x, 1, k, w, n, 4);
  if (impl_->batch_invariant) {
    if (!gemv) return linear_cpu_order(x, m, k, w, n, y, impl_->stream);
    for (int64_t r = 0; r < m; r += kGemvMaxM)
      gemv_f32(x + r * k, std::min<int64_t>(kGemvMaxM, m - r), k, w, n, y + r * n, impl_->stream);
    return;
  }
  if (gemv && m <= kGemvMaxM) return gemv_f32(x, m, k, w, n, y, impl_->stream);
  // Row-major y[m,n] = x[m,k] w[n,k]^T is column-major y^T[n,m] = (w^T)^T[n,k] x^T[k,m].
  const float one = 1.0f, zero = 0.0f;
  check_cublas(cublasGemmEx(impl_->blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                            static_cast<int>(k), &one, w, CUDA_R_32F, static_cast<int>(k), x, CUDA_R_32F,
                            static_cast<int>(k), &zero, y, CUDA_R_32F, static_cast<int>(n), CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT),
               "linear (cublasGemmEx fp32)");
}

void CudaBackend::linear_bf16(const uint16_t* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y) {
  impl_->bind();
  check_sizes(m >= 0 && k >= 0 && n >= 0 && m <= INT32_MAX && k <= INT32_MAX && n <= INT32_MAX, "linear_bf16");
  if (m == 0 || n == 0) return;
  // bf16 GEMV only up to m = 4: at m = 8 cuBLAS was faster at n = 4096 (run 5: 21.0 vs 29.1 us).
  if (impl_->linear_gemv && m <= kLinearBf16GemvMaxM && gemv_fits(x, m, k, w, n, 2)) return gemv_bf16(x, m, k, w, n, y, impl_->stream);
  const float one = 1.0f, zero = 0.0f;
  check_cublas(cublasGemmEx(impl_->blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                            static_cast<int>(k), &one, w, CUDA_R_16BF, static_cast<int>(k), x, CUDA_R_16BF,
                            static_cast<int>(k), &zero, y, CUDA_R_32F, static_cast<int>(n), CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT),
               "linear_bf16 (cublasGemmEx bf16)");
}

void CudaBackend::rms_norm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* y,
                           bool bf16_out) {
  impl_->bind();
  check_sizes(rows >= 0 && dim > 0 && rows <= INT32_MAX, "rms_norm");
  if (rows == 0) return;
  const int threads = dim >= 1024 ? 512 : 128;
  rms_norm_kernel<<<static_cast<unsigned>(rows), threads, 0, impl_->stream>>>(x, weight, dim, eps, impl_->exact_gemm, bf16_out,
                                                                                      y);
  check_launch("rms_norm_kernel");
}

void CudaBackend::rope(float* x, int64_t rows, int64_t heads, int64_t dim, const int64_t* positions,
                       const ops::RopeFreqs& f, bool inverse, bool bf16_out) {
  impl_->bind();
  check_sizes(rows >= 0 && heads >= 0 && f.rope_dim >= 0 && f.rope_dim % 2 == 0 && f.rope_dim <= dim &&
                  rows <= INT32_MAX && f.rope_dim * sizeof(float) <= 48 * 1024,
              "rope");
  if (rows == 0 || heads == 0 || f.rope_dim == 0) return;
  const size_t smem = static_cast<size_t>(f.rope_dim) * sizeof(float);
  const int64_t chunks = (heads * (f.rope_dim / 2) + kRopeThreads - 1) / kRopeThreads;
  check_sizes(chunks <= 65535, "rope");
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(chunks));
  rope_kernel<<<grid, kRopeThreads, smem, impl_->stream>>>(x, heads, dim, positions, f.inv_freq,
                                                                         f.rope_dim, f.attention_factor,
                                                                         inverse ? -1.0f : 1.0f, bf16_out);
  check_launch("rope_kernel");
}

// Stages in flight for the tiled kernel: 3 with 8 warps (one block per SM), 2 with 4 warps (two blocks).
constexpr int tiled_stages(int warps) { return warps == 8 ? 3 : 2; }

template <int NV, int HPW, int W>
void launch_tiled(int max_smem, unsigned grid, size_t smem, cudaStream_t st, const float* q, int64_t heads,
                  const float* pool, const int32_t* idx, int64_t k, const float* sink, float scale, float* out) {
  constexpr int S = tiled_stages(W);
  static bool raised = false;  // the dynamic shared-memory limit, raised once per instantiation
  if (!raised) {
    check_cuda(cudaFuncSetAttribute(sparse_attention_tiled_kernel<NV, HPW, W, S>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem),
               "cudaFuncSetAttribute(sparse_attention_tiled_kernel)");
    raised = true;
  }
  sparse_attention_tiled_kernel<NV, HPW, W, S><<<grid, W * 32, smem, st>>>(q, heads, pool, idx, k, sink, scale, out);
}

// Launches the tiled kernel with HPW heads per warp and W warps when the shape fits; false otherwise.
template <int HPW, int W>
bool launch_tiled_nv(int max_smem, cudaStream_t st, const float* q, int64_t tokens, int64_t heads, int64_t dim,
                     const float* pool, const int32_t* idx, int64_t k, const float* sink, float scale, float* out) {
  constexpr int G = HPW * W;
  if (heads % G != 0) return false;
  const int64_t ntiles = (k + kTiledStageRows - 1) / kTiledStageRows;
  const size_t smem = (static_cast<size_t>(tiled_stages(W)) * kTiledStageRows + G) * dim * sizeof(float) +
                      static_cast<size_t>(ntiles) * kTiledStageRows * sizeof(int32_t);
  if (smem > static_cast<size_t>(max_smem)) return false;
  const unsigned grid = static_cast<unsigned>(tokens * (heads / G));
  switch (dim / 128) {
    case 1: launch_tiled<1, HPW, W>(max_smem, grid, smem, st, q, heads, pool, idx, k, sink, scale, out); break;
    case 2: launch_tiled<2, HPW, W>(max_smem, grid, smem, st, q, heads, pool, idx, k, sink, scale, out); break;
    case 3: launch_tiled<3, HPW, W>(max_smem, grid, smem, st, q, heads, pool, idx, k, sink, scale, out); break;
    case 4: launch_tiled<4, HPW, W>(max_smem, grid, smem, st, q, heads, pool, idx, k, sink, scale, out); break;
    default: return false;
  }
  check_launch("sparse_attention_tiled_kernel");
  return true;
}

void CudaBackend::sparse_attention(const float* q, int64_t tokens, int64_t heads, int64_t dim, const float* pool,
                                   const int32_t* idx, int64_t k, const float* sink, float scale, float* out) {
  impl_->bind();
  check_sizes(tokens >= 0 && heads >= 0 && dim > 0 && k >= 0 && tokens * heads <= INT32_MAX, "sparse_attention");
  const int64_t blocks = tokens * heads;
  if (blocks == 0) return;
  const unsigned grid = static_cast<unsigned>(blocks);
  const int threads = kAttnWarps * 32;
  auto aligned16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool tiled = dim % 128 == 0 && dim <= 512 && aligned16(q) && aligned16(pool) && aligned16(out);
  // The tiled kernel (4 heads per warp; 8 warps when heads % 32 == 0, else 4 when heads % 16 == 0),
  // else the generic one.
  if (tiled && k > 0) {
    const int mx = impl_->max_smem_optin;
    cudaStream_t st = impl_->stream;
    if (impl_->attention_kernel == kAttnAuto &&
        launch_tiled_nv<4, 8>(mx, st, q, tokens, heads, dim, pool, idx, k, sink, scale, out))
      return;
    if (launch_tiled_nv<4, 4>(mx, st, q, tokens, heads, dim, pool, idx, k, sink, scale, out)) return;
  }
  const size_t smem = static_cast<size_t>(1 + kAttnWarps) * dim * sizeof(float);
  impl_->allow_smem(sparse_attention_generic_kernel, smem, "cudaFuncSetAttribute(sparse_attention_generic_kernel)",
                    "cuda sparse_attention: dim ", dim, " needs more shared memory than the device has");
  sparse_attention_generic_kernel<<<grid, threads, smem, impl_->stream>>>(q, heads, dim, pool, idx, k, sink, scale,
                                                                          out);
  check_launch("sparse_attention_generic_kernel");
}

void CudaBackend::hc_weights(const float* x, int64_t rows, int64_t hc, int64_t dim, const float* fn, const float* base,
                             const float* scale, float rms_eps, float hc_eps, int64_t sinkhorn_iters, float* pre,
                             float* post, float* comb) {
  impl_->bind();
  check_sizes(rows >= 0 && hc > 0 && dim > 0 && rows <= INT32_MAX, "hc_weights");
  check(!comb || post, "cuda hc_weights: comb needs post");
  if (rows == 0) return;
  const int64_t outs = comb ? (2 + hc) * hc : hc, width = hc * dim;
  check_sizes(width <= INT32_MAX && outs <= INT32_MAX, "hc_weights");
  // At decode the dots are few outputs over a long row: split K over 8 blocks an output (a fixed split,
  // so a row's bits do not depend on the batch), the tail adding the splits. Else linear() (cuBLAS, or
  // the CPU's order when exact).
  const int64_t kSplits = kHcMaxSplits;
  const bool split = !impl_->exact_gemm && impl_->linear_gemv && (rows <= kGemvMaxM || impl_->batch_invariant) &&
                     gemv_fits(x, 1, width, fn, outs, 4) && gemv_split_fits(width, kSplits, 4);
  const int64_t splits = split ? kSplits : 1;
  float* dots = static_cast<float*>(impl_->workspace(static_cast<size_t>(splits * rows * outs) * sizeof(float)));
  if (!split) linear(x, rows, width, fn, outs, dots);
  for (int64_t r = 0; split && r < rows; r += kGemvMaxM)  // [splits, rows, outs], chunks of rows (batch invariant)
    gemv_f32_split(x + r * width, std::min<int64_t>(kGemvMaxM, rows - r), width, fn, outs, kSplits, dots + r * outs,
                   rows * outs, impl_->stream);
  check(hc <= kHcMax, "cuda hc_weights: hc ", hc, " is above the supported ", kHcMax);
  hc_weights_tail_kernel<<<static_cast<unsigned>(rows), kHcThreads, 0, impl_->stream>>>(x, static_cast<int>(hc), dim, dots, base, scale, rms_eps, hc_eps,
                                                                     sinkhorn_iters, impl_->exact_gemm, static_cast<int>(splits), pre, post, comb);
  check_launch("hc_weights_tail_kernel");
}

void CudaBackend::hc_collapse(const float* x, const float* mix, int64_t rows, int64_t hc, int64_t dim, bool bf16_out,
                              float* y) {
  impl_->bind();
  check_sizes(rows >= 0 && hc > 0 && dim >= 0, "hc_collapse");
  const int64_t n = rows * dim;
  if (n == 0) return;
  hc_collapse_kernel<<<grid_for(n, 256), 256, 0, impl_->stream>>>(x, mix, rows, hc, dim, bf16_out, y);
  check_launch("hc_collapse_kernel");
}

void CudaBackend::hc_expand(const float* x, const float* sub, const float* post, const float* comb, int64_t rows,
                            int64_t hc, int64_t dim, bool bf16_out, float* out) {
  impl_->bind();
  check_sizes(rows >= 0 && hc > 0 && hc <= kExpandMaxHc && dim >= 0, "hc_expand");
  const int64_t n = rows * dim;
  if (n == 0) return;
  hc_expand_kernel<<<grid_for(n, 256), 256, 0, impl_->stream>>>(x, sub, post, comb, rows, hc, dim, bf16_out, out);
  check_launch("hc_expand_kernel");
}

void CudaBackend::softmax_pool(const float* kv, const float* gate, int64_t windows, int64_t slots, int64_t channels,
                               float* z) {
  impl_->bind();
  check_sizes(windows >= 0 && slots >= 0 && channels >= 0, "softmax_pool");
  const int64_t n = windows * channels;
  if (n == 0) return;
  softmax_pool_kernel<<<grid_for(n, 256), 256, 0, impl_->stream>>>(kv, gate, windows, slots, channels, z);
  check_launch("softmax_pool_kernel");
}

void CudaBackend::swiglu(const float* g, const float* u, int64_t rows, int64_t dim, float limit,
                         const float* row_scale, float* h, bool bf16_out) {
  impl_->bind();
  check_sizes(rows >= 0 && dim >= 0, "swiglu");
  const int64_t n = rows * dim;
  if (n == 0) return;
  swiglu_kernel<<<grid_for(n, 256), 256, 0, impl_->stream>>>(g, u, rows, dim, limit, row_scale, bf16_out, h);
  check_launch("swiglu_kernel");
}

void CudaBackend::fake_quant_fp8(float* x, int64_t rows, int64_t dim, int64_t block) {
  impl_->bind();
  check_sizes(rows >= 0 && dim >= 0 && block > 0, "fake_quant_fp8");
  const int64_t per_row = (dim + block - 1) / block, n = rows * per_row;
  if (n == 0) return;
  fake_quant_kernel<true><<<grid_for(n, 8), 256, 0, impl_->stream>>>(x, rows, dim, block, per_row, 1e-4f, 448.0f);
  check_launch("fake_quant_kernel<fp8>");
}

void CudaBackend::fake_quant_fp4(float* x, int64_t rows, int64_t dim, int64_t block) {
  impl_->bind();
  check_sizes(rows >= 0 && dim >= 0 && block > 0, "fake_quant_fp4");
  const int64_t per_row = (dim + block - 1) / block, n = rows * per_row;
  if (n == 0) return;
  const float floor_amax = 6.0f * std::ldexp(1.0f, -126);
  fake_quant_kernel<false><<<grid_for(n, 8), 256, 0, impl_->stream>>>(x, rows, dim, block, per_row, floor_amax, 6.0f);
  check_launch("fake_quant_kernel<fp4>");
}

void CudaBackend::fake_quant_fp4_e4m3(float* x, int64_t rows, int64_t dim, int64_t block) {
  impl_->bind();
  check_sizes(rows >= 0 && dim >= 0 && block > 0, "fake_quant_fp4_e4m3");
  const int64_t per_row = (dim + block - 1) / block, n = rows * per_row;
  if (n == 0) return;
  const float floor_amax = 6.0f * std::ldexp(1.0f, -9);
  fake_quant_kernel<false, true><<<grid_for(n, 8), 256, 0, impl_->stream>>>(x, rows, dim, block, per_row, floor_amax,
                                                                            6.0f);
  check_launch("fake_quant_kernel<fp4, e4m3 scale>");
}

void CudaBackend::linear_kblocked(const float* x, int64_t m, int64_t k, const float* w, int64_t n, int64_t block,
                                  float* y) {
  impl_->bind();
  check_sizes(m >= 0 && k >= 0 && n >= 0 && block > 0 && (m + kKbTm - 1) / kKbTm <= 65535, "linear_kblocked");
  if (m == 0 || n == 0) return;
  const dim3 grid(static_cast<unsigned>((n + kKbTn - 1) / kKbTn), static_cast<unsigned>((m + kKbTm - 1) / kKbTm));
  linear_kblocked_kernel<<<grid, 256, 0, impl_->stream>>>(x, m, k, w, n, block, y);
  check_launch("linear_kblocked_kernel");
}

void CudaBackend::round_bf16(float* x, int64_t n) {
  impl_->bind();
  check_sizes(n >= 0, "round_bf16");
  if (n == 0) return;
  round_bf16_kernel<<<grid_for(n, 256), 256, 0, impl_->stream>>>(x, n);
  check_launch("round_bf16_kernel");
}

void CudaBackend::sparse_attention_online(const float* q, int64_t tokens, int64_t heads, int64_t dim,
                                          const uint8_t* pool, int64_t pool_block_bytes, const uint8_t* fresh,
                                          const int32_t* idx, int64_t k, int64_t window, const float* sink, float scale,
                                          int64_t block, float* out) {
  impl_->bind();
  check_sizes(tokens >= 0 && heads >= 0 && dim > 0 && dim % 32 == 0 && k >= 0 && block > 0 &&
                  tokens * heads <= INT32_MAX && pool_block_bytes >= 0,
              "sparse_attention_online");
  const int64_t blocks = tokens * heads;
  if (blocks == 0) return;
  // DeepSeek-V4.1's shape (64 heads x 512, blocks of 64): the BF16 tensor-core kernel. It reads q rounded
  // to bf16 (exact for the model's bf16-valued data) and the rows decoded to bf16 (exact), and sums in the tensor cores' order, so
  // out differs from the CPU by fp32 reassociation and the bf16 roundings of p that it flips.
  // DEEPINFER_ATTENTION=exact keeps the fp32 kernel below for verification.
  auto aligned16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (!impl_->exact_attention && dim == 512 && heads % 64 == 0 && block == 64 && pool && aligned16(q) &&
      aligned16(pool) && aligned16(fresh) && aligned16(out) && pool_block_bytes % 16 == 0) {
    SparseAttnArgs a;
    a.q = q, a.pool = pool, a.pool_block_bytes = pool_block_bytes, a.fresh = fresh, a.idx = idx, a.k = k;
    a.window = window;
    a.sink = sink, a.scale = scale, a.out = out, a.tokens = tokens, a.heads = heads, a.dim = dim, a.f32 = true;
    // Decode leaves most SMs idle at one CTA per (token, 64 heads): split the index list over them. The
    // split depends on the batch's size, so batch-invariant mode never splits.
    if (!impl_->batch_invariant) a.splits = sparse_attention_splits(tokens, heads, k, impl_->sms);
    if (a.splits > 1) a.partial = static_cast<float*>(impl_->workspace(sparse_attention_partial_bytes(tokens, heads, a.splits)));
    sparse_attention_bf16(a, impl_->stream);
    return;
  }
  const size_t smem = (static_cast<size_t>(1 + kAttnWarps) * dim + block) * sizeof(float);
  impl_->allow_smem(sparse_attention_online_kernel, smem, "cudaFuncSetAttribute(sparse_attention_online_kernel)",
                    "cuda sparse_attention_online: dim ", dim, " block ", block,
                    " need more shared memory than the device has");
  sparse_attention_online_kernel<<<static_cast<unsigned>(blocks), kAttnWarps * 32, smem, impl_->stream>>>(
      q, heads, dim, pool, pool_block_bytes, fresh, idx, k, window, sink, scale, block, out);
  check_launch("sparse_attention_online_kernel");
}

}  // namespace deepinfer::cuda
