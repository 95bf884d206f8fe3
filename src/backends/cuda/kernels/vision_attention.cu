// Flash-style bidirectional attention for the vision tower (head dim 64) on the tensor cores:
// mma.sync m16n8k16 bf16 x bf16 -> fp32. A block takes 128 query rows of one sequence and one head
// (8 warps x 16 rows) and walks the sequence's keys in tiles of 64, double-buffered through cp.async
// into XOR-swizzled shared memory (conflict-free ldmatrix). The softmax is online in fp32 (base 2,
// running max and sum per row); the probabilities enter P.V as bf16 (as a bf16 flash kernel's do) and
// the row sum adds those same rounded values, so the weights of each row sum to one.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "backends/cuda/kernels/vision_attention.h"
#include "core/error.h"

namespace deepinfer::cuda {
namespace {

constexpr int kD = 64, kBq = 128, kBk = 64, kWarps = kBq / 16, kThreads = kWarps * 32;

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// Element (row, col) of a [rows][64] bf16 tile: 16-byte chunk c of row r sits at chunk c ^ (r & 7).
__device__ __forceinline__ int swz(int row, int col) { return row * kD + ((((col >> 3) ^ row) & 7) << 3) + (col & 7); }

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  // src-size 0 zero-fills: rows past the sequence read as 0 (finite, so 0-weight keys add nothing).
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_u32(dst)), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const uint16_t* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const uint16_t* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
// c[16 x 8] += a[16 x 16] b[16 x 8] (the PTX fragment layouts).
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 p = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&p);
}
__device__ __forceinline__ float bf16_value(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// Rows row0 .. row0 + kRows of head column `g` (row stride `stride` elements) into a swizzled tile.
template <int kRows>
__device__ __forceinline__ void load_tile(uint16_t* s, const uint16_t* g, int64_t row0, int64_t end, int64_t stride) {
  for (int c = threadIdx.x; c < kRows * 8; c += kThreads) {
    const int r = c >> 3, ch = c & 7;
    const bool ok = row0 + r < end;
    cp_async16(s + swz(r, ch * 8), g + (ok ? (row0 + r) * stride + ch * 8 : 0), ok);
  }
}

__global__ void __launch_bounds__(kThreads) vision_attention_kernel(const uint16_t* __restrict__ q,
                                                                    const uint16_t* __restrict__ k,
                                                                    const uint16_t* __restrict__ v, int64_t heads,
                                                                    const int32_t* __restrict__ seq_begin,
                                                                    int64_t seqs, float scale_log2,
                                                                    float* __restrict__ out) {
  __shared__ __align__(128) uint16_t sq[kBq * kD];
  __shared__ __align__(128) uint16_t sk[2][kBk * kD];
  __shared__ __align__(128) uint16_t sv[2][kBk * kD];
  // This block's sequence and query tile: blockIdx.x counts the tiles of all sequences in order.
  int64_t tile = blockIdx.x, s = 0, b = 0, e = 0;
  for (; s < seqs; ++s) {
    b = seq_begin[s], e = seq_begin[s + 1];
    const int64_t tiles = (e - b + kBq - 1) / kBq;
    if (tile < tiles) break;
    tile -= tiles;
  }
  if (s == seqs) return;
  const int64_t stride = heads * kD, head = blockIdx.y, q0 = b + tile * kBq;
  const uint16_t* qg = q + head * kD;
  const uint16_t* kg = k + head * kD;
  const uint16_t* vg = v + head * kD;
  load_tile<kBq>(sq, qg, q0, e, stride);
  load_tile<kBk>(sk[0], kg, b, e, stride);
  load_tile<kBk>(sv[0], vg, b, e, stride);
  cp_async_commit();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tiles = static_cast<int>((e - b + kBk - 1) / kBk);
  uint32_t qf[4][4];  // this warp's 16 query rows as A fragments, 4 steps of 16 over d
  float o[8][4] = {};  // output rows g and g + 8 (g = lane / 4), 8 blocks of 8 columns
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  for (int j = 0; j < tiles; ++j) {
    if (j + 1 < tiles) {
      load_tile<kBk>(sk[(j + 1) & 1], kg, b + (j + 1) * kBk, e, stride);
      load_tile<kBk>(sv[(j + 1) & 1], vg, b + (j + 1) * kBk, e, stride);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (j == 0)
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) ldsm_x4(qf[kk], sq + swz(warp * 16 + (lane & 15), kk * 16 + (lane >> 4) * 8));
    const uint16_t* ks = sk[j & 1];
    const uint16_t* vs = sv[j & 1];
    // S = Q K^T for 64 keys: 8 blocks of 8 keys.
    float sc[8][4] = {};
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int nb = 0; nb < 8; nb += 2) {
        uint32_t bf[4];
        ldsm_x4(bf, ks + swz(nb * 8 + (lane >> 4) * 8 + (lane & 7), kk * 16 + ((lane >> 3) & 1) * 8));
        mma_bf16(sc[nb], qf[kk], bf[0], bf[1]);
        mma_bf16(sc[nb + 1], qf[kk], bf[2], bf[3]);
      }
    // Online softmax (base 2): keys past the sequence's end get -inf; every tile holds a valid key.
    const int64_t key0 = b + static_cast<int64_t>(j) * kBk + (lane % 4) * 2;
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int nb = 0; nb < 8; ++nb)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float x = key0 + nb * 8 + (i & 1) < e ? sc[nb][i] * scale_log2 : -INFINITY;
        sc[nb][i] = x;
        mx[i >> 1] = fmaxf(mx[i >> 1], x);
      }
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      alpha[r] = exp2f(m[r] - mx[r]);  // 0 on the first tile (m = -inf)
      m[r] = mx[r];
      l[r] *= alpha[r];
    }
