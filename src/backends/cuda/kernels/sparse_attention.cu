// BF16 tensor-core sparse attention with sink (see sparse_attention.h).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernels/sparse_attention.h"
#include "core/error.h"

namespace deepinfer::cuda {
namespace {

constexpr int kD = 512, kHeads = 64, kRows = 64, kThreads = 256;
constexpr int kRowBytes = kD * 2;                            // one bf16 row: 64 chunks of 16 bytes
constexpr int kTileBytes = kRows * kRowBytes;                // 64 rows (or heads) x 512 channels
constexpr int kExchBytes = 8 * 8 * 2 * 32 * 8;               // per warp: 8 n-tiles x 2 halves x 32 lanes x float2
constexpr int kSmem = kTileBytes * 3 + kExchBytes + 2 * kRows + 128;  // Q, two row buffers, exchange, flags

// Byte offset of 16-byte chunk c of row r in a swizzled tile: the chunk index XOR (r % 8) spreads the 8
// rows an ldmatrix reads over all banks.
__device__ __forceinline__ uint32_t swz(int r, int c) { return r * kRowBytes + ((c ^ (r & 7)) << 4); }

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// d[16 x 8] += a[16 x 16] b[16 x 8], bf16 in, fp32 accumulate.
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Gathers chunk c's 64 rows of token t into a row buffer (rows past k or with index -1 zero-filled) and
// its validity flags; each thread issues 16 of the 4096 16-byte copies, a row's 64 by consecutive threads.
__device__ __forceinline__ void gather_chunk(const SparseAttnArgs& a, const int32_t* idx_t, int c, uint32_t buf,
                                             uint8_t* valid) {
  for (int i = threadIdx.x; i < kRows * 64; i += kThreads) {
    const int r = i / 64, ch = i % 64, j = c * kRows + r;
    const int32_t ix = j < a.k ? __ldg(idx_t + j) : -1;
    const uint16_t* row = ix >= 0 ? a.pool + static_cast<int64_t>(ix) * a.ld_pool
                                  : a.fresh + (-2 - static_cast<int64_t>(ix)) * a.ld_fresh;
    cp_async16(buf + swz(r, ch), ix != -1 ? row + ch * 8 : a.pool, ix != -1);
    if (ch == 0) valid[r] = ix != -1;
  }
}

__global__ void __launch_bounds__(kThreads, 1) sparse_attention_kernel(const SparseAttnArgs a) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int t = blockIdx.y, h0 = blockIdx.x * kHeads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, hg = warp % 4, dh = warp / 4;
  const int g = lane / 4, tq = lane % 4;
  const uint32_t s_q = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  float2* exch = reinterpret_cast<float2*>(smem + 3 * kTileBytes);
  uint8_t* valid = smem + 3 * kTileBytes + kExchBytes;  // [2][64]
  const int32_t* idx_t = a.idx + static_cast<int64_t>(t) * a.k;
  const int nchunks = static_cast<int>((a.k + kRows - 1) / kRows);

  // Prologue: this token's 64 heads of q, and chunk 0.
  const uint16_t* q_t = a.q + (static_cast<int64_t>(t) * a.heads + h0) * kD;
  for (int i = threadIdx.x; i < kHeads * 64; i += kThreads)
    cp_async16(s_q + swz(i / 64, i % 64), q_t + static_cast<int64_t>(i / 64) * kD + (i % 64) * 8, true);
  if (nchunks > 0) gather_chunk(a, idx_t, 0, s_q + kTileBytes, valid);
  cp_async_commit();

