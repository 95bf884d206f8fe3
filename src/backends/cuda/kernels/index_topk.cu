// index_topk (index_topk.h): radix select, then an exact replay of the CPU's tie breaking when a tie
// straddles the m-th value.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>

#include "backends/cuda/kernels/index_topk.h"
#include "backends/cuda/torch_topk_device.h"
#include "core/error.h"

namespace deepinfer::cuda {
namespace {

namespace cg = cooperative_groups;
using topk::Elem;
constexpr int kThreads = 512, kWarps = kThreads / 32;
constexpr unsigned kFull = 0xffffffffu;

// Order-preserving key of torch_topk's comparator: larger value -> larger key, all NaNs largest and
// equal, -0 == +0.
__device__ __forceinline__ uint32_t order_key(float v) {
  if (v != v) return 0xffffffffu;
  const uint32_t u = v == 0.0f ? 0u : __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

constexpr int kPer = 16, kTile = kThreads * kPer;  // a thread's run of columns in a tile; a tile

struct Row {
  const float* s;
  const uint8_t* mask;
  __device__ float value(int w) const { return mask && !mask[w] ? -__int_as_float(0x7f800000) : s[w]; }
  // Columns w0 .. w0 + 15 (those < n; the others get -inf), 16-byte loads where aligned.
  __device__ void load16(int w0, int n, float (&v)[kPer]) const {
    if (w0 + kPer <= n && (reinterpret_cast<uintptr_t>(s + w0) & 15) == 0 &&
        (!mask || (reinterpret_cast<uintptr_t>(mask + w0) & 15) == 0)) {
#pragma unroll
      for (int u = 0; u < kPer; u += 4) {
        const float4 x = *reinterpret_cast<const float4*>(s + w0 + u);
        v[u] = x.x, v[u + 1] = x.y, v[u + 2] = x.z, v[u + 3] = x.w;
      }
      if (mask) {
        const uint4 mk = *reinterpret_cast<const uint4*>(mask + w0);
        const uint32_t mw[4] = {mk.x, mk.y, mk.z, mk.w};
#pragma unroll
        for (int u = 0; u < kPer; ++u)
          if (!((mw[u / 4] >> (8 * (u % 4))) & 0xffu)) v[u] = -__int_as_float(0x7f800000);
      }
    } else {
#pragma unroll
      for (int u = 0; u < kPer; ++u) v[u] = w0 + u < n ? value(w0 + u) : -__int_as_float(0x7f800000);
    }
  }
};

// Exclusive CTA-wide prefix sums of N counters at once (v becomes the prefix, tot the totals).
template <int N>
__device__ void block_scan(int (&v)[N], int (&tot)[N], int* sc) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int inc[N];
#pragma unroll
  for (int q = 0; q < N; ++q) {
    inc[q] = v[q];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int t = __shfl_up_sync(kFull, inc[q], o);
      if (lane >= o) inc[q] += t;
    }
    if (lane == 31) sc[q * 32 + warp] = inc[q];
  }
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int q = 0; q < N; ++q) {
      int x = lane < kWarps ? sc[q * 32 + lane] : 0;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int t = __shfl_up_sync(kFull, x, o);
        if (lane >= o) x += t;
      }
      sc[q * 32 + lane] = x;
    }
  }
  __syncthreads();
#pragma unroll
  for (int q = 0; q < N; ++q) {
    tot[q] = sc[q * 32 + kWarps - 1];
    v[q] = (warp ? sc[q * 32 + warp - 1] : 0) + inc[q] - v[q];
  }
  __syncthreads();
}

struct alignas(16) Shared {
  int hist[256];
  int hist_all[256];  // a cluster's histograms summed
  int scan[4 * 32];
  int digit, kk, cnt, lnext;
  uint32_t root;
  int cgt, ceq;  // this CTA's slice: keys above T, keys equal to T
};

