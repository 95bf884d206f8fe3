// MXFP4 decode GEMM (see mxfp4_decode.h): y[i, n] = bf16(sum over K blocks b of a_s w_s 2^14 *
// mma_b(a[i], f16(2^-14 w[n]))) for each group's rows i, one warp per 16 MT weight rows of one active group.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

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

// Warp 0 fills the head of shared memory: off[g] (row offsets, [groups + 1]) and active[] (the non-empty
// groups, ascending); returns their count to the whole block.
__device__ int load_groups(const Params& p, int* off, int* active, int* n_active) {
  const int lane = threadIdx.x & 31;
  if (threadIdx.x < 32) {
    if (!p.group_offsets) {
      if (lane == 0) off[0] = 0, off[1] = p.m, active[0] = 0, *n_active = 1;
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
      if (lane == 0) *n_active = base;
    }
  }
  __syncthreads();
  return *n_active;
}

// Eight e2m1 codes x (low nibble first: k0 .. k7) -> four f16x2 of 2^-14 times their values, h[0] = (k0, k2),
// h[1] = (k4, k6), h[2] = (k1, k3), h[3] = (k5, k7). An f16 of 2^-14 e2m1 is the code's sign at bit 15 and
// its three magnitude bits at 11..9 (exponent 0..3, one mantissa bit; code 1 lands on the f16 subnormal
// 2^-15 = 2^-14 * 0.5): high bytes are built four at a time, then spread with zero low bytes.
__device__ __forceinline__ void e2m1x8_to_f16x8(uint32_t x, uint32_t (&h)[4]) {
  const uint32_t ev = ((x << 1) & 0x0E0E0E0Eu) | ((x << 4) & 0x80808080u);  // high bytes of k0, k2, k4, k6
  const uint32_t od = ((x >> 3) & 0x0E0E0E0Eu) | (x & 0x80808080u);         // of k1, k3, k5, k7
  h[0] = __byte_perm(ev, 0, 0x1404);
  h[1] = __byte_perm(ev, 0, 0x3424);
  h[2] = __byte_perm(od, 0, 0x1404);
  h[3] = __byte_perm(od, 0, 0x3424);
}
// Two e4m3 codes (low byte first) -> f16x2, exact.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t x) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(x & 0xffff), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}
// d = A[16 x 16] B[16 x 8] and d += A B: f16 in, f32 accumulators (PTX's m16n8k16 fragments).
__device__ __forceinline__ void mma_f16_first(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                              uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %10, %10, %10};"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.0f));
}
__device__ __forceinline__ void mma_f16_acc(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                            uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// UE8M0 byte b -> 2^(b - 120) = 2^7 times its value, a normal float for every b <= 247 (b = 0 too); the
// product of a weight's and an activation's is their scale times 2^14, undoing the 2^-14 of the f16 codes.
// Bytes above 247 (2^121 and up: no finite bf16 activation quantizes to them) are read as 247.
__device__ __forceinline__ float ue8m0_x128(uint32_t b) { return __int_as_float((min(b, 247u) + 7u) << 23); }

// A warp's place in its stream of (tile, token batch, K stage) items; tile = active group x slice.
struct Cursor {
  int tile, batch, st;
};

// Thread (g8, t4) of a warp holds, per 16-row tile mt of its slice, weight rows 16 mt + g8 and 16 mt + g8 + 8
// (word t4 of each K block: k 8 t4 .. 8 t4 + 7, split into even and odd k alike on both sides), token g8
// on the B side, tokens 2 t4 + {0, 1} in C.
template <int MT>
__global__ void __launch_bounds__(kWarps * 32) mxfp4_decode_kernel(const Params p) {
  using L = Lay<MT>;
  constexpr int kRows = L::kRows;
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ int n_active_s;
  int* off = reinterpret_cast<int*>(smem);  // [groups + 1] row offsets
  int* active = off + kMaxGroups + 1;       // ids of the non-empty groups, ascending
  const int n_active = load_groups(p, off, active, &n_active_s);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g8 = lane >> 2, t4 = lane & 3;
  const int slices = p.n / kRows, tiles = n_active * slices, stages = p.k / kStageK;
  const int nw = gridDim.x * kWarps;
  uint8_t* const ring = smem + kHeadBytes + warp * kStages * L::kStageBytes;
  auto advance = [&](Cursor& c) {
    if (++c.st < stages) return;
    c.st = 0;
    const int g = active[c.tile / slices];
    if (++c.batch * kTokens < off[g + 1] - off[g]) return;
    c.batch = 0;
    c.tile += nw;
  };

  // Producer: one stage by cp.async, always one commit group; the source pointers are set once a tile
  // and batch and step by one stage. Weight chunks are swizzled by row % 8 and activation chunks by
  // 2 x token, so the fragment reads below hit every bank.
  Cursor pc{static_cast<int>(blockIdx.x) * kWarps + warp, 0, 0};
  const uint8_t *pw = nullptr, *pws = nullptr, *pa = nullptr, *pas = nullptr;
  int prows = 0;        // tokens of the batch at or past this lane's first (2 i + lane / 16 < rows <=> 2 i < prows)
  bool pas_ok = false;  // this lane's activation-scale chunk holds some of the batch
  const uint32_t ldw4 = static_cast<uint32_t>(4 * p.ldw), lda2 = static_cast<uint32_t>(2 * p.lda);
  int pslot = 0;
  auto produce = [&]() {
    if (pc.tile < tiles) {
      if (pc.st == 0) {
        const int gi = pc.tile / slices, g = active[gi];
        const int row0 = off[g] + pc.batch * kTokens, rows = min(off[g + 1] - row0, kTokens);
        const int64_t wrow = static_cast<int64_t>(g) * p.n + (pc.tile - gi * slices) * kRows;
        pw = p.w + (wrow + (lane >> 3)) * p.ldw + (lane & 7) * 16;
        pws = p.w_scale + (lane / MT) * p.ld_ws + wrow + (lane % MT) * 16;  // lanes < 8 MT
        pa = p.a + static_cast<int64_t>(row0 + (lane >> 4)) * p.lda + (lane & 15) * 16;
        pas = p.a_scale + ((lane & 15) >> 1) * p.ld_as + (row0 & ~15) + (lane & 1) * 16;  // lanes >= 16
        prows = rows - (lane >> 4);
        pas_ok = (lane & 1) == 0 || (row0 & 15) + rows > 16;  // ld_as % 16 == 0: within the scale row
      }
      const uint32_t dst = smem_addr(ring + pslot * L::kStageBytes);
#pragma unroll
      for (int i = 0; i < kRows / 4; ++i) {
        const int row = i * 4 + (lane >> 3);
        cp_async16(dst + row * kRowBytes + (((lane & 7) ^ (row & 7)) * 16), pw + i * ldw4);
      }
#pragma unroll
      for (int i = 0; i < kTokens / 2; ++i) {
        const int tok = 2 * i + (lane >> 4);
        if (2 * i < prows) cp_async16(dst + L::kAOff + tok * kStageK + (((lane & 15) ^ (2 * tok)) * 16), pa + i * lda2);
      }
      if (lane < kStageBlocks * MT) cp_async16(dst + L::kWsOff + lane * 16, pws);  // [block][row]
      else if (lane >= 16 && pas_ok) cp_async16(dst + L::kAsOff + (lane - 16) * 16, pas);
      pw += kRowBytes, pa += kStageK;
      pws += kStageBlocks * p.ld_ws, pas += kStageBlocks * p.ld_as;
      advance(pc);
    }
    cp_async_commit();
    pslot = pslot + 1 == kStages ? 0 : pslot + 1;
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) produce();

  float acc[MT][4];
  int row0 = 0, rows = 0, col0 = 0;
  Cursor cc{static_cast<int>(blockIdx.x) * kWarps + warp, 0, 0};
  int cslot = 0;
  while (cc.tile < tiles) {
    cp_async_wait_stage();
    __syncwarp();
    produce();  // into the slot consumed last iteration
    if (cc.st == 0) {
      const int gi = cc.tile / slices, g = active[gi];
      row0 = off[g] + cc.batch * kTokens;
      rows = min(off[g + 1] - row0, kTokens);
      col0 = (cc.tile - gi * slices) * kRows;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[mt][r] = 0.0f;
    }
    const uint8_t* stage = ring + cslot * L::kStageBytes;
    const uint8_t* as = stage + L::kAsOff + (row0 & 15) + 2 * t4;  // columns past `rows` are never stored
    const uint8_t* act = stage + L::kAOff + g8 * kStageK + (t4 & 1) * 8;
    const uint8_t* wrow = stage + g8 * kRowBytes + t4 * 4;
    const uint8_t* ws = stage + L::kWsOff + g8;
#pragma unroll
    for (int j = 0; j < kStageBlocks; ++j) {
      const uint2 av = *reinterpret_cast<const uint2*>(act + (((2 * j + (t4 >> 1)) ^ (2 * g8)) * 16));
      const uint32_t ev = __byte_perm(av.x, av.y, 0x6420), od = __byte_perm(av.x, av.y, 0x7531);
      const uint32_t b0 = e4m3x2_to_f16x2(ev), b1 = e4m3x2_to_f16x2(ev >> 16), b2 = e4m3x2_to_f16x2(od),
                     b3 = e4m3x2_to_f16x2(od >> 16);
      const float as0 = ue8m0_x128(as[j * 32]), as1 = ue8m0_x128(as[j * 32 + 1]);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const uint8_t* wr = wrow + 16 * mt * kRowBytes + ((j ^ g8) * 16);
        uint32_t lo[4], hi[4];
        e2m1x8_to_f16x8(lds32(wr), lo);                  // row 16 mt + g8
        e2m1x8_to_f16x8(lds32(wr + 8 * kRowBytes), hi);  // row 16 mt + g8 + 8
        float d[4];
        mma_f16_first(d, lo[0], hi[0], lo[1], hi[1], b0, b1);  // k 8 t4 + {0, 2, 4, 6}
        mma_f16_acc(d, lo[2], hi[2], lo[3], hi[3], b2, b3);    // k 8 t4 + {1, 3, 5, 7}
        const float w0 = ue8m0_x128(ws[j * kRows + 16 * mt]), w1 = ue8m0_x128(ws[j * kRows + 16 * mt + 8]);
        acc[mt][0] += d[0] * (w0 * as0);
        acc[mt][1] += d[1] * (w0 * as1);
        acc[mt][2] += d[2] * (w1 * as0);
        acc[mt][3] += d[3] * (w1 * as1);
      }
    }
    if (cc.st == stages - 1) {  // token 2 t4 + c gets rows 16 mt + g8 (+ 8) of the slice
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int tok = 2 * t4 + c;
        if (tok >= rows) continue;
        uint16_t* y = p.y + (row0 + tok) * p.ldy + col0 + g8;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          y[16 * mt] = __bfloat16_as_ushort(__float2bfloat16_rn(acc[mt][c]));
          y[16 * mt + 8] = __bfloat16_as_ushort(__float2bfloat16_rn(acc[mt][2 + c]));
        }
      }
    }
    advance(cc);
    cslot = cslot + 1 == kStages ? 0 : cslot + 1;
  }
}

