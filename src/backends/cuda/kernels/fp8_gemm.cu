// FP8 block-scaled GEMM (see fp8_gemm.h). C[i, j] = sum_k P[i, k] Q[j, k] on a 128 x BN tile:
// prefill P = activations, Q = weights; decode (m <= 64) P = weights, Q = activations (swap), so the
// 128-row wgmma side is never mostly padding.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <algorithm>

#include "backends/cuda/kernels/fp8_gemm.h"
#include "backends/cuda/kernels/mxfp4_gemm.h"
#include "backends/cuda/kernels/sm90.cuh"
#include "core/error.h"

namespace deepinfer::cuda {
namespace {

using namespace sm90;

constexpr int kBM = 128, kBK = 128, kThreads = 384, kMaxGroups = 512;

template <int BN, int BLK, bool SWAP, bool W4>
struct Cfg {
  // The narrowest FP8 decode tile runs two CTAs per SM, so one CTA's pipeline fill overlaps another's.
  static constexpr int kCtasPerSm = BN == 16 && !W4 ? 2 : 1;
  static constexpr int kPBytes = kBM * kBK, kQBytes = BN * kBK;
  static constexpr int kW4Bytes = W4 ? (SWAP ? kBM : BN) * kBK / 2 : 0;  // packed MXFP4 staging
  // Every stage carries its scales in shared memory, so the K loop never waits on a global load:
  // [0, 512) weight scales (MXFP4: [K block][row], 4 x 128; FP8 blocks: [K block][row block]), copied
  // by producer warps; [512, 1024) activation scales ([K block][token]: FP8 by TMA, MXFP4 copied).
  static constexpr int kWsBytes = 1024;
  static constexpr int kKbs = kBK / BLK;               // K blocks per stage
  static constexpr int kAsCols = SWAP ? BN : kBM;      // tokens per tile
  static constexpr int kStageBytes = kPBytes + kQBytes + kW4Bytes + kWsBytes;
  static constexpr int kStages = kCtasPerSm == 2 ? 5 : W4 ? (SWAP ? 6 : 5) : BN == 128 ? 6 : 8;
  // K blocks whose wgmmas are issued before one wait (a partial each): fewer round trips at blk 32.
  // (MXFP4 prefill holds a scale per column, so one block at a time keeps it within the registers.)
  static constexpr int kT = BLK == 128 || (W4 && !SWAP) ? 1 : BN == 16 ? 4 : 2;
  static constexpr int kG = BLK / 32;  // k32 wgmma steps per K block
  static constexpr int kR = BN / 2;    // accumulators per thread
  // Scales per thread per K block on the Q (BN) side: one per column when Q is the tokens or per-row
  // (MXFP4) weights, else one per weight block.
  static constexpr bool kQPerCol = SWAP || W4;
  static constexpr int kNQ = kQPerCol ? BN / 4 : BN / BLK;
  static constexpr int kSmem = kStages * kStageBytes + 1024 + 3 * kStages * 8 + 4 * (kMaxGroups + 1);
};

struct Params {
  const uint8_t* a_scale;
  int64_t ld_as;
  const uint8_t* w_scale;
  int64_t ld_ws;
  uint16_t* y;
  int64_t ldy;
  float* ws;  // [splits, m, n] fp32 partials, or null (bf16 straight to y)
  int m, n, k;
  const int* group_offsets;  // [groups + 1] or null: one group of m rows
  int groups;
  int p_tiles, q_tiles, splits;  // ungrouped tile grid (grouped: computed per group in the kernel)
};

// One output tile: group, its A rows [a0, a1), the P / Q tile indices and the K split.
struct Tile {
  int g, a0, a1, tp, tq, z;
};

// Tile w of the (possibly grouped) problem; tile_start[g] = first tile of group g (grouped only).
template <int BN, bool SWAP>
__device__ __forceinline__ Tile tile_of(const Params& p, const int* tile_start, int w) {
  Tile t{0, 0, p.m, 0, 0, 0};
  if (!p.group_offsets) {
    const int per_split = p.p_tiles * p.q_tiles;
    t.z = w / per_split;
    const int r = w % per_split;
    t.tp = r / p.q_tiles;
    t.tq = r % p.q_tiles;
    return t;
  }
  int lo = 0, hi = p.groups;  // last group with tile_start[g] <= w
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (tile_start[mid] <= w) lo = mid;
    else hi = mid;
  }
  t.g = lo;
  t.a0 = p.group_offsets[lo];
  t.a1 = p.group_offsets[lo + 1];
  const int r = w - tile_start[lo];
  if constexpr (SWAP) {  // P = this group's weight rows, Q = its tokens
    const int qt = (t.a1 - t.a0 + BN - 1) / BN;
    t.tp = r / qt;
    t.tq = r % qt;
  } else {  // P = its tokens, Q = its weight rows
    t.tp = r / p.q_tiles;
    t.tq = r % p.q_tiles;
  }
  return t;
}

// Per-group tile counts, prefix-summed into tile_start[0..groups] (shared memory) by the whole CTA.
template <int BN, bool SWAP>
__device__ void group_tile_starts(const Params& p, int* tile_start) {
  for (int g = threadIdx.x; g < p.groups; g += blockDim.x) {
    const int rows = p.group_offsets[g + 1] - p.group_offsets[g];
    tile_start[g + 1] = rows <= 0 ? 0 : SWAP ? p.p_tiles * ((rows + BN - 1) / BN) : ((rows + kBM - 1) / kBM) * p.q_tiles;
  }
  __syncthreads();
  if (threadIdx.x < 32) {  // warp scan: each lane sums a run of groups, then the lanes' totals
    const int per = (p.groups + 31) / 32, b0 = threadIdx.x * per, b1 = min(p.groups, b0 + per);
    int sum = 0;
    for (int g = b0; g < b1; ++g) sum += tile_start[g + 1];
    int incl = sum;
    for (int o = 1; o < 32; o *= 2) {
      const int v = __shfl_up_sync(0xffffffffu, incl, o);
      if (static_cast<int>(threadIdx.x) >= o) incl += v;
    }
    int run = incl - sum;
    if (threadIdx.x == 0) tile_start[0] = 0;
    for (int g = b0; g < b1; ++g) {
      run += tile_start[g + 1];
      tile_start[g + 1] = run;
    }
  }
  __syncthreads();
}

// The scales of K block kb for this thread's two P rows (sp) and its Q columns (sq), from the stage's
// scale area in shared memory. Token rows count from the group's first row; weight rows are the group's
// local rows (FP8 blocks: row-block indices).
template <int BN, int BLK, bool SWAP, bool W4>
__device__ __forceinline__ void load_scales(const Params& p, const Tile& t, int kb, int p_row, int p_warp_row,
                                            int q_col, const uint8_t* stage_ws, float (&sp)[2],
                                            float (&sq)[Cfg<BN, BLK, SWAP, W4>::kNQ]) {
  using C = Cfg<BN, BLK, SWAP, W4>;
  const int kbl = kb % C::kKbs;  // K block within the stage
  // Weight scales: MXFP4 by local row of the tile, FP8 blocks by row block of the tile.
  const uint8_t* wss = stage_ws + (W4 ? kbl * 128 - (SWAP ? t.tp * kBM : t.tq * BN) : kbl * 4 - (SWAP ? t.tp * kBM : t.tq * BN) / BLK);
  const uint8_t* ass = stage_ws + 512 + kbl * C::kAsCols - (SWAP ? t.tq * BN : t.tp * kBM);
  auto wscale = [&](int r) { return ue8m0(wss[r]); };
  auto ascale = [&](int r) { return ue8m0(ass[r]); };  // r: token index from the group's first row
  if constexpr (SWAP) {  // P = weights, Q = tokens (one scale each)
    if constexpr (W4) {
      sp[0] = wscale(p_row);
      sp[1] = wscale(p_row + 8);
    } else {  // a warp's 16 rows share one block
      sp[0] = sp[1] = wscale(p_warp_row / BLK);
    }
#pragma unroll
    for (int c = 0; c < BN / 4; ++c) sq[c] = ascale(q_col + (c / 2) * 8 + (c % 2));
  } else {  // P = tokens, Q = weights
    sp[0] = ascale(p_row);
    sp[1] = ascale(p_row + 8);
    if constexpr (W4) {
#pragma unroll
      for (int c = 0; c < BN / 4; ++c) sq[c] = wscale(q_col + (c / 2) * 8 + (c % 2));
    } else {
#pragma unroll
      for (int c = 0; c < BN / BLK; ++c) sq[c] = wscale((q_col - q_col % BN) / BLK + c);
    }
  }
}

// acc += t * (scale of P row) * (scale of Q column), element by element (t: one K block's partial).
template <int BN, int BLK, bool SWAP, bool W4>
__device__ __forceinline__ void promote(float (&acc)[BN / 2], const float (&t)[BN / 2], const float (&sp)[2],
                                        const float (&sq)[Cfg<BN, BLK, SWAP, W4>::kNQ]) {
#pragma unroll
  for (int jn = 0; jn < BN / 8; ++jn)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float q = Cfg<BN, BLK, SWAP, W4>::kQPerCol ? sq[jn * 2 + e] : sq[(jn * 8) / BLK];
      acc[jn * 4 + e] = fmaf(t[jn * 4 + e], sp[0] * q, acc[jn * 4 + e]);
      acc[jn * 4 + 2 + e] = fmaf(t[jn * 4 + 2 + e], sp[1] * q, acc[jn * 4 + 2 + e]);
    }
}

