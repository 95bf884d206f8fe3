// BF16 tensor-core sparse attention with sink (see sparse_attention.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backends/cuda/kernels/fp_formats.cuh"
#include "backends/cuda/kernels/mma_bf16.cuh"
#include "backends/cuda/kernels/sparse_attention.h"
#include "core/error.h"

namespace deepinfer::cuda {
namespace {

using mma::ldsm_x4;
using mma::ldsm_x4_t;
using mma::pack_bf16;

constexpr int kD = 512, kHeads = 64, kRows = 64, kThreads = 256;
constexpr int kRowBytes = kD * 2;                            // one bf16 row: 64 chunks of 16 bytes
constexpr int kWinBytes = kD + kD / 32, kCkvBytes = kD / 2 + kD / 16;  // stored window / compressed rows
constexpr int kTileBytes = kRows * kRowBytes;                // 64 rows (or heads) x 512 channels
constexpr int kExchBytes = 8 * 8 * 2 * 32 * 8;               // per warp: 8 n-tiles x 2 halves x 32 lanes x float2
// Q, two row buffers, the exchange, the chunks' row kinds [2][64] (0 none, 1 window, 2 compressed) and row
// addresses [2][64].
constexpr int kSmem = kTileBytes * 3 + kExchBytes + 2 * kRows + 2 * kRows * 8 + 128;
// The gather: each thread owns 16 pieces of a chunk (a piece = 8 channels of a row: one 16-byte chunk of
// the bf16 tile), loaded in batches of kBatch, half of the batches behind the S math and half behind the
// P.V math.
// (All of a chunk's cp.async copies at once, waited for a chunk later, measured slower: 974 vs 801 us.)
struct Gather {
  static constexpr int kBatch = 4, kBatches = 16 / kBatch, kParts = kBatches / 2;
};

// Byte offset of 16-byte chunk c of row r in a swizzled tile: the chunk index XOR (r % 8) spreads the 8
// rows an ldmatrix reads over all banks.
__device__ __forceinline__ uint32_t swz(int r, int c) { return r * kRowBytes + ((c ^ (r & 7)) << 4); }

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }

// One piece from global memory (zeros when !valid): 8 fp32 values or 8 bf16 ones, issued as volatile asm
// so the compiler keeps the loads where they are written, ahead of the math they hide behind.
template <bool kF32>
struct Piece {
  uint32_t v[kF32 ? 8 : 4];
};
template <bool kF32>
__device__ __forceinline__ Piece<kF32> ldg_piece(const void* p, bool valid) {
  Piece<kF32> r;
  if constexpr (kF32)
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %9, 0;\n"
        " mov.b32 %0, 0; mov.b32 %1, 0; mov.b32 %2, 0; mov.b32 %3, 0;\n"
        " mov.b32 %4, 0; mov.b32 %5, 0; mov.b32 %6, 0; mov.b32 %7, 0;\n"
        " @p ld.global.nc.v4.b32 {%0, %1, %2, %3}, [%8];\n"
        " @p ld.global.nc.v4.b32 {%4, %5, %6, %7}, [%8 + 16];\n}"
        : "=r"(r.v[0]), "=r"(r.v[1]), "=r"(r.v[2]), "=r"(r.v[3]), "=r"(r.v[4]), "=r"(r.v[5]), "=r"(r.v[6]),
          "=r"(r.v[7])
        : "l"(p), "r"(static_cast<int>(valid)));
  else
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n"
        " mov.b32 %0, 0; mov.b32 %1, 0; mov.b32 %2, 0; mov.b32 %3, 0;\n"
        " @p ld.global.nc.v4.b32 {%0, %1, %2, %3}, [%4];\n}"
        : "=r"(r.v[0]), "=r"(r.v[1]), "=r"(r.v[2]), "=r"(r.v[3])
        : "l"(p), "r"(static_cast<int>(valid)));
  return r;
}
// The piece as 8 bf16 values (fp32 narrowed, RNE: exact for bf16-valued data) into one 16-byte chunk.
template <bool kF32>
__device__ __forceinline__ void sts_piece(uint32_t addr, const Piece<kF32>& x) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (kF32)
      w[i] = pack_bf16(__uint_as_float(x.v[2 * i]), __uint_as_float(x.v[2 * i + 1]));
    else
      w[i] = x.v[i];
  }
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
               : "memory");
}

