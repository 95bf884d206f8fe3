// MXFP4 decode GEMM (see mxfp4_decode.h): y[i, n] = bf16(sum over K blocks b of a_s w_s 2^6 *
// mma_b(a[i], e4m3(2^-6 w[n]))) for each group's rows i, one warp per 32 weight rows of one active group.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "backends/cuda/kernels/mxfp4_decode.h"
#include "backends/cuda/kernels/sm90.cuh"
#include "core/error.h"

namespace deepinfer::cuda {
namespace {

using sm90::smem_addr;
using sm90::ue8m0;

constexpr int kWarps = 4, kRows = 32, kStages = 4, kMaxGroups = 512;
constexpr int kStageK = 256, kStageBlocks = kStageK / 32, kRowBytes = kStageK / 2;  // 128 bytes a row a stage
constexpr int kWBytes = kRows * kRowBytes, kStageBytes = kWBytes + kStageBlocks * kRows;  // + [block][row] scales
constexpr int kHeadBytes = (4 * (2 * kMaxGroups + 2) + 127) / 128 * 128;                   // offsets, active list
constexpr int kSmem = kHeadBytes + kWarps * kStages * kStageBytes;

struct Params {
  const uint8_t* a;
  int64_t lda;
  const uint8_t* a_scale;
  int64_t ld_as;
  const uint8_t* w;
  int64_t ldw;
  const uint8_t* w_scale;
  int64_t ld_ws;
  uint16_t* y;
  int64_t ldy;
  int m, n, k, groups;
  const int* group_offsets;  // null: one group of m rows
};

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_stage() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 2) : "memory");
}
__device__ __forceinline__ uint32_t lds32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }

// Eight e2m1 codes (low nibble first) -> e4m3 codes of 2^-6 times their values: codes 0, 2, 4, 6 in
// `even`, 1, 3, 5, 7 in `odd` (the activations are permuted alike, so the dot product is unchanged).
__device__ __forceinline__ void e2m1x8_to_e4m3(uint32_t x, uint32_t& even, uint32_t& odd) {
  even = ((x << 2) & 0x1C1C1C1Cu) | ((x << 4) & 0x80808080u);
  odd = ((x >> 2) & 0x1C1C1C1Cu) | (x & 0x80808080u);
}

// d = A[16 x 32] B[32 x 8] (e4m3, f32 out), the fragments of PTX's m16n8k32 layout.
__device__ __forceinline__ void mma_e4m3(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %10, %10, %10};"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.0f));
}

// A warp's place in its stream of (tile, token batch, K stage) items; tile = active group x 32-row slice.
struct Cursor {
  int tile, batch, st;
};