// 8 e2m1 codes (a 32-bit word, low nibble first) -> 8 e4m3 bytes (lo: codes 0..3, hi: 4..7). The magnitude
// by a byte permute of the code table; the signs (bit 3 of each nibble) by a permute that puts nibbles
// 2i, 2i + 1 in bytes 2i, 2i + 1 and two masked shifts to bit 7 (lop3s): 12 instructions for 8 codes.
__device__ __forceinline__ void e2m1x8_to_e4m3x8(uint32_t w, uint32_t& lo, uint32_t& hi) {
  const uint32_t m = w & 0x77777777u;  // magnitude selectors (the selector's bit 3 would replicate a sign)
  const uint32_t mag_lo = __byte_perm(0x3C383000u, 0x4C484440u, m);
  const uint32_t mag_hi = __byte_perm(0x3C383000u, 0x4C484440u, m >> 16);
  const uint32_t y_lo = __byte_perm(w, 0, 0x1100), y_hi = __byte_perm(w, 0, 0x3322);
  lo = mag_lo | ((y_lo << 4) & 0x00800080u) | (y_lo & 0x80008000u);
  hi = mag_hi | ((y_hi << 4) & 0x00800080u) | (y_hi & 0x80008000u);
}

// Producer warps 1..3: widen one stage's packed MXFP4 tile (rows x 64 bytes, row-major) into the
// 128B-swizzled e4m3 tile the wgmmas read (rows x 128 bytes). Two chunks a trip: one warp per scheduler
// has no other warp to hide its latencies behind.
template <int ROWS>
__device__ __forceinline__ void widen_fp4_stage(const uint8_t* packed, uint8_t* dst, int tid, int nthreads) {
#pragma unroll 2
  for (int c = tid; c < ROWS * 4; c += nthreads) {
    const int r = c / 4, j = c % 4;  // 16 packed bytes = K elements 32j .. 32j + 31 of row r
    const uint4 v = *reinterpret_cast<const uint4*>(packed + r * 64 + j * 16);
    uint4 o0, o1;
    e2m1x8_to_e4m3x8(v.x, o0.x, o0.y);
    e2m1x8_to_e4m3x8(v.y, o0.z, o0.w);
    e2m1x8_to_e4m3x8(v.z, o1.x, o1.y);
    e2m1x8_to_e4m3x8(v.w, o1.z, o1.w);
    *reinterpret_cast<uint4*>(dst + r * 128 + (((2 * j) ^ (r & 7)) * 16)) = o0;
    *reinterpret_cast<uint4*>(dst + r * 128 + (((2 * j + 1) ^ (r & 7)) * 16)) = o1;
  }
}

