// What the two MXFP4 expert GEMM kernels share (mxfp4_gemm.cu: decode, token batches widened in
// registers; mxfp4_prefill.cu: prefill, bf16 in registers): the raw-pointer parameters, the persistent
// launch and the active-group list each CTA builds in shared memory.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "backends/cuda/kernels/mma_bf16.cuh"
#include "backends/cuda/kernels/sm90.cuh"
#include "core/error.h"

namespace deepinfer::cuda {

using mma::cp_async16, mma::cp_async_commit, mma::cp_async_wait;

constexpr int kMxfp4MaxGroups = 512;
constexpr int kMxfp4HeadBytes = (4 * (2 * kMxfp4MaxGroups + 2) + 127) / 128 * 128;  // offsets, active list

struct Mxfp4Params {
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
  uint16_t* ab;              // the prefill kernel's workspace: the activations as bf16 [m, k]
};

// The prefill kernel (mxfp4_prefill.cu): its workspace, and the launch (p.ab set) for token batches of up
// to 64 rows (batch <= 64) or 128.
size_t mxfp4_prefill_workspace_bytes(int64_t m, int64_t k);
void mxfp4_prefill_launch(const Mxfp4Params& p, int64_t active_bound, int batch, cudaStream_t s);

// Launches a persistent kernel of theirs: one CTA a tile, at most as many as fit on the GPU at once
// (CTAs an SM asked of the occupancy calculator once per kernel, with `smem` bytes of shared memory).
template <auto Kernel>
void launch_persistent(const Mxfp4Params& p, int64_t tiles, int threads, int smem, cudaStream_t s) {
  static const int per_sm = [&] {
    int b = 0;
    if (cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, Kernel, threads, smem) != cudaSuccess)
      return 0;
    return b;
  }();
  check(per_sm > 0, "mxfp4 expert GEMM: cannot launch with ", smem, " bytes of shared memory");
  const int64_t grid = std::min<int64_t>(tiles, int64_t{per_sm} * sm90::sm_count());
  Kernel<<<static_cast<unsigned>(grid), threads, smem, s>>>(p);
}

// Warp 0 fills the head of shared memory: off[g] (row offsets, [groups + 1]) and active[] (the non-empty
// groups, ascending); returns their count to the whole block.
__device__ __forceinline__ int load_groups(const Mxfp4Params& p, int* off, int* active, int* n_active) {
  const int lane = threadIdx.x & 31;
  if (threadIdx.x < 32) {
    if (!p.group_offsets) {
      if (lane == 0) off[0] = 0, off[1] = p.m, active[0] = 0, *n_active = 1;
    } else {
      int lo[kMxfp4MaxGroups / 32], hi[kMxfp4MaxGroups / 32];
#pragma unroll
      for (int c = 0; c < kMxfp4MaxGroups / 32; ++c) {  // all loads first: one latency
        const int gi = c * 32 + lane;
        lo[c] = gi < p.groups ? __ldg(p.group_offsets + gi) : 0;
        hi[c] = gi < p.groups ? __ldg(p.group_offsets + gi + 1) : 0;
      }
      int base = 0;
#pragma unroll
      for (int c = 0; c < kMxfp4MaxGroups / 32; ++c) {
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

}  // namespace deepinfer::cuda