// Piece `ch` of a stored row, raw: the codes of channels 8 ch .. 8 ch + 7 (window rows: 8 e4m3 bytes in
// c[0..1]; compressed rows: 4 bytes of e2m1 pairs in c[0]) and their scale byte (| 0x100 for a compressed
// row's E4M3 scale); zeros when !valid. Volatile asm keeps the loads where they are written.
struct RawPiece {
  uint32_t c[2], s;
};
__device__ __forceinline__ RawPiece ldg_raw(const uint8_t* row, int ch, bool fp4, bool valid) {
  RawPiece r;
  if (fp4) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %4, 0;\n mov.b32 %0, 0; mov.b32 %1, 0;\n"
        " @p ld.global.nc.b32 %0, [%2];\n @p ld.global.nc.u8 %1, [%3];\n}"
        : "=r"(r.c[0]), "=r"(r.s)
        : "l"(row + ch * 4), "l"(row + kD / 2 + ch / 2), "r"(static_cast<int>(valid)));
    r.c[1] = 0;
    r.s |= 0x100;
  } else {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n mov.b32 %0, 0; mov.b32 %1, 0; mov.b32 %2, 0;\n"
        " @p ld.global.nc.v2.b32 {%0, %1}, [%3];\n @p ld.global.nc.u8 %2, [%4];\n}"
        : "=r"(r.c[0]), "=r"(r.c[1]), "=r"(r.s)
        : "l"(row + ch * 8), "l"(row + kD + ch / 4), "r"(static_cast<int>(valid)));
  }
  return r;
}
// A raw piece decoded (code x scale: exact in fp32 and in bf16, so the bf16 bits are the top half) into
// one 16-byte chunk of the bf16 tile.
__device__ __forceinline__ void sts_raw(uint32_t addr, const RawPiece& x) {
  const bool fp4 = x.s & 0x100;
  const float sc = fp4 ? e4m3_to_float_d(x.s & 0xff) : e8m0_to_float_d(x.s & 0xff);
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float v0, v1;
    if (fp4) {
      const uint32_t b = (x.c[0] >> (8 * i)) & 0xff;
      v0 = e2m1_to_float_d(b & 0xf), v1 = e2m1_to_float_d(b >> 4);
    } else {
      const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
          static_cast<__nv_fp8x2_storage_t>((x.c[i / 2] >> (16 * (i % 2))) & 0xffff), __NV_E4M3);
      const float2 f = __half22float2(__half2(h));
      v0 = f.x, v1 = f.y;
    }
    w[i] = (__float_as_uint(__fmul_rn(v0, sc)) >> 16) | (__float_as_uint(__fmul_rn(v1, sc)) & 0xffff0000u);
  }
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
               : "memory");
}

