// FP8 block-scaled GEMM (see fp8_gemm.h). C[i, j] = sum_k P[i, k] Q[j, k] on a 128 x BN tile:
// prefill P = activations, Q = weights; decode (m <= 64) P = weights, Q = activations (swap), so the
// 128-row wgmma side is never mostly padding.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <algorithm>

#include "backends/cuda/kernels/fp8_gemm.h"
#include "backends/cuda/kernels/sm90.cuh"
#include "core/error.h"

namespace deepinfer::cuda {
namespace {

using namespace sm90;

constexpr int kBM = 128, kBK = 128, kThreads = 384;

__device__ __forceinline__ float ue8m0(uint32_t b) { return __int_as_float(b == 0 ? 0x00400000 : (b << 23)); }

template <int BN, int BLK, bool SWAP>
struct Cfg {
  // The narrowest decode tile runs two CTAs per SM, so one CTA's pipeline fill overlaps another's stream.
  static constexpr int kCtasPerSm = BN == 16 ? 2 : 1;
  static constexpr int kStages = kCtasPerSm == 2 ? 6 : BN == 128 ? 6 : 8;
  // K blocks whose wgmmas are issued before one wait (a partial each): fewer round trips at blk 32.
  static constexpr int kT = BLK == 128 ? 1 : BN == 16 ? 4 : 2;
  static constexpr int kPBytes = kBM * kBK, kQBytes = BN * kBK, kStageBytes = kPBytes + kQBytes;
  static constexpr int kG = BLK / 32;                      // k32 wgmma steps per K block
  static constexpr int kR = BN / 2;                        // accumulators per thread
  static constexpr int kNQ = SWAP ? BN / 4 : BN / BLK;     // Q-side scales per thread per K block
  static constexpr int kSmem = kStages * kStageBytes + 1024 + 2 * kStages * 8;
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
};

// The scales of K block kb for this thread's two P rows (sp) and its Q columns (sq).
template <int BN, int BLK, bool SWAP>
__device__ __forceinline__ void load_scales(const Params& p, int kb, int p_row, int p_warp_row, int q_col,
                                            float (&sp)[2], float (&sq)[Cfg<BN, BLK, SWAP>::kNQ]) {
  const uint8_t* as = p.a_scale + static_cast<int64_t>(kb) * p.ld_as;
  const int w_blocks = (p.n + BLK - 1) / BLK;
  if constexpr (SWAP) {  // P = weights: a warp's 16 rows share one block; Q = tokens: one scale each
    const int rb = min(p_warp_row / BLK, w_blocks - 1);
    sp[0] = sp[1] = ue8m0(__ldg(p.w_scale + static_cast<int64_t>(rb) * p.ld_ws + kb));
#pragma unroll
    for (int c = 0; c < BN / 4; ++c) sq[c] = ue8m0(__ldg(as + min(q_col + (c / 2) * 8 + (c % 2), p.m - 1)));
  } else {  // P = tokens, Q = weights (BN = 128: BN / BLK weight blocks)
    sp[0] = ue8m0(__ldg(as + min(p_row, p.m - 1)));
    sp[1] = ue8m0(__ldg(as + min(p_row + 8, p.m - 1)));
#pragma unroll
    for (int c = 0; c < BN / BLK; ++c) {
      const int nb = min((q_col - q_col % BN) / BLK + c, w_blocks - 1);
      sq[c] = ue8m0(__ldg(p.w_scale + static_cast<int64_t>(nb) * p.ld_ws + kb));
    }
  }
}

// acc += t * (scale of P row) * (scale of Q column), element by element (t: one K block's partial).
template <int BN, int BLK, bool SWAP>
__device__ __forceinline__ void promote(float (&acc)[BN / 2], const float (&t)[BN / 2], const float (&sp)[2],
                                        const float (&sq)[Cfg<BN, BLK, SWAP>::kNQ]) {
#pragma unroll
  for (int jn = 0; jn < BN / 8; ++jn)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float q = SWAP ? sq[jn * 2 + e] : sq[(jn * 8) / BLK];
      acc[jn * 4 + e] = fmaf(t[jn * 4 + e], sp[0] * q, acc[jn * 4 + e]);
      acc[jn * 4 + 2 + e] = fmaf(t[jn * 4 + 2 + e], sp[1] * q, acc[jn * 4 + 2 + e]);
    }
}

template <int BN, int BLK, bool SWAP>
__global__ void __launch_bounds__(kThreads, Cfg<BN, BLK, SWAP>::kCtasPerSm)
    fp8_gemm_kernel(const __grid_constant__ CUtensorMap map_p, const __grid_constant__ CUtensorMap map_q, Params p) {
  using C = Cfg<BN, BLK, SWAP>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);  // 128B swizzle wants 1 KB
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + C::kStages * C::kStageBytes);
  uint64_t* empty = full + C::kStages;
  const int tq = blockIdx.x, tp = blockIdx.y;
  const int kt = p.k / kBK;
  const int s0 = blockIdx.z * kt / gridDim.z, nst = (blockIdx.z + 1) * kt / gridDim.z - s0;
  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int i = 0; i < C::kStages; ++i) {
      mbar_init(&full[i], 1);
      mbar_init(&empty[i], 8);  // one arrival per consumer warp
    }
    fence_barrier_init();
  }
  __syncthreads();

  if (wg == 0) {  // producer: one thread streams the K stages of both tiles
    if constexpr (C::kCtasPerSm == 1) setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      tma_prefetch_map(&map_p);
      tma_prefetch_map(&map_q);
      for (int s = 0; s < nst; ++s) {
        const int slot = s % C::kStages;
        mbar_wait(&empty[slot], ((s / C::kStages) & 1) ^ 1);
        uint8_t* st = smem + slot * C::kStageBytes;
        mbar_arrive_expect_tx(&full[slot], C::kStageBytes);
        tma_load_2d(st, &map_p, (s0 + s) * kBK, tp * kBM, &full[slot]);
        tma_load_2d(st + C::kPBytes, &map_q, (s0 + s) * kBK, tq * BN, &full[slot]);
      }
    }
    return;
  }

  if constexpr (C::kCtasPerSm == 1) setmaxnreg_inc<232>();
  const int cw = wg - 1, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int p_warp_row = tp * kBM + cw * 64 + warp * 16;
  const int p_row = p_warp_row + lane / 4;             // and p_row + 8
  const int q_col = tq * BN + (lane % 4) * 2;          // + jn * 8 + e
  const uint32_t sbase = smem_addr(smem);
  const int ng = nst * 4 / C::kG, kb0 = s0 * (kBK / BLK);

  float acc[C::kR], t[C::kT][C::kR], sp[C::kT][2], sq[C::kT][C::kNQ];
