// Flash-style bidirectional attention for the vision tower (head dim 64) on the tensor cores:
// mma.sync m16n8k16 bf16 x bf16 -> fp32. A block takes 128 query rows of one sequence and one head,
// 4 warps of 32 rows (two m16 tiles a warp, so each K/V fragment read by ldmatrix feeds 4 mma: 16 rows a
// warp fed 2 and left the kernel bound by shared-memory reads). Keys come in tiles of 64, double-buffered
// through cp.async into XOR-swizzled shared memory (conflict-free ldmatrix); the next tile's copies are
// issued right after the barrier that frees its buffer, one barrier a tile. The softmax is online in
// fp32, base 2 with the scale folded into one FFMA (max on raw scores), ex2.approx, the running maximum
// raised lazily (o rescaled only when it grows by 2^8); keys past the end are masked on the last tile
// only. Probabilities enter P.V as bf16; the output is written as bf16.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "backends/cuda/kernels/mma_bf16.cuh"
#include "backends/cuda/kernels/vision_attention.h"
#include "core/error.h"

namespace deepinfer::cuda {
namespace {

using mma::cp_async16;
using mma::cp_async_commit;
using mma::cp_async_wait;
using mma::ldsm_x4;
using mma::ldsm_x4_t;
using mma::pack_bf16;
using mma::smem_u32;

constexpr int kD = 64, kBk = 64, kMt = 2, kWarps = 4, kBq = kWarps * 16 * kMt, kThreads = kWarps * 32;
constexpr int kRowBytes = kD * 2;               // a bf16 row: 8 chunks of 16 bytes
constexpr uint32_t kKvBytes = kBk * kRowBytes;  // one K (or V) tile

// Byte offset of 16-byte chunk c of row r in a [rows][64] bf16 tile: chunk c sits at c ^ (r % 8).
__device__ __forceinline__ uint32_t swz(int r, int c) { return r * kRowBytes + (((c ^ r) & 7) << 4); }

// 2^x (MUFU.EX2; subnormal results flush to 0: far below a bf16 probability's weight).
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Rows row0 .. row0 + kRows of head column g (row stride ld elements) into a swizzled tile; rows at or
// past `end` read as 0 (finite, so masked keys and unused query rows stay NaN-free).
template <int kRows>
__device__ __forceinline__ void load_tile(uint32_t s, const uint16_t* g, int64_t row0, int64_t end, int64_t ld) {
#pragma unroll
  for (int i = 0; i < kRows * 8 / kThreads; ++i) {
    const int c = threadIdx.x + i * kThreads, r = c >> 3, ch = c & 7;
    const bool ok = row0 + r < end;
    cp_async16(s + swz(r, ch), g + (ok ? (row0 + r) * ld + ch * 8 : 0), ok);
  }
}

// Shared memory (48 KiB: two blocks an SM): the Q tile, then K and V double-buffered. (Measured on the
// H200, 2026-12-02: Q fragments reloaded from shared memory with 3 blocks an SM took 1.082 ms, 8 warps of
// 256 query rows 1.188 ms, against 1.036 ms for this one.)
constexpr size_t kSmemBytes = static_cast<size_t>(kBq + 4 * kBk) * kRowBytes;

__global__ void __launch_bounds__(kThreads, 2)
    vision_attention_kernel(const uint16_t* __restrict__ q, const uint16_t* __restrict__ k,
                            const uint16_t* __restrict__ v, int64_t ld, const int32_t* __restrict__ seq_begin,
                            int64_t seqs, float scale_log2, uint16_t* __restrict__ out, int64_t out_ld) {
  extern __shared__ __align__(128) uint8_t smem[];
  // This block's sequence and query tile: blockIdx.x counts the tiles of all sequences in order.
  int64_t tile = blockIdx.x, s = 0, b = 0, e = 0;
  for (; s < seqs; ++s) {
    b = seq_begin[s], e = seq_begin[s + 1];
    const int64_t tiles = (e - b + kBq - 1) / kBq;
    if (tile < tiles) break;
    tile -= tiles;
  }
  if (s == seqs) return;
  const int64_t head = blockIdx.y, q0 = b + tile * kBq;
  const uint16_t* kg = k + head * kD;
  const uint16_t* vg = v + head * kD;
  const uint32_t aq = smem_u32(smem), ak = aq + kBq * kRowBytes, av = ak + 2 * kKvBytes;
  load_tile<kBq>(aq, q + head * kD, q0, e, ld);
  load_tile<kBk>(ak, kg, b, e, ld);
  load_tile<kBk>(av, vg, b, e, ld);
  cp_async_commit();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n = static_cast<int>(e - b), tiles = (n + kBk - 1) / kBk;
  uint32_t qf[kMt][4][4];   // this warp's 32 query rows as A fragments, 4 steps of 16 over d
  float o[kMt][8][4] = {};  // per m tile: rows g and g + 8 (g = lane / 4), 8 blocks of 8 columns
  float m[kMt][2], l[kMt][2];
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.0f;
  for (int j = 0; j < tiles; ++j) {
    cp_async_wait<0>();
    __syncthreads();  // tile j is in; every warp is done with tile j - 1, whose buffer the next copies fill
    if (j + 1 < tiles) {
      const uint32_t nxt = ((j + 1) & 1) * kKvBytes;
      load_tile<kBk>(ak + nxt, kg, b + static_cast<int64_t>(j + 1) * kBk, e, ld);
      load_tile<kBk>(av + nxt, vg, b + static_cast<int64_t>(j + 1) * kBk, e, ld);
      cp_async_commit();
    }
    if (j == 0)
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) ldsm_x4(qf[mt][kk], aq + swz(warp * 32 + mt * 16 + (lane & 15), kk * 2 + (lane >> 4)));
    const uint32_t ks = ak + (j & 1) * kKvBytes, vs = av + (j & 1) * kKvBytes;
    // S = Q K^T for 64 keys: 8 blocks of 8 keys per m tile.
    float sc[kMt][8][4] = {};
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
      for (int nb = 0; nb < 8; nb += 2) {
        uint32_t bf[4];
        ldsm_x4(bf, ks + swz(nb * 8 + (lane >> 4) * 8 + (lane & 7), kk * 2 + ((lane >> 3) & 1)));
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) {
          mma::mma(sc[mt][nb], qf[mt][kk], bf[0], bf[1]);
          mma::mma(sc[mt][nb + 1], qf[mt][kk], bf[2], bf[3]);
        }
      }
    }
    if ((j + 1) * kBk > n) {  // the partial last tile: keys past the sequence weigh 0
      const int key = j * kBk + (lane & 3) * 2;
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
        for (int nb = 0; nb < 8; ++nb)
#pragma unroll
          for (int i = 0; i < 4; ++i)
            if (key + nb * 8 + (i & 1) >= n) sc[mt][nb][i] = -INFINITY;
    }
    // Online softmax, base 2: p = 2^(s c - m c) with c = scale log2(e) and m a running raw maximum that
    // is raised (rescaling o and l) only when a row's maximum grows past 2^8 of it: until then the
    // probabilities are up to 2^8, which fp32 sums and bf16 carry alike (numerator and l share m).
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) {
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int nb = 0; nb < 8; ++nb)
#pragma unroll
        for (int i = 0; i < 4; ++i) mx[i >> 1] = fmaxf(mx[i >> 1], sc[mt][nb][i]);
      bool up[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        up[r] = (mx[r] - m[mt][r]) * scale_log2 > 8.0f;  // always on the first tile (m = -inf)
      }
      if (__any_sync(0xffffffffu, up[0] || up[1])) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float mn = up[r] ? mx[r] : m[mt][r];
          const float alpha = ex2((m[mt][r] - mn) * scale_log2);  // 0 on the first tile, 1 where kept
          m[mt][r] = mn;
          l[mt][r] *= alpha;