// --- v2 (branch kernels5-next, for the comparison run only): e4m3 mma.sync ---
namespace v2 {
__device__ __forceinline__ void e2m1x8_to_e4m3(uint32_t x, uint32_t& even, uint32_t& odd) {
  even = ((x << 2) & 0x1C1C1C1Cu) | ((x << 4) & 0x80808080u);
  odd = ((x >> 2) & 0x1C1C1C1Cu) | (x & 0x80808080u);
}
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
__global__ void __launch_bounds__(kWarps * 32) kernel(const Params p) {
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

}  // namespace v2

// --- v4: one warpgroup a CTA, wgmma with the weights in registers ---
namespace v4 {
// A CTA's tile is 64 weight rows of one active group (16 a warp). A ring stage (K 256): the raw
// activations [8 tokens][256 B], weights [64 rows][128 B] (chunks swizzled by row % 8), their scales
// [8 blocks][64 rows] and the activations' scales [8 blocks][32 B]. The stage being consumed is first
// prepared into one shared area: the activations deinterleaved for wgmma's B [2 atoms][8 tokens][128 B]
// (128-byte swizzle; each 32-byte K block holds its even-k bytes, then its odd-k ones, matching the
// registers' e2m1 split) and both scales as floats (ue8m0_x8): activations [8 blocks][8 tokens], weights
// [8 blocks][4 warps][8 g8][rows g8, g8 + 8].
constexpr int kRows = 64, kThreads = 128;
constexpr int kARawOff = 0, kWOff = kTokens * kStageK, kWsOff = kWOff + kRows * kRowBytes,
              kAsOff = kWsOff + kStageBlocks * kRows, kStageBytes = kAsOff + kStageBlocks * 32;
constexpr int kBOff = kStages * kStageBytes, kAsfOff = kBOff + 2048, kWsfOff = kAsfOff + kStageBlocks * kTokens * 4,
              kHeadOff = kWsfOff + kStageBlocks * kRows * 4;
constexpr int kSmem = 1024 + kHeadOff + kHeadBytes;  // + 1024: aligned by hand for the swizzled B atoms
static_assert(kStageBytes % 16 == 0 && kBOff % 1024 == 0, "stage layout");

__device__ __forceinline__ void e2m1x8_to_e4m3(uint32_t x, uint32_t& even, uint32_t& odd) {
  even = ((x << 2) & 0x1C1C1C1Cu) | ((x << 4) & 0x80808080u);
  odd = ((x >> 2) & 0x1C1C1C1Cu) | (x & 0x80808080u);
}
// D[64 x 8] = A[64 x 32] (e4m3, registers) B[8 x 32]^T (e4m3, K-major in shared memory), f32.
__device__ __forceinline__ void wgmma_rs(float (&d)[4], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(0));
}
// UE8M0 byte b -> 2^(b - 124) = 2^3 times its value (normal for every b <= 251); the product of a
// weight's and an activation's is their scale times 2^6, undoing the 2^-6 of the e4m3 codes.
__device__ __forceinline__ float ue8m0_x8(uint32_t b) { return __int_as_float((min(b, 251u) + 3u) << 23); }
template <int R>
__device__ __forceinline__ void fence_u32(uint32_t (&r)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

__global__ void __launch_bounds__(kThreads) kernel(const Params p) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* const ring = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  __shared__ int n_active_s;
  int* off = reinterpret_cast<int*>(ring + kHeadOff);
  int* active = off + kMaxGroups + 1;
  const int n_active = load_groups(p, off, active, &n_active_s);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g8 = lane >> 2, t4 = lane & 3;
  const int slices = p.n / kRows, tiles = n_active * slices, stages = p.k / kStageK;
  auto advance = [&](Cursor& c) {
    if (++c.st < stages) return;
    c.st = 0;
    const int g = active[c.tile / slices];
    if (++c.batch * kTokens < off[g + 1] - off[g]) return;
    c.batch = 0;
    c.tile += gridDim.x;
  };

  // Producer: the whole CTA copies a stage by cp.async (always one commit group a thread): 4 weight chunks
  // a thread, then one of the weight scales (threads < 32), the raw activations (token tid / 16 < rows)
  // and their scales (threads 32..47).
  Cursor pc{static_cast<int>(blockIdx.x), 0, 0};
  const uint8_t *pw = nullptr, *pws = nullptr, *pa = nullptr, *pas = nullptr;
  bool pa_ok = false, pas_ok = false;
  const int64_t ldw16 = 16 * p.ldw;
  int pslot = 0;
  auto produce = [&]() {
    if (pc.tile < tiles) {
      if (pc.st == 0) {
        const int gi = pc.tile / slices, g = active[gi];
        const int row0 = off[g] + pc.batch * kTokens, rows = min(off[g + 1] - row0, kTokens);
        const int64_t wrow = static_cast<int64_t>(g) * p.n + (pc.tile - gi * slices) * kRows;
        pw = p.w + (wrow + (tid >> 3)) * p.ldw + (tid & 7) * 16;
        pws = p.w_scale + ((tid >> 2) & 7) * p.ld_ws + wrow + (tid & 3) * 16;
        pa = p.a + static_cast<int64_t>(row0 + min(tid >> 4, rows - 1)) * p.lda + (tid & 15) * 16;
        pas = p.a_scale + ((tid >> 1) & 7) * p.ld_as + (row0 & ~15) + (tid & 1) * 16;
        pa_ok = (tid >> 4) < rows;
        pas_ok = tid >= 32 && tid < 48 && ((tid & 1) == 0 || (row0 & 15) + rows > 16);
      }
      uint8_t* const st = ring + pslot * kStageBytes;
      const uint32_t w_dst = smem_addr(st + kWOff + (tid >> 3) * kRowBytes + (((tid & 7) ^ ((tid >> 3) & 7)) * 16));
#pragma unroll
      for (int i = 0; i < 4; ++i) cp_async16(w_dst + i * 16 * kRowBytes, pw + i * ldw16);
      if (tid < 32) cp_async16(smem_addr(st + kWsOff + tid * 16), pws);  // [block][row]
      if (pa_ok) cp_async16(smem_addr(st + kARawOff + tid * 16), pa);  // [token][256 B]
      if (pas_ok) cp_async16(smem_addr(st + kAsOff + (tid - 32) * 16), pas);
      pw += kRowBytes, pa += kStageK;
      pws += kStageBlocks * p.ld_ws, pas += kStageBlocks * p.ld_as;
      advance(pc);
    }
    cp_async_commit();
    pslot = pslot + 1 == kStages ? 0 : pslot + 1;
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) produce();

  float acc[4];
  int row0 = 0, rows = 0, col0 = 0;
  Cursor cc{static_cast<int>(blockIdx.x), 0, 0};
  int cslot = 0;
  while (cc.tile < tiles) {
    cp_async_wait_stage();
    __syncthreads();  // the stage has landed for every thread; every warp is done with the previous one
    produce();        // into the slot consumed last iteration
    if (cc.st == 0) {
      const int gi = cc.tile / slices, g = active[gi];
      row0 = off[g] + cc.batch * kTokens;
      rows = min(off[g + 1] - row0, kTokens);
      col0 = (cc.tile - gi * slices) * kRows;
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[r] = 0.0f;
    }
    uint8_t* const st = ring + cslot * kStageBytes;
    // Stage prep: B (threads < 64: token tid / 8, K block tid % 8) and the scales as floats.
    if (tid < 64) {
      const int t = tid >> 3, j = tid & 7;
      if (t < rows) {
        const uint4 lo = *reinterpret_cast<const uint4*>(st + kARawOff + t * kStageK + j * 32);
        const uint4 hi = *reinterpret_cast<const uint4*>(st + kARawOff + t * kStageK + j * 32 + 16);
        const uint4 ev = make_uint4(__byte_perm(lo.x, lo.y, 0x6420), __byte_perm(lo.z, lo.w, 0x6420),
                                    __byte_perm(hi.x, hi.y, 0x6420), __byte_perm(hi.z, hi.w, 0x6420));
        const uint4 od = make_uint4(__byte_perm(lo.x, lo.y, 0x7531), __byte_perm(lo.z, lo.w, 0x7531),
                                    __byte_perm(hi.x, hi.y, 0x7531), __byte_perm(hi.z, hi.w, 0x7531));
        uint8_t* b = ring + kBOff + (j >> 2) * 1024 + t * 128;
        const int c = (j & 3) * 2;
        *reinterpret_cast<uint4*>(b + ((c ^ t) * 16)) = ev;
        *reinterpret_cast<uint4*>(b + (((c + 1) ^ t) * 16)) = od;
      }
    } else {  // activation scales: block (tid - 64) / 8, token tid % 8
      const int j = (tid - 64) >> 3, t = tid & 7;
      reinterpret_cast<float*>(ring + kAsfOff)[j * kTokens + t] = ue8m0_x8(st[kAsOff + j * 32 + (row0 & 15) + t]);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // weight scales: block idx / 64, row idx % 64
      const int idx = tid + i * kThreads, j = idx >> 6, r = idx & 63;
      reinterpret_cast<float*>(ring + kWsfOff)[j * kRows + (r >> 4) * 16 + (r & 7) * 2 + ((r >> 3) & 1)] =
          ue8m0_x8(st[kWsOff + idx]);
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic writes of B -> wgmma reads
    __syncthreads();

    // Warp w: rows 16 w + g8 and 16 w + g8 + 8, word t4 of each K block (k 8 t4 .. 8 t4 + 7: even k in
    // a0 / a1 at B positions 4 t4 .., odd k in a2 / a3 at 16 + 4 t4 ..), two batches of 4 K blocks.
    const uint8_t* wr = st + kWOff + (16 * warp + g8) * kRowBytes + t4 * 4;
    const uint32_t bdesc = smem_addr(ring + kBOff);
    float d[2][4][4];
    uint32_t a[2][4][4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int j = 4 * h + q;
        e2m1x8_to_e4m3(lds32(wr + ((j ^ g8) * 16)), a[h][q][0], a[h][q][2]);
        e2m1x8_to_e4m3(lds32(wr + 8 * kRowBytes + ((j ^ g8) * 16)), a[h][q][1], a[h][q][3]);
      }
      sm90::wgmma_fence();
#pragma unroll
      for (int q = 0; q < 4; ++q) wgmma_rs(d[h][q], a[h][q], sm90::desc_k_sw128(bdesc + h * 1024 + q * 32));
      sm90::wgmma_commit();
    }
    const float* asf = reinterpret_cast<const float*>(ring + kAsfOff) + 2 * t4;
    const float* wsf = reinterpret_cast<const float*>(ring + kWsfOff) + warp * 16 + g8 * 2;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (h == 0) sm90::wgmma_wait<1>();
      else sm90::wgmma_wait<0>();
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        sm90::fence_regs(d[h][q]);
        fence_u32(a[h][q]);
        const int j = 4 * h + q;
        const float2 as = *reinterpret_cast<const float2*>(asf + j * kTokens);
        const float2 ws = *reinterpret_cast<const float2*>(wsf + j * kRows);
        acc[0] += d[h][q][0] * (ws.x * as.x);
        acc[1] += d[h][q][1] * (ws.x * as.y);
        acc[2] += d[h][q][2] * (ws.y * as.x);
        acc[3] += d[h][q][3] * (ws.y * as.y);
      }
    }
    if (cc.st == stages - 1) {  // token 2 t4 + c gets rows 16 w + g8 (+ 8) of the tile
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int tok = 2 * t4 + c;
        if (tok >= rows) continue;
        uint16_t* y = p.y + (row0 + tok) * p.ldy + col0 + 16 * warp + g8;
        y[0] = __bfloat16_as_ushort(__float2bfloat16_rn(acc[c]));
        y[8] = __bfloat16_as_ushort(__float2bfloat16_rn(acc[2 + c]));
      }
    }
    advance(cc);
    cslot = cslot + 1 == kStages ? 0 : cslot + 1;
  }
}
}  // namespace v4

