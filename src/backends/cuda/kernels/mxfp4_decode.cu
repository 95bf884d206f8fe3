// MXFP4 decode GEMM (see mxfp4_decode.h): y[i, n] = bf16(sum over K blocks b of a_s w_s 2^6 *
// mma_b(a[i], e4m3(2^-6 w[n]))) for each group's rows i, one warp per 32 weight rows of one active group.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>

#include "backends/cuda/kernels/mxfp4_decode.h"
#include "backends/cuda/kernels/sm90.cuh"
#include "core/error.h"

namespace deepinfer::cuda {
namespace {

using sm90::smem_addr;
using sm90::ue8m0;

constexpr int kWarps = 4, kTokens = 8, kStages = 4, kMaxGroups = 512;
constexpr int kStageK = 256, kStageBlocks = kStageK / 32, kRowBytes = kStageK / 2;  // 128 bytes a row a stage
constexpr int kHeadBytes = (4 * (2 * kMaxGroups + 2) + 127) / 128 * 128;             // offsets, active list

// A warp's slice is MT x 16 weight rows. A stage: weights [rows][128 B], their scales [8 blocks][rows],
// the batch's activations [8 tokens][256 B] and their scales [8 blocks][32 B] (the 16-byte chunks
// holding the batch's 8 bytes).
template <int MT>
struct Lay {
  static constexpr int kRows = 16 * MT, kWBytes = kRows * kRowBytes, kWsOff = kWBytes,
                       kAOff = kWsOff + kStageBlocks * kRows, kAsOff = kAOff + kTokens * kStageK,
                       kStageBytes = kAsOff + kStageBlocks * 32, kSmem = kHeadBytes + kWarps * kStages * kStageBytes;
};

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

template <int MT>
__global__ void __launch_bounds__(kWarps * 32) mxfp4_decode_kernel(const Params p) {
  using L = Lay<MT>;
  constexpr int kRows = L::kRows;
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
  auto group_of = [&](int tile) { return active[tile / slices]; };
  auto advance = [&](Cursor& c) {
    if (++c.st < stages) return;
    c.st = 0;
    const int g = group_of(c.tile);
    if (++c.batch * kTokens < off[g + 1] - off[g]) return;
    c.batch = 0;
    c.tile += nw;
  };
  uint8_t* const ring = smem + kHeadBytes + warp * kStages * L::kStageBytes;

  // Producer: one stage by cp.async, always one commit group. Weight chunks are swizzled by row / (2 MT) and
  // activation chunks by 2 x token, so the fragment reads below hit every bank.
  Cursor pc{gw, 0, 0};
  int pslot = 0;
  auto produce = [&]() {
    if (pc.tile < tiles) {
      const int g = group_of(pc.tile), row0 = off[g] + pc.batch * kTokens, rows = min(off[g + 1] - row0, kTokens);
      const int64_t wrow = static_cast<int64_t>(g) * p.n + (pc.tile % slices) * kRows;
      const uint8_t* src = p.w + wrow * p.ldw + pc.st * kRowBytes;
      const uint32_t dst = smem_addr(ring + pslot * L::kStageBytes);
#pragma unroll
      for (int i = 0; i < kRows / 4; ++i) {
        const int row = i * 4 + (lane >> 3), ch = lane & 7;
        cp_async16(dst + row * kRowBytes + ((ch ^ ((row / (2 * MT)) & 7)) * 16), src + row * p.ldw + ch * 16);
      }
#pragma unroll
      for (int i = 0; i < kTokens * 16 / 32; ++i) {
        const int tok = i * 2 + (lane >> 4), ch = lane & 15;
        if (tok < rows)
          cp_async16(dst + L::kAOff + tok * kStageK + ((ch ^ (2 * tok)) * 16),
                     p.a + static_cast<int64_t>(row0 + tok) * p.lda + pc.st * kStageK + ch * 16);
      }
      if (lane < kStageBlocks * MT) {  // weight scales: MT chunks a block
        const int64_t kb = pc.st * kStageBlocks + lane / MT;
        cp_async16(dst + L::kWsOff + lane * 16, p.w_scale + kb * p.ld_ws + wrow + (lane % MT) * 16);
      } else if (lane >= 16) {  // activation scales; ld_as % 16 == 0: the chunks lie within the scale row
        const int j = (lane - 16) >> 1, h = lane & 1;
        const int64_t kb = pc.st * kStageBlocks + j;
        if (h == 0 || (row0 & 15) + rows > 16)
          cp_async16(dst + L::kAsOff + j * 32 + h * 16, p.a_scale + kb * p.ld_as + (row0 & ~15) + h * 16);
      }
      advance(pc);
    }
    cp_async_commit();
    pslot = (pslot + 1) % kStages;
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) produce();

  // Consumer. Thread (g8, t4) holds weight rows r = 2 MT g8 + 2 mt + {0, 1} (mma mt's rows g8, g8 + 8),
  // word t4 of each K block; token g8 on the B side, tokens 2 t4 + {0, 1} in C.
  float acc[MT][4];
  int row0 = 0, rows = 0, col0 = 0;
  Cursor cc{gw, 0, 0};
  int cslot = 0;
  while (cc.tile < tiles) {
    cp_async_wait_stage();
    __syncwarp();
    produce();  // into the slot consumed last iteration
    if (cc.st == 0) {
      const int g = group_of(cc.tile);
      row0 = off[g] + cc.batch * kTokens;
      rows = min(off[g + 1] - row0, kTokens);
      col0 = (cc.tile % slices) * kRows;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[mt][r] = 0.0f;
    }
    const uint8_t* stage = ring + cslot * L::kStageBytes;
    const uint8_t* as = stage + L::kAsOff + (row0 & 15) + 2 * t4;  // columns past `rows` are never stored
#pragma unroll 4
    for (int j = 0; j < kStageBlocks; ++j) {
      const uint2 av = *reinterpret_cast<const uint2*>(stage + L::kAOff + g8 * kStageK +
                                                       (((2 * j + (t4 >> 1)) ^ (2 * g8)) * 16) + (t4 & 1) * 8);
      const uint32_t b0 = __byte_perm(av.x, av.y, 0x6420), b1 = __byte_perm(av.x, av.y, 0x7531);
      const float as0 = ue8m0(as[j * 32]) * 64.0f, as1 = ue8m0(as[j * 32 + 1]) * 64.0f;
      const uint8_t* ws = stage + L::kWsOff + j * kRows + 2 * MT * g8;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const uint8_t* wr = stage + (2 * MT * g8 + 2 * mt) * kRowBytes + ((j ^ g8) * 16) + t4 * 4;
        uint32_t e0, o0, e1, o1;
        e2m1x8_to_e4m3(lds32(wr), e0, o0);
        e2m1x8_to_e4m3(lds32(wr + kRowBytes), e1, o1);
        const float w0 = ue8m0(ws[2 * mt]), w1 = ue8m0(ws[2 * mt + 1]);
        float d[4];
        mma_e4m3(d, e0, e1, o0, o1, b0, b1);
        acc[mt][0] += d[0] * (w0 * as0);
        acc[mt][1] += d[1] * (w0 * as1);
        acc[mt][2] += d[2] * (w1 * as0);
        acc[mt][3] += d[3] * (w1 * as1);
      }
    }
    if (cc.st == stages - 1) {  // token 2 t4 + c gets rows 2 MT g8 .. 2 MT g8 + 2 MT - 1 of the slice
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int tok = 2 * t4 + c;
        if (tok >= rows) continue;
        auto* y = reinterpret_cast<__nv_bfloat162*>(p.y + (row0 + tok) * p.ldy + col0 + 2 * MT * g8);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) y[mt] = __floats2bfloat162_rn(acc[mt][c], acc[mt][2 + c]);
      }
    }
    advance(cc);
    cslot = (cslot + 1) % kStages;
  }
}

