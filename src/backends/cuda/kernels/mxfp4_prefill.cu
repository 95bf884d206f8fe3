// The MXFP4 expert GEMM at prefill sizes (see mxfp4_gemm.h): y[i, n] = bf16(sum_k a'[i, k] w'[n, k]) with
// a' = e4m3 x 2^(a_s - 127) and w' = e2m1 x 2^(w_s - 127) written exactly as bf16 (their 1 x 32 UE8M0
// scales folded into the values, so no K block needs a promotion) and summed by bf16 wgmma into fp32.
//
// Why bf16 and not FP8: both scales change every 32 K, so an FP8 partial must be scaled into the fp32
// accumulator once per 32 K per output (an FFMA an output per 32 K: as many issue slots as the FP8
// tensor work itself, the ~0.3 of peak the blk-32 FP8 GEMM reaches); the folded bf16 values need none
// and the tensor cores run the whole K in one accumulator at half the FP8 rate. Exactness: e2m1 and
// e4m3 values have at most 2 and 4 significant bits, so a' and w' are bf16 values, and their products
// are exact in fp32; what differs from the reference is the fp32 summation order (the tensor cores' sum
// over K instead of per-32 partials added in order), well inside fp8_gemm's tolerance.
//
// Kernel: a CTA (two warpgroups, 256 threads) owns 128 weight rows of one active group and a batch of up
// to NT of its tokens; a persistent grid walks (128-row slice, token batch, K stage of 64) items. A
// cp.async ring brings each stage's packed codes, the batch's e4m3 activations and both scale sets; the
// CTA widens one stage into a bf16 tile pair (weights [128][64], tokens [NT][64], 128-byte swizzle) while
// the tensor cores multiply the previous one (double buffer: wgmma m64nNk16, A = 64 weight rows a
// warpgroup, B = the tokens). N is picked per batch from its rows (16 .. NT), so a short batch costs
// what its rows need. Each 8 K inside a row are stored in the order 0 4 1 5 2 6 3 7, in both operands
// (what the widening's shifts give). Results depend on a row's own inputs (no split K); the N picked
// follows the batch's rows, so not batch-invariant (fp8_gemm's WGMMA path keeps that).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "backends/cuda/kernels/mxfp4_internal.cuh"
#include "backends/cuda/kernels/sm90.cuh"
#include "backends/cuda/kernels/sm90_wgmma_bf16.cuh"
#include "core/error.h"

namespace deepinfer::cuda {
namespace {

using sm90::smem_addr;

constexpr int kThreads = 256, kSlice = 128, kStageK = 64;
constexpr int kRawW = kSlice * kStageK / 2, kRawWs = 2 * kSlice;  // codes [128 rows][32 B], scales [2][128]

// Shared memory: a ring of raw stages (codes [128][32 B], activations [NT][64 B], weight scales
// [2 blocks][128 rows], activation scales [2 blocks][kAsBytes] from the batch's first row rounded down
// to 16), two bf16 tile pairs (weights [128][128 B], tokens [NT][128 B]), the group list.
template <int NT>
struct Layout {
  static constexpr int kStages = NT == 256 ? 4 : 6;  // 1 CTA an SM at 256 tokens, 2 at 64
  static constexpr int kAsChunks = (NT + 15 + 15) / 16, kAsBytes = 16 * kAsChunks;
  static constexpr int kWOff = 0, kAOff = kRawW, kWsOff = kAOff + NT * kStageK, kAsOff = kWsOff + kRawWs,
                       kStageBytes = kAsOff + 2 * kAsBytes;
  static constexpr int kTileW = kSlice * 128, kTileBytes = kTileW + NT * 128;
  static constexpr int kTileOff = (kStages * kStageBytes + 1023) / 1024 * 1024, kHeadOff = kTileOff + 2 * kTileBytes;
  static constexpr int kSmem = 1024 + kHeadOff + kMxfp4HeadBytes;  // + 1024: aligned by hand for the swizzle
  static_assert(kStageBytes % 16 == 0 && kTileBytes % 1024 == 0, "stage layout");
  static_assert(kSmem <= 227 * 1024, "shared memory");
};

// 2^e (e in [-126, 254]) as one or two bf16x2 factors (a bf16 exponent stops at 127).
struct Pow2 {
  uint32_t m1, m2;
  bool two;
};
__device__ __forceinline__ Pow2 pow2_bf16x2(int e) {
  const uint32_t b1 = static_cast<uint32_t>(min(e, 127) + 127) << 7, b2 = static_cast<uint32_t>(max(e - 127, 0) + 127) << 7;
  return {b1 * 0x10001u, b2 * 0x10001u, e > 127};
}
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t x, uint32_t m) {  // x * m + (-0): exact here
  uint32_t y;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(y) : "r"(x), "r"(m), "r"(0x80008000u));
  return y;
}
__device__ __forceinline__ uint32_t scale(uint32_t x, const Pow2& s) {
  x = bf16x2_mul(x, s.m1);
  return s.two ? bf16x2_mul(x, s.m2) : x;
}