// --- v5: v4 with loop-invariant descriptors, one source pointer a thread for the weights, no division in
// the loop, the scales as floats laid out for 16-byte reads, S ring stages (4: 4 CTAs an SM, 3: 5) ---
namespace v5 {
constexpr int kRows = 64, kThreads = 128;
constexpr int kARawOff = 0, kWOff = kTokens * kStageK, kWsOff = kWOff + kRows * kRowBytes,
              kAsOff = kWsOff + kStageBlocks * kRows, kStageBytes = kAsOff + kStageBlocks * 32;
template <int S>
struct Lay {
  static constexpr int kBOff = (S * kStageBytes + 1023) / 1024 * 1024, kAsfOff = kBOff + 2048,
                       kWsfOff = kAsfOff + kStageBlocks * kTokens * 4, kHeadOff = kWsfOff + kStageBlocks * kRows * 4,
                       kSmem = 1024 + kHeadOff + kHeadBytes;
};

// The cursor of v4 plus the tile's active-group index and slice, stepped without division.
struct Cursor5 {
  int gi, slice, batch, st;
};

template <int S, int QB>
__global__ void __launch_bounds__(kThreads, S == 3 ? 5 : 4) kernel(const Params p) {
  using L = Lay<S>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* const ring = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  __shared__ int n_active_s;
  int* off = reinterpret_cast<int*>(ring + L::kHeadOff);
  int* active = off + kMaxGroups + 1;
  const int n_active = load_groups(p, off, active, &n_active_s);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g8 = lane >> 2, t4 = lane & 3;
  const int slices = p.n / kRows, stages = p.k / kStageK;
  const int step_gi = static_cast<int>(gridDim.x) / slices, step_slice = static_cast<int>(gridDim.x) % slices;
  const int first = static_cast<int>(blockIdx.x);
  auto advance = [&](Cursor5& c) {
    if (++c.st < stages) return;
    c.st = 0;
    const int g = active[c.gi];
    if (++c.batch * kTokens < off[g + 1] - off[g]) return;
    c.batch = 0;
    c.gi += step_gi, c.slice += step_slice;
    if (c.slice >= slices) c.slice -= slices, ++c.gi;
  };

  // Producer. Thread t copies weight row t / 2, chunks 2 i + t % 2 (a 32-byte sector a thread pair), one
  // source pointer at immediate offsets; weight scales (t < 32), raw activations (token t / 16 < rows) and
  // their scales (64 <= t < 80) as in v4.
  Cursor5 pc{first / slices, first % slices, 0, 0};
  const uint8_t *pw = nullptr, *pws = nullptr, *pa = nullptr, *pas = nullptr;
  bool pa_ok = false, pas_ok = false;
  const int wr_row = tid >> 1, wr_b = tid & 1;
  int pslot = 0;
  auto produce = [&]() {
    if (pc.gi < n_active) {
      if (pc.st == 0) {
        const int g = active[pc.gi];
        const int row0 = off[g] + pc.batch * kTokens, rows = min(off[g + 1] - row0, kTokens);
        const int64_t wrow = static_cast<int64_t>(g) * p.n + pc.slice * kRows;
        pw = p.w + (wrow + wr_row) * p.ldw + wr_b * 16;
        pws = p.w_scale + ((tid >> 2) & 7) * p.ld_ws + wrow + (tid & 3) * 16;
        pa = p.a + static_cast<int64_t>(row0 + min(tid >> 4, rows - 1)) * p.lda + (tid & 15) * 16;
        pas = p.a_scale + ((tid >> 1) & 7) * p.ld_as + (row0 & ~15) + (tid & 1) * 16;
        pa_ok = (tid >> 4) < rows;
        pas_ok = tid >= 64 && tid < 80 && ((tid & 1) == 0 || (row0 & 15) + rows > 16);
      }
      uint8_t* const st = ring + pslot * kStageBytes;
      const uint32_t w_dst = smem_addr(st + kWOff + wr_row * kRowBytes);
#pragma unroll
      for (int i = 0; i < kRowBytes / 32; ++i)
        cp_async16(w_dst + (((2 * i + wr_b) ^ (wr_row & 7)) * 16), pw + 32 * i);
      if (tid < 32) cp_async16(smem_addr(st + kWsOff + tid * 16), pws);  // [block][row]
      if (pa_ok) cp_async16(smem_addr(st + kARawOff + tid * 16), pa);  // [token][256 B]
      if (pas_ok) cp_async16(smem_addr(st + kAsOff + (tid - 64) * 16), pas);
      pw += kRowBytes, pa += kStageK;
      pws += kStageBlocks * p.ld_ws, pas += kStageBlocks * p.ld_as;
      advance(pc);
    }
    cp_async_commit();
    pslot = pslot + 1 == S ? 0 : pslot + 1;
  };
#pragma unroll
  for (int s = 0; s < S - 1; ++s) produce();

  // B descriptors (the area is fixed): atom h at +1024 bytes, K block q of it at +32 (16-byte units).
  const uint64_t desc0 = sm90::desc_k_sw128(smem_addr(ring + L::kBOff));
  float* const asf_w = reinterpret_cast<float*>(ring + L::kAsfOff);  // [token / 2][block][token % 2]
  float* const wsf_w = reinterpret_cast<float*>(ring + L::kWsfOff);  // [warp][g8][block][row g8, g8 + 8]
  float acc[4];
  int row0 = 0, rows = 0, col0 = 0;
  Cursor5 cc{first / slices, first % slices, 0, 0};
  int cslot = 0;
  while (cc.gi < n_active) {
    if constexpr (S == 4) asm volatile("cp.async.wait_group 2;" ::: "memory");
    else asm volatile("cp.async.wait_group 1;" ::: "memory");
    __syncthreads();  // the stage has landed for every thread; every warp is done with the previous one
    produce();        // into the slot consumed last iteration
    if (cc.st == 0) {
      const int g = active[cc.gi];
      row0 = off[g] + cc.batch * kTokens;
      rows = min(off[g + 1] - row0, kTokens);
      col0 = cc.slice * kRows;
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[r] = 0.0f;
    }
    uint8_t* const st = ring + cslot * kStageBytes;
    if (tid < 64) {  // B: token tid / 8, K block tid % 8, deinterleaved
      const int t = tid >> 3, j = tid & 7;
      if (t < rows) {
        const uint4 lo = *reinterpret_cast<const uint4*>(st + kARawOff + t * kStageK + j * 32);
        const uint4 hi = *reinterpret_cast<const uint4*>(st + kARawOff + t * kStageK + j * 32 + 16);
        const uint4 ev = make_uint4(__byte_perm(lo.x, lo.y, 0x6420), __byte_perm(lo.z, lo.w, 0x6420),
                                    __byte_perm(hi.x, hi.y, 0x6420), __byte_perm(hi.z, hi.w, 0x6420));
        const uint4 od = make_uint4(__byte_perm(lo.x, lo.y, 0x7531), __byte_perm(lo.z, lo.w, 0x7531),
                                    __byte_perm(hi.x, hi.y, 0x7531), __byte_perm(hi.z, hi.w, 0x7531));
        uint8_t* b = ring + L::kBOff + (j >> 2) * 1024 + t * 128;
        const int c = (j & 3) * 2;
        *reinterpret_cast<uint4*>(b + ((c ^ t) * 16)) = ev;
        *reinterpret_cast<uint4*>(b + (((c + 1) ^ t) * 16)) = od;
      }
    } else {  // activation scales: block (tid - 64) / 8, token tid % 8
      const int j = (tid - 64) >> 3, t = tid & 7;
      asf_w[(t >> 1) * kStageBlocks * 2 + j * 2 + (t & 1)] = v4::ue8m0_x8(st[kAsOff + j * 32 + (row0 & 15) + t]);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // weight scales: block idx / 64, row idx % 64
      const int idx = tid + i * kThreads, j = idx >> 6, r = idx & 63;
      wsf_w[((r >> 4) * 8 + (r & 7)) * kStageBlocks * 2 + j * 2 + ((r >> 3) & 1)] = v4::ue8m0_x8(st[kWsOff + idx]);
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic writes of B -> wgmma reads
    __syncthreads();

    // Batches of QB K blocks, rolling: batch h's wgmmas run while batch h - 1 is promoted.
    const uint8_t* wr = st + kWOff + (16 * warp + g8) * kRowBytes + t4 * 4;
    constexpr int NB = kStageBlocks / QB;
    float d[2][QB][4];
    uint32_t a[2][QB][4];
    auto promote = [&](int h) {
      const int hb = h & 1;
#pragma unroll
      for (int q = 0; q < QB; q += 2) {  // two K blocks a 16-byte read of each scale array
        const int j = QB * h + q;
        const float4 as = *reinterpret_cast<const float4*>(asf_w + t4 * kStageBlocks * 2 + j * 2);
        const float4 ws = *reinterpret_cast<const float4*>(wsf_w + (warp * 8 + g8) * kStageBlocks * 2 + j * 2);
        const float sa[2][2] = {{as.x, as.y}, {as.z, as.w}}, sw[2][2] = {{ws.x, ws.y}, {ws.z, ws.w}};
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          float (&dd)[4] = d[hb][q + u];
          sm90::fence_regs(dd);
          v4::fence_u32(a[hb][q + u]);
          acc[0] += dd[0] * (sw[u][0] * sa[u][0]);
          acc[1] += dd[1] * (sw[u][0] * sa[u][1]);
          acc[2] += dd[2] * (sw[u][1] * sa[u][0]);
          acc[3] += dd[3] * (sw[u][1] * sa[u][1]);
        }
      }
      sm90::fence_regs(acc);  // the promotion stays ahead of the next batch's issue and wait
    };
#pragma unroll
    for (int h = 0; h < NB; ++h) {
      const int hb = h & 1;
#pragma unroll
      for (int q = 0; q < QB; ++q) {
        const int j = QB * h + q;
        v4::e2m1x8_to_e4m3(lds32(wr + ((j ^ g8) * 16)), a[hb][q][0], a[hb][q][2]);
        v4::e2m1x8_to_e4m3(lds32(wr + 8 * kRowBytes + ((j ^ g8) * 16)), a[hb][q][1], a[hb][q][3]);
      }
      sm90::wgmma_fence();
#pragma unroll
      for (int q = 0; q < QB; ++q) {
        const int j = QB * h + q;
        v4::wgmma_rs(d[hb][q], a[hb][q], desc0 + ((j >> 2) * 64 + (j & 3) * 2));
      }
      sm90::wgmma_commit();
      if (h > 0) {
        sm90::wgmma_wait<1>();
        promote(h - 1);
      }
    }
    sm90::wgmma_wait<0>();
    promote(NB - 1);
    if (cc.st == stages - 1) {  // token 2 t4 + c gets rows 16 w + g8 (+ 8) of the tile
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int tok = 2 * t4 + c;
        if (tok >= rows) continue;
        uint16_t* y = p.y + (row0 + tok) * p.ldy + col0 + 16 * warp + g8;
        y[0] = __bfloat16_as_ushort(__float2bfloat16_rn(acc[c]));
        y[8] = __bfloat16_as_ushort(__float2bfloat16_rn(acc[2 + c]));
      }
    }
    advance(cc);
    cslot = cslot + 1 == S ? 0 : cslot + 1;
  }
}
}  // namespace v5