#pragma unroll
          for (int db = 0; db < 8; ++db) o[mt][db][2 * r] *= alpha, o[mt][db][2 * r + 1] *= alpha;
        }
      }
      const float msc[2] = {m[mt][0] * scale_log2, m[mt][1] * scale_log2};
#pragma unroll
      for (int nb = 0; nb < 8; ++nb)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float p = ex2(fmaf(sc[mt][nb][i], scale_log2, -msc[i >> 1]));
          sc[mt][nb][i] = p;
          l[mt][i >> 1] += p;
        }
    }
    // O += P V: P's accumulator layout is the A fragment of keys 16 kk .. 16 kk + 15.
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t pa[kMt][4];
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
        pa[mt][0] = pack_bf16(sc[mt][2 * kk][0], sc[mt][2 * kk][1]);
        pa[mt][1] = pack_bf16(sc[mt][2 * kk][2], sc[mt][2 * kk][3]);
        pa[mt][2] = pack_bf16(sc[mt][2 * kk + 1][0], sc[mt][2 * kk + 1][1]);
        pa[mt][3] = pack_bf16(sc[mt][2 * kk + 1][2], sc[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int db = 0; db < 8; db += 2) {
        uint32_t bf[4];
        ldsm_x4_t(bf, vs + swz(kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7), db + (lane >> 4)));
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) {
          mma::mma(o[mt][db], pa[mt], bf[0], bf[1]);
          mma::mma(o[mt][db + 1], pa[mt], bf[2], bf[3]);
        }
      }
    }
  }
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = l[mt][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const float inv = 1.0f / sum;
      const int64_t row = q0 + warp * 32 + mt * 16 + lane / 4 + r * 8;
      if (row >= e) continue;
      uint16_t* dst = out + row * out_ld + head * kD + (lane % 4) * 2;
#pragma unroll
      for (int db = 0; db < 8; ++db)
        *reinterpret_cast<uint32_t*>(dst + db * 8) = pack_bf16(o[mt][db][2 * r] * inv, o[mt][db][2 * r + 1] * inv);
    }
}

}  // namespace

void vision_attention_bf16(const uint16_t* q, const uint16_t* k, const uint16_t* v, int64_t ld, int64_t tokens,
                           int64_t heads, const int32_t* seq_begin, int64_t seqs, float scale, uint16_t* out,
                           void* stream) {
  check(scale > 0 && ld % 8 == 0, "vision_attention_bf16: scale must be > 0 and rows 16-byte aligned");
  // At most ceil(tokens / kBq) + seqs query tiles (each sequence's last may be partial); spare blocks exit.
  const int64_t tiles = (tokens + kBq - 1) / kBq + seqs;
  check(tiles <= INT32_MAX && heads <= 65535, "vision_attention_bf16: ", tokens, " tokens x ", heads,
        " heads is past the grid");
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(heads));
  vision_attention_kernel<<<grid, kThreads, kSmemBytes, static_cast<cudaStream_t>(stream)>>>(
      q, k, v, ld, seq_begin, seqs, scale * 1.4426950408889634f, out, heads * kD);
  const cudaError_t err = cudaGetLastError();
  check(err == cudaSuccess, "CUDA vision_attention_kernel: ", cudaGetErrorString(err));
}

}  // namespace deepinfer::cuda