// Batch `bt` of this thread's 16 pieces of a chunk whose row addresses and kinds are in srow / kind: piece p
// is row threadIdx.x / 64 + 4 p, piece threadIdx.x % 64 (a row's 64 pieces by consecutive threads: a warp
// reads one row, of one kind).
struct Batch {
  RawPiece x[Gather::kBatch];
};
__device__ __forceinline__ Batch load_batch(const uint8_t* const* srow, const uint8_t* kind, int bt) {
  constexpr int kB = Gather::kBatch;
  Batch b;
#pragma unroll
  for (int u = 0; u < kB; ++u) {
    const int r = threadIdx.x / 64 + 4 * (kB * bt + u);
    b.x[u] = ldg_raw(srow[r], threadIdx.x % 64, kind[r] == 2, kind[r] != 0);
  }
  return b;
}
__device__ __forceinline__ void store_batch(uint32_t buf, const Batch& b, int bt) {
  constexpr int kB = Gather::kBatch;
#pragma unroll
  for (int u = 0; u < kB; ++u) sts_raw(buf + swz(threadIdx.x / 64 + 4 * (kB * bt + u), threadIdx.x % 64), b.x[u]);
}
// Chunk c's row addresses and kinds (0 none, 1 window row, 2 compressed row), by threads 0..63.
__device__ __forceinline__ void stage_indices(const SparseAttnArgs& a, const int32_t* idx_t, int c,
                                              const uint8_t** srow, uint8_t* kind) {
  if (threadIdx.x < kRows) {
    const int j = c * kRows + threadIdx.x;
    const int32_t ix = j < a.k ? __ldg(idx_t + j) : -1;
    const bool fp4 = j >= a.window;
    srow[threadIdx.x] = ix == -1 ? a.pool
                        : ix >= 0 ? a.pool + paged_row_offset_d(ix, fp4 ? kCkvBytes : kWinBytes, a.pool_block_bytes)
                                  : a.fresh + (-2 - static_cast<int64_t>(ix)) * kWinBytes;
    kind[threadIdx.x] = ix == -1 ? 0 : fp4 ? 2 : 1;
  }
}

template <bool kF32>
__global__ void __launch_bounds__(kThreads, 1) sparse_attention_kernel(const SparseAttnArgs a) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int t = blockIdx.x, h0 = blockIdx.y * kHeads, split = blockIdx.z;  // tokens on x: up to 2^31 - 1
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, hg = warp % 4, dh = warp / 4;
  const int g = lane / 4, tq = lane % 4;
  const uint32_t s_q = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  float2* exch = reinterpret_cast<float2*>(smem + 3 * kTileBytes);
  uint8_t* valid = smem + 3 * kTileBytes + kExchBytes;  // [2][64] row kinds (nonzero: a row)
  const uint8_t** srow = reinterpret_cast<const uint8_t**>(smem + 3 * kTileBytes + kExchBytes + 2 * kRows);  // [2][64]
  const int32_t* idx_t = a.idx + static_cast<int64_t>(t) * a.k;
  const int all_chunks = static_cast<int>((a.k + kRows - 1) / kRows), per = (all_chunks + a.splits - 1) / a.splits;
  const int c0 = min(all_chunks, split * per), c1 = min(all_chunks, c0 + per);  // this CTA's chunks

  // Prologue: this token's 64 heads of q, and chunk 0.
  using G = Gather;
  using T = std::conditional_t<kF32, float, uint16_t>;
  const T* q_t = static_cast<const T*>(a.q) + (static_cast<int64_t>(t) * a.heads + h0) * kD;
  for (int i = threadIdx.x; i < kHeads * 64; i += kThreads)
    sts_piece<kF32>(s_q + swz(i / 64, i % 64), ldg_piece<kF32>(q_t + static_cast<int64_t>(i / 64) * kD + (i % 64) * 8, true));
  if (c0 < c1) stage_indices(a, idx_t, c0, srow, valid);
  __syncthreads();
  if (c0 < c1)
#pragma unroll
    for (int bt = 0; bt < G::kBatches; ++bt) store_batch(s_q + kTileBytes, load_batch(srow, valid, bt), bt);

  float o[32][4];
