// Times the raw-pointer kernels (src/backends/cuda/kernels/) at DeepSeek-V4.1-Flash shapes, decode and
// prefill: per call inside a CUDA graph of `reps` calls (median of 5 replays; what a graph-captured
// forward sees, without the per-launch gaps), and one launch at a time between CUDA events (median). Inputs are random bytes (never zeros)
// and each timed call reads another copy of the weights and activations among copies totalling >= 4x
// the L2, so weights stream from HBM as in a real forward. Prints one machine-readable line per row:
//   KROW|kernel|shape|graph_us|bytes|flops|event_us
// (bench/cuda/report.py joins these with the peer timings and the ceilings of the same run and prints
// the table with floors), plus the copy ceiling measured here:
//   CEIL|copy_tb_s|value
//   bench_cuda_kernels [--quick | --moe | --moe-decode | --moe-prefill | --indexer | --attention]   (--moe /
//   --indexer / --attention: the copy ceiling and the routed-expert rows / the indexer rows / sparse
//   attention and candidate_mask only; --moe-decode / --moe-prefill: the routed-expert rows at decode
//   sizes, m 1..512 tokens, or prefill sizes, m 1024..16384: 16..256 rows an expert; --moe-prefill M: m = M only)
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/kernels/fp8_gemm.h"
#include "backends/cuda/kernels/index_topk.h"
#include "backends/cuda/kernels/sparse_attention.h"
#include "core/dtype.h"

namespace {

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "CUDA error %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// A device pool of random bytes; `pick` hands out 256-byte-aligned slices at rotating offsets.
struct Pool {
  uint8_t* base = nullptr;
  size_t bytes = 0;
  explicit Pool(size_t n, uint64_t seed, uint8_t (*map)(uint64_t)) : bytes(n) {
    std::vector<uint8_t> h(n);
    uint64_t x = seed;
    for (size_t i = 0; i < n; ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      h[i] = map(x);
    }
    ck(cudaMalloc(&base, n), "cudaMalloc pool");
    ck(cudaMemcpy(base, h.data(), n, cudaMemcpyHostToDevice), "pool upload");
  }
  ~Pool() { cudaFree(base); }
  // The i-th of a run of `len`-byte slices, 256-byte aligned, wrapping around the pool.
  uint8_t* slice(int i, size_t len) const {
    const size_t stride = (len + 255) / 256 * 256;
    return base + (static_cast<size_t>(i) * stride) % (bytes - len + 1) / 256 * 256;
  }
};

uint8_t e4m3_byte(uint64_t x) {  // finite e4m3, magnitude code 0x00..0x5f (|v| <= 4): sums stay tame
  uint8_t b = static_cast<uint8_t>(x >> 24);
  return static_cast<uint8_t>((b & 0x80) | ((b & 0x7f) % 0x60));
}
uint8_t scale_byte(uint64_t x) { return static_cast<uint8_t>(120 + (x >> 33) % 12); }

double time_us(cudaStream_t s, const std::function<void(int)>& fn, int reps, int warmup = 3) {
  for (int i = 0; i < warmup; ++i) fn(i);
  ck(cudaStreamSynchronize(s), "warmup");
  cudaEvent_t a, b;
  ck(cudaEventCreate(&a), "event");
  ck(cudaEventCreate(&b), "event");
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; ++i) {
    ck(cudaEventRecord(a, s), "record");
    fn(warmup + i);
    ck(cudaEventRecord(b, s), "record");
    ck(cudaEventSynchronize(b), "sync");
    ck(cudaEventElapsedTime(&ms[i], a, b), "elapsed");
  }
  ck(cudaGetLastError(), "timed launches");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return 1e3 * ms[reps / 2];
}

// Per-call microseconds of fn(0..reps-1) captured in one CUDA graph (median of 5 replays after one).
double time_graph_us(cudaStream_t s, const std::function<void(int)>& fn, int reps) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  ck(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "begin capture");
  for (int i = 0; i < reps; ++i) fn(i);
  ck(cudaStreamEndCapture(s, &g), "end capture");
  ck(cudaGraphInstantiate(&ge, g, 0), "instantiate");
  const double us = time_us(s, [&](int) { ck(cudaGraphLaunch(ge, s), "graph launch"); }, 5, 1);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  return us / reps;
}