#pragma unroll
  for (int i = 0; i < C::kR; ++i) acc[i] = 0.0f;
  // Per batch of kT K blocks (within one stage): their wgmmas into t[0..kT), one wait, then each partial
  // scaled into acc. While one consumer warpgroup promotes, the other's wgmmas keep the tensor cores busy.
  for (int g = 0; g < ng; g += C::kT) {
    const int kq = g * C::kG, s = kq / 4, slot = s % C::kStages;
    if (kq % 4 == 0) mbar_wait(&full[slot], (s / C::kStages) & 1);
    const uint32_t st = sbase + slot * C::kStageBytes;
    const uint64_t dp = desc_k_sw128(st + cw * 64 * kBK) + 2 * (kq % 4);
    const uint64_t dq = desc_k_sw128(st + C::kPBytes) + 2 * (kq % 4);
    wgmma_fence();
#pragma unroll
    for (int b = 0; b < C::kT; ++b)
#pragma unroll
      for (int u = 0; u < C::kG; ++u)
        Wgmma<BN>::mma(t[b], dp + 2 * (b * C::kG + u), dq + 2 * (b * C::kG + u), u > 0);
    wgmma_commit();
#pragma unroll
    for (int b = 0; b < C::kT; ++b)  // overlaps the wgmmas
      load_scales<BN, BLK, SWAP>(p, kb0 + g + b, p_row, p_warp_row, q_col, sp[b], sq[b]);
    wgmma_wait<0>();
#pragma unroll
    for (int b = 0; b < C::kT; ++b) fence_regs(t[b]);
    if (kq % 4 + C::kT * C::kG == 4 && lane == 0) mbar_arrive(&empty[slot]);  // stage fully read
#pragma unroll
    for (int b = 0; b < C::kT; ++b) promote<BN, BLK, SWAP>(acc, t[b], sp[b], sq[b]);
  }

  // Epilogue: C[i, j] -> y[m, n] (swap: m = j, n = i), bf16, or fp32 into this split's partial.
  const int rows_p = SWAP ? p.n : p.m, rows_q = SWAP ? p.m : p.n;
  float* ws = p.ws ? p.ws + static_cast<int64_t>(blockIdx.z) * p.m * p.n : nullptr;