// One warp copies a stage's activation scales (its K blocks x the tile's tokens) into shared memory:
// grouped tiles start at any token, and TMA boxes must start 16-byte aligned.
template <typename C>
__device__ __forceinline__ void copy_act_scales(const Params& p, int tok0, int kb0, uint8_t* dst, int lane) {
  for (int e = lane; e < C::kKbs * C::kAsCols; e += 32) {
    const int kb = e / C::kAsCols, c = e % C::kAsCols;
    dst[e] = __ldg(p.a_scale + static_cast<int64_t>(kb0 + kb) * p.ld_as + min(tok0 + c, p.m - 1));
  }
}

// MXFP4: the widening warps 1 and 2 also bring a stage's scales (weights: 4 K blocks x the tile's 128
// rows; activations: the stage's K blocks x the tile's tokens). Their global loads are issued a stage
// ahead and held in registers, so a stage's widening never waits on them: the widening warps are the
// pipeline's slowest part, and a load issued at the stage itself cost its full latency every stage.
template <typename C>
struct ScalePrefetch {
  static constexpr int kActPerLane = C::kKbs * C::kAsCols / 32;
  uint4 w;                                // warp 1: 16 weight-scale bytes a lane
  uint32_t a[(kActPerLane + 3) / 4] = {};  // warp 2: activation-scale bytes, 4 a word
};
template <typename C, int BN, bool SWAP>
__device__ __forceinline__ void fetch_scales(const Params& p, const Tile& t, int ks, int warp, int lane,
                                             ScalePrefetch<C>& f) {
  if (warp == 1) {
    const int w_row0 = t.g * p.n + (SWAP ? t.tp * kBM : t.tq * BN);
    const int64_t row = ks * 4 + lane / 8, col = w_row0 + (lane % 8) * 16;
    f.w = __ldg(reinterpret_cast<const uint4*>(p.w_scale + row * p.ld_ws + col));
  } else if (warp == 2) {
    const int tok0 = t.a0 + (SWAP ? t.tq * BN : t.tp * kBM), kb0 = ks * C::kKbs;
#pragma unroll
    for (int i = 0; i < ScalePrefetch<C>::kActPerLane; ++i) {
      const int e = lane + 32 * i, kb = e / C::kAsCols, c = e % C::kAsCols;
      if (i % 4 == 0) f.a[i / 4] = 0;
      f.a[i / 4] |= static_cast<uint32_t>(__ldg(p.a_scale + static_cast<int64_t>(kb0 + kb) * p.ld_as +
                                                min(tok0 + c, p.m - 1)))
                    << (8 * (i % 4));
    }
  }
}
template <typename C>
__device__ __forceinline__ void store_scales(const ScalePrefetch<C>& f, uint8_t* stage_s, int warp, int lane) {
  if (warp == 1) {
    *reinterpret_cast<uint4*>(stage_s + lane * 16) = f.w;
  } else if (warp == 2) {
#pragma unroll
    for (int i = 0; i < ScalePrefetch<C>::kActPerLane; ++i)
      stage_s[512 + lane + 32 * i] = static_cast<uint8_t>(f.a[i / 4] >> (8 * (i % 4)));
  }
}

