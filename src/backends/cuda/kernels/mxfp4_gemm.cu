// Grouped MXFP4 GEMM (see mxfp4_gemm.h): y[i, n] = bf16(sum over K blocks b, in order, of a_s w_s 2^6 *
// wgmma_b(e4m3(2^-6 w[n]), a[i])) for each group's rows i; one CTA (a warpgroup) per 64 weight rows of
// one active group and batch of up to NT of its rows.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "backends/cuda/kernels/mxfp4_gemm.h"
#include "backends/cuda/kernels/mxfp4_internal.cuh"
#include "backends/cuda/kernels/sm90.cuh"
#include "core/error.h"

namespace deepinfer::cuda {
namespace {

using sm90::smem_addr;

constexpr int kRows = 64, kThreads = 128;
constexpr int kStageK = 256, kStageBlocks = kStageK / 32, kRowBytes = kStageK / 2;  // 128 bytes a row a stage
constexpr int kMaxGroups = kMxfp4MaxGroups, kHeadBytes = kMxfp4HeadBytes;

using Params = Mxfp4Params;

// Shared-memory layout for batches of NT tokens. A ring stage (K 256): the raw activations [NT tokens]
// [256 B], weights [64 rows][128 B] (chunks swizzled by row % 8), their scales [8 blocks][64 rows] and
// the activations' scales [8 blocks][kAsBytes] (from the batch's first row rounded down to 16). The stage
// being consumed is first prepared into one shared area: the activations deinterleaved for wgmma's B
// [2 atoms][NT tokens][128 B] (128-byte swizzle; each 32-byte K block holds its even-k bytes, then its
// odd-k ones, matching the registers' e2m1 split) and both scales as floats (ue8m0_x8): activations
// [8 blocks][NT tokens], weights [8 blocks][4 warps][8 g8][rows g8, g8 + 8].
template <int NT>
struct Layout {
  // 3 stages at 32 tokens: 3 CTAs an SM (2 with 4 stages: 1.19x the time at 1024 tokens).
  static constexpr int kStages = NT == 8 ? 4 : 3;
  static constexpr int kAsChunks = (NT + 15 + 15) / 16, kAsBytes = 16 * kAsChunks;
  static constexpr int kARawOff = 0, kWOff = NT * kStageK, kWsOff = kWOff + kRows * kRowBytes,
                       kAsOff = kWsOff + kStageBlocks * kRows, kStageBytes = kAsOff + kStageBlocks * kAsBytes;
  static constexpr int kAtom = NT * 128;  // one B atom: 4 K blocks of NT tokens
  static constexpr int kBOff = (kStages * kStageBytes + 1023) / 1024 * 1024, kAsfOff = kBOff + 2 * kAtom,
                       kWsfOff = kAsfOff + kStageBlocks * NT * 4, kHeadOff = kWsfOff + kStageBlocks * kRows * 4;
  static constexpr int kSmem = 1024 + kHeadOff + kHeadBytes;  // + 1024: aligned by hand for the swizzled B atoms
  // K blocks a wgmma batch: their partials (NT / 2 floats a thread each) are double-buffered.
  static constexpr int kBatchBlocks = NT == 8 ? 4 : 2, kBatches = kStageBlocks / kBatchBlocks;
  static_assert(kStageBytes % 16 == 0 && kBOff % 1024 == 0 && kAtom % 1024 == 0, "stage layout");
  static_assert(kSmem <= 227 * 1024, "shared memory");
};

__device__ __forceinline__ uint32_t lds32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }

// A CTA's place in its stream of (tile, token batch, K stage) items; tile = active group x 64-row slice.
struct Cursor {
  int tile, batch, st;
};

__device__ __forceinline__ void e2m1x8_to_e4m3(uint32_t x, uint32_t& even, uint32_t& odd) {
  even = ((x << 2) & 0x1C1C1C1Cu) | ((x << 4) & 0x80808080u);
  odd = ((x >> 2) & 0x1C1C1C1Cu) | (x & 0x80808080u);
}
// D[64 x N] = A[64 x 32] (e4m3, registers) B[N x 32]^T (e4m3, K-major in shared memory), f32.
template <int N>
struct WgmmaRs;
template <>
struct WgmmaRs<8> {
  static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint64_t db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(0));
  }
};
template <>
struct WgmmaRs<32> {
  static __device__ __forceinline__ void mma(float (&d)[16], const uint32_t (&a)[4], uint64_t db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(0));
  }
};
// UE8M0 byte b -> 2^(b - 124) = 2^3 times its value (normal for every b <= 251); the product of a
// weight's and an activation's is their scale times 2^6, undoing the 2^-6 of the e4m3 codes.
__device__ __forceinline__ float ue8m0_x8(uint32_t b) { return __int_as_float((min(b, 251u) + 3u) << 23); }
template <int R>
__device__ __forceinline__ void fence_u32(uint32_t (&r)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

template <int NT>
__global__ void __launch_bounds__(kThreads) mxfp4_gemm_kernel(const Params p) {
  using L = Layout<NT>;
  constexpr int kStages = L::kStages, KB = L::kBatchBlocks;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* const ring = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  __shared__ int n_active_s;
  int* off = reinterpret_cast<int*>(ring + L::kHeadOff);
  int* active = off + kMaxGroups + 1;
  const int n_active = load_groups(p, off, active, &n_active_s);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g8 = lane >> 2, t4 = lane & 3;
  const int slices = p.n / kRows, tiles = n_active * slices, stages = p.k / kStageK;
  auto advance = [&](Cursor& c) {
    if (++c.st < stages) return;
    c.st = 0;
    const int g = active[c.tile / slices];
    if (++c.batch * NT < off[g + 1] - off[g]) return;
    c.batch = 0;
    c.tile += gridDim.x;
  };

  // Producer: the whole CTA copies a stage by cp.async (always one commit group a thread): 4 weight chunks
  // a thread, then one of the weight scales (threads < 32), NT / 8 chunks of the raw activations (tokens
  // tid / 16 + 8 i < rows) and one of their scales (threads 32 .. 32 + 8 kAsChunks).
  Cursor pc{static_cast<int>(blockIdx.x), 0, 0};
  const uint8_t *pw = nullptr, *pws = nullptr, *pa = nullptr, *pas = nullptr;
  int pa_rows = 0;  // tokens of the batch from this thread's first one (tid / 16)
  bool pas_ok = false;
  const int64_t ldw16 = 16 * p.ldw, lda8 = 8 * p.lda;
  int pslot = 0;
  auto produce = [&]() {
    if (pc.tile < tiles) {
      if (pc.st == 0) {
        const int gi = pc.tile / slices, g = active[gi];
        const int row0 = off[g] + pc.batch * NT, rows = min(off[g + 1] - row0, NT);
        const int64_t wrow = static_cast<int64_t>(g) * p.n + (pc.tile - gi * slices) * kRows;
        pw = p.w + (wrow + (tid >> 3)) * p.ldw + (tid & 7) * 16;
        pws = p.w_scale + ((tid >> 2) & 7) * p.ld_ws + wrow + (tid & 3) * 16;
        pa_rows = rows - (tid >> 4);
        pa = p.a + static_cast<int64_t>(row0 + max(min(tid >> 4, rows - 1), 0)) * p.lda + (tid & 15) * 16;
        const int sc = tid - 32, sb = sc / L::kAsChunks, sch = sc - sb * L::kAsChunks;
        pas = p.a_scale + max(sb, 0) * p.ld_as + (row0 & ~15) + sch * 16;
        pas_ok = sc >= 0 && sc < 8 * L::kAsChunks && sch * 16 < (row0 & 15) + rows;
      }
      uint8_t* const st = ring + pslot * L::kStageBytes;
      const uint32_t w_dst = smem_addr(st + L::kWOff + (tid >> 3) * kRowBytes + (((tid & 7) ^ ((tid >> 3) & 7)) * 16));
#pragma unroll
      for (int i = 0; i < 4; ++i) cp_async16(w_dst + i * 16 * kRowBytes, pw + i * ldw16);
      if (tid < 32) cp_async16(smem_addr(st + L::kWsOff + tid * 16), pws);  // [block][row]
#pragma unroll
      for (int i = 0; i < NT / 8; ++i)  // [token][256 B]
        if (8 * i < pa_rows) cp_async16(smem_addr(st + L::kARawOff + (tid + i * kThreads) * 16), pa + i * lda8);
      if (pas_ok) cp_async16(smem_addr(st + L::kAsOff + (tid - 32) * 16), pas);
      pw += kRowBytes, pa += kStageK;
      pws += kStageBlocks * p.ld_ws, pas += kStageBlocks * p.ld_as;
      advance(pc);
    }
    cp_async_commit();
    pslot = pslot + 1 == kStages ? 0 : pslot + 1;
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) produce();

  float acc[NT / 2];
  int row0 = 0, rows = 0, col0 = 0;
  Cursor cc{static_cast<int>(blockIdx.x), 0, 0};
  int cslot = 0;
  while (cc.tile < tiles) {
    cp_async_wait<kStages - 2>();  // the oldest of the stages in flight has landed
    __syncthreads();  // the stage has landed for every thread; every warp is done with the previous one
    produce();        // into the slot consumed last iteration
    if (cc.st == 0) {
      const int gi = cc.tile / slices, g = active[gi];
      row0 = off[g] + cc.batch * NT;
      rows = min(off[g + 1] - row0, NT);
      col0 = (cc.tile - gi * slices) * kRows;
#pragma unroll
      for (int r = 0; r < NT / 2; ++r) acc[r] = 0.0f;
    }
    uint8_t* const st = ring + cslot * L::kStageBytes;
    // Stage prep: B (token t, K block j: its even-k bytes then its odd-k ones) and both scales as floats.
    auto prep_b = [&](int t, int j) {
      const uint4 lo = *reinterpret_cast<const uint4*>(st + L::kARawOff + t * kStageK + j * 32);
      const uint4 hi = *reinterpret_cast<const uint4*>(st + L::kARawOff + t * kStageK + j * 32 + 16);
      const uint4 ev = make_uint4(__byte_perm(lo.x, lo.y, 0x6420), __byte_perm(lo.z, lo.w, 0x6420),
                                  __byte_perm(hi.x, hi.y, 0x6420), __byte_perm(hi.z, hi.w, 0x6420));
      const uint4 od = make_uint4(__byte_perm(lo.x, lo.y, 0x7531), __byte_perm(lo.z, lo.w, 0x7531),
                                  __byte_perm(hi.x, hi.y, 0x7531), __byte_perm(hi.z, hi.w, 0x7531));
      uint8_t* b = ring + L::kBOff + (j >> 2) * L::kAtom + t * 128;
      const int c = (j & 3) * 2, sw = t & 7;
      *reinterpret_cast<uint4*>(b + ((c ^ sw) * 16)) = ev;
      *reinterpret_cast<uint4*>(b + (((c + 1) ^ sw) * 16)) = od;
    };
    float* const asf_w = reinterpret_cast<float*>(ring + L::kAsfOff);
    if constexpr (NT == 8) {  // threads < 64: B of token tid / 8, K block tid % 8; the others the scales
      if (tid < 64) {
        if ((tid >> 3) < rows) prep_b(tid >> 3, tid & 7);
      } else {  // activation scales: block (tid - 64) / 8, token tid % 8
        const int j = (tid - 64) >> 3, t = tid & 7;
        asf_w[j * NT + t] = ue8m0_x8(st[L::kAsOff + j * L::kAsBytes + (row0 & 15) + t]);
      }
    } else {
#pragma unroll
      for (int i = 0; i < NT / 16; ++i) {
        const int idx = tid + i * kThreads, t = idx >> 3;
        if (t < rows) prep_b(t, idx & 7);
      }
#pragma unroll
      for (int i = 0; i < NT / 16; ++i) {  // activation scales: block idx / NT, token idx % NT
        const int idx = tid + i * kThreads, j = idx / NT, t = idx % NT;
        asf_w[j * NT + t] = ue8m0_x8(st[L::kAsOff + j * L::kAsBytes + (row0 & 15) + t]);
      }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // weight scales: block idx / 64, row idx % 64
      const int idx = tid + i * kThreads, j = idx >> 6, r = idx & 63;
      reinterpret_cast<float*>(ring + L::kWsfOff)[j * kRows + (r >> 4) * 16 + (r & 7) * 2 + ((r >> 3) & 1)] =
          ue8m0_x8(st[L::kWsOff + idx]);
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic writes of B -> wgmma reads
    __syncthreads();

    // Warp w: rows 16 w + g8 and 16 w + g8 + 8, word t4 of each K block (k 8 t4 .. 8 t4 + 7: even k in
    // a0 / a1 at B positions 4 t4 .., odd k in a2 / a3 at 16 + 4 t4 ..); batches of KB K blocks, each
    // batch's wgmmas in flight while the previous batch is promoted.
    const uint8_t* wr = st + L::kWOff + (16 * warp + g8) * kRowBytes + t4 * 4;
    const uint32_t bdesc = smem_addr(ring + L::kBOff);
    const float* asf = reinterpret_cast<const float*>(ring + L::kAsfOff) + 2 * t4;
    const float* wsf = reinterpret_cast<const float*>(ring + L::kWsfOff) + warp * 16 + g8 * 2;
    float d[2][KB][NT / 2];
    uint32_t a[2][KB][4];
    auto promote = [&](int h) {
#pragma unroll
      for (int q = 0; q < KB; ++q) {
        sm90::fence_regs(d[h & 1][q]);
        fence_u32(a[h & 1][q]);
        const int j = KB * h + q;
        const float2 ws = *reinterpret_cast<const float2*>(wsf + j * kRows);
#pragma unroll
        for (int jn = 0; jn < NT / 8; ++jn) {  // tokens 8 jn + 2 t4, + 1
          const float2 as = *reinterpret_cast<const float2*>(asf + j * NT + 8 * jn);
          acc[4 * jn + 0] += d[h & 1][q][4 * jn + 0] * (ws.x * as.x);
          acc[4 * jn + 1] += d[h & 1][q][4 * jn + 1] * (ws.x * as.y);
          acc[4 * jn + 2] += d[h & 1][q][4 * jn + 2] * (ws.y * as.x);
          acc[4 * jn + 3] += d[h & 1][q][4 * jn + 3] * (ws.y * as.y);
        }
      }
    };
#pragma unroll
    for (int h = 0; h < L::kBatches; ++h) {
#pragma unroll
      for (int q = 0; q < KB; ++q) {
        const int j = KB * h + q;
        e2m1x8_to_e4m3(lds32(wr + ((j ^ g8) * 16)), a[h & 1][q][0], a[h & 1][q][2]);
        e2m1x8_to_e4m3(lds32(wr + 8 * kRowBytes + ((j ^ g8) * 16)), a[h & 1][q][1], a[h & 1][q][3]);
      }
      sm90::wgmma_fence();
#pragma unroll
      for (int q = 0; q < KB; ++q) {
        const int j = KB * h + q;
        WgmmaRs<NT>::mma(d[h & 1][q], a[h & 1][q], sm90::desc_k_sw128(bdesc + (j >> 2) * L::kAtom + (j & 3) * 32));
      }
      sm90::wgmma_commit();
      if (h > 0) {
        sm90::wgmma_wait<1>();
        promote(h - 1);
      }
    }
    sm90::wgmma_wait<0>();
    promote(L::kBatches - 1);
    if (cc.st == stages - 1) {  // token 8 jn + 2 t4 + c gets rows 16 w + g8 (+ 8) of the tile
#pragma unroll
      for (int jn = 0; jn < NT / 8; ++jn)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int tok = 8 * jn + 2 * t4 + c;
          if (tok >= rows) continue;
          uint16_t* y = p.y + (row0 + tok) * p.ldy + col0 + 16 * warp + g8;
          y[0] = __bfloat16_as_ushort(__float2bfloat16_rn(acc[4 * jn + c]));
          y[8] = __bfloat16_as_ushort(__float2bfloat16_rn(acc[4 * jn + 2 + c]));
        }
    }
    advance(cc);
    cslot = cslot + 1 == kStages ? 0 : cslot + 1;
  }
}

template <int NT>
void launch(const Params& p, int64_t active_bound, cudaStream_t s) {
  launch_persistent<mxfp4_gemm_kernel<NT>>(p, active_bound * (p.n / kRows), kThreads, Layout<NT>::kSmem, s);
}

// Mean rows a group (the routing stays on the device; empty groups count too).
int64_t mean_rows(const Fp8GemmArgs& a) {
  const int64_t g = std::max(a.groups, 1);
  return (a.m + g - 1) / g;
}

// The bf16 kernel's token batch by the mean rows a group, 0 for this file's kernel (measured, kernels9: at
// 16 rows this file's 32-token batches take 0.89x the time of the bf16 kernel's 64-token ones, at 32 rows
// 1.2x; at 64 rows batches of 128 are 1.6x faster than this file's, at 128-256 rows 1.04-1.10x faster
// than the bf16 kernel's former 256-token tiles).
int prefill_batch(const Fp8GemmArgs& a) {
  const int64_t mean = mean_rows(a);  // m when ungrouped
  return mean <= 24 ? 0 : mean <= 40 ? 64 : 128;
}
bool use_prefill(const Fp8GemmArgs& a) { return prefill_batch(a) > 0; }

}  // namespace