#pragma unroll
  for (int i = 0; i < 32; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m[2] = {-1e30f, -1e30f}, z[2] = {0.0f, 0.0f};

  for (int c = c0; c < c1; ++c) {
    const int b = (c - c0) & 1;
    const uint32_t s_rows = s_q + (1 + b) * kTileBytes, s_next = s_q + (2 - b) * kTileBytes;
    const bool next = c + 1 < c1;
    const uint8_t* const* srow_next = srow + (b ^ 1) * kRows;
    const uint8_t* kind_next = valid + (b ^ 1) * kRows;
    __syncthreads();  // every warp is done with chunk c - 1, so its buffer may be refilled
    if (next) stage_indices(a, idx_t, c + 1, srow + (b ^ 1) * kRows, valid + (b ^ 1) * kRows);
    __syncthreads();  // chunk c (stored during chunk c - 1) and chunk c + 1's indices are visible

    // S[16 heads x 64 rows] over this warp's 256 channels, in kParts stretches of channels, each hiding a
    // batch of the next chunk's loads.
    float s[8][4];
#pragma unroll
    for (int i = 0; i < 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
    for (int part = 0; part < G::kParts; ++part) {
      Batch pre;
      if (next) pre = load_batch(srow_next, kind_next, part);
#pragma unroll 4
      for (int ks = part * (16 / G::kParts); ks < (part + 1) * (16 / G::kParts); ++ks) {
        uint32_t qa[4];
        ldsm_x4(qa, s_q + swz(hg * 16 + lane % 16, dh * 32 + ks * 2 + lane / 16));
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          uint32_t kb[4];
          ldsm_x4(kb, s_rows + swz(np * 16 + lane % 8 + (lane / 16) * 8, dh * 32 + ks * 2 + (lane / 8) % 2));
          mma::mma(s[2 * np], qa, kb[0], kb[1]);
          mma::mma(s[2 * np + 1], qa, kb[2], kb[3]);
        }
      }
      if (next) store_batch(s_next, pre, part);
    }
    // The two channel halves of each head group add up through shared memory (a + b == b + a, so both
    // warps of the pair hold the same S and make the same softmax).
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      exch[((warp * 8 + nt) * 2 + 0) * 32 + lane] = make_float2(s[nt][0], s[nt][1]);
      exch[((warp * 8 + nt) * 2 + 1) * 32 + lane] = make_float2(s[nt][2], s[nt][3]);
    }
    __syncthreads();
    const int partner = warp ^ 4;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const float2 p0 = exch[((partner * 8 + nt) * 2 + 0) * 32 + lane];
      const float2 p1 = exch[((partner * 8 + nt) * 2 + 1) * 32 + lane];
      s[nt][0] += p0.x, s[nt][1] += p0.y, s[nt][2] += p1.x, s[nt][3] += p1.y;
    }

    // Online softmax: rows g (half 0) and g + 8 (half 1) of the head group, 16 of the 64 columns here,
    // the other 48 in the quad's other lanes.
    const uint8_t* vf = valid + b * kRows;
    uint32_t pa[4][4];  // P as the A operand of the P.V mma, k16 chunk by k16 chunk
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float bm = neg_inf();
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const bool ok = vf[nt * 8 + 2 * tq + e];
          const float v = ok ? s[nt][2 * hr + e] * a.scale : neg_inf();
          s[nt][2 * hr + e] = v;
          bm = fmaxf(bm, v);
        }
      bm = fmaxf(bm, __shfl_xor_sync(0xffffffffu, bm, 1));
      bm = fmaxf(bm, __shfl_xor_sync(0xffffffffu, bm, 2));
      const float m_new = fmaxf(m[hr], bm), rescale = expf(m[hr] - m_new);
      float psum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        float p[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float v = s[nt][2 * hr + e];
          p[e] = v == neg_inf() ? 0.0f : expf(v - m_new);  // masked columns are exactly 0
          psum += p[e];
        }
        // m16n8 C layout -> m16k16 A layout: n-tile 2kk gives regs 0 / 1, n-tile 2kk + 1 regs 2 / 3.
        pa[nt / 2][(nt % 2) * 2 + hr] = pack_bf16(p[0], p[1]);
      }
      psum += __shfl_xor_sync(0xffffffffu, psum, 1);
      psum += __shfl_xor_sync(0xffffffffu, psum, 2);
      z[hr] = z[hr] * rescale + psum;
      m[hr] = m_new;