template <int NT>
__global__ void __launch_bounds__(kWarps * 32) mxfp4_decode_kernel(const Params p) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ int n_active;
  int* off = reinterpret_cast<int*>(smem);  // [groups + 1] row offsets
  int* active = off + kMaxGroups + 1;       // ids of the non-empty groups, ascending
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g8 = lane >> 2, t4 = lane & 3;
  if (warp == 0) {
    if (!p.group_offsets) {
      if (lane == 0) off[0] = 0, off[1] = p.m, active[0] = 0, n_active = 1;
    } else {
      int lo[kMaxGroups / 32], hi[kMaxGroups / 32];
#pragma unroll
      for (int c = 0; c < kMaxGroups / 32; ++c) {  // all loads first: one latency
        const int gi = c * 32 + lane;
        lo[c] = gi < p.groups ? __ldg(p.group_offsets + gi) : 0;
        hi[c] = gi < p.groups ? __ldg(p.group_offsets + gi + 1) : 0;
      }
      int base = 0;
#pragma unroll
      for (int c = 0; c < kMaxGroups / 32; ++c) {
        const int gi = c * 32 + lane;
        if (gi < p.groups) off[gi] = lo[c];
        if (gi == p.groups - 1) off[gi + 1] = hi[c];
        const unsigned mask = __ballot_sync(~0u, hi[c] > lo[c]);
        if (hi[c] > lo[c]) active[base + __popc(mask & ((1u << lane) - 1))] = gi;
        base += __popc(mask);
      }
      if (lane == 0) n_active = base;
    }
  }
  __syncthreads();
  const int slices = p.n / kRows, tiles = n_active * slices, stages = p.k / kStageK;
  const int gw = blockIdx.x * kWarps + warp, nw = gridDim.x * kWarps;
  constexpr int kBatchRows = 8 * NT;
  auto group_of = [&](int tile) { return active[tile / slices]; };
  auto batches = [&](int tile) {
    const int g = group_of(tile);
    return (off[g + 1] - off[g] + kBatchRows - 1) / kBatchRows;
  };
  auto advance = [&](Cursor& c) {
    if (++c.st < stages) return;
    c.st = 0;
    if (++c.batch < batches(c.tile)) return;
    c.batch = 0;
    c.tile += nw;
  };
  uint8_t* const ring = smem + kHeadBytes + warp * kStages * kStageBytes;

  // Producer: one stage of the slice (32 rows x 128 bytes, chunks swizzled by row / 4 so the fragment
  // reads below hit 32 banks) and its scales [8 blocks][32 rows], by cp.async; always one commit group.
  Cursor pc{gw, 0, 0};
  int pslot = 0;
  auto produce = [&]() {
    if (pc.tile < tiles) {
      const int64_t wrow = static_cast<int64_t>(group_of(pc.tile)) * p.n + (pc.tile % slices) * kRows;
      const uint8_t* src = p.w + wrow * p.ldw + pc.st * kRowBytes;
      const uint32_t dst = smem_addr(ring + pslot * kStageBytes);
#pragma unroll
      for (int i = 0; i < kRows / 4; ++i) {
        const int row = i * 4 + (lane >> 3), ch = lane & 7;
        cp_async16(dst + row * kRowBytes + ((ch ^ ((row >> 2) & 7)) * 16), src + row * p.ldw + ch * 16);
      }
      if (lane < 2 * kStageBlocks) {
        const int j = lane >> 1, h = lane & 1;
        cp_async16(dst + kWBytes + j * kRows + h * 16,
                   p.w_scale + static_cast<int64_t>(pc.st * kStageBlocks + j) * p.ld_ws + wrow + h * 16);
      }
      advance(pc);
    }
    cp_async_commit();
    pslot = (pslot + 1) % kStages;
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) produce();

  // Consumer. Thread (g8, t4) holds weight rows 4 g8 + {0, 1} (mma 0's rows g8, g8 + 8) and 4 g8 + {2, 3}
  // (mma 1's), word t4 of each K block; tokens 8 nt + g8 on the B side, 8 nt + 2 t4 + {0, 1} in C.
  float acc[NT][8];
  int row0 = 0, rows = 0, col0 = 0;
  Cursor cc{gw, 0, 0};
  int cslot = 0;
  while (cc.tile < tiles) {
    cp_async_wait_stage();
    __syncwarp();
    produce();  // into the slot consumed last iteration
    if (cc.st == 0) {
      const int g = group_of(cc.tile);
      row0 = off[g] + cc.batch * kBatchRows;
      rows = min(off[g + 1] - row0, kBatchRows);
      col0 = (cc.tile % slices) * kRows;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int r = 0; r < 8; ++r) acc[nt][r] = 0.0f;
    }
    const uint8_t* stage = ring + cslot * kStageBytes;
#pragma unroll 2
    for (int j = 0; j < kStageBlocks; ++j) {
      const int kb = cc.st * kStageBlocks + j;
      uint32_t ev[4], od[4];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        e2m1x8_to_e4m3(lds32(stage + (4 * g8 + i) * kRowBytes + ((j ^ g8) * 16) + t4 * 4), ev[i], od[i]);
      const uint32_t sw = lds32(stage + kWBytes + j * kRows + 4 * g8);
      const float ws0 = ue8m0(sw & 0xff), ws1 = ue8m0((sw >> 8) & 0xff), ws2 = ue8m0((sw >> 16) & 0xff),
                  ws3 = ue8m0(sw >> 24);
      const uint8_t* as = p.a_scale + static_cast<int64_t>(kb) * p.ld_as + row0;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        if (nt * 8 >= rows) break;
        const int tb = nt * 8 + g8, tc = nt * 8 + 2 * t4;
        uint2 av = make_uint2(0, 0);
        if (tb < rows) av = __ldg(reinterpret_cast<const uint2*>(p.a + (row0 + tb) * p.lda + kb * 32 + t4 * 8));
        const float as0 = tc < rows ? ue8m0(__ldg(as + tc)) * 64.0f : 0.0f;
        const float as1 = tc + 1 < rows ? ue8m0(__ldg(as + tc + 1)) * 64.0f : 0.0f;
        const uint32_t b0 = __byte_perm(av.x, av.y, 0x6420), b1 = __byte_perm(av.x, av.y, 0x7531);
        float d0[4], d1[4];
        mma_e4m3(d0, ev[0], ev[1], od[0], od[1], b0, b1);
        mma_e4m3(d1, ev[2], ev[3], od[2], od[3], b0, b1);
        acc[nt][0] += d0[0] * (ws0 * as0);
        acc[nt][1] += d0[1] * (ws0 * as1);
        acc[nt][2] += d0[2] * (ws1 * as0);
        acc[nt][3] += d0[3] * (ws1 * as1);
        acc[nt][4] += d1[0] * (ws2 * as0);
        acc[nt][5] += d1[1] * (ws2 * as1);
        acc[nt][6] += d1[2] * (ws3 * as0);
        acc[nt][7] += d1[3] * (ws3 * as1);
      }
    }
    if (cc.st == stages - 1) {  // token 8 nt + 2 t4 + c gets rows 4 g8 .. 4 g8 + 3 of the slice
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int tok = nt * 8 + 2 * t4 + c;
          if (tok >= rows) continue;
          auto* y = reinterpret_cast<__nv_bfloat162*>(p.y + (row0 + tok) * p.ldy + col0 + 4 * g8);
          y[0] = __floats2bfloat162_rn(acc[nt][c], acc[nt][2 + c]);
          y[1] = __floats2bfloat162_rn(acc[nt][4 + c], acc[nt][6 + c]);
        }
    }
    advance(cc);
    cslot = (cslot + 1) % kStages;
  }
}