// The m-th largest key of the row (radix select, 8 bits a pass); *need = how many of the keys equal
// to it the selection takes, *eq = how many there are. A cluster of CTAs shares a row: each counts its
// slice [lo, hi), and every CTA sums the cluster's histograms through distributed shared memory (so all
// make the same choice).
__device__ uint32_t radix_select(const Row& row, int lo, int hi, int m, Shared& sh, int* need, int* eq) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  cg::cluster_group cluster = cg::this_cluster();
  const int ranks = static_cast<int>(cluster.num_blocks());
  uint32_t prefix = 0, pmask = 0;
  int kk = m;
  for (int shift = 24; shift >= 0; shift -= 8) {
    if (ranks > 1) cluster.sync();  // the others are done reading this CTA's last histogram
    for (int i = tid; i < 256; i += kThreads) sh.hist[i] = 0;
    __syncthreads();
    for (int base = lo; base < hi; base += kTile) {
      const int w0 = base + tid * kPer;
      const int n = hi;
      float v[kPer];
      row.load16(w0, n, v);
#pragma unroll
      for (int u = 0; u < kPer; ++u) {
        const uint32_t k = order_key(v[u]);
        const int bin = w0 + u < n && (k & pmask) == prefix ? static_cast<int>((k >> shift) & 255u) : 256;
        if (!__any_sync(kFull, bin < 256)) continue;  // later passes: most columns left the prefix
        const unsigned peers = __match_any_sync(kFull, bin);  // one atomic per distinct bin in the warp
        if (bin < 256 && lane == __ffs(peers) - 1) atomicAdd(&sh.hist[bin], __popc(peers));
      }
    }
    int* hist = sh.hist;
    if (ranks > 1) {
      cluster.sync();
      for (int i = tid; i < 256; i += kThreads) {
        int sum = 0;
        for (int r = 0; r < ranks; ++r) sum += cluster.map_shared_rank(sh.hist, r)[i];
        sh.hist_all[i] = sum;
      }
      hist = sh.hist_all;
    }
    __syncthreads();
    if (warp == 0) {  // lane l: bins 255-8l .. 248-8l; the bin where the count from the top reaches kk
      int c[8], local = 0;
#pragma unroll
      for (int b = 0; b < 8; ++b) local += c[b] = hist[255 - (lane * 8 + b)];
      int incl = local;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int t = __shfl_up_sync(kFull, incl, o);
        if (lane >= o) incl += t;
      }
      int acc = incl - local;
      if (acc < kk && kk <= incl) {
#pragma unroll
        for (int b = 0; b < 8; ++b) {
          if (acc < kk && kk <= acc + c[b]) {
            sh.digit = 255 - (lane * 8 + b);
            sh.kk = kk - acc;
            sh.cnt = c[b];
          }
          acc += c[b];
        }
      }
    }
    __syncthreads();
    prefix |= static_cast<uint32_t>(sh.digit) << shift;
    pmask |= 255u << shift;
    kk = sh.kk;
  }
  *need = kk;
  *eq = sh.cnt;
  return prefix;
}

__device__ __forceinline__ void set_bit(uint32_t* bits, int w) { atomicOr(&bits[w >> 5], 1u << (w & 31)); }

// libstdc++'s adjust_heap + push_heap (as pop_heap and make_heap call them) on a heap of keys, as one
// top-down pass: the hole descends the path of smaller children (ties: the right one, as
// `comp(right, left) ? left : right`) while that child is not above the value, the children moving up;
// the same writes as the library's descent to a leaf and climb back, since keys rise along the path.
// Node x lives at k[x + 1] / ix[x + 1], so a node's two children are one aligned 8-byte load.
__device__ void sift_down(uint32_t* k, int32_t* ix, int hole, int len, uint32_t vk, int32_t vi) {
  while (true) {
    const int right = 2 * hole + 2;
    int c;
    uint32_t ck;
    int32_t ci;
    if (right < len) {
      const uint2 kk = *reinterpret_cast<const uint2*>(k + right);  // nodes right - 1, right
      const int2 ii = *reinterpret_cast<const int2*>(ix + right);   // their columns, loaded alongside
      const bool left = kk.y > kk.x;
      c = left ? right - 1 : right;
      ck = left ? kk.x : kk.y;
      ci = left ? ii.x : ii.y;
    } else if (right - 1 < len) {
      c = right - 1;
      ck = k[right];
      ci = ix[right];
    } else {
      break;
    }
    if (ck > vk) break;
    k[hole + 1] = ck;
    ix[hole + 1] = ci;
    hole = c;
  }
  k[hole + 1] = vk;
  ix[hole + 1] = vi;
}