// Up to 8 rows a group on average (decode): this file's 8-token batches; up to 24 its 32-token batches;
// above, mxfp4_prefill.cu's bf16 kernel.
bool mxfp4_gemm_fits(const Fp8GemmArgs& a) {
  return a.wfmt == WeightFormat::kMxfp4 && !a.batch_invariant && a.k % kStageK == 0 && a.n % kRows == 0;
}

size_t mxfp4_gemm_workspace_bytes(const Fp8GemmArgs& a) {
  return mxfp4_gemm_fits(a) && use_prefill(a) ? mxfp4_prefill_workspace_bytes(a.m, a.k) : 0;
}

void mxfp4_gemm(const Fp8GemmArgs& a, void* workspace, void* stream) {
  Params p{};
  p.a = a.a, p.lda = a.lda, p.a_scale = a.a_scale, p.ld_as = a.ld_as;
  p.w = a.w, p.ldw = a.ldw, p.w_scale = a.w_scale, p.ld_ws = a.ld_ws;
  p.y = a.y, p.ldy = a.ldy;
  p.m = static_cast<int>(a.m), p.n = static_cast<int>(a.n), p.k = static_cast<int>(a.k);
  p.groups = a.groups, p.group_offsets = a.groups > 0 ? a.group_offsets : nullptr;
  // A CTA takes every batch of its (active group, slice) tiles: at most min(groups, m) x slices of them.
  const int64_t active_bound = a.groups > 0 ? std::min<int64_t>(a.groups, a.m) : 1, mean = mean_rows(a);
  auto s = static_cast<cudaStream_t>(stream);
  if (use_prefill(a)) {
    check(workspace != nullptr, "mxfp4_gemm: this shape needs a workspace of ", mxfp4_gemm_workspace_bytes(a), " bytes");
    p.ab = static_cast<uint16_t*>(workspace);
    mxfp4_prefill_launch(p, active_bound, prefill_batch(a), s);
  } else if (mean <= 8) {
    launch<8>(p, active_bound, s);  // decode: about one token an active expert
  } else {
    launch<32>(p, active_bound, s);
  }
  const cudaError_t e = cudaGetLastError();
  check(e == cudaSuccess, "mxfp4_gemm: launch failed: ", cudaGetErrorString(e));
}

}  // namespace deepinfer::cuda
