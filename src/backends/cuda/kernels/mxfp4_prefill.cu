// The MXFP4 expert GEMM past 24 rows a group (see mxfp4_gemm.h): y[i, n] = bf16(sum_k a'[i, k] w'[n, k])
// with a' = e4m3 x 2^(a_s - 127) and w' = e2m1 x 2^(w_s - 127) written exactly as bf16 (their 1 x 32
// UE8M0 scales folded into the values, so no K block needs a promotion) and summed by bf16 wgmma into fp32.
//
// Why bf16 and not FP8: both scales change every 32 K, so an FP8 partial must be scaled into the fp32
// accumulator once per 32 K per output (an FMUL + FFMA an output per 32 K, per token: what bounds the
// e4m3 kernel of mxfp4_gemm.cu past 16 rows); the folded bf16 values need none and the tensor cores run
// the whole K in one accumulator at half the FP8 rate. Exactness: e2m1 and e4m3 values have at most 2
// and 4 significant bits, so a' and w' are bf16 values, and their products are exact in fp32; what
// differs from the reference is the fp32 summation order (the tensor cores' sum over K instead of per-32
// partials added in order), well inside fp8_gemm's tolerance.
//
// Kernel: a pre-pass writes a' once for all weight slices into the workspace (bf16 [m, k]); then a CTA
// (two warpgroups, 256 threads, 2 an SM) owns 128 weight rows of one active group and a batch of up to
// NT = 64 or 128 of its tokens (past 40 rows a group on average, 128: one pass over the weights for most
// groups), and a persistent grid walks (128-row slice, token batch, K stage of 64) items. A cp.async ring
// brings each stage's bf16 activations straight into the 128-byte-swizzled tile wgmma reads (B), and the
// packed codes with their scales; each warp widens its own 16 rows' codes straight into wgmma's A
// registers (m64nNk16 with A from registers: no widened tile in shared memory, one barrier a stage), one
// A buffer filling while the other's wgmmas run. N is picked per batch from its rows (16 .. 128 in steps
// of 16), so a short batch costs what its rows need. K order: the A registers of lane t4 for a stage's
// 4 k16 chunks hold K 16 t4 .. 16 t4 + 15 (8 code bytes a row, one load), so each 64 K of a row are in
// the order the pre-pass writes the activations in (position 16 c + 8 h + 2 t4 + e holds K
// 16 t4 + 8 h + c + 4 e).
// Results depend on a row's own inputs (no split K); the N picked follows the batch's rows, so not
// batch-invariant (fp8_gemm's WGMMA path keeps that). Limits of the exactness: scale bytes <= 252 and
// products above fp32's subnormals (weight scale bytes >= 2 with activations of scale >= 2^-20 or so;
// real checkpoints sit far inside, the decode kernel takes any byte).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "backends/cuda/kernels/mxfp4_internal.cuh"
#include "backends/cuda/kernels/sm90.cuh"
#include "backends/cuda/kernels/sm90_wgmma_bf16.cuh"
#include "core/error.h"