void row(const std::string& kernel, const std::string& shape, cudaStream_t s, const std::function<void(int)>& fn,
         int reps, double bytes, double flops, bool graph = true) {
  // At least 50 ms of this row's calls first: the first row of a call otherwise runs while the clocks
  // ramp up from idle (seen on the H200: the same kernel 4-25% slower as a call's first benchmark).
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(50); ++i) {
    fn(i);
    if (i % 8 == 7) ck(cudaStreamSynchronize(s), "clock warm-up");
  }
  ck(cudaStreamSynchronize(s), "clock warm-up");
  const double event_us = time_us(s, fn, reps), graph_us = graph ? time_graph_us(s, fn, reps) : event_us;
  std::printf("KROW|%s|%s|%.2f|%.0f|%.0f|%.2f\n", kernel.c_str(), shape.c_str(), graph_us, bytes, flops, event_us);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const bool moe_decode = argc > 1 && std::strcmp(argv[1], "--moe-decode") == 0;
  const bool moe_prefill = argc > 1 && std::strcmp(argv[1], "--moe-prefill") == 0;
  const bool moe_only = moe_decode || moe_prefill || (argc > 1 && std::strcmp(argv[1], "--moe") == 0);
  const bool indexer_only = argc > 1 && std::strcmp(argv[1], "--indexer") == 0;
  const bool attention_only = argc > 1 && std::strcmp(argv[1], "--attention") == 0;
  const int reps = quick ? 10 : 30;
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::printf("bench_cuda_kernels: no CUDA device, skipped\n");
    return 0;
  }
  cudaDeviceProp prop{};
  ck(cudaGetDeviceProperties(&prop, 0), "props");
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  cudaStream_t s;
  ck(cudaStreamCreate(&s), "stream");
  const size_t rotate_bytes = 4 * static_cast<size_t>(prop.l2CacheSize);

  {  // copy ceiling: 2 GiB device-to-device, bytes read + written
    const size_t n = size_t{1} << 31;
    void *x, *y;
    ck(cudaMalloc(&x, n), "cudaMalloc");
    ck(cudaMalloc(&y, n), "cudaMalloc");
    ck(cudaMemset(x, 0x5a, n), "memset");
    const double us = time_us(s, [&](int) { ck(cudaMemcpyAsync(y, x, n, cudaMemcpyDeviceToDevice, s), "copy"); }, 10);
    std::printf("CEIL|copy_tb_s|%.3f\n", 2.0 * n / us * 1e-6);
    cudaFree(x);
    cudaFree(y);
  }

  // Operand pools: 1 GiB of e4m3 codes, 64 MiB of scale bytes.
  Pool codes(size_t{1} << 30, 0x9e3779b97f4a7c15ull, e4m3_byte);
  Pool scales(size_t{64} << 20, 0x243f6a8885a308d3ull, scale_byte);
  uint16_t* y = nullptr;
  ck(cudaMalloc(&y, size_t{16384} * 32768 * 2), "cudaMalloc y");
  void* work = nullptr;
  size_t work_bytes = 0;

  // V4.1-Flash projections (k -> n): q_a, q_b, o_b, shared expert gate+up, shared expert down.
  struct Proj { const char* name; int64_t k, n; };
  const Proj projs[] = {{"q_a", 5120, 1280}, {"q_b", 1280, 32768}, {"o_b", 8192, 5120}, {"sh_gate_up", 5120, 4608},
                        {"sh_down", 2304, 5120}};
  std::vector<int64_t> ms = {1, 8, 32, 64, 256, 4096, 16384};
  if (quick) ms = {1, 64, 4096};
  for (int blk : {32, 128})
    for (const Proj& p : projs)
      for (int64_t m : ms) {
        if (moe_only || indexer_only || attention_only) break;
        const size_t a_bytes = m * p.k, w_bytes = p.n * p.k;
        const int64_t ld_as = (m + 15) / 16 * 16;
        const size_t as_bytes = p.k / blk * ld_as, ws_bytes = (p.n + blk - 1) / blk * (p.k / blk);
        const int copies = static_cast<int>(std::clamp<size_t>(rotate_bytes / (a_bytes + w_bytes) + 1, 1, 64));
        const size_t need = deepinfer::cuda::fp8_gemm_workspace_bytes(m, p.n, p.k, blk);
        if (need > work_bytes) {
          cudaFree(work);
          ck(cudaMalloc(&work, need), "cudaMalloc workspace");
          work_bytes = need;
        }
        auto call = [&](int i) {
          deepinfer::cuda::Fp8GemmArgs a;
          const int c = i % copies;
          a.w = codes.slice(2 * c, w_bytes);
          a.a = codes.slice(2 * c + 1, a_bytes);
          a.a_scale = scales.slice(2 * c, as_bytes);
          a.w_scale = scales.slice(2 * c + 1, ws_bytes);
          a.lda = a.ldw = p.k;
          a.ld_as = ld_as;
          a.ld_ws = p.k / blk;
          a.y = y;
          a.ldy = p.n;
          a.m = m, a.n = p.n, a.k = p.k, a.blk = blk;
          deepinfer::cuda::fp8_gemm(a, work, s);
        };
        const double bytes = a_bytes + w_bytes + as_bytes + ws_bytes + 2.0 * m * p.n;
        char shape[96];
        std::snprintf(shape, sizeof shape, "%s m%lld k%lld n%lld", p.name, static_cast<long long>(m),
                      static_cast<long long>(p.k), static_cast<long long>(p.n));
        row("fp8_gemm blk" + std::to_string(blk), shape, s, call, reps, bytes, 2.0 * m * p.n * p.k);
      }

  // Routed experts (V4.1-Flash: 384 experts, top-6; gate+up fused n = 2 x 2304, down k = 2304) as one
  // grouped MXFP4 GEMM over the rows the batch routes to each expert. Every rep draws another routing
  // (6 distinct experts per token), so the experts' weights stream from HBM.
  {
    const int64_t E = 384, topk = 6;
    struct Moe { const char* name; int64_t k, n; };
    const Moe moes[] = {{"experts_gate_up", 5120, 4608}, {"experts_down", 2304, 5120}};
    std::vector<int64_t> mts = {1, 8, 32, 64, 512, 4096};
    if (quick) mts = {1, 64, 4096};
    if (moe_decode) mts = {1, 8, 32, 64, 512};
    if (moe_prefill) mts = {1024, 2048, 4096, 8192, 16384};
    if (moe_prefill && argc > 2) mts = {std::atoll(argv[2])};  // one size (for profiling)
    std::mt19937 rng(7);
    for (const Moe& mo : moes) {
      if (indexer_only || attention_only) break;
      const size_t w_bytes = E * mo.n * mo.k / 2, ws_bytes = mo.k / 32 * E * mo.n;
      uint8_t *w = nullptr, *wsc = nullptr;
      ck(cudaMalloc(&w, w_bytes), "cudaMalloc experts");
      for (size_t off = 0; off < w_bytes; off += codes.bytes)  // tile the random pool over all experts
        ck(cudaMemcpy(w + off, codes.base, std::min(codes.bytes, w_bytes - off), cudaMemcpyDeviceToDevice), "tile");
      ck(cudaMalloc(&wsc, ws_bytes), "cudaMalloc expert scales");
      for (size_t off = 0; off < ws_bytes; off += scales.bytes)
        ck(cudaMemcpy(wsc + off, scales.base, std::min(scales.bytes, ws_bytes - off), cudaMemcpyDeviceToDevice), "tile");
      for (int64_t m : mts) {
        const int routings = 8;
        const int64_t rows = m * topk;
        std::vector<int> offs_h;  // routings x (E + 1)
        int max_rows = 0;
        double active = 0;
        for (int r = 0; r < routings; ++r) {
          std::vector<int> count(E, 0);
          for (int64_t t = 0; t < m; ++t) {
            std::vector<int> pick;
            while (static_cast<int64_t>(pick.size()) < topk) {
              const int e = static_cast<int>(rng() % E);
              if (std::find(pick.begin(), pick.end(), e) == pick.end()) pick.push_back(e);
            }
            for (int e : pick) ++count[e];
          }
          offs_h.push_back(0);
          for (int64_t e = 0; e < E; ++e) {
            offs_h.push_back(offs_h.back() + count[e]);
            max_rows = std::max(max_rows, count[e]);
            active += count[e] > 0;
          }
        }
        active /= routings;
        int* offs = nullptr;
        ck(cudaMalloc(&offs, offs_h.size() * sizeof(int)), "cudaMalloc offsets");
        ck(cudaMemcpy(offs, offs_h.data(), offs_h.size() * sizeof(int), cudaMemcpyHostToDevice), "offsets");
        void* act_work = nullptr;  // the prefill kernel's bf16 activations (sized on the first call)
        size_t act_work_bytes = 0;
        auto call = [&](int i) {
          deepinfer::cuda::Fp8GemmArgs a;
          a.a = codes.slice(1, rows * mo.k);
          a.lda = mo.k;
          a.ld_as = (rows + 15) / 16 * 16;
          a.a_scale = scales.slice(1, mo.k / 32 * a.ld_as);
          a.w = w, a.ldw = mo.k / 2, a.w_scale = wsc, a.ld_ws = E * mo.n;
          a.y = y, a.ldy = mo.n;
          a.m = rows, a.n = mo.n, a.k = mo.k, a.blk = 32;
          a.wfmt = deepinfer::cuda::WeightFormat::kMxfp4;
          a.groups = static_cast<int>(E);
          a.group_offsets = offs + (i % routings) * (E + 1);
          a.max_group_rows = max_rows;
          if (const size_t need = deepinfer::cuda::fp8_gemm_workspace_bytes(a); need > act_work_bytes) {
            ck(cudaFree(act_work), "cudaFree workspace");
            ck(cudaMalloc(&act_work, need), "cudaMalloc workspace");
            act_work_bytes = need;
          }
          deepinfer::cuda::fp8_gemm(a, act_work, s);
        };
        // Bytes: the active experts' FP4 weights and scales, the routed rows in and out.
        const double bytes = active * (mo.n * mo.k / 2.0 + mo.n * mo.k / 32.0) + rows * (mo.k * 33.0 / 32 + 2.0 * mo.n);
        char shape[96];
        std::snprintf(shape, sizeof shape, "%s m%lld top6 E384 k%lld n%lld", mo.name, static_cast<long long>(m),
                      static_cast<long long>(mo.k), static_cast<long long>(mo.n));
        // Past 24 rows an expert on average the kernel multiplies in bf16 (mxfp4_prefill.cu): report.py
        // takes the bf16 rate for the FLOP floor of rows named so.
        const char* mma = rows > 24 * E ? "grouped mxfp4 bf16-mma (" : "grouped mxfp4 (";
        row(mma + std::to_string(static_cast<int>(active)) + " experts)", shape, s, call,
            m >= 8192 ? 5 : reps, bytes, 2.0 * rows * mo.n * mo.k);  // 5: calls of 10+ ms
        cudaFree(offs);
        cudaFree(act_work);
      }
      cudaFree(w);
      cudaFree(wsc);
    }
  }

  // Sparse attention (V4.1: 64 heads x 512, top-512 + window 128 = 640 rows a token) over a 65536-row
  // arena, ~5% of the indices empty. Bytes: q and out once, each token's rows once (128 FP8 window rows of
  // 528 B, 512 FP4 compressed rows of 288 B: the state arena's packed rows, random codes read back to
  // back). Rows: the kernel on bf16 tensors; on fp32 q / out holding bf16 values (what the CUDA backend's
  // sparse_attention_online hands it); and that op itself, by default (the same kernel) and with DEEPINFER_ATTENTION=exact (the
  // fp32 kernel; one launch at a time, no graph).
  float* attn_f32 = nullptr;  // [65536 rows + 1024 * 64 q rows, 512] random bf16 values
  deepinfer::cuda::CudaBackend* attn_be[2] = {nullptr, nullptr};
  if (!moe_only) {
    const size_t n = size_t{65536 + 1024 * 64} * 512;
    std::vector<float> h(n);
    uint64_t x = 0x2545f4914f6cdd1dull;
    for (auto& v : h) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      v = deepinfer::bf16_to_float(deepinfer::float_to_bf16(static_cast<float>(x >> 40) / 8388608.0f - 1.0f));
    }
    ck(cudaMalloc(&attn_f32, n * 4), "cudaMalloc attn_f32");
    ck(cudaMemcpy(attn_f32, h.data(), n * 4, cudaMemcpyHostToDevice), "attn_f32");
    attn_be[0] = new deepinfer::cuda::CudaBackend(0);
    setenv("DEEPINFER_ATTENTION", "exact", 1);
    attn_be[1] = new deepinfer::cuda::CudaBackend(0);
    unsetenv("DEEPINFER_ATTENTION");
  }
  if (!moe_only)
    for (int64_t t : {int64_t{64}, int64_t{256}, int64_t{1024}}) {
      const int64_t H = 64, D = 512, K = 640, N = 65536;
      std::vector<int32_t> idx_h(t * K);
      std::mt19937 r(11);
      for (auto& v : idx_h) v = r() % 20 == 0 ? -1 : static_cast<int32_t>(r() % N);
      int32_t* idx = nullptr;
      float* sink = nullptr;
      uint16_t* out = nullptr;
      ck(cudaMalloc(&idx, idx_h.size() * 4), "cudaMalloc idx");
      ck(cudaMemcpy(idx, idx_h.data(), idx_h.size() * 4, cudaMemcpyHostToDevice), "idx");
      ck(cudaMalloc(&sink, H * 4), "cudaMalloc sink");
      ck(cudaMemset(sink, 0, H * 4), "sink");
      ck(cudaMalloc(&out, t * H * D * 2), "cudaMalloc out");
      auto call = [&](int) {
        deepinfer::cuda::SparseAttnArgs a;
        a.q = reinterpret_cast<const uint16_t*>(codes.slice(0, t * H * D * 2));  // e4m3 codes read as bf16: finite
        a.pool = codes.slice(1, N * 528), a.pool_block_bytes = 0;
        a.idx = idx, a.k = K, a.window = 128, a.sink = sink, a.scale = 0.04f, a.out = out;
        a.tokens = t, a.heads = H, a.dim = D;
        deepinfer::cuda::sparse_attention_bf16(a, s);
      };
      char shape[64];
      std::snprintf(shape, sizeof shape, "t%lld h64 d512 k640", static_cast<long long>(t));
      const double row_bytes = t * (128 * 528.0 + (K - 128) * 288.0 + K * 4);
      row("sparse_attention bf16", shape, s, call, reps, 2.0 * t * H * D * 2 + row_bytes, 4.0 * t * H * K * D);
      const auto* pool8 = reinterpret_cast<const uint8_t*>(codes.slice(1, N * 528));
      const float* q32 = attn_f32 + N * D;
      float* out32 = nullptr;
      ck(cudaMalloc(&out32, t * H * D * 4), "cudaMalloc out32");
      auto call32 = [&](int) {
        deepinfer::cuda::SparseAttnArgs a;
        a.q = q32, a.pool = pool8, a.idx = idx, a.k = K, a.window = 128, a.sink = sink, a.scale = 0.04f;
        a.out = out32, a.tokens = t, a.heads = H, a.dim = D, a.f32 = true;
        deepinfer::cuda::sparse_attention_bf16(a, s);
      };
      const double bytes32 = 2.0 * t * H * D * 4 + row_bytes;
      row("sparse_attention bf16 (f32 q/out)", shape, s, call32, reps, bytes32, 4.0 * t * H * K * D);
      for (int e = 0; e < 2; ++e) {
        deepinfer::cuda::CudaBackend& be = *attn_be[e];
        auto op = [&](int) { be.sparse_attention_online(q32, t, H, D, pool8, 0, nullptr, idx, K, 128, sink, 0.04f, 64, out32); };
        row(e == 0 ? "sparse_attention_online op, tensor (bf16 mma)" : "sparse_attention_online op, exact (fp32 cores)",
            shape, static_cast<cudaStream_t>(be.stream()), op, e == 0 ? reps : 5, bytes32, 4.0 * t * H * K * D, e == 0);
      }
      cudaFree(out32);
      cudaFree(idx);
      cudaFree(sink);
      cudaFree(out);
    }

  // candidate_mask (CudaBackend op) at V4.1-Flash's setting: the top 2048 of 4096 blocks of 8 over 32768
  // compressed rows, bf16-valued scores (ties straddle the 2048th block maximum). Bytes: scores read once,
  // the mask written once.
  if (!moe_only)
    for (int64_t t : {int64_t{64}, int64_t{1024}}) {
      const int64_t n = 32768;
      std::vector<float> h(t * n);
      uint64_t x = 0x9e3779b97f4a7c15ull + t;
      for (auto& v : h) {
        float u = 0;
        for (int i = 0; i < 4; ++i) {
          x ^= x << 13, x ^= x >> 7, x ^= x << 17;
          u += static_cast<float>(x >> 40) * (1.0f / 16777216.0f) - 0.5f;
        }
        v = deepinfer::round_to_bf16(std::fabs(u) * 5.2f);
      }
      std::vector<int32_t> mh(3 * t);
      for (int64_t i = 0; i < t; ++i)
        mh[i] = static_cast<int32_t>(n), mh[t + i] = static_cast<int32_t>(n - i), mh[2 * t + i] = static_cast<int32_t>(n / 8);
      float* sc = nullptr;
      int32_t* meta = nullptr;
      uint8_t* mask = nullptr;
      ck(cudaMalloc(&sc, h.size() * 4), "cudaMalloc scores");
      ck(cudaMemcpy(sc, h.data(), h.size() * 4, cudaMemcpyHostToDevice), "scores");
      ck(cudaMalloc(&meta, mh.size() * 4), "cudaMalloc meta");
      ck(cudaMemcpy(meta, mh.data(), mh.size() * 4, cudaMemcpyHostToDevice), "meta");
      ck(cudaMalloc(&mask, t * n), "cudaMalloc mask");
      deepinfer::cuda::CudaBackend& be = *attn_be[0];
      auto call = [&](int) { be.candidate_mask(sc, t, n, meta, meta + t, meta + 2 * t, 8, 2048, mask); };
      char shape[64];
      std::snprintf(shape, sizeof shape, "t%lld n%lld b8 top2048", static_cast<long long>(t), static_cast<long long>(n));
      row("candidate_mask (ties, CPU order)", shape, static_cast<cudaStream_t>(be.stream()), call, 10, 5.0 * t * n, 0);
      cudaFree(sc), cudaFree(meta), cudaFree(mask);
    }
  cudaFree(attn_f32);
  delete attn_be[0];
  delete attn_be[1];

  // Indexer top-512 (index_select's kernel) over n compressed rows per token: fp32 scores (no tie at the
  // 512th value: the radix select alone) and bf16-rounded ones as index_scores makes them (ties: the CPU's
  // tie order replayed; n >= 32768 is partial_sort's heap). Bytes: the scores read once, the selection.
  if (!moe_only && !attention_only) {
    struct Sel { int64_t t, n; };
    const Sel sels[] = {{1, 8192}, {64, 8192}, {256, 8192}, {4096, 8192}, {1, 32768}, {64, 32768},
                        {1, 262144}, {64, 262144}};
    const int64_t K = 512;
    for (const int variant : {0, 1, 2})  // fp32 scores; bf16 scores; bf16 scores, lowest-column ties
      for (const Sel& c : sels) {
        const bool bf16 = variant > 0;
        std::vector<float> h(c.t * c.n);
        uint64_t x = 0x853c49e6748fea9bull + c.t * 7 + c.n;
        for (auto& v : h) {  // |normal-ish| * 3 from the sum of 4 uniforms
          float u = 0;
          for (int i = 0; i < 4; ++i) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            u += static_cast<float>(x >> 40) * (1.0f / 16777216.0f) - 0.5f;
          }
          v = std::fabs(u) * 5.2f;
          if (bf16) v = deepinfer::round_to_bf16(v);
        }
        float* sc = nullptr;
        int32_t *meta = nullptr, *sel = nullptr;
        ck(cudaMalloc(&sc, h.size() * 4), "cudaMalloc scores");
        ck(cudaMemcpy(sc, h.data(), h.size() * 4, cudaMemcpyHostToDevice), "scores");
        std::vector<int32_t> mh(3 * c.t);
        for (int64_t t = 0; t < c.t; ++t) mh[t] = mh[c.t + t] = static_cast<int32_t>(c.n), mh[2 * c.t + t] = K;
        ck(cudaMalloc(&meta, mh.size() * 4), "cudaMalloc meta");
        ck(cudaMemcpy(meta, mh.data(), mh.size() * 4, cudaMemcpyHostToDevice), "meta");
        ck(cudaMalloc(&sel, c.t * K * 4), "cudaMalloc sel");
        void* ws = nullptr;
        ck(cudaMalloc(&ws, deepinfer::cuda::index_topk_workspace_bytes(c.t, c.n, K)), "cudaMalloc ws");
        auto call = [&](int) {
          deepinfer::cuda::IndexTopkArgs a;
          a.scores = sc, a.ld = c.n, a.ranked = meta, a.visible = meta + c.t, a.topk = meta + 2 * c.t;
          a.tokens = c.t, a.K = K, a.sel = sel;
          if (variant == 2) a.ties = deepinfer::cuda::TopkTies::kLowestColumn;
          deepinfer::cuda::index_topk(a, ws, s);
        };
        char shape[64];
        std::snprintf(shape, sizeof shape, "t%lld n%lld k512", static_cast<long long>(c.t),
                      static_cast<long long>(c.n));
        const char* names[] = {"index_topk fp32 scores", "index_topk bf16 scores (ties, CPU order)",
                               "index_topk bf16 scores (ties, lowest column)"};
        row(names[variant], shape, s, call, c.n >= 32768 && variant == 1 ? 5 : reps, 4.0 * c.t * c.n + 4.0 * c.t * K,
            0);
        cudaFree(sc), cudaFree(meta), cudaFree(sel), cudaFree(ws);
      }
  }

  // Indexer scores (CudaBackend::index_scores, fp32 math on packed FP4 keys of 68 B, dim 128, 32 heads): decode tokens with their own W
  // keys each (random rows of a 2^20-row arena) and a prefill chunk of tokens sharing W keys. Bytes: the
  // key rows each token reads (once per sequence), q, weights and the scores; FLOPs: 2 * 32 * 128 a pair.
  if (!moe_only && !attention_only) {
    deepinfer::cuda::CudaBackend be;
    const auto bs = static_cast<cudaStream_t>(be.stream());
    const int64_t H = 32, D = 128, N = int64_t{1} << 20;
    const auto* arena = reinterpret_cast<const uint8_t*>(codes.slice(0, N * 68));  // random bytes as FP4 keys
    const auto* arena_f32 = reinterpret_cast<const float*>(codes.slice(0, N * D * 4));  // q and weights
    struct Sc { int64_t t, w; bool shared; };
    for (const Sc c : {Sc{1, 8192, false}, Sc{64, 8192, false}, Sc{1, 65536, false}, Sc{64, 65536, false},
                       Sc{1024, 8192, true}}) {
      std::vector<int32_t> rows_h(c.shared ? c.w : c.t * c.w), begin_h(c.t), width_h(c.t, static_cast<int32_t>(c.w));
      std::mt19937 r(5);
      for (auto& v : rows_h) v = static_cast<int32_t>(r() % N);
      for (int64_t t = 0; t < c.t; ++t) begin_h[t] = static_cast<int32_t>(c.shared ? 0 : t * c.w);
      int32_t *rows = nullptr, *begin = nullptr, *width = nullptr;
      float *qd = nullptr, *wd = nullptr, *out = nullptr;
      ck(cudaMalloc(&rows, rows_h.size() * 4), "cudaMalloc rows");
      ck(cudaMemcpy(rows, rows_h.data(), rows_h.size() * 4, cudaMemcpyHostToDevice), "rows");
      ck(cudaMalloc(&begin, c.t * 4), "cudaMalloc begin");
      ck(cudaMemcpy(begin, begin_h.data(), c.t * 4, cudaMemcpyHostToDevice), "begin");
      ck(cudaMalloc(&width, c.t * 4), "cudaMalloc width");
      ck(cudaMemcpy(width, width_h.data(), c.t * 4, cudaMemcpyHostToDevice), "width");
      ck(cudaMalloc(&qd, c.t * H * D * 4), "cudaMalloc q");
      ck(cudaMemcpy(qd, arena_f32 + 12345 * D, c.t * H * D * 4, cudaMemcpyDeviceToDevice), "q");
      ck(cudaMalloc(&wd, c.t * H * 4), "cudaMalloc w");
      ck(cudaMemcpy(wd, arena_f32 + 777 * D, c.t * H * 4, cudaMemcpyDeviceToDevice), "w");
      ck(cudaMalloc(&out, c.t * c.w * 4), "cudaMalloc scores");
      auto call = [&](int) { be.index_scores(qd, wd, c.t, H, D, arena, 0, rows, begin, width, width, c.w, out); };
      char shape[64];
      std::snprintf(shape, sizeof shape, "t%lld w%lld h32 d128%s", static_cast<long long>(c.t),
                    static_cast<long long>(c.w), c.shared ? " shared" : "");
      const double key_bytes = (c.shared ? 1.0 : static_cast<double>(c.t)) * c.w * 68;
      row("index_scores fp4 keys", shape, bs, call, c.t * c.w > 1 << 22 ? 5 : reps,
          key_bytes + c.t * H * (D + 1) * 4.0 + c.t * c.w * 4.0, 2.0 * c.t * c.w * H * D);
      cudaFree(rows), cudaFree(begin), cudaFree(width), cudaFree(qd), cudaFree(wd), cudaFree(out);
    }
  }

  // Activation quantization (bf16 -> e4m3 + scales), the producer of the GEMM's A.
  if (!moe_only && !indexer_only && !attention_only)
  for (int blk : {32, 128})
    for (int64_t m : {int64_t{1}, int64_t{64}, int64_t{4096}}) {
      const int64_t k = 5120;
      uint8_t* q = nullptr;
      uint8_t* sc = nullptr;
      ck(cudaMalloc(&q, m * k), "cudaMalloc");
      ck(cudaMalloc(&sc, m * k / blk), "cudaMalloc");
      const int copies = static_cast<int>(std::clamp<size_t>(rotate_bytes / (2 * m * k) + 1, 1, 64));
      auto call = [&](int i) {
        const auto* x = reinterpret_cast<const uint16_t*>(codes.slice(i % copies, 2 * m * k));
        deepinfer::cuda::fp8_quantize_act(x, k, m, k, blk, q, k, sc, m, s);
      };
      char shape[64];
      std::snprintf(shape, sizeof shape, "m%lld k%lld", static_cast<long long>(m), static_cast<long long>(k));
      row("fp8_quantize_act blk" + std::to_string(blk), shape, s, call, reps, 3.0 * m * k + m * k / blk, 0);
      cudaFree(q);
      cudaFree(sc);
    }
  ck(cudaStreamSynchronize(s), "final sync");
  std::printf("bench_cuda_kernels: done\n");
  return 0;
}