// Warp slices of 16 or 32 rows (DEEPINFER_MXFP4_DECODE_MT=1 or 2; measurements).
int slice_mtiles() {
  static const int v = [] {
    const char* e = std::getenv("DEEPINFER_MXFP4_DECODE_MT");
    return e && std::atoi(e) == 1 ? 1 : 2;
  }();
  return v;
}

template <int MT>
void launch(const Params& p, int64_t active_bound, cudaStream_t s) {
  using L = Lay<MT>;
  static const int per_sm = [] {
    int b = 0;
    if (cudaFuncSetAttribute(mxfp4_decode_kernel<MT>, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kSmem) !=
            cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, mxfp4_decode_kernel<MT>, kWarps * 32, L::kSmem) !=
            cudaSuccess)
      return 0;
    return b;
  }();
  check(per_sm > 0, "mxfp4_decode: cannot launch with ", L::kSmem, " bytes of shared memory");
  const int64_t warps = active_bound * (p.n / L::kRows);
  const int64_t grid = std::min<int64_t>((warps + kWarps - 1) / kWarps, int64_t{per_sm} * sm90::sm_count());
  mxfp4_decode_kernel<MT><<<static_cast<unsigned>(grid), kWarps * 32, L::kSmem, s>>>(p);
}

}  // namespace

// Measured on the H200 (docs/performance.md): faster than the WGMMA path up to 8 rows a group on average
// (512 tokens top-6 over 384 experts: 1.5x), 1.8x slower at 64 (the first version of this kernel).
bool mxfp4_decode_fits(const Fp8GemmArgs& a) {
  // Grouped: up to 32 rows a group on average (one token tile batch). Measured on 8 Flash layers
  // (docs/performance.md): a prefill of 128-4096 tokens is 1-7% faster with 32 than with 8, and slower
  // again with 64 or 128 at 2048+ tokens.
  const bool few_rows = a.groups > 0 ? a.m <= 32 * int64_t{a.groups} : a.m <= 64;
  return a.wfmt == WeightFormat::kMxfp4 && !a.batch_invariant && few_rows && a.k % kStageK == 0 &&
         a.n % 32 == 0 && reinterpret_cast<uintptr_t>(a.y) % 4 == 0 && a.ldy % 2 == 0;
}

void mxfp4_decode_gemm(const Fp8GemmArgs& a, void* stream) {
  Params p{};
  p.a = a.a, p.lda = a.lda, p.a_scale = a.a_scale, p.ld_as = a.ld_as;
  p.w = a.w, p.ldw = a.ldw, p.w_scale = a.w_scale, p.ld_ws = a.ld_ws;
  p.y = a.y, p.ldy = a.ldy;
  p.m = static_cast<int>(a.m), p.n = static_cast<int>(a.n), p.k = static_cast<int>(a.k);
  p.groups = a.groups, p.group_offsets = a.groups > 0 ? a.group_offsets : nullptr;
  const int64_t active_bound = a.groups > 0 ? std::min<int64_t>(a.groups, a.m) : 1;
  auto s = static_cast<cudaStream_t>(stream);
  if (slice_mtiles() == 1) launch<1>(p, active_bound, s);
  else launch<2>(p, active_bound, s);
  const cudaError_t e = cudaGetLastError();
  check(e == cudaSuccess, "mxfp4_decode: launch failed: ", cudaGetErrorString(e));
}

}  // namespace deepinfer::cuda