namespace deepinfer::cuda {
namespace {

using sm90::smem_addr;

constexpr int kThreads = 256, kSlice = 128, kStageK = 64;
constexpr int kRawW = kSlice * kStageK / 2, kRawWs = 2 * kSlice;  // codes [128 rows][32 B], scales [2][128]

// Shared memory: a ring of stages (the batch's bf16 activations [NT][128 B] as wgmma reads them,
// 128-byte swizzle; the stage's packed codes [128][32 B]; their scales [2 blocks][128 rows]) and the group
// list. NT 64 / 128: 8 / 5 stages; 2 CTAs an SM (registers <= 128 a thread: 108 / 127).
template <int NT>
struct Layout {
  static constexpr int kStages = NT == 64 ? 8 : 5;
  static constexpr int kBOff = 0, kWOff = NT * 128, kWsOff = kWOff + kRawW,
                       kStageBytes = (kWsOff + kRawWs + 1023) / 1024 * 1024;
  static constexpr int kHeadOff = kStages * kStageBytes;
  static constexpr int kSmem = 1024 + kHeadOff + kMxfp4HeadBytes;  // + 1024: aligned by hand for the swizzle
  static_assert(kStageBytes % 1024 == 0 && 2 * (kSmem + 1024) <= 228 * 1024, "shared memory: 2 CTAs an SM");
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

// One stage's wgmmas (4 x k16, A = the 4 chunks' registers) with N = the smallest width holding `rows`.
template <int N, int R>
__device__ __forceinline__ void mma4(float (&d)[R], const uint32_t (&a)[4][4], uint64_t db, bool first) {
#pragma unroll
  for (int s = 0; s < 4; ++s) sm90::WgmmaBf16Rs<N>::mma(d, a[s], db + 2 * s, first && s == 0 ? 0 : 1);
}
template <int NT>
__device__ __forceinline__ void mma_stage(float (&d)[NT / 2], const uint32_t (&a)[4][4], uint64_t db, bool first, int rows) {
  if (rows <= 16) return mma4<16>(d, a, db, first);
  if (rows <= 32) return mma4<32>(d, a, db, first);
  if (rows <= 48) return mma4<48>(d, a, db, first);
  if (NT == 64 || rows <= 64) return mma4<64>(d, a, db, first);
  if constexpr (NT == 128) {
    if (rows <= 80) return mma4<80>(d, a, db, first);
    if (rows <= 96) return mma4<96>(d, a, db, first);
    if (rows <= 112) return mma4<112>(d, a, db, first);
    return mma4<128>(d, a, db, first);
  }
}

// The activations once for all weight slices: ab[i, k] = bf16(e4m3 a[i, k] x 2^(a_s - 127)), each 64 K
// in the order the A registers take them (see the file comment): 16-byte word q = 2c + h holds, for
// t4 = 0..3, the pair (k 16 t4 + 8 h + c, + 4). Thread = (row, 64 K); consecutive threads take
// consecutive rows (their scale bytes are adjacent).
__global__ void act_to_bf16_kernel(const Mxfp4Params p) {
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= static_cast<int64_t>(p.m) * (p.k / 64)) return;
  const int i = static_cast<int>(idx % p.m), c = static_cast<int>(idx / p.m);
  const uint4* src = reinterpret_cast<const uint4*>(p.a + static_cast<int64_t>(i) * p.lda + c * 64);
  uint4* dst = reinterpret_cast<uint4*>(p.ab + static_cast<int64_t>(i) * p.k + c * 64);
  uint4 v[8];  // v[g]: the pairs (k 8 g + j, + 4), j = 0..3, of the 8 codes of group g
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const Pow2 s = pow2_bf16x2(static_cast<int>(__ldg(p.a_scale + (2 * c + h) * p.ld_as + i)) - 7);
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const uint4 x = __ldg(src + 2 * h + q);
      v[4 * h + 2 * q] = e4m3x8_to_bf16(x.x, x.y, s);
      v[4 * h + 2 * q + 1] = e4m3x8_to_bf16(x.z, x.w, s);
    }
  }
  auto pick = [](const uint4& u, int j) { return j == 0 ? u.x : j == 1 ? u.y : j == 2 ? u.z : u.w; };
#pragma unroll
  for (int q = 0; q < 8; ++q) {  // word q = 2 j + h: groups h, 2 + h, 4 + h, 6 + h, pair j
    const int j = q >> 1, h = q & 1;
    dst[q] = make_uint4(pick(v[h], j), pick(v[2 + h], j), pick(v[4 + h], j), pick(v[6 + h], j));
  }
}

// A CTA's place in its stream of (tile, token batch, K stage) items and the item's rows;
// tile = active group x 128-row slice.
struct Item {
  int tile, batch, st, g, row0, rows, col0;
};