template <int BN, int BLK, bool SWAP, bool W4>
__global__ void __launch_bounds__(kThreads, Cfg<BN, BLK, SWAP, W4>::kCtasPerSm)
    fp8_gemm_kernel(const __grid_constant__ CUtensorMap map_p, const __grid_constant__ CUtensorMap map_q,
                    const __grid_constant__ CUtensorMap map_as, Params p, int ntiles) {
  using C = Cfg<BN, BLK, SWAP, W4>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);  // 128B swizzle wants 1 KB
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + C::kStages * C::kStageBytes);
  uint64_t* ready = full + C::kStages;  // MXFP4: the widened weights are in place
  uint64_t* empty = ready + C::kStages;
  int* tile_start = reinterpret_cast<int*>(empty + C::kStages);
  const int kt = p.k / kBK;
  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int i = 0; i < C::kStages; ++i) {
      mbar_init(&full[i], 1);
      mbar_init(&ready[i], W4 ? 3 : 2);  // the widening warps, or the two scale-copying warps
      mbar_init(&empty[i], 8);  // one arrival per consumer warp
    }
    fence_barrier_init();
  }
  if (p.group_offsets) {
    group_tile_starts<BN, SWAP>(p, tile_start);
    ntiles = tile_start[p.groups];
  } else {
    __syncthreads();
  }
  constexpr int W4_ROWS = SWAP ? kBM : BN;  // rows of the MXFP4 weight tile
  constexpr uint32_t w4_off = SWAP ? 0 : C::kPBytes;  // where the widened weights go in a stage

  if (wg == 0) {  // producer warpgroup: warp 0 lane 0 streams stages by TMA; warps 1..3 widen MXFP4
    // The CTA's register pool is what it launched with (384 x 168): 128 x 40 + 256 x 232 (FP8) and
    // 128 x 56 + 256 x 224 (MXFP4: the widening warps need more) both fit; more would hang the inc.
    if constexpr (C::kCtasPerSm == 1) setmaxnreg_dec<W4 ? 56 : 40>();
    const int warp = threadIdx.x / 32;
    if (threadIdx.x == 0) {
      tma_prefetch_map(&map_p);
      tma_prefetch_map(&map_q);
      tma_prefetch_map(&map_as);
    }
    int it = 0;
    ScalePrefetch<C> pre;  // MXFP4, warps 1 and 2: the scales of the stage they handle next
    const int lane = threadIdx.x % 32;
    if (W4 && (warp == 1 || warp == 2) && static_cast<int>(blockIdx.x) < ntiles) {
      const Tile t0 = tile_of<BN, SWAP>(p, tile_start, blockIdx.x);
      fetch_scales<C, BN, SWAP>(p, t0, t0.z * kt / p.splits, warp, lane, pre);
    }
    for (int w = blockIdx.x; w < ntiles; w += gridDim.x) {
      const Tile t = tile_of<BN, SWAP>(p, tile_start, w);
      const int s0 = t.z * kt / p.splits, nst = (t.z + 1) * kt / p.splits - s0;
      // Row coordinates in the TMA tensors: weights are stacked by group, tokens are global rows.
      const int p_y = SWAP ? t.g * p.n + t.tp * kBM : t.a0 + t.tp * kBM;
      const int q_y = SWAP ? t.a0 + t.tq * BN : t.g * p.n + t.tq * BN;
      for (int s = 0; s < nst; ++s, ++it) {
        const int slot = it % C::kStages;
        const uint32_t ph = (it / C::kStages) & 1;
        uint8_t* st = smem + slot * C::kStageBytes;
        if (threadIdx.x == 0) {
          mbar_wait(&empty[slot], ph ^ 1);
          // TMA bytes: both tiles (MXFP4: activations and packed weights), the activation scales
          // (and MXFP4 weight scales).
          const bool as_tma = !W4 && !p.group_offsets;  // ungrouped tiles start 16-byte aligned
          const uint32_t tx = W4 ? (SWAP ? C::kQBytes : C::kPBytes) + C::kW4Bytes
                                 : C::kPBytes + C::kQBytes + (as_tma ? C::kKbs * C::kAsCols : 0);
          mbar_arrive_expect_tx(&full[slot], tx);
          const int kx = (s0 + s) * kBK;
          uint8_t* stage_s = st + C::kStageBytes - C::kWsBytes;
          if (as_tma)
            tma_load_2d(stage_s + 512, &map_as, t.a0 + (SWAP ? t.tq * BN : t.tp * kBM), (s0 + s) * C::kKbs, &full[slot]);
          if constexpr (W4) {  // packed weights into the staging area, activations as usual
            uint8_t* stage_w4 = st + C::kPBytes + C::kQBytes;
            if constexpr (SWAP) {
              tma_load_2d(stage_w4, &map_p, kx / 2, p_y, &full[slot]);
              tma_load_2d(st + C::kPBytes, &map_q, kx, q_y, &full[slot]);
            } else {
              tma_load_2d(st, &map_p, kx, p_y, &full[slot]);
              tma_load_2d(stage_w4, &map_q, kx / 2, q_y, &full[slot]);
            }
          } else {
            tma_load_2d(st, &map_p, kx, p_y, &full[slot]);
            tma_load_2d(st + C::kPBytes, &map_q, kx, q_y, &full[slot]);
          }
        } else if (W4 && warp > 0) {
          // Scales (fetched a stage ago) as soon as the slot is free, the next stage's fetched, then widen.
          mbar_wait(&empty[slot], ph ^ 1);
          store_scales<C>(pre, st + C::kStageBytes - C::kWsBytes, warp, lane);
          if (s + 1 < nst) {
            fetch_scales<C, BN, SWAP>(p, t, s0 + s + 1, warp, lane, pre);
          } else if (w + static_cast<int>(gridDim.x) < ntiles) {
            const Tile tn = tile_of<BN, SWAP>(p, tile_start, w + static_cast<int>(gridDim.x));
            fetch_scales<C, BN, SWAP>(p, tn, tn.z * kt / p.splits, warp, lane, pre);
          }
          mbar_wait(&full[slot], ph);
          widen_fp4_stage<W4_ROWS>(st + C::kPBytes + C::kQBytes, st + w4_off, threadIdx.x - 32, 96);
          asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic writes -> wgmma reads
          __syncwarp();
          if (threadIdx.x % 32 == 0) mbar_arrive(&ready[slot]);
        } else if (!W4 && warp == 2) {  // grouped FP8: the activation scales (else TMA brings them)
          mbar_wait(&empty[slot], ph ^ 1);
          if (p.group_offsets)
            copy_act_scales<C>(p, t.a0 + (SWAP ? t.tq * BN : t.tp * kBM), (s0 + s) * C::kKbs,
                               st + C::kStageBytes - C::kWsBytes + 512, lane);
          __syncwarp();
          if (threadIdx.x % 32 == 0) mbar_arrive(&ready[slot]);
        } else if (!W4 && warp == 1) {  // FP8 blocks: copy the stage's few weight-block scales
          constexpr int kRb = (SWAP ? kBM : BN) / BLK;  // weight row blocks in the tile
          mbar_wait(&empty[slot], ph ^ 1);
          if (lane < kRb * C::kKbs) {
            const int w_rows = (p.n + BLK - 1) / BLK, kbl = lane / kRb, rb = lane % kRb;
            const int rb0 = (SWAP ? t.tp * kBM : t.tq * BN) / BLK;
            const uint8_t v = __ldg(p.w_scale + static_cast<int64_t>(t.g * w_rows + min(rb0 + rb, w_rows - 1)) * p.ld_ws +
                                    (s0 + s) * C::kKbs + kbl);
            st[C::kStageBytes - C::kWsBytes + kbl * 4 + rb] = v;
          }
          __syncwarp();
          if (lane == 0) mbar_arrive(&ready[slot]);  // release: the bytes above are visible to its waiters
        }
      }
    }
    return;
  }

  if constexpr (C::kCtasPerSm == 1) setmaxnreg_inc<W4 ? 224 : 232>();
  const int cw = wg - 1, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const uint32_t sbase = smem_addr(smem);
  int it = 0;
  for (int w = blockIdx.x; w < ntiles; w += gridDim.x) {
    const Tile t = tile_of<BN, SWAP>(p, tile_start, w);
    const int s0 = t.z * kt / p.splits, nst = (t.z + 1) * kt / p.splits - s0;
    // Rows in the tile's own coordinates: P rows are local weight rows (swap) or tokens from a0;
    // Q columns are tokens from a0 (swap) or local weight rows.
    const int p_warp_row = t.tp * kBM + cw * 64 + warp * 16;
    const int p_row = p_warp_row + lane / 4;     // and p_row + 8
    const int q_col = t.tq * BN + (lane % 4) * 2;  // + jn * 8 + e
    const int ng = nst * 4 / C::kG, kb0 = s0 * (kBK / BLK);

    float acc[C::kR], tmp[C::kT][C::kR], sp[C::kT][2], sq[C::kT][C::kNQ];
#pragma unroll
    for (int i = 0; i < C::kR; ++i) acc[i] = 0.0f;
    // Per batch of kT K blocks (within one stage): their wgmmas into tmp[0..kT), one wait, then each
    // partial scaled into acc. While one consumer warpgroup promotes, the other's wgmmas run.
    for (int g = 0; g < ng; g += C::kT) {
      const int kq = g * C::kG, slot = (it + kq / 4) % C::kStages;
      const uint32_t ph = ((it + kq / 4) / C::kStages) & 1;
      if (kq % 4 == 0) {  // TMA bytes landed, and the producer warps' shared-memory writes
        mbar_wait(&full[slot], ph);
        mbar_wait(&ready[slot], ph);
      }
      const uint32_t st = sbase + slot * C::kStageBytes;
      const uint64_t dp = desc_k_sw128(st + cw * 64 * kBK) + 2 * (kq % 4);
      const uint64_t dq = desc_k_sw128(st + C::kPBytes) + 2 * (kq % 4);
      wgmma_fence();
#pragma unroll
      for (int b = 0; b < C::kT; ++b)
#pragma unroll
        for (int u = 0; u < C::kG; ++u)
          Wgmma<BN>::mma(tmp[b], dp + 2 * (b * C::kG + u), dq + 2 * (b * C::kG + u), u > 0);
      wgmma_commit();
#pragma unroll
      for (int b = 0; b < C::kT; ++b)  // overlaps the wgmmas
        load_scales<BN, BLK, SWAP, W4>(p, t, kb0 + g + b, p_row, p_warp_row, q_col,
                                       smem + slot * C::kStageBytes + C::kStageBytes - C::kWsBytes, sp[b], sq[b]);
      wgmma_wait<0>();
#pragma unroll
      for (int b = 0; b < C::kT; ++b) fence_regs(tmp[b]);
      if (kq % 4 + C::kT * C::kG == 4 && lane == 0) mbar_arrive(&empty[slot]);  // stage fully read
#pragma unroll
      for (int b = 0; b < C::kT; ++b) promote<BN, BLK, SWAP, W4>(acc, tmp[b], sp[b], sq[b]);
    }
    it += nst;

    // Epilogue: C[i, j] -> y (swap: token j, channel i), bf16, or fp32 into this split's partial.
    const int rows_p = SWAP ? p.n : t.a1 - t.a0, rows_q = SWAP ? t.a1 - t.a0 : p.n;
    float* ws = p.ws ? p.ws + static_cast<int64_t>(t.z) * p.m * p.n : nullptr;
#pragma unroll
    for (int jn = 0; jn < BN / 8; ++jn)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = p_row + 8 * h, j = q_col + jn * 8;
        if (i >= rows_p || j >= rows_q) continue;
        const float v0 = acc[jn * 4 + 2 * h], v1 = acc[jn * 4 + 2 * h + 1];
        if constexpr (SWAP) {  // columns j, j + 1 are tokens: two rows of y
          const bool second = j + 1 < rows_q;
          const int64_t r0 = t.a0 + j;
          if (ws) {
            ws[r0 * p.n + i] = v0;
            if (second) ws[(r0 + 1) * p.n + i] = v1;
          } else {
            auto* y = reinterpret_cast<__nv_bfloat16*>(p.y);
            y[r0 * p.ldy + i] = __float2bfloat16_rn(v0);
            if (second) y[(r0 + 1) * p.ldy + i] = __float2bfloat16_rn(v1);
          }
        } else {  // n even, so j + 1 < n
          const int64_t r = t.a0 + i;
          if (ws) {
            *reinterpret_cast<float2*>(ws + r * p.n + j) = make_float2(v0, v1);
          } else {
            *reinterpret_cast<__nv_bfloat162*>(p.y + r * p.ldy + j) = __floats2bfloat162_rn(v0, v1);
          }
        }
      }
  }
}