// 8 e2m1 codes (nibble i = k i) -> bf16 pairs (k i, k i + 4), i = 0..3, times 2^(e + 1 - 127)... as bits:
// sign to bit 15, the 3 magnitude bits to bits 8..6 make the bf16 of 2^-126 times the code's value
// (code 1 = 0.5 lands on the subnormal 2^-127), so the factor is 2^(126 + scale exponent).
__device__ __forceinline__ uint4 e2m1x8_to_bf16(uint32_t q, const Pow2& s) {
  uint32_t v[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t t = q << (12 - 4 * i);  // code i's nibble at bits 12..15, code i + 4's at 28..31
    v[i] = scale((t & 0x80008000u) | ((t >> 6) & 0x01C001C0u), s);
  }
  return make_uint4(v[0], v[1], v[2], v[3]);
}
// 8 e4m3 codes (bytes of x0, x1 = k 0..7) -> bf16 pairs (k i, k i + 4): the sign to bit 15 and the 7
// magnitude bits to bits 10..4 make the bf16 of 2^-120 times the value (subnormals included).
__device__ __forceinline__ uint4 e4m3x8_to_bf16(uint32_t x0, uint32_t x1, const Pow2& s) {
  const uint32_t y0 = __byte_perm(x0, x1, 0x5410), y1 = __byte_perm(x0, x1, 0x7632);  // k 0 1 4 5, k 2 3 6 7
  auto lo = [](uint32_t y) { return ((y << 4) & 0x07F007F0u) | ((y << 8) & 0x80008000u); };  // bytes 0, 2
  auto hi = [](uint32_t y) { return ((y >> 4) & 0x07F007F0u) | (y & 0x80008000u); };         // bytes 1, 3
  return make_uint4(scale(lo(y0), s), scale(hi(y0), s), scale(lo(y1), s), scale(hi(y1), s));
}

// One stage's wgmmas (4 x k16) with N = the smallest width holding `rows` tokens.
template <int N, int R>
__device__ __forceinline__ void mma4(float (&d)[R], uint64_t da, uint64_t db, bool first) {
#pragma unroll
  for (int s = 0; s < 4; ++s) sm90::WgmmaBf16<N>::mma(d, da + 2 * s, db + 2 * s, first && s == 0 ? 0 : 1);
}
template <int NT>
__device__ __forceinline__ void mma_stage(float (&d)[NT / 2], uint64_t da, uint64_t db, bool first, int rows) {
  if (rows <= 16) return mma4<16>(d, da, db, first);
  if (rows <= 32) return mma4<32>(d, da, db, first);
  if constexpr (NT == 64) {
    if (rows <= 48) return mma4<48>(d, da, db, first);
    return mma4<64>(d, da, db, first);
  } else {
    if (rows <= 64) return mma4<64>(d, da, db, first);
    if (rows <= 96) return mma4<96>(d, da, db, first);
    if (rows <= 128) return mma4<128>(d, da, db, first);
    if (rows <= 160) return mma4<160>(d, da, db, first);
    if (rows <= 192) return mma4<192>(d, da, db, first);
    if (rows <= 224) return mma4<224>(d, da, db, first);
    return mma4<256>(d, da, db, first);
  }
}

// A CTA's place in its stream of (tile, token batch, K stage) items and the item's rows;
// tile = active group x 128-row slice.
struct Item {
  int tile, batch, st, g, row0, rows, col0;
};

