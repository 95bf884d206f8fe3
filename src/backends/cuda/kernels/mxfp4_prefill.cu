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
// Kernel: a pre-pass writes a' once for all weight slices into the workspace (bf16 [m, k]); then a CTA
// (two warpgroups, 256 threads, 1 an SM) owns 128 weight rows of one active group and a batch of up to
// NT = 256 of its tokens, and a persistent grid walks (128-row slice, token batch, K stage of 64) items.
// A cp.async ring brings each stage's bf16 activations straight into the 128-byte-swizzled tile wgmma
// reads, and the packed codes with their scales; the CTA widens one stage's codes into a bf16 weight
// tile while the tensor cores multiply the previous one (double buffer: wgmma m64nNk16, A = 64 weight
// rows a warpgroup, B = the tokens). N is
// picked per batch from its rows (16 .. 256), so a short batch costs what its rows need. Each 8 K inside
// a row are stored in the order 0 4 1 5 2 6 3 7, in both operands (what the widening's shifts give).
// Results depend on a row's own inputs (no split K); the N picked follows the batch's rows, so not
// batch-invariant (fp8_gemm's WGMMA path keeps that). Limits of the exactness: scale bytes <= 252 and
// products above fp32's subnormals (weight scale bytes >= 2 with activations of scale >= 2^-20 or so;
// real checkpoints sit far inside, the decode kernel takes any byte).
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

constexpr int kThreads = 256, kSlice = 128, kStageK = 64, NT = 256;
constexpr int kRawW = kSlice * kStageK / 2, kRawWs = 2 * kSlice;  // codes [128 rows][32 B], scales [2][128]

// Shared memory: a ring of 5 stages (the batch's bf16 activations [NT][128 B] as wgmma reads them,
// 128-byte swizzle; the stage's packed codes [128][32 B]; their scales [2 blocks][128 rows]), two bf16
// weight tiles ([128][128 B], swizzled), the group list: 222 KB, 1 CTA an SM.
struct Layout {
  static constexpr int kStages = 5;
  static constexpr int kBOff = 0, kWOff = NT * 128, kWsOff = kWOff + kRawW,
                       kStageBytes = (kWsOff + kRawWs + 1023) / 1024 * 1024;
  static constexpr int kTileW = kSlice * 128;
  static constexpr int kTileOff = kStages * kStageBytes, kHeadOff = kTileOff + 2 * kTileW;
  static constexpr int kSmem = 1024 + kHeadOff + kMxfp4HeadBytes;  // + 1024: aligned by hand for the swizzle
  static_assert(kStageBytes % 1024 == 0 && kSmem <= 227 * 1024, "shared memory");
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

// 8 e2m1 codes (nibble i = k i) -> bf16 pairs (k i, k i + 4), i = 0..3, times the factor s: the sign to
// bit 15 and the 3 magnitude bits to bits 8..6 make the bf16 of 2^-126 times the code's value (code 1 =
// 0.5 lands on the subnormal 2^-127), so s = 2^(126 + the scale's exponent).
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
template <int N>
__device__ __forceinline__ void mma4(float (&d)[NT / 2], uint64_t da, uint64_t db, bool first) {
#pragma unroll
  for (int s = 0; s < 4; ++s) sm90::WgmmaBf16<N>::mma(d, da + 2 * s, db + 2 * s, first && s == 0 ? 0 : 1);
}
__device__ __forceinline__ void mma_stage(float (&d)[NT / 2], uint64_t da, uint64_t db, bool first, int rows) {
  if (rows <= 16) return mma4<16>(d, da, db, first);
  if (rows <= 32) return mma4<32>(d, da, db, first);
  if (rows <= 64) return mma4<64>(d, da, db, first);
  if (rows <= 96) return mma4<96>(d, da, db, first);
  if (rows <= 128) return mma4<128>(d, da, db, first);
  if (rows <= 160) return mma4<160>(d, da, db, first);
  if (rows <= 192) return mma4<192>(d, da, db, first);
  if (rows <= 224) return mma4<224>(d, da, db, first);
  return mma4<256>(d, da, db, first);
}

// The activations once for all weight slices: ab[i, k] = bf16(e4m3 a[i, k] x 2^(a_s - 127)), each 8 K
// in the tiles' order. Thread = (row, 64 K); consecutive threads take consecutive rows (their scale
// bytes are adjacent).
__global__ void act_to_bf16_kernel(const Mxfp4Params p) {
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= static_cast<int64_t>(p.m) * (p.k / 64)) return;
  const int i = static_cast<int>(idx % p.m), c = static_cast<int>(idx / p.m);
  const uint8_t* src = p.a + static_cast<int64_t>(i) * p.lda + c * 64;
  uint4* dst = reinterpret_cast<uint4*>(p.ab + static_cast<int64_t>(i) * p.k + c * 64);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const Pow2 s = pow2_bf16x2(static_cast<int>(__ldg(p.a_scale + (2 * c + h) * p.ld_as + i)) - 7);
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const uint4 x = __ldg(reinterpret_cast<const uint4*>(src + 32 * h + 16 * q));
      dst[4 * h + 2 * q] = e4m3x8_to_bf16(x.x, x.y, s);
      dst[4 * h + 2 * q + 1] = e4m3x8_to_bf16(x.z, x.w, s);
    }
  }
}