// y = bf16(sum of the splits' partials, in split order).
__global__ void split_reduce_kernel(const float* ws, int splits, int m, int n, uint16_t* y, int64_t ldy) {
  const int64_t mn = static_cast<int64_t>(m) * n;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < mn;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (int z = 0; z < splits; ++z) s += ws[z * mn + e];
    reinterpret_cast<__nv_bfloat16*>(y)[(e / n) * ldy + e % n] = __float2bfloat16_rn(s);
  }
}

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    check(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) ==
                  cudaSuccess &&
              q == cudaDriverEntryPointSuccess && f,
          "fp8_gemm: cuTensorMapEncodeTiled is not available from the driver");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// A [rows, cols] byte matrix (row stride ld bytes) read in boxes of box_cols bytes x box_rows; rows past
// the end read as zeros. 128-byte boxes are 128B-swizzled (what wgmma reads), narrower ones plain.
CUtensorMap tensor_map(const uint8_t* base, int64_t rows, int64_t cols, int64_t ld, int box_rows, int box_cols = kBK,
                       bool swizzle = true) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem[2] = {1, 1};
  const CUresult r = encode_fn()(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<uint8_t*>(base), dims, strides,
                                 box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                 swizzle && box_cols == kBK ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  check(r == CUDA_SUCCESS, "fp8_gemm: cuTensorMapEncodeTiled failed (", static_cast<int>(r), ")");
  return map;
}