template <int NT>
__global__ void __launch_bounds__(kThreads, NT == 256 ? 1 : 2) mxfp4_prefill_kernel(const Mxfp4Params p) {
  using L = Layout<NT>;
  constexpr int S = L::kStages;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* const ring = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  __shared__ int n_active_s;
  int* off = reinterpret_cast<int*>(ring + L::kHeadOff);
  int* active = off + kMxfp4MaxGroups + 1;
  const int n_active = load_groups(p, off, active, &n_active_s);
  const int tid = threadIdx.x;
  const int slices = p.n / kSlice, tiles = n_active * slices, stages = p.k / kStageK;
  auto start = [&](Item& c) {
    if (c.tile >= tiles) return;
    const int gi = c.tile / slices;
    c.g = active[gi];
    c.row0 = off[c.g] + c.batch * NT;
    c.rows = min(off[c.g + 1] - c.row0, NT);
    c.col0 = (c.tile - gi * slices) * kSlice;
  };
  auto advance = [&](Item& c) {
    if (++c.st < stages) return;
    c.st = 0;
    if (++c.batch * NT >= off[c.g + 1] - off[c.g]) c.batch = 0, c.tile += gridDim.x;
    start(c);
  };
  Item first{static_cast<int>(blockIdx.x), 0, 0, 0, 0, 0, 0};
  start(first);

  // Producer: the whole CTA copies a stage (one commit group a thread, empty past the end): thread t
  // the 16 code bytes of row t / 2, block t % 2; threads < 16 one chunk of the weight scales; chunk t % 4
  // of tokens t / 4 + 64 i; threads 16 .. 16 + 2 kAsChunks one chunk of the activation scales.
  Item pc = first;
  const uint8_t *pw = nullptr, *pws = nullptr, *pa = nullptr, *pas = nullptr;
  int pa_rows = 0;
  bool pas_ok = false;
  const int64_t lda64 = 64 * p.lda;
  int pslot = 0;
  auto produce = [&]() {
    if (pc.tile < tiles) {
      if (pc.st == 0) {
        const int64_t wrow = static_cast<int64_t>(pc.g) * p.n + pc.col0;
        pw = p.w + (wrow + (tid >> 1)) * p.ldw + (tid & 1) * 16;
        pws = p.w_scale + (tid >> 3) * p.ld_ws + wrow + (tid & 7) * 16;
        pa_rows = pc.rows - (tid >> 2);
        pa = p.a + static_cast<int64_t>(pc.row0 + max(min(tid >> 2, pc.rows - 1), 0)) * p.lda + (tid & 3) * 16;
        const int sc = tid - 16, sb = sc / L::kAsChunks, sch = sc - sb * L::kAsChunks;
        pas = p.a_scale + max(sb, 0) * p.ld_as + (pc.row0 & ~15) + sch * 16;
        pas_ok = sc >= 0 && sc < 2 * L::kAsChunks && sch * 16 < (pc.row0 & 15) + pc.rows;
      }
      uint8_t* const st = ring + pslot * L::kStageBytes;
      cp_async16(smem_addr(st + L::kWOff + tid * 16), pw);
      if (tid < 16) cp_async16(smem_addr(st + L::kWsOff + tid * 16), pws);
#pragma unroll
      for (int i = 0; i < NT / 64; ++i)
        if (64 * i < pa_rows) cp_async16(smem_addr(st + L::kAOff + (tid + i * kThreads) * 16), pa + i * lda64);
      if (pas_ok) cp_async16(smem_addr(st + L::kAsOff + (tid - 16) * 16), pas);
      pw += kStageK / 2, pa += kStageK;
      pws += 2 * p.ld_ws, pas += 2 * p.ld_as;
      advance(pc);
    }
    cp_async_commit();
    pslot = pslot + 1 == S ? 0 : pslot + 1;
  };

  // Widening of a landed stage into bf16 tile pair `tile`: thread t the 32 codes it copied (row t / 2,
  // K block t % 2: 4 chunks of 8 K); the activation chunks it copied (token t / 4 + 64 i, 16 K: 2 chunks).
  // Chunk c of a row holds K 8c .. 8c + 7 at 16-byte slot c ^ (row % 8) (the 128-byte swizzle).
  Item vc = first;
  int vslot = 0;
  auto widen = [&](uint8_t* tile) {
    const uint8_t* const st = ring + vslot * L::kStageBytes;
    {
      const int r = tid >> 1, j = tid & 1, sw = r & 7;
      const uint4 q = *reinterpret_cast<const uint4*>(st + L::kWOff + tid * 16);
      const Pow2 s = pow2_bf16x2(static_cast<int>(st[L::kWsOff + j * kSlice + r]) - 1);
      uint8_t* const row = tile + r * 128;
      *reinterpret_cast<uint4*>(row + (((4 * j + 0) ^ sw) * 16)) = e2m1x8_to_bf16(q.x, s);
      *reinterpret_cast<uint4*>(row + (((4 * j + 1) ^ sw) * 16)) = e2m1x8_to_bf16(q.y, s);
      *reinterpret_cast<uint4*>(row + (((4 * j + 2) ^ sw) * 16)) = e2m1x8_to_bf16(q.z, s);
      *reinterpret_cast<uint4*>(row + (((4 * j + 3) ^ sw) * 16)) = e2m1x8_to_bf16(q.w, s);
    }
#pragma unroll
    for (int i = 0; i < NT / 64; ++i) {
      const int idx = tid + i * kThreads, t = idx >> 2, ch = idx & 3, sw = t & 7;
      if (t >= vc.rows) continue;
      const uint4 x = *reinterpret_cast<const uint4*>(st + L::kAOff + idx * 16);
      const Pow2 s = pow2_bf16x2(static_cast<int>(st[L::kAsOff + (ch >> 1) * L::kAsBytes + (vc.row0 & 15) + t]) - 7);
      uint8_t* const row = tile + L::kTileW + t * 128;
      *reinterpret_cast<uint4*>(row + (((2 * ch) ^ sw) * 16)) = e4m3x8_to_bf16(x.x, x.y, s);
      *reinterpret_cast<uint4*>(row + (((2 * ch + 1) ^ sw) * 16)) = e4m3x8_to_bf16(x.z, x.w, s);
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic writes -> wgmma reads
    advance(vc);
    vslot = vslot + 1 == S ? 0 : vslot + 1;
  };
  auto tile_at = [&](int b) { return ring + L::kTileOff + b * L::kTileBytes; };

#pragma unroll 1
  for (int s = 0; s < S - 1; ++s) produce();
  if (vc.tile < tiles) {
    cp_async_wait<S - 2>();  // stage 0 landed (this thread's copies)
    __syncthreads();         // ... and every thread's
    produce();
    widen(tile_at(0));
    __syncthreads();
  }

  const int cw = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  float acc[NT / 2];
#pragma unroll
  for (int i = 0; i < NT / 2; ++i) acc[i] = 0.0f;
  Item mc = first;
  for (int q = 0; mc.tile < tiles; ++q) {
    // The tensor cores take stage q's tiles while the CTA widens stage q + 1 into the other pair.
    const uint32_t tile = smem_addr(tile_at(q & 1));
    sm90::wgmma_fence();
    mma_stage<NT>(acc, sm90::desc_k_sw128(tile + cw * 64 * 128), sm90::desc_k_sw128(tile + L::kTileW), mc.st == 0,
                  mc.rows);
    sm90::wgmma_commit();
    if (vc.tile < tiles) {
      cp_async_wait<S - 2>();  // stage q + 1 landed
      __syncthreads();         // for every thread; and every thread has widened stage q (its slot is free)
      produce();
      widen(tile_at((q + 1) & 1));
    }
    sm90::wgmma_wait<0>();
    sm90::fence_regs(acc);
    if (mc.st == stages - 1) {  // token 8 jn + 2 (lane % 4) + c gets weight rows g8, g8 + 8 of the warp
      const int g8 = lane >> 2, t4 = lane & 3;
      uint16_t* const y = p.y + static_cast<int64_t>(mc.row0) * p.ldy + mc.col0 + cw * 64 + warp * 16 + g8;
#pragma unroll
      for (int jn = 0; jn < NT / 8; ++jn)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int tok = 8 * jn + 2 * t4 + c;
          if (tok >= mc.rows) continue;
          y[tok * p.ldy] = __bfloat16_as_ushort(__float2bfloat16_rn(acc[4 * jn + c]));
          y[tok * p.ldy + 8] = __bfloat16_as_ushort(__float2bfloat16_rn(acc[4 * jn + 2 + c]));
        }
    }
    advance(mc);
    __syncthreads();  // the widened pair complete; every warpgroup done with pair q & 1
  }
}

template <int NT>
void launch(const Mxfp4Params& p, int64_t active_bound, cudaStream_t s) {
  constexpr int smem = Layout<NT>::kSmem;
  static const int per_sm = [] {
    int b = 0;
    if (cudaFuncSetAttribute(mxfp4_prefill_kernel<NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, mxfp4_prefill_kernel<NT>, kThreads, smem) != cudaSuccess)
      return 0;
    return b;
  }();
  check(per_sm > 0, "mxfp4_prefill: cannot launch with ", smem, " bytes of shared memory");
  const int64_t grid = std::min<int64_t>(active_bound * (p.n / kSlice), int64_t{per_sm} * sm90::sm_count());
  mxfp4_prefill_kernel<NT><<<static_cast<unsigned>(grid), kThreads, smem, s>>>(p);
}

}  // namespace

void mxfp4_prefill_launch(const Mxfp4Params& p, int64_t active_bound, int nt, cudaStream_t s) {
  check(p.n % kSlice == 0 && p.k % kStageK == 0, "mxfp4_prefill: need n % 128 == 0 and k % 64 == 0");
  if (nt <= 64) launch<64>(p, active_bound, s);
  else launch<256>(p, active_bound, s);
}

}  // namespace deepinfer::cuda