#pragma unroll
      for (int nt = 0; nt < 32; ++nt) {
        o[nt][2 * hr] *= rescale;
        o[nt][2 * hr + 1] *= rescale;
      }
    }

    // O[16 heads x 256 channels] += P[16 x 64] V[64 x 256] (V = the same rows, read transposed), in kParts
    // stretches of rows, each hiding one of the other batches of loads.
#pragma unroll
    for (int part = 0; part < G::kParts; ++part) {
      Batch pre;
      if (next) pre = load_batch(srow_next, kind_next, G::kParts + part);
#pragma unroll
      for (int kk = part * (4 / G::kParts); kk < (part + 1) * (4 / G::kParts); ++kk)
#pragma unroll
        for (int ntp = 0; ntp < 16; ++ntp) {
          uint32_t vb[4];
          ldsm_x4_t(vb, s_rows + swz(kk * 16 + lane % 8 + ((lane / 8) % 2) * 8, dh * 32 + ntp * 2 + lane / 16));
          mma::mma(o[2 * ntp], pa[kk], vb[0], vb[1]);
          mma::mma(o[2 * ntp + 1], pa[kk], vb[2], vb[3]);
        }
      if (next) store_batch(s_next, pre, G::kParts + part);
    }
  }

  // out = O / (z + exp(sink - m)); rows with no index have z = 0, m = -1e30: 0 / inf = 0. A split writes
  // O, m and z (the quad's lane 0 and half 0 of the channels: every lane of the quad holds the same m, z).
  if (a.splits > 1) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int h = h0 + hg * 16 + g + 8 * hr;
      const int64_t row = (static_cast<int64_t>(split) * a.tokens + t) * a.heads + h;
      float* po = a.partial + row * kD;
#pragma unroll
      for (int nt = 0; nt < 32; ++nt)
        *reinterpret_cast<float2*>(po + dh * 256 + nt * 8 + 2 * tq) = make_float2(o[nt][2 * hr], o[nt][2 * hr + 1]);
      if (tq == 0 && dh == 0) {
        float* mz = a.partial + static_cast<int64_t>(a.splits) * a.tokens * a.heads * kD + row * 2;
        mz[0] = m[hr], mz[1] = z[hr];
      }
    }
    return;
  }
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int h = h0 + hg * 16 + g + 8 * hr;
    const float zt = z[hr] + expf(__ldg(a.sink + h) - m[hr]);
    const int64_t off = (static_cast<int64_t>(t) * a.heads + h) * kD;
#pragma unroll
    for (int nt = 0; nt < 32; ++nt) {
      const int d = dh * 256 + nt * 8 + 2 * tq;
      if constexpr (kF32)
        *reinterpret_cast<float2*>(static_cast<float*>(a.out) + off + d) =
            make_float2(o[nt][2 * hr] / zt, o[nt][2 * hr + 1] / zt);
      else
        *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(a.out) + off + d) =
            __floats2bfloat162_rn(o[nt][2 * hr] / zt, o[nt][2 * hr + 1] / zt);
    }
  }
}

// The splits of one (token, head) in split order: M = max m_s, O = sum O_s e^(m_s - M), z likewise, then
// out = O / (z + e^(sink - M)). One CTA of 128 threads per (token, head), 4 channels a thread.
template <bool kF32>
__global__ void __launch_bounds__(128) sparse_attention_combine_kernel(const SparseAttnArgs a) {
  const int64_t row = blockIdx.x, h = row % a.heads, rows = a.tokens * a.heads;
  const float* mz = a.partial + a.splits * rows * kD;
  float mx = -1e30f;
  for (int64_t s = 0; s < a.splits; ++s) mx = fmaxf(mx, mz[(s * rows + row) * 2]);
  float z = 0.0f, o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const int d = threadIdx.x * 4;
  for (int64_t s = 0; s < a.splits; ++s) {
    const float w = expf(mz[(s * rows + row) * 2] - mx);
    z += mz[(s * rows + row) * 2 + 1] * w;
    const float4 v = *reinterpret_cast<const float4*>(a.partial + (s * rows + row) * kD + d);
    o[0] += v.x * w, o[1] += v.y * w, o[2] += v.z * w, o[3] += v.w * w;
  }
  const float zt = z + expf(__ldg(a.sink + h) - mx);
  if constexpr (kF32) {
    *reinterpret_cast<float4*>(static_cast<float*>(a.out) + row * kD + d) =
        make_float4(o[0] / zt, o[1] / zt, o[2] / zt, o[3] / zt);
  } else {
    auto* out = reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(a.out) + row * kD + d);
    out[0] = __floats2bfloat162_rn(o[0] / zt, o[1] / zt);
    out[1] = __floats2bfloat162_rn(o[2] / zt, o[3] / zt);
  }
}