struct Plan {
  bool swap;
  int bn, splits;
};

// Tile shape and K split from the shape alone (rows = m, or the largest group for grouped calls):
// decode swaps and takes the narrowest N tile holding the rows; when the tiles fill fewer than one wave
// (one or two CTAs per SM), K is split (>= 4 stages of 128 per split) up to one wave. Grouped calls
// never split (their tile count is only known on the device).
Plan plan_for(int64_t rows, int64_t n, int64_t k, bool grouped, bool w4, bool invariant) {
  Plan pl{};
  pl.swap = rows <= 64;
  pl.bn = !pl.swap ? 128 : rows <= 16 ? 16 : rows <= 32 ? 32 : 64;
  const int64_t rows_p = pl.swap ? n : rows, rows_q = pl.swap ? rows : n;
  const int64_t tiles = ((rows_p + kBM - 1) / kBM) * ((rows_q + pl.bn - 1) / pl.bn);
  const int64_t kt = k / kBK;
  const int64_t slots = sm_count() * (pl.bn == 16 && !w4 ? 2 : 1);
  pl.splits = grouped || invariant ? 1 : static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(kt / 4, slots / tiles)));
  return pl;
}

template <int BN, int BLK, bool SWAP, bool W4>
void launch(const Fp8GemmArgs& a, const Plan& pl, float* ws, cudaStream_t s) {
  using C = Cfg<BN, BLK, SWAP, W4>;
  static const bool attr_set = [] {
    return cudaFuncSetAttribute(fp8_gemm_kernel<BN, BLK, SWAP, W4>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                C::kSmem) == cudaSuccess;
  }();
  check(attr_set, "fp8_gemm: cannot reserve ", C::kSmem, " bytes of shared memory");
  const int64_t groups = std::max(a.groups, 1), w_rows = groups * a.n;
  const int w_cols = W4 ? kBK / 2 : kBK;  // bytes of one K stage of a weight row
  const CUtensorMap mw = tensor_map(a.w, w_rows, W4 ? a.k / 2 : a.k, a.ldw, SWAP ? kBM : BN, w_cols);
  const CUtensorMap ma = tensor_map(a.a, a.m, a.k, a.lda, SWAP ? BN : kBM);
  // Activation scales [k / blk, m] in boxes of one stage's K blocks x the tile's tokens.
  const CUtensorMap mas = tensor_map(a.a_scale, a.k / BLK, a.m, a.ld_as, kBK / BLK, SWAP ? BN : kBM, false);
  Params p{};
  p.a_scale = a.a_scale, p.ld_as = a.ld_as, p.w_scale = a.w_scale, p.ld_ws = a.ld_ws;
  p.y = a.y, p.ldy = a.ldy, p.ws = ws;
  p.m = static_cast<int>(a.m), p.n = static_cast<int>(a.n), p.k = static_cast<int>(a.k);
  p.group_offsets = a.groups > 0 ? a.group_offsets : nullptr;
  p.groups = a.groups;
  const int64_t rows_p = SWAP ? a.n : a.m, rows_q = SWAP ? a.m : a.n;
  p.p_tiles = static_cast<int>((rows_p + kBM - 1) / kBM);
  p.q_tiles = static_cast<int>((rows_q + BN - 1) / BN);
  p.splits = pl.splits;
  int64_t ntiles = static_cast<int64_t>(p.p_tiles) * p.q_tiles * pl.splits, grid = ntiles;
  if (p.group_offsets) {  // persistent: at most one wave; each CTA walks the device-side tile list
    p.p_tiles = SWAP ? static_cast<int>((a.n + kBM - 1) / kBM) : 0;
    p.q_tiles = SWAP ? 0 : static_cast<int>((a.n + BN - 1) / BN);
    const int64_t per_group = SWAP ? p.p_tiles : p.q_tiles;
    const int64_t bound = per_group * (std::min<int64_t>(a.groups, a.m) + (a.m + (SWAP ? BN : kBM) - 1) / (SWAP ? BN : kBM));
    grid = std::min<int64_t>(bound, sm_count() * C::kCtasPerSm);
    ntiles = 0;  // computed in the kernel
  }
  fp8_gemm_kernel<BN, BLK, SWAP, W4><<<static_cast<unsigned>(grid), kThreads, C::kSmem, s>>>(
      SWAP ? mw : ma, SWAP ? ma : mw, mas, p, static_cast<int>(ntiles));
}