// A CTA's place in its stream of (tile, token batch, K stage) items and the item's rows;
// tile = active group x 128-row slice.
struct Item {
  int tile, batch, st, g, row0, rows, col0;
};

__global__ void __launch_bounds__(kThreads, 1) mxfp4_prefill_kernel(const Mxfp4Params p) {
  using L = Layout;
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

  // Producer: the whole CTA copies a stage (one commit group a thread, empty past the end): thread t the
  // 16 code bytes of row t / 2, block t % 2; threads < 16 one chunk of the weight scales; 16-byte chunk
  // t % 8 (8 K) of tokens t / 8 + 32 i, into its swizzled slot.
  Item pc = first;
  const uint8_t *pw = nullptr, *pws = nullptr;
  const uint16_t* pb = nullptr;
  int pb_rows = 0;
  const int64_t ldb32 = 32 * static_cast<int64_t>(p.k);
  const int b_dst = (tid >> 3) * 128 + (((tid & 7) ^ ((tid >> 3) & 7)) * 16);
  int pslot = 0;
  auto produce = [&]() {
    if (pc.tile < tiles) {
      if (pc.st == 0) {
        const int64_t wrow = static_cast<int64_t>(pc.g) * p.n + pc.col0;
        pw = p.w + (wrow + (tid >> 1)) * p.ldw + (tid & 1) * 16;
        pws = p.w_scale + (tid >> 3) * p.ld_ws + wrow + (tid & 7) * 16;
        pb_rows = pc.rows - (tid >> 3);
        pb = p.ab + static_cast<int64_t>(pc.row0 + max(min(tid >> 3, pc.rows - 1), 0)) * p.k + (tid & 7) * 8;
      }
      uint8_t* const st = ring + pslot * L::kStageBytes;
      cp_async16(smem_addr(st + L::kWOff + tid * 16), pw);
      if (tid < 16) cp_async16(smem_addr(st + L::kWsOff + tid * 16), pws);
#pragma unroll
      for (int i = 0; i < NT / 32; ++i)
        if (32 * i < pb_rows) cp_async16(smem_addr(st + L::kBOff + b_dst + i * 32 * 128), pb + i * ldb32);
      pw += kStageK / 2, pws += 2 * p.ld_ws, pb += kStageK;
      advance(pc);
    }
    cp_async_commit();
    pslot = pslot + 1 == S ? 0 : pslot + 1;
  };

  // Widening of stage q's codes (landed) into weight tile `tile`: thread t the 32 codes it copied (row
  // t / 2, K block t % 2: 4 chunks of 8 K). Chunk c of a tile row holds K 8c .. 8c + 7 at 16-byte slot
  // c ^ (row % 8) (the 128-byte swizzle).
  auto widen = [&](int q, uint8_t* tile) {
    const int r = tid >> 1, j = tid & 1, sw = r & 7;
    const uint8_t* const st = ring + (q % S) * L::kStageBytes;
    const uint4 c = *reinterpret_cast<const uint4*>(st + L::kWOff + tid * 16);
    const Pow2 s = pow2_bf16x2(static_cast<int>(st[L::kWsOff + j * kSlice + r]) - 1);
    uint8_t* const row = tile + r * 128;
    *reinterpret_cast<uint4*>(row + (((4 * j + 0) ^ sw) * 16)) = e2m1x8_to_bf16(c.x, s);
    *reinterpret_cast<uint4*>(row + (((4 * j + 1) ^ sw) * 16)) = e2m1x8_to_bf16(c.y, s);
    *reinterpret_cast<uint4*>(row + (((4 * j + 2) ^ sw) * 16)) = e2m1x8_to_bf16(c.z, s);
    *reinterpret_cast<uint4*>(row + (((4 * j + 3) ^ sw) * 16)) = e2m1x8_to_bf16(c.w, s);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic writes -> wgmma reads
  };
  auto stage_at = [&](int slot) { return ring + slot * L::kStageBytes; };
  auto tile_at = [&](int b) { return ring + L::kTileOff + b * L::kTileW; };

#pragma unroll 1
  for (int s = 0; s < S - 1; ++s) produce();
  if (first.tile < tiles) {
    cp_async_wait<S - 2>();  // stage 0 landed (this thread's copies)
    __syncthreads();         // ... and every thread's
    widen(0, tile_at(0));
    __syncthreads();
  }

  const int cw = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  float acc[NT / 2];
#pragma unroll
  for (int i = 0; i < NT / 2; ++i) acc[i] = 0.0f;
  Item mc = first;
  int mslot = 0;
  for (int q = 0; mc.tile < tiles; ++q) {
    // The tensor cores take stage q (activations in its ring slot, weights in tile q % 2) while the CTA
    // widens stage q + 1's codes into the other tile.
    sm90::wgmma_fence();
    mma_stage(acc, sm90::desc_k_sw128(smem_addr(tile_at(q & 1)) + cw * 64 * 128),
              sm90::desc_k_sw128(smem_addr(stage_at(mslot) + L::kBOff)), mc.st == 0, mc.rows);
    sm90::wgmma_commit();
    const int nslot = mslot + 1 == S ? 0 : mslot + 1;
    Item nx = mc;  // stage q + 1
    advance(nx);
    if (nx.tile < tiles) {
      cp_async_wait<S - 3>();  // stage q + 1 landed
      __syncthreads();         // for every thread
      produce();               // stage q + S - 1 into stage q - 1's slot (free since the last barrier)
      widen(q + 1, tile_at((q + 1) & 1));
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
    mc = nx;
    __syncthreads();  // the widened tile complete; every warpgroup done with stage q (its slot refills)
    mslot = nslot;
  }
}

void launch(const Mxfp4Params& p, int64_t active_bound, cudaStream_t s) {
  constexpr int smem = Layout::kSmem;
  static const bool attr_set =
      cudaFuncSetAttribute(mxfp4_prefill_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) == cudaSuccess;
  check(attr_set, "mxfp4_prefill: cannot reserve ", smem, " bytes of shared memory");
  const int64_t grid = std::min<int64_t>(active_bound * (p.n / kSlice), sm90::sm_count());
  mxfp4_prefill_kernel<<<static_cast<unsigned>(grid), kThreads, smem, s>>>(p);
}

}  // namespace

size_t mxfp4_prefill_workspace_bytes(int64_t m, int64_t k) { return static_cast<size_t>(m * k * 2 + 255) / 256 * 256; }

void mxfp4_prefill_launch(const Mxfp4Params& p, int64_t active_bound, cudaStream_t s) {
  check(p.n % kSlice == 0 && p.k % kStageK == 0 && p.ab, "mxfp4_prefill: need n % 128 == 0, k % 64 == 0, a workspace");
  const int64_t threads = static_cast<int64_t>(p.m) * (p.k / 64);
  act_to_bf16_kernel<<<static_cast<unsigned>((threads + 255) / 256), 256, 0, s>>>(p);
  launch(p, active_bound, s);
}

}  // namespace deepinfer::cuda