#pragma unroll
  for (int jn = 0; jn < BN / 8; ++jn)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int i = p_row + 8 * h, j = q_col + jn * 8;
      if (i >= rows_p || j >= rows_q) continue;
      const float v0 = acc[jn * 4 + 2 * h], v1 = acc[jn * 4 + 2 * h + 1];
      if constexpr (SWAP) {  // columns j, j + 1 are tokens: two rows of y
        const bool second = j + 1 < rows_q;
        if (ws) {
          ws[static_cast<int64_t>(j) * p.n + i] = v0;
          if (second) ws[static_cast<int64_t>(j + 1) * p.n + i] = v1;
        } else {
          reinterpret_cast<__nv_bfloat16*>(p.y)[static_cast<int64_t>(j) * p.ldy + i] = __float2bfloat16_rn(v0);
          if (second)
            reinterpret_cast<__nv_bfloat16*>(p.y)[static_cast<int64_t>(j + 1) * p.ldy + i] = __float2bfloat16_rn(v1);
        }
      } else {  // n even, so j + 1 < n
        if (ws) {
          *reinterpret_cast<float2*>(ws + static_cast<int64_t>(i) * p.n + j) = make_float2(v0, v1);
        } else {
          *reinterpret_cast<__nv_bfloat162*>(p.y + static_cast<int64_t>(i) * p.ldy + j) =
              __floats2bfloat162_rn(v0, v1);
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

// A [rows, k] e4m3 matrix (row stride ld bytes) read in boxes of 128 K-bytes x box_rows, 128B-swizzled;
// rows past the end read as zeros.
CUtensorMap tensor_map(const uint8_t* base, int64_t rows, int64_t k, int64_t ld, int box_rows) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld)};
  const cuuint32_t box[2] = {kBK, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem[2] = {1, 1};
  const CUresult r = encode_fn()(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<uint8_t*>(base), dims, strides,
                                 box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  check(r == CUDA_SUCCESS, "fp8_gemm: cuTensorMapEncodeTiled failed (", static_cast<int>(r), ")");
  return map;
}

struct Plan {
  bool swap;
  int bn, splits;
};

int sm_count() {
  static int n = [] {
    int dev = 0, c = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&c, cudaDevAttrMultiProcessorCount, dev);
    return c > 0 ? c : 132;
  }();
  return n;
}

// Tile shape and K split from the shape alone: decode swaps and takes the narrowest N tile holding m;
// when the tiles fill fewer than one wave (one or two CTAs per SM), K is split (>= 4 stages of 128 per
// split) up to one wave.
Plan plan_for(int64_t m, int64_t n, int64_t k) {
  Plan pl{};
  pl.swap = m <= 64;
  pl.bn = !pl.swap ? 128 : m <= 16 ? 16 : m <= 32 ? 32 : 64;
  const int64_t rows_p = pl.swap ? n : m, rows_q = pl.swap ? m : n;
  const int64_t tiles = ((rows_p + kBM - 1) / kBM) * ((rows_q + pl.bn - 1) / pl.bn);
  const int64_t kt = k / kBK;
  const int64_t slots = sm_count() * (pl.bn == 16 ? 2 : 1);
  pl.splits = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(kt / 4, slots / tiles)));
  return pl;
}