template <int NT>
__global__ void __launch_bounds__(kThreads, 2) mxfp4_prefill_kernel(const Mxfp4Params p) {
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

  // Warp w of warpgroup cw: weight rows r0 = 64 cw + 16 w + g8 and r0 + 8 of the slice. Lane t4 widens
  // K 16 t4 .. 16 t4 + 15 of the stage (8 code bytes a row, one weight scale: block t4 / 2) into the A
  // registers of the stage's 4 k16 chunks: chunk c gets the pairs j = c of its two words (a0 / a1: the
  // first word of rows r0 / r0 + 8, a2 / a3: the second word).
  const int cw = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g8 = lane >> 2, t4 = lane & 3;
  const int r0 = cw * 64 + warp * 16 + g8;
  auto widen = [&](const uint8_t* st, uint32_t (&a)[4][4]) {
    const uint2 c0 = *reinterpret_cast<const uint2*>(st + L::kWOff + r0 * 32 + t4 * 8);
    const uint2 c1 = *reinterpret_cast<const uint2*>(st + L::kWOff + (r0 + 8) * 32 + t4 * 8);
    const Pow2 s0 = pow2_bf16x2(static_cast<int>(st[L::kWsOff + (t4 >> 1) * kSlice + r0]) - 1);
    const Pow2 s1 = pow2_bf16x2(static_cast<int>(st[L::kWsOff + (t4 >> 1) * kSlice + r0 + 8]) - 1);
    const uint4 v00 = e2m1x8_to_bf16(c0.x, s0), v01 = e2m1x8_to_bf16(c0.y, s0);
    const uint4 v10 = e2m1x8_to_bf16(c1.x, s1), v11 = e2m1x8_to_bf16(c1.y, s1);
    a[0][0] = v00.x, a[0][1] = v10.x, a[0][2] = v01.x, a[0][3] = v11.x;
    a[1][0] = v00.y, a[1][1] = v10.y, a[1][2] = v01.y, a[1][3] = v11.y;
    a[2][0] = v00.z, a[2][1] = v10.z, a[2][2] = v01.z, a[2][3] = v11.z;
    a[3][0] = v00.w, a[3][1] = v10.w, a[3][2] = v01.w, a[3][3] = v11.w;
  };

#pragma unroll 1
  for (int s = 0; s < S - 2; ++s) produce();

  float acc[NT / 2];
#pragma unroll
  for (int i = 0; i < NT / 2; ++i) acc[i] = 0.0f;
  uint32_t a[2][4][4];
  Item mc = first;
  int mslot = 0;
  // Stage q: its copies landed (every thread's), the copies of stage q + S - 2 go out into stage q - 2's
  // slot (its wgmmas done: each thread waited for them in stage q - 1), its codes are widened into the A
  // registers stage q - 2 used, and its wgmmas stay in flight over stage q + 1's copies and widening.
  auto step = [&](auto buf) {
    constexpr int b = decltype(buf)::value;
    cp_async_wait<S - 3>();
    __syncthreads();
    produce();
    uint8_t* const st = ring + mslot * L::kStageBytes;
    widen(st, a[b]);
    sm90::wgmma_fence();
    mma_stage<NT>(acc, a[b], sm90::desc_k_sw128(smem_addr(st + L::kBOff)), mc.st == 0, mc.rows);
    sm90::wgmma_commit();
    if (mc.st == stages - 1) {  // token 8 jn + 2 t4 + c gets weight rows r0, r0 + 8
      sm90::wgmma_wait<0>();
      sm90::fence_regs(acc);
      uint16_t* const y = p.y + static_cast<int64_t>(mc.row0) * p.ldy + mc.col0 + r0;
#pragma unroll
      for (int jn = 0; jn < NT / 8; ++jn)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int tok = 8 * jn + 2 * t4 + c;
          if (tok >= mc.rows) continue;
          y[tok * p.ldy] = __bfloat16_as_ushort(__float2bfloat16_rn(acc[4 * jn + c]));
          y[tok * p.ldy + 8] = __bfloat16_as_ushort(__float2bfloat16_rn(acc[4 * jn + 2 + c]));
        }
    } else {
      sm90::wgmma_wait<1>();  // stage q - 1's wgmmas: its A registers and ring slot are free
    }
    advance(mc);
    mslot = mslot + 1 == S ? 0 : mslot + 1;
  };
  while (mc.tile < tiles) {  // two stages an iteration: the A register buffer is a compile-time index
    step(std::integral_constant<int, 0>{});
    if (mc.tile >= tiles) break;
    step(std::integral_constant<int, 1>{});
  }
  sm90::wgmma_wait<0>();
}

}  // namespace

size_t mxfp4_prefill_workspace_bytes(int64_t m, int64_t k) { return static_cast<size_t>(m * k * 2 + 255) / 256 * 256; }

void mxfp4_prefill_launch(const Mxfp4Params& p, int64_t active_bound, int batch, cudaStream_t s) {
  check(p.n % kSlice == 0 && p.k % kStageK == 0 && p.ab, "mxfp4_prefill: need n % 128 == 0, k % 64 == 0, a workspace");
  const int64_t threads = static_cast<int64_t>(p.m) * (p.k / 64);
  act_to_bf16_kernel<<<static_cast<unsigned>((threads + 255) / 256), 256, 0, s>>>(p);
  const int64_t tiles = active_bound * (p.n / kSlice);
  if (batch <= 64) return launch_persistent<mxfp4_prefill_kernel<64>>(p, tiles, kThreads, Layout<64>::kSmem, s);
  launch_persistent<mxfp4_prefill_kernel<128>>(p, tiles, kThreads, Layout<128>::kSmem, s);
}

}  // namespace deepinfer::cuda