  float o[32][4];
#pragma unroll
  for (int i = 0; i < 32; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m[2] = {-1e30f, -1e30f}, z[2] = {0.0f, 0.0f};

  for (int c = 0; c < nchunks; ++c) {
    const int b = c & 1;
    const uint32_t s_rows = s_q + (1 + b) * kTileBytes, s_next = s_q + (2 - b) * kTileBytes;
    __syncthreads();  // every warp is done with chunk c - 1, so its buffer may be refilled
    if (c + 1 < nchunks) gather_chunk(a, idx_t, c + 1, s_next, valid + (b ^ 1) * kRows);
    cp_async_commit();
    cp_async_wait<1>();  // chunk c (and q) landed for this thread's copies
    __syncthreads();     // ... and for everyone's

    // S[16 heads x 64 rows] over this warp's 256 channels.
    float s[8][4];
#pragma unroll
    for (int i = 0; i < 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll 4
    for (int ks = 0; ks < 16; ++ks) {
      uint32_t qa[4];
      ldsm_x4(qa, s_q + swz(hg * 16 + lane % 16, dh * 32 + ks * 2 + lane / 16));
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t kb[4];
        ldsm_x4(kb, s_rows + swz(np * 16 + lane % 8 + (lane / 16) * 8, dh * 32 + ks * 2 + (lane / 8) % 2));
        mma(s[2 * np], qa, kb[0], kb[1]);
        mma(s[2 * np + 1], qa, kb[2], kb[3]);
      }
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

    // O[16 heads x 256 channels] += P[16 x 64] V[64 x 256] (V = the same rows, read transposed).
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int ntp = 0; ntp < 16; ++ntp) {
        uint32_t vb[4];
        ldsm_x4_t(vb, s_rows + swz(kk * 16 + lane % 8 + ((lane / 8) % 2) * 8, dh * 32 + ntp * 2 + lane / 16));
        mma(o[2 * ntp], pa[kk], vb[0], vb[1]);
        mma(o[2 * ntp + 1], pa[kk], vb[2], vb[3]);
      }
  }

  cp_async_wait<0>();  // (k == 0: the q copies of the prologue)
  // out = O / (z + exp(sink - m)); rows with no index have z = 0, m = -1e30: 0 / inf = 0.
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int h = h0 + hg * 16 + g + 8 * hr;
    const float zt = z[hr] + expf(__ldg(a.sink + h) - m[hr]);
    __nv_bfloat16* out_h = reinterpret_cast<__nv_bfloat16*>(a.out) + (static_cast<int64_t>(t) * a.heads + h) * kD;
#pragma unroll
    for (int nt = 0; nt < 32; ++nt) {
      const int d = dh * 256 + nt * 8 + 2 * tq;
      *reinterpret_cast<__nv_bfloat162*>(out_h + d) = __floats2bfloat162_rn(o[nt][2 * hr] / zt, o[nt][2 * hr + 1] / zt);
    }
  }
}

}  // namespace

void sparse_attention_bf16(const SparseAttnArgs& a, void* stream) {
  check(a.dim == kD, "sparse_attention_bf16: dim must be 512, got ", a.dim);
  check(a.heads > 0 && a.heads % kHeads == 0, "sparse_attention_bf16: heads must be a multiple of 64, got ", a.heads);
  check(a.tokens >= 0 && a.tokens < (1 << 30) && a.k >= 0 && a.k < (1 << 30), "sparse_attention_bf16: bad sizes");
  check(a.ld_pool % 8 == 0 && a.ld_fresh % 8 == 0, "sparse_attention_bf16: row strides must be multiples of 8");
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  check(a.q && a.pool && a.idx && a.sink && a.out && aligned(a.q) && aligned(a.pool) && aligned(a.out) &&
            (!a.fresh || aligned(a.fresh)),
        "sparse_attention_bf16: null or unaligned pointer");
  if (a.tokens == 0) return;
  SparseAttnArgs args = a;
  if (!args.fresh) args.fresh = args.pool;  // never read: only indices <= -2 point there
  static const bool attr_set =
      cudaFuncSetAttribute(sparse_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem) == cudaSuccess;
  check(attr_set, "sparse_attention_bf16: cannot reserve ", kSmem, " bytes of shared memory");
  const dim3 grid(static_cast<unsigned>(a.heads / kHeads), static_cast<unsigned>(a.tokens));
  sparse_attention_kernel<<<grid, kThreads, kSmem, static_cast<cudaStream_t>(stream)>>>(args);
  const cudaError_t e = cudaGetLastError();
  check(e == cudaSuccess, "sparse_attention_bf16: launch failed: ", cudaGetErrorString(e));
}

}  // namespace deepinfer::cuda