// Kernel variants for the measurement run (DEEPINFER_MXFP4_DECODE = v2-16, v2-32, v3-16, v3-32, v4, v5,
// v5q2; default v5).
int variant() {
  static const int v = [] {
    const char* e = std::getenv("DEEPINFER_MXFP4_DECODE");
    if (!e) return 5;
    if (!std::strcmp(e, "v2-16")) return 0;
    if (!std::strcmp(e, "v2-32")) return 1;
    if (!std::strcmp(e, "v3-16")) return 2;
    if (!std::strcmp(e, "v3-32")) return 3;
    if (!std::strcmp(e, "v4")) return 4;
    if (!std::strcmp(e, "v5q2")) return 6;
    return 5;
  }();
  return v;
}

template <int S, int QB>
void launch_v5(const Params& p, int64_t active_bound, cudaStream_t s) {
  using L = v5::Lay<S>;
  static const int per_sm = [] {
    int b = 0;
    if (cudaFuncSetAttribute(v5::kernel<S, QB>, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kSmem) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, v5::kernel<S, QB>, v5::kThreads, L::kSmem) != cudaSuccess)
      return 0;
    return b;
  }();
  check(per_sm > 0, "mxfp4_decode: cannot launch with ", L::kSmem, " bytes of shared memory");
  const int64_t grid = std::min<int64_t>(active_bound * (p.n / v5::kRows), int64_t{per_sm} * sm90::sm_count());
  v5::kernel<S, QB><<<static_cast<unsigned>(grid), v5::kThreads, L::kSmem, s>>>(p);
}