#pragma unroll
    for (int nb = 0; nb < 8; ++nb)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float p = bf16_value(exp2f(sc[nb][i] - mx[i >> 1]));
        sc[nb][i] = p;
        l[i >> 1] += p;
      }
#pragma unroll
    for (int db = 0; db < 8; ++db) {
      o[db][0] *= alpha[0], o[db][1] *= alpha[0];
      o[db][2] *= alpha[1], o[db][3] *= alpha[1];
    }
    // O += P V: P's accumulator layout is the A fragment of keys 16 kk .. 16 kk + 15.
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint32_t pa[4] = {pack_bf16(sc[2 * kk][0], sc[2 * kk][1]), pack_bf16(sc[2 * kk][2], sc[2 * kk][3]),
                              pack_bf16(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                              pack_bf16(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
#pragma unroll
      for (int db = 0; db < 8; db += 2) {
        uint32_t bf[4];
        ldsm_x4_trans(bf, vs + swz(kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7), db * 8 + (lane >> 4) * 8));
        mma_bf16(o[db], pa, bf[0], bf[1]);
        mma_bf16(o[db + 1], pa, bf[2], bf[3]);
      }
    }
    __syncthreads();  // every warp is done with this buffer before the next tile's loads refill it
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = q0 + warp * 16 + lane / 4 + r * 8;
    if (row >= e) continue;
    float* dst = out + row * stride + head * kD + (lane % 4) * 2;
#pragma unroll
    for (int db = 0; db < 8; ++db)
      *reinterpret_cast<float2*>(dst + db * 8) = make_float2(o[db][2 * r] / l[r], o[db][2 * r + 1] / l[r]);
  }
}

}  // namespace

void vision_attention_bf16(const uint16_t* q, const uint16_t* k, const uint16_t* v, int64_t tokens, int64_t heads,
                           const int32_t* seq_begin, int64_t seqs, float scale, float* out, void* stream) {
  // At most ceil(tokens / 128) + seqs query tiles (each sequence's last may be partial); spare blocks exit.
  const int64_t tiles = (tokens + kBq - 1) / kBq + seqs;
  check(tiles <= INT32_MAX && heads <= 65535, "vision_attention_bf16: ", tokens, " tokens x ", heads,
        " heads is past the grid");
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(heads));
  vision_attention_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      q, k, v, heads, seq_begin, seqs, scale * 1.4426950408889634f, out);
  const cudaError_t err = cudaGetLastError();
  check(err == cudaSuccess, "CUDA vision_attention_kernel: ", cudaGetErrorString(err));
}

}  // namespace deepinfer::cuda