template <int NT>
void launch(const Params& p, int64_t active_bound, cudaStream_t s) {
  static const int per_sm = [] {
    int b = 0;
    if (cudaFuncSetAttribute(mxfp4_decode_kernel<NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem) !=
            cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, mxfp4_decode_kernel<NT>, kWarps * 32, kSmem) != cudaSuccess)
      return 0;
    return b;
  }();
  check(per_sm > 0, "mxfp4_decode: cannot launch with ", kSmem, " bytes of shared memory");
  const int64_t warps = active_bound * (p.n / kRows);
  const int64_t grid = std::min<int64_t>((warps + kWarps - 1) / kWarps, int64_t{per_sm} * sm90::sm_count());
  mxfp4_decode_kernel<NT><<<static_cast<unsigned>(grid), kWarps * 32, kSmem, s>>>(p);
}

}  // namespace

// Measured on the H200 (docs/performance.md): faster than the WGMMA path up to 8 rows a group on average
// (512 tokens top-6 over 384 experts: 1.5x), 1.8x slower at 64.
bool mxfp4_decode_fits(const Fp8GemmArgs& a) {
  // Grouped: up to 32 rows a group on average (one token tile batch). Measured on 8 Flash layers
  // (docs/performance.md): a prefill of 128-4096 tokens is 1-7% faster with 32 than with 8, and slower
  // again with 64 or 128 at 2048+ tokens.
  const bool few_rows = a.groups > 0 ? a.m <= 32 * int64_t{a.groups} : a.m <= 64;
  return a.wfmt == WeightFormat::kMxfp4 && !a.batch_invariant && few_rows && a.k % kStageK == 0 &&
         a.n % kRows == 0 && reinterpret_cast<uintptr_t>(a.y) % 4 == 0 && a.ldy % 2 == 0;
}

void mxfp4_decode_gemm(const Fp8GemmArgs& a, void* stream) {
  Params p{};
  p.a = a.a, p.lda = a.lda, p.a_scale = a.a_scale, p.ld_as = a.ld_as;
  p.w = a.w, p.ldw = a.ldw, p.w_scale = a.w_scale, p.ld_ws = a.ld_ws;
  p.y = a.y, p.ldy = a.ldy;
  p.m = static_cast<int>(a.m), p.n = static_cast<int>(a.n), p.k = static_cast<int>(a.k);
  p.groups = a.groups, p.group_offsets = a.groups > 0 ? a.group_offsets : nullptr;
  const int64_t rows = a.groups > 0 ? std::max<int64_t>(1, a.max_group_rows) : a.m;
  const int64_t active_bound = a.groups > 0 ? std::min<int64_t>(a.groups, a.m) : 1;
  auto s = static_cast<cudaStream_t>(stream);
  if (rows <= 8) launch<1>(p, active_bound, s);
  else if (rows <= 16) launch<2>(p, active_bound, s);
  else launch<4>(p, active_bound, s);  // groups of more than 32 rows take batches of 32
  const cudaError_t e = cudaGetLastError();
  check(e == cudaSuccess, "mxfp4_decode: launch failed: ", cudaGetErrorString(e));
}

}  // namespace deepinfer::cuda