void launch_v4(const Params& p, int64_t active_bound, cudaStream_t s) {
  static const int per_sm = [] {
    int b = 0;
    if (cudaFuncSetAttribute(v4::kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, v4::kSmem) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, v4::kernel, v4::kThreads, v4::kSmem) != cudaSuccess)
      return 0;
    return b;
  }();
  check(per_sm > 0, "mxfp4_decode: cannot launch with ", v4::kSmem, " bytes of shared memory");
  const int64_t grid = std::min<int64_t>(active_bound * (p.n / v4::kRows), int64_t{per_sm} * sm90::sm_count());
  v4::kernel<<<static_cast<unsigned>(grid), v4::kThreads, v4::kSmem, s>>>(p);
}

template <int MT>
void launch_kernel(void (*kernel)(Params), const Params& p, int64_t active_bound, cudaStream_t s, int& per_sm) {
  using L = Lay<MT>;
  if (per_sm < 0) {
    int b = 0;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kSmem) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, kWarps * 32, L::kSmem) != cudaSuccess)
      b = 0;
    per_sm = b;
  }
  check(per_sm > 0, "mxfp4_decode: cannot launch with ", L::kSmem, " bytes of shared memory");
  const int64_t warps = active_bound * (p.n / L::kRows);
  const int64_t grid = std::min<int64_t>((warps + kWarps - 1) / kWarps, int64_t{per_sm} * sm90::sm_count());
  kernel<<<static_cast<unsigned>(grid), kWarps * 32, L::kSmem, s>>>(p);
}

}  // namespace