template <bool kF32>
void launch(const SparseAttnArgs& a, cudaStream_t stream) {
  static const bool attr_set = cudaFuncSetAttribute(sparse_attention_kernel<kF32>,
                                                    cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem) == cudaSuccess;
  check(attr_set, "sparse_attention_bf16: cannot reserve ", kSmem, " bytes of shared memory");
  const dim3 grid(static_cast<unsigned>(a.tokens), static_cast<unsigned>(a.heads / kHeads), static_cast<unsigned>(a.splits));
  sparse_attention_kernel<kF32><<<grid, kThreads, kSmem, stream>>>(a);
  if (a.splits > 1)
    sparse_attention_combine_kernel<kF32><<<static_cast<unsigned>(a.tokens * a.heads), 128, 0, stream>>>(a);
}

}  // namespace

int64_t sparse_attention_splits(int64_t tokens, int64_t heads, int64_t k, int64_t sms) {
  const int64_t ctas = tokens * (heads / kHeads), chunks = (k + kRows - 1) / kRows;
  if (ctas <= 0 || ctas * 2 > sms || chunks < 2) return 1;  // half the SMs busy already: no split
  const int64_t want = std::min<int64_t>(chunks, sms / ctas);
  const int64_t per = (chunks + want - 1) / want;
  return (chunks + per - 1) / per;  // every split gets chunks
}

size_t sparse_attention_partial_bytes(int64_t tokens, int64_t heads, int64_t splits) {
  return static_cast<size_t>(splits * tokens * heads) * (kD + 2) * sizeof(float);
}

void sparse_attention_bf16(const SparseAttnArgs& a, void* stream) {
  check(a.dim == kD, "sparse_attention_bf16: dim must be 512, got ", a.dim);
  check(a.heads > 0 && a.heads % kHeads == 0, "sparse_attention_bf16: heads must be a multiple of 64, got ", a.heads);
  check(a.tokens >= 0 && a.tokens < (1 << 30) && a.k >= 0 && a.k < (1 << 30), "sparse_attention_bf16: bad sizes");
  check(a.pool_block_bytes % 16 == 0 && a.window >= 0, "sparse_attention_bf16: state blocks must be whole 16-byte units");
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  check(a.q && a.pool && a.idx && a.sink && a.out && aligned(a.q) && aligned(a.pool) && aligned(a.out) &&
            (!a.fresh || aligned(a.fresh)),
        "sparse_attention_bf16: null or unaligned pointer");
  check(a.splits >= 1 && a.splits <= 1024 && (a.splits == 1 || aligned(a.partial)),
        "sparse_attention_bf16: splits must be 1..1024, with 16-byte aligned partial scratch past 1");
  if (a.tokens == 0) return;
  SparseAttnArgs args = a;
  if (!args.fresh) args.fresh = args.pool;  // never read: only indices <= -2 point there
  if (a.f32)
    launch<true>(args, static_cast<cudaStream_t>(stream));
  else
    launch<false>(args, static_cast<cudaStream_t>(stream));
  const cudaError_t e = cudaGetLastError();
  check(e == cudaSuccess, "sparse_attention_bf16: launch failed: ", cudaGetErrorString(e));
}

}  // namespace deepinfer::cuda