// partial_sort's heap_select over the row, replayed in shared memory: per tile, every thread keeps its
// columns above the heap root (the root only rises, so a column not above it now stays out) as
// candidates in column order, and one thread replays those insertions. Marks the chosen columns whose
// key is T. hk / hix: m + 1 entries each.
__device__ void replay_heap_select(const Row& row, int n, int m, uint32_t T, uint32_t* hk, int32_t* hix, uint2* cand,
                                   Shared& sh, uint32_t* bits) {
  const int tid = threadIdx.x;
  for (int j = tid; j < m; j += kThreads) hk[j + 1] = order_key(row.value(j)), hix[j + 1] = j;
  __syncthreads();
  if (tid == 0) {
    if (m >= 2)
      for (int parent = (m - 2) / 2; parent >= 0; --parent)
        sift_down(hk, hix, parent, m, hk[parent + 1], hix[parent + 1]);
    sh.root = hk[1];
  }
  __syncthreads();
  for (int base = m; base < n; base += kTile) {
    const int w0 = base + tid * kPer;
    float v[kPer];
    row.load16(w0, n, v);
    const uint32_t root = sh.root;
    int c[1] = {0}, total[1];
#pragma unroll
    for (int u = 0; u < kPer; ++u) c[0] += w0 + u < n && order_key(v[u]) > root;
    block_scan<1>(c, total, sh.scan);
#pragma unroll
    for (int u = 0; u < kPer; ++u)
      if (w0 + u < n && order_key(v[u]) > root) cand[c[0]++] = make_uint2(order_key(v[u]), w0 + u);
    __syncthreads();
    if (tid == 0) {
      uint32_t r = hk[1];
      for (int j = 0; j < total[0]; ++j) {
        const uint2 y = cand[j];
        if (y.x > r) {  // pop_heap: the root leaves, y sifts in
          sift_down(hk, hix, 0, m, y.x, static_cast<int32_t>(y.y));
          r = hk[1];
        }
      }
      sh.root = r;
    }
    __syncthreads();
  }
  for (int j = tid; j < m; j += kThreads)
    if (hk[j + 1] == T) set_bit(bits, hix[j + 1]);
}

// nth_element(q, q + m - 1, q + n) replayed by the CTA on q[0, n) = (value, column). Each Hoare
// partition: left stops (q[i] not before the pivot, i > F) and right stops (pivot not before q[i])
// pair up in order, the j-th from the left with the j-th from the right, while l_j < r_j; the pairs
// are found by prefix counts and swapped at once. Marks the chosen columns whose key is T.
__device__ void replay_nth_element(int n, int m, uint32_t T, Elem* q, int* ltbl, int* rtbl, Shared& sh,
                                   uint32_t* bits) {
  const int tid = threadIdx.x, nth = m - 1;
  int F = 0, L = n, depth = 2 * static_cast<int>(topk::floor_log2(n));
  int lo_set = 0, hi_set = m;  // afterwards the chosen ties are the T-valued q[lo_set, hi_set)
  while (true) {
    if (L - F <= 3) {
      if (tid == 0) topk::insertion_sort(q + F, q + L);
      break;
    }
    if (depth == 0) {  // introselect's fallback
      if (tid == 0) {
        topk::heap_select(q + F, q + nth + 1, q + L);
        topk::swap(q[F], q[nth]);
      }
      break;
    }
    --depth;
    if (tid == 0) topk::move_median_to_first(q + F, q + F + 1, q + F + (L - F) / 2, q + L - 1);
    if (tid == 0) sh.lnext = INT_MAX;
    __syncthreads();
    const Elem p = q[F];
    const int chunk = (L - F + kThreads - 1) / kThreads, lo = F + tid * chunk, hi = min(L, lo + chunk);
    int c[4] = {0, 0, 0, 0}, tot[4];  // left stops, right stops, keys > T, keys == T
    for (int i = lo; i < hi; ++i) {
      const Elem x = q[i];
      c[0] += i > F && !topk::before(x, p);
      c[1] += !topk::before(p, x);
      const uint32_t k = order_key(x.v);
      c[2] += k > T;
      c[3] += k == T;
    }
    block_scan<4>(c, tot, sh.scan);
    // The ties still in the range are all chosen or all not: the set is known without more partitions.
    const int slots = m - F;
    if (slots - tot[2] == tot[3]) {
      lo_set = 0, hi_set = L;
      break;
    }
    if (slots == tot[2]) {
      lo_set = 0, hi_set = F;
      break;
    }
    // j* = #{j : l_j < r_j} = #{left stops i of rank j with at least j right stops after i}.
    int pairs[1] = {0}, jstar[1];
    {
      int cl = c[0], cr = c[1];
      for (int i = lo; i < hi; ++i) {
        const Elem x = q[i];
        cr += !topk::before(p, x);
        if (i > F && !topk::before(x, p)) pairs[0] += ++cl <= tot[1] - cr;
      }
    }
    block_scan<1>(pairs, jstar, sh.scan);
    const int js = jstar[0];
    {
      int cl = c[0], cr = c[1];
      for (int i = lo; i < hi; ++i) {
        const Elem x = q[i];
        if (!topk::before(p, x)) {
          const int rank = tot[1] - cr++;  // right stops at positions >= i
          if (rank <= js) rtbl[rank - 1] = i;
        }
        if (i > F && !topk::before(x, p)) {
          const int rank = ++cl;
          if (rank <= js) ltbl[rank - 1] = i;
          if (rank == js + 1) sh.lnext = i;
        }
      }
    }
    __syncthreads();
    for (int j = tid; j < js; j += kThreads) topk::swap(q[ltbl[j]], q[rtbl[j]]);
    const int cut = js == 0 ? sh.lnext : min(sh.lnext, rtbl[js - 1]);
    __syncthreads();
    if (cut <= nth) F = cut;
    else L = cut;
  }
  __syncthreads();
  for (int i = lo_set + tid; i < hi_set; i += kThreads)
    if (order_key(q[i].v) == T) set_bit(bits, q[i].i);
}