template <int BLK, bool W4>
void dispatch(const Fp8GemmArgs& a, const Plan& pl, float* ws, cudaStream_t s) {
  if (!pl.swap) return launch<128, BLK, false, W4>(a, pl, ws, s);
  switch (pl.bn) {
    case 16: return launch<16, BLK, true, W4>(a, pl, ws, s);
    case 32: return launch<32, BLK, true, W4>(a, pl, ws, s);
    default: return launch<64, BLK, true, W4>(a, pl, ws, s);
  }
}

int64_t plan_rows(const Fp8GemmArgs& a) { return a.groups > 0 ? std::max<int64_t>(1, a.max_group_rows) : a.m; }

}  // namespace

size_t fp8_gemm_workspace_bytes(int64_t m, int64_t n, int64_t k, int blk, bool batch_invariant) {
  const Plan pl = plan_for(m, n, k, false, false, batch_invariant);
  return pl.splits > 1 ? static_cast<size_t>(pl.splits) * m * n * sizeof(float) : 0;
}

size_t fp8_gemm_workspace_bytes(const Fp8GemmArgs& a) {
  if (mxfp4_gemm_fits(a)) return mxfp4_gemm_workspace_bytes(a);
  return a.groups > 0 ? 0 : fp8_gemm_workspace_bytes(a.m, a.n, a.k, a.blk, a.batch_invariant);
}

