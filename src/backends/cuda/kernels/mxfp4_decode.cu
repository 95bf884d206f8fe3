// MXFP4 decode GEMM (see mxfp4_decode.h): y[i, n] = bf16(sum over K blocks b, in order, of a_s w_s 2^6 *
// wgmma_b(e4m3(2^-6 w[n]), a[i])) for each group's rows i; one CTA (a warpgroup) per 64 weight rows of
// one active group and batch of up to 8 of its rows.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "backends/cuda/kernels/mxfp4_decode.h"
#include "backends/cuda/kernels/sm90.cuh"
#include "core/error.h"

namespace deepinfer::cuda {
namespace {

using sm90::smem_addr;

constexpr int kTokens = 8, kStages = 4, kMaxGroups = 512;
constexpr int kStageK = 256, kStageBlocks = kStageK / 32, kRowBytes = kStageK / 2;  // 128 bytes a row a stage
constexpr int kHeadBytes = (4 * (2 * kMaxGroups + 2) + 127) / 128 * 128;             // offsets, active list

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
__device__ __forceinline__ void cp_async_wait_stage() {  // the oldest of the stages in flight has landed
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

// A CTA's place in its stream of (tile, token batch, K stage) items; tile = active group x 64-row slice.
struct Cursor {
  int tile, batch, st;
};

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

__global__ void __launch_bounds__(kThreads) mxfp4_decode_kernel(const Params p) {
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

void launch(const Params& p, int64_t active_bound, cudaStream_t s) {
  static const int per_sm = [] {
    int b = 0;
    if (cudaFuncSetAttribute(mxfp4_decode_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, mxfp4_decode_kernel, kThreads, kSmem) != cudaSuccess)
      return 0;
    return b;
  }();
  check(per_sm > 0, "mxfp4_decode: cannot launch with ", kSmem, " bytes of shared memory");
  const int64_t grid = std::min<int64_t>(active_bound * (p.n / kRows), int64_t{per_sm} * sm90::sm_count());
  mxfp4_decode_kernel<<<static_cast<unsigned>(grid), kThreads, kSmem, s>>>(p);
}

}  // namespace

// Measured on the H200 (docs/performance.md, kernels6): 1.2-1.45x the bytes floor at 8-64 tokens; at 512
// tokens 2044 / 1045 us against the WGMMA path's 6901 / 3443 (kernels5's run); at 4096 (64 rows a group)
// a close variant forced onto this path took 1.3x the WGMMA path's time.
bool mxfp4_decode_fits(const Fp8GemmArgs& a) {
  // Grouped: up to 32 rows a group on average. Measured on 8 Flash layers with the previous (mma.sync)
  // kernel of this path (docs/performance.md): a prefill of 128-4096 tokens is 1-7% faster with 32 than
  // with 8, and slower again with 64 or 128 at 2048+ tokens; this kernel is faster than that one at 8
  // and 64 rows a group, 32 not re-measured.
  const bool few_rows = a.groups > 0 ? a.m <= 32 * int64_t{a.groups} : a.m <= 64;
  return a.wfmt == WeightFormat::kMxfp4 && !a.batch_invariant && few_rows && a.k % kStageK == 0 && a.n % kRows == 0;
}

void mxfp4_decode_gemm(const Fp8GemmArgs& a, void* stream) {
  Params p{};
  p.a = a.a, p.lda = a.lda, p.a_scale = a.a_scale, p.ld_as = a.ld_as;
  p.w = a.w, p.ldw = a.ldw, p.w_scale = a.w_scale, p.ld_ws = a.ld_ws;
  p.y = a.y, p.ldy = a.ldy;
  p.m = static_cast<int>(a.m), p.n = static_cast<int>(a.n), p.k = static_cast<int>(a.k);
  p.groups = a.groups, p.group_offsets = a.groups > 0 ? a.group_offsets : nullptr;
  const int64_t active_bound = a.groups > 0 ? std::min<int64_t>(a.groups, a.m) : 1;
  launch(p, active_bound, static_cast<cudaStream_t>(stream));
  const cudaError_t e = cudaGetLastError();
  check(e == cudaSuccess, "mxfp4_decode: launch failed: ", cudaGetErrorString(e));
}

}  // namespace deepinfer::cuda