__global__ void __launch_bounds__(kThreads) index_topk_kernel(IndexTopkArgs a, int64_t intro_cap, Elem* ws_q,
                                                              int* ws_tbl) {
  extern __shared__ __align__(16) unsigned char smem[];
  Shared& sh = *reinterpret_cast<Shared*>(smem);
  Elem* cand = reinterpret_cast<Elem*>(smem + sizeof(Shared));  // heap candidates, or a short row's pairs
  const int64_t hstride = (a.K + 3) & ~int64_t{1};  // heap keys / columns, 1-based, 8-byte aligned
  uint32_t* hk = reinterpret_cast<uint32_t*>(cand + kTile);
  int32_t* hix = reinterpret_cast<int32_t*>(hk + hstride);
  uint32_t* bits = reinterpret_cast<uint32_t*>(hix + hstride);
  const int tid = threadIdx.x;
  Elem* q = ws_q + blockIdx.x * intro_cap;
  int* ltbl = ws_tbl + 2 * blockIdx.x * intro_cap;
  int* rtbl = ltbl + intro_cap;
  cg::cluster_group cluster = cg::this_cluster();
  const int ranks = static_cast<int>(cluster.num_blocks()), rank = static_cast<int>(cluster.block_rank());
  const int64_t cid = blockIdx.x / ranks, clusters = gridDim.x / ranks;
  for (int64_t t = cid; t < a.tokens; t += clusters) {
    const Row row{a.scores + t * a.ld, a.mask ? a.mask + t * a.ld : nullptr};
    const int n = a.ranked[t], m = min(a.topk[t], n), vis = a.visible[t];
    int32_t* out = a.sel + t * a.K;
    if (rank == 0)
      for (int j = max(m, 0) + tid; j < a.K; j += kThreads) out[j] = -1;
    if (m <= 0) continue;
    // This CTA's slice of the row (a multiple of 16 columns wide).
    const int slice = (n + ranks * kPer - 1) / (ranks * kPer) * kPer;
    int lo = min(n, rank * slice), hi = min(n, lo + slice);
    int need, eq;
    const uint32_t T = radix_select(row, lo, hi, m, sh, &need, &eq);
    const bool all_ties = need == eq, lowest = a.ties == TopkTies::kLowestColumn;
    int done = 0, eq_done = 0;  // chosen columns and columns equal to T before this slice
    if (ranks > 1) {
      if (!all_ties && !lowest) {  // the replay below runs on the whole row, in CTA 0
        lo = 0, hi = rank == 0 ? n : 0;
        cluster.sync();  // (the last histogram reads are done)
      } else {
        int c[2] = {0, 0}, tot[2];
        for (int base = lo; base < hi; base += kTile) {
          const int w0 = base + tid * kPer;
          float v[kPer];
          row.load16(w0, hi, v);
#pragma unroll
          for (int u = 0; u < kPer; ++u) {
            const uint32_t k = order_key(v[u]);
            c[0] += w0 + u < hi && k > T;
            c[1] += w0 + u < hi && k == T;
          }
        }
        block_scan<2>(c, tot, sh.scan);
        if (tid == 0) sh.cgt = tot[0], sh.ceq = tot[1];
        cluster.sync();
        for (int r = 0; r < rank; ++r) {
          const int g = *cluster.map_shared_rank(&sh.cgt, r), e = *cluster.map_shared_rank(&sh.ceq, r);
          done += g + max(0, min(e, need - eq_done));
          eq_done += e;
        }
        cluster.sync();  // every CTA has read the counts
      }
    }
    if (hi <= lo) continue;
    if (!all_ties && !lowest) {
      for (int i = tid; i < (n + 31) / 32; i += kThreads) bits[i] = 0;
      __syncthreads();
      if (static_cast<int64_t>(m) * 64 <= n) {
        replay_heap_select(row, n, m, T, hk, hix, reinterpret_cast<uint2*>(cand), sh, bits);
      } else {
        Elem* qr = n <= kTile ? cand : q;  // in shared memory when it fits
        for (int j = tid; j < n; j += kThreads) qr[j] = {row.value(j), j};
        __syncthreads();
        replay_nth_element(n, m, T, qr, ltbl, rtbl, sh, bits);
      }
      __syncthreads();
    }
    // Chosen columns in ascending order, a tile at a time: each thread's run, offset by a prefix sum.
    for (int base = lo; base < hi; base += kTile) {
      const int w0 = base + tid * kPer;
      float v[kPer];
      row.load16(w0, hi, v);
      unsigned pick = 0, eqm = 0;
#pragma unroll
      for (int u = 0; u < kPer; ++u) {
        const int w = w0 + u;
        const uint32_t k = order_key(v[u]);
        if (w < hi && k == T) eqm |= 1u << u;
        if (w < hi && (k > T || (k == T && (all_ties || lowest || ((bits[w >> 5] >> (w & 31)) & 1u))))) pick |= 1u << u;
      }
      if (lowest && !all_ties) {  // the first `need` columns equal to T, in column order
        int e[1] = {__popc(eqm)}, etot[1];
        block_scan<1>(e, etot, sh.scan);
        for (unsigned x = eqm; x; x &= x - 1)
          if (eq_done + e[0]++ >= need) pick &= ~(x & -x);
        eq_done += etot[0];
      }
      int off[1] = {__popc(pick)}, total[1];
      block_scan<1>(off, total, sh.scan);
      for (int o = done + off[0]; pick; pick &= pick - 1, ++o) {
        const int w = w0 + __ffs(pick) - 1;
        if (o < a.K) out[o] = w < vis ? w : -1;
      }
      done += total[0];
    }
    __syncthreads();  // bits and the shared state are reused by the next row
  }
}