void fp8_gemm(const Fp8GemmArgs& a, void* workspace, void* stream) {
  const bool w4 = a.wfmt == WeightFormat::kMxfp4;
  check(a.blk == 32 || (a.blk == 128 && !w4), "fp8_gemm: blk must be 32 or 128 (MXFP4: 32), got ", a.blk);
  check(a.m >= 1 && a.n >= 1 && a.k >= kBK && a.k % kBK == 0, "fp8_gemm: need m, n >= 1 and k a multiple of 128 (m ",
        a.m, ", n ", a.n, ", k ", a.k, ")");
  check(a.groups >= 0 && a.groups <= kMaxGroups && (a.groups == 0 || (a.group_offsets && a.max_group_rows <= a.m)),
        "fp8_gemm: groups must be 0..", kMaxGroups, " with group_offsets and max_group_rows <= m");
  check(a.m < (1 << 30) && a.n * std::max(a.groups, 1) < (1 << 30) && a.k < (1 << 30), "fp8_gemm: sizes must fit in int32");
  check(a.n % 2 == 0 && a.ldy % 2 == 0 && a.ldy >= a.n, "fp8_gemm: n and ldy must be even, ldy >= n");
  check(a.lda % 16 == 0 && a.ldw % 16 == 0 && a.lda >= a.k && a.ldw >= (w4 ? a.k / 2 : a.k),
        "fp8_gemm: lda, ldw must be multiples of 16 and hold a row");
  check(reinterpret_cast<uintptr_t>(a.a) % 16 == 0 && reinterpret_cast<uintptr_t>(a.w) % 16 == 0,
        "fp8_gemm: a and w must be 16-byte aligned");
  check(a.ld_as >= a.m && a.ld_as % 16 == 0 && reinterpret_cast<uintptr_t>(a.a_scale) % 16 == 0 &&
            (w4 ? a.ld_ws >= std::max(a.groups, 1) * a.n && a.ld_ws % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(a.w_scale) % 16 == 0
                : a.ld_ws >= a.k / a.blk),
        "fp8_gemm: scale strides too small or not multiples of 16 (a_scale; MXFP4 w_scale), or unaligned");
  check(!w4 || a.n % kBM == 0, "fp8_gemm: MXFP4 weights need n % 128 == 0, got ", a.n);
  check(a.a && a.a_scale && a.w && a.w_scale && a.y, "fp8_gemm: null pointer");
  if (mxfp4_gemm_fits(a)) return mxfp4_gemm(a, workspace, stream);  // MXFP4: the expert kernels
  const Plan pl = plan_for(plan_rows(a), a.n, a.k, a.groups > 0, w4, a.batch_invariant);
  float* ws = pl.splits > 1 ? static_cast<float*>(workspace) : nullptr;
  check(pl.splits == 1 || ws, "fp8_gemm: this shape needs a workspace of ", fp8_gemm_workspace_bytes(a.m, a.n, a.k, a.blk),
        " bytes");
  auto s = static_cast<cudaStream_t>(stream);
  if (w4) dispatch<32, true>(a, pl, ws, s);
  else if (a.blk == 32) dispatch<32, false>(a, pl, ws, s);
  else dispatch<128, false>(a, pl, ws, s);
  cudaError_t e = cudaGetLastError();
  check(e == cudaSuccess, "fp8_gemm: launch failed: ", cudaGetErrorString(e));
  if (ws) {
    const int64_t mn = a.m * a.n;
    const int blocks = static_cast<int>(std::min<int64_t>((mn + 255) / 256, 4 * sm_count()));
    split_reduce_kernel<<<blocks, 256, 0, s>>>(ws, pl.splits, static_cast<int>(a.m), static_cast<int>(a.n), a.y, a.ldy);
    e = cudaGetLastError();
    check(e == cudaSuccess, "fp8_gemm: split reduce launch failed: ", cudaGetErrorString(e));
  }
}

}  // namespace deepinfer::cuda
