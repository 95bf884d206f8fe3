// CudaBackend::moe_group: the MoE's token groups formed on the device (no read-back of the routing),
// in the CPU reference's order: a counting sort of the n * k choices by expert, stable in token order.
#include "backends/cuda/cuda_internal.cuh"

namespace deepinfer::cuda {
namespace {

constexpr int kThreads = 256;

// One CTA: the per-expert counts (shared-memory atomics: a count does not depend on their order) and
// their exclusive prefix sum -> offsets [experts + 1].
__global__ void moe_group_offsets_kernel(const int32_t* __restrict__ sel, int64_t pairs, int experts,
                                         int32_t* __restrict__ offsets) {
  extern __shared__ int32_t count[];
  for (int e = threadIdx.x; e < experts; e += blockDim.x) count[e] = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < pairs; i += blockDim.x)
    if (static_cast<unsigned>(sel[i]) < static_cast<unsigned>(experts)) atomicAdd(&count[sel[i]], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t run = 0;
    for (int e = 0; e < experts; ++e) {
      offsets[e] = run;
      run += count[e];
    }
    offsets[experts] = run;
  }
}

// CTA e: walks the choices in order, ranking those of expert e by a block-wide prefix count, so token
// t's row precedes token t + 1's (each token picks an expert at most once).
__global__ void moe_group_rows_kernel(const int32_t* __restrict__ sel, const float* __restrict__ weight, int64_t n,
                                      int k, const int32_t* __restrict__ offsets, int32_t* __restrict__ perm,
                                      float* __restrict__ row_weight, int32_t* __restrict__ slot) {
  __shared__ int32_t warp_total[kThreads / 32];
  const int e = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int32_t base = offsets[e];
  for (int64_t i0 = 0; i0 < n * k; i0 += kThreads) {
    const int64_t i = i0 + threadIdx.x;
    const bool mine = i < n * k && sel[i] == e;
    const unsigned ballot = __ballot_sync(0xffffffffu, mine);
    if (lane == 0) warp_total[warp] = __popc(ballot);
    __syncthreads();
    int32_t before = 0, total = 0;
    for (int w = 0; w < kThreads / 32; ++w) {
      before += w < warp ? warp_total[w] : 0;
      total += warp_total[w];
    }
    if (mine) {
      const int32_t r = base + before + __popc(ballot & ((1u << lane) - 1));
      const int64_t t = i / k;
      int rank = 0;  // e's place among t's experts by ascending id
      for (int j = 0; j < k; ++j) rank += sel[t * k + j] < e;
      perm[r] = static_cast<int32_t>(t);
      row_weight[r] = weight[i];
      slot[t * k + rank] = r;
    }
    base += total;
    __syncthreads();  // warp_total is rewritten next round
  }
}

}  // namespace

void CudaBackend::moe_group(const int32_t* sel, const float* weight, int64_t n, int64_t k, int64_t experts,
                            int32_t* perm, float* row_weight, int32_t* slot, int32_t* offsets) {
  check_sizes(n >= 0 && k >= 1 && experts >= 1 && experts <= 12 * 1024 && n * k < INT32_MAX, "moe_group");
  impl_->bind();
  moe_group_offsets_kernel<<<1, 1024, experts * sizeof(int32_t), impl_->stream>>>(sel, n * k, static_cast<int>(experts),
                                                                                   offsets);
  check_launch("moe_group_offsets_kernel");
  if (n == 0) return;
  moe_group_rows_kernel<<<static_cast<unsigned>(experts), kThreads, 0, impl_->stream>>>(
      sel, weight, n, static_cast<int>(k), offsets, perm, row_weight, slot);
  check_launch("moe_group_rows_kernel");
}

}  // namespace deepinfer::cuda