int device_sms() {
  int dev = 0, sms = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  return std::max(sms, 1);
}

// Rows per launch and CTAs per row: a batch of at most SMs / 8 long rows is split over clusters of 8
// CTAs (one row's passes spread over 8 SMs: 46 -> 21 us at n = 32768, 217 -> 44 us at 262144, one row);
// otherwise one CTA a row, at most two CTAs per SM in the grid (pairs of CTAs per row measured slower:
// 46 -> 67 us at 64 rows of 32768, the cluster barriers costing more than the halved slice).
struct Shape {
  int ranks;
  int64_t grid;
};
Shape launch_shape(int64_t tokens, int64_t ld) {
  const int64_t sms = device_sms();
  const int ranks = ld >= 16384 && tokens * 8 <= sms ? 8 : 1;
  return {ranks, std::max<int64_t>(1, std::min<int64_t>(tokens, 2 * sms / ranks)) * ranks};
}
int64_t intro_cap(int64_t ld, int64_t K) { return std::max<int64_t>(1, std::min(ld, 64 * K)); }

}  // namespace

size_t index_topk_workspace_bytes(int64_t tokens, int64_t ld, int64_t K) {
  return static_cast<size_t>(launch_shape(tokens, ld).grid * intro_cap(ld, K)) * (sizeof(Elem) + 2 * sizeof(int));
}

void index_topk(const IndexTopkArgs& a, void* workspace, void* stream) {
  check(a.tokens >= 0 && a.ld >= 0 && a.K >= 0 && a.ld <= INT32_MAX / 2, "index_topk: invalid sizes");
  if (a.tokens == 0 || a.K == 0) return;
  const Shape shape = launch_shape(a.tokens, a.ld);
  const int64_t grid = shape.grid, cap = intro_cap(a.ld, a.K);
  const size_t smem = sizeof(Shared) + kTile * sizeof(Elem) + 2 * ((a.K + 3) & ~int64_t{1}) * sizeof(uint32_t) +
                      (a.ld + 31) / 32 * sizeof(uint32_t);
  int dev = 0, optin = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  check(smem <= static_cast<size_t>(optin), "index_topk: K ", a.K, " with rows of ", a.ld,
        " columns needs more shared memory than the device has");
  if (smem > 48 * 1024) cudaFuncSetAttribute(index_topk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  Elem* q = static_cast<Elem*>(workspace);
  int* tbl = reinterpret_cast<int*>(q + grid * cap);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(grid));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = static_cast<cudaStream_t>(stream);
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = static_cast<unsigned>(shape.ranks), attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  cudaLaunchKernelEx(&cfg, index_topk_kernel, a, cap, q, tbl);
  const cudaError_t e = cudaGetLastError();
  check(e == cudaSuccess, "index_topk launch: ", cudaGetErrorString(e));
}

}  // namespace deepinfer::cuda