template <int BN, int BLK, bool SWAP>
void launch(const Fp8GemmArgs& a, const Plan& pl, float* ws, cudaStream_t s) {
  using C = Cfg<BN, BLK, SWAP>;
  static const bool attr_set = [] {
    return cudaFuncSetAttribute(fp8_gemm_kernel<BN, BLK, SWAP>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                C::kSmem) == cudaSuccess;
  }();
  check(attr_set, "fp8_gemm: cannot reserve ", C::kSmem, " bytes of shared memory");
  const int64_t rows_p = SWAP ? a.n : a.m, rows_q = SWAP ? a.m : a.n;
  const CUtensorMap mp = SWAP ? tensor_map(a.w, a.n, a.k, a.ldw, kBM) : tensor_map(a.a, a.m, a.k, a.lda, kBM);
  const CUtensorMap mq = SWAP ? tensor_map(a.a, a.m, a.k, a.lda, BN) : tensor_map(a.w, a.n, a.k, a.ldw, BN);
  Params p{a.a_scale, a.ld_as, a.w_scale, a.ld_ws, a.y, a.ldy, ws, static_cast<int>(a.m), static_cast<int>(a.n),
           static_cast<int>(a.k)};
  const dim3 grid(static_cast<unsigned>((rows_q + BN - 1) / BN), static_cast<unsigned>((rows_p + kBM - 1) / kBM),
                  static_cast<unsigned>(pl.splits));
  fp8_gemm_kernel<BN, BLK, SWAP><<<grid, kThreads, C::kSmem, s>>>(mp, mq, p);
}

template <int BLK>
void dispatch(const Fp8GemmArgs& a, const Plan& pl, float* ws, cudaStream_t s) {
  if (!pl.swap) return launch<128, BLK, false>(a, pl, ws, s);
  switch (pl.bn) {
    case 16: return launch<16, BLK, true>(a, pl, ws, s);
    case 32: return launch<32, BLK, true>(a, pl, ws, s);
    default: return launch<64, BLK, true>(a, pl, ws, s);
  }
}

}  // namespace

size_t fp8_gemm_workspace_bytes(int64_t m, int64_t n, int64_t k, int blk) {
  const Plan pl = plan_for(m, n, k);
  return pl.splits > 1 ? static_cast<size_t>(pl.splits) * m * n * sizeof(float) : 0;
}

void fp8_gemm(const Fp8GemmArgs& a, void* workspace, void* stream) {
  check(a.blk == 32 || a.blk == 128, "fp8_gemm: blk must be 32 or 128, got ", a.blk);
  check(a.m >= 1 && a.n >= 1 && a.k >= kBK && a.k % kBK == 0, "fp8_gemm: need m, n >= 1 and k a multiple of 128 (m ",
        a.m, ", n ", a.n, ", k ", a.k, ")");
  check(a.m < (1 << 30) && a.n < (1 << 30) && a.k < (1 << 30), "fp8_gemm: sizes must fit in int32");
  check(a.n % 2 == 0 && a.ldy % 2 == 0 && a.ldy >= a.n, "fp8_gemm: n and ldy must be even, ldy >= n");
  check(a.lda % 16 == 0 && a.ldw % 16 == 0 && a.lda >= a.k && a.ldw >= a.k, "fp8_gemm: lda, ldw must be >= k and multiples of 16");
  check(reinterpret_cast<uintptr_t>(a.a) % 16 == 0 && reinterpret_cast<uintptr_t>(a.w) % 16 == 0,
        "fp8_gemm: a and w must be 16-byte aligned");
  check(a.ld_as >= a.m && a.ld_ws >= a.k / a.blk, "fp8_gemm: scale strides too small");
  check(a.a && a.a_scale && a.w && a.w_scale && a.y, "fp8_gemm: null pointer");
  const Plan pl = plan_for(a.m, a.n, a.k);
  float* ws = pl.splits > 1 ? static_cast<float*>(workspace) : nullptr;
  check(pl.splits == 1 || ws, "fp8_gemm: this shape needs a workspace of ", fp8_gemm_workspace_bytes(a.m, a.n, a.k, a.blk),
        " bytes");
  auto s = static_cast<cudaStream_t>(stream);
  if (a.blk == 32) dispatch<32>(a, pl, ws, s);
  else dispatch<128>(a, pl, ws, s);
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