// Measured on the H200 (docs/performance.md): faster than the WGMMA path up to 8 rows a group on average
// (512 tokens top-6 over 384 experts: 1.5x), 1.8x slower at 64 (the first version of this kernel).
bool mxfp4_decode_fits(const Fp8GemmArgs& a) {
  // Grouped: up to 32 rows a group on average (one token tile batch). Measured on 8 Flash layers
  // (docs/performance.md): a prefill of 128-4096 tokens is 1-7% faster with 32 than with 8, and slower
  // again with 64 or 128 at 2048+ tokens.
  static const bool force = std::getenv("DEEPINFER_MXFP4_DECODE_FORCE") != nullptr;  // measurement run only
  const bool few_rows = force || (a.groups > 0 ? a.m <= 32 * int64_t{a.groups} : a.m <= 64);
  return a.wfmt == WeightFormat::kMxfp4 && !a.batch_invariant && few_rows && a.k % kStageK == 0 &&
         a.n % 64 == 0 && reinterpret_cast<uintptr_t>(a.y) % 4 == 0 && a.ldy % 2 == 0;
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
  static int per_sm[4] = {-1, -1, -1, -1};
  switch (variant()) {
    case 0: launch_kernel<1>(v2::kernel<1>, p, active_bound, s, per_sm[0]); break;
    case 1: launch_kernel<2>(v2::kernel<2>, p, active_bound, s, per_sm[1]); break;
    case 2: launch_kernel<1>(mxfp4_decode_kernel<1>, p, active_bound, s, per_sm[2]); break;
    case 3: launch_kernel<2>(mxfp4_decode_kernel<2>, p, active_bound, s, per_sm[3]); break;
    case 4: launch_v4(p, active_bound, s); break;
    case 6: launch_v5<4, 2>(p, active_bound, s); break;
    default: launch_v5<4, 4>(p, active_bound, s); break;
  }
  const cudaError_t e = cudaGetLastError();
  check(e == cudaSuccess, "mxfp4_decode: launch failed: ", cudaGetErrorString(e));
}

}  // namespace deepinfer::cuda
