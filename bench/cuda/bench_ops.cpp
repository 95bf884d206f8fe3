// Times CUDA backend ops at V4-Flash shapes with CUDA events (median of many reps after warm-up) and
// prints each next to its floor: max(bytes / measured copy bandwidth, FLOPs / measured GEMM rate).
// Both ceilings are measured first on the device itself. Inputs are random (never zeros) and the
// weights rotate among copies whose total exceeds the L2, so the timings are not L2-resident.
//   bench_cuda_ops [--quick | --attention | --linear | --profile]
//   --linear:    the ceilings, then linear only (m = 1, 2, 4, 8 by the decode GEMV and by cuBLAS, and
//                m = 32..256 by cuBLAS)
//   --attention: the ceilings, then sparse_attention only (every kernel variant, t64/256/1024)
//   --profile:   one t1024 launch of each sparse_attention variant, nothing else (for ncu)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "core/dtype.h"
#include "core/error.h"

using deepinfer::cuda::CudaBackend;

namespace {

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "CUDA error %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

template <typename T>
T* dev_random(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<T> h(n);
  for (auto& x : h) {
    float v;
    do v = d(rng); while (v == 0.0f);
    if constexpr (std::is_same_v<T, uint16_t>) x = deepinfer::float_to_bf16(v);
    else x = v;
  }
  T* p = nullptr;
  ck(cudaMalloc(&p, n * sizeof(T)), "cudaMalloc");
  ck(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  return p;
}

// Median milliseconds of `reps` timed calls of fn(i) (i = rep index, for rotating buffers).
double time_ms(CudaBackend& be, const std::function<void(int)>& fn, int reps, int warmup = 3) {
  auto s = static_cast<cudaStream_t>(be.stream());
  for (int i = 0; i < warmup; ++i) fn(i);
  be.synchronize();
  cudaEvent_t a, b;
  ck(cudaEventCreate(&a), "event");
  ck(cudaEventCreate(&b), "event");
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; ++i) {
    ck(cudaEventRecord(a, s), "record");
    fn(i);
    ck(cudaEventRecord(b, s), "record");
    ck(cudaEventSynchronize(b), "sync");
    ck(cudaEventElapsedTime(&ms[i], a, b), "elapsed");
  }
  be.synchronize();
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[reps / 2];
}

struct Row {
  std::string op, shape;
  double ms, floor_ms;
  const char* bound;
};
std::vector<Row> rows;

void report(const std::string& op, const std::string& shape, double ms, double bytes, double flops, double bw,
            double rate) {
  double t_mem = bytes / bw * 1e3, t_fl = flops / rate * 1e3;
  double fl = std::max(t_mem, t_fl);
  rows.push_back({op, shape, ms, fl, t_mem >= t_fl ? "mem" : "flop"});
  std::printf("%-22s %-26s %10.4f ms  floor %9.4f ms (%s)  %5.1f%% of floor speed\n", op.c_str(), shape.c_str(), ms, fl,
              t_mem >= t_fl ? "mem" : "flop", 100.0 * fl / ms);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) try {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const bool attention_only = argc > 1 && std::strcmp(argv[1], "--attention") == 0;
  const bool profile = argc > 1 && std::strcmp(argv[1], "--profile") == 0;
  const bool linear_only = argc > 1 && std::strcmp(argv[1], "--linear") == 0;
  const int reps = quick ? 10 : 50;
  if (!deepinfer::cuda::device_available()) {
    std::printf("bench_cuda_ops: no CUDA device, skipped\n");
    return 0;
  }
  cudaDeviceProp prop{};
  ck(cudaGetDeviceProperties(&prop, 0), "props");
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  CudaBackend be;
  setenv("DEEPINFER_ATTENTION", "exact", 1);
  CudaBackend exact_attn;  // sparse_attention_online on the fp32 kernel
  unsetenv("DEEPINFER_ATTENTION");
  std::mt19937 rng(12345);
  const size_t l2 = static_cast<size_t>(prop.l2CacheSize);

  // ---- ceilings measured here (skipped by --profile)
  double bw = 1, fp32_rate = 1, bf16_rate = 1;
  if (!profile) {
    const size_t copy_bytes = size_t{2} << 30;
    float* c0 = dev_random<float>(copy_bytes / 4, rng);
    float* c1 = nullptr;
    ck(cudaMalloc(&c1, copy_bytes), "cudaMalloc");
    double copy_ms = time_ms(be, [&](int) {
      ck(cudaMemcpyAsync(c1, c0, copy_bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(be.stream())), "copy");
    }, 20);
    bw = 2.0 * copy_bytes / (copy_ms * 1e-3);  // bytes read + written
    cudaFree(c0);
    cudaFree(c1);
    const int64_t G = 8192;
    float* ga = dev_random<float>(G * G, rng);
    float* gb = dev_random<float>(G * G, rng);
    float* gc = nullptr;
    ck(cudaMalloc(&gc, G * G * 4), "cudaMalloc");
    double sgemm_ms = time_ms(be, [&](int) { be.linear(ga, G, G, gb, G, gc); }, quick ? 3 : 10, 2);
    fp32_rate = 2.0 * G * G * G / (sgemm_ms * 1e-3);
    auto* ha = dev_random<uint16_t>(G * G, rng);
    auto* hb = dev_random<uint16_t>(G * G, rng);
    double hgemm_ms = time_ms(be, [&](int) { be.linear_bf16(ha, G, G, hb, G, gc); }, 10, 2);
    bf16_rate = 2.0 * G * G * G / (hgemm_ms * 1e-3);
    cudaFree(ga); cudaFree(gb); cudaFree(ha); cudaFree(hb); cudaFree(gc);
    std::printf("ceilings: copy %.2f TB/s (read+write), fp32 GEMM %.1f TFLOP/s, bf16 GEMM %.1f TFLOP/s (8192^3)\n",
                bw / 1e12, fp32_rate / 1e12, bf16_rate / 1e12);
  }

  // ---- linear: decode/prefill rows against V4-Flash projections (hidden 4096)
  struct KN { int64_t k, n; };
  const std::vector<KN> kns = {{4096, 512}, {4096, 1024}, {4096, 4096}, {2048, 4096}};
  const std::vector<int64_t> ms = quick ? std::vector<int64_t>{1, 256} : std::vector<int64_t>{1, 2, 4, 8, 32, 128, 256};
  for (KN kn : (attention_only || profile) ? std::vector<KN>{} : kns) {
    const size_t wbytes = kn.k * kn.n * 4;
    const int copies = static_cast<int>(std::max<size_t>(2, (4 * l2 + wbytes - 1) / wbytes));
    std::vector<float*> w(copies);
    std::vector<uint16_t*> wh(copies);
    for (auto& p : w) p = dev_random<float>(kn.k * kn.n, rng);
    for (auto& p : wh) p = dev_random<uint16_t>(kn.k * kn.n, rng);
    float* x = dev_random<float>(256 * kn.k, rng);
    uint16_t* xh = dev_random<uint16_t>(256 * kn.k, rng);
    float* y = nullptr;
    ck(cudaMalloc(&y, 256 * kn.n * 4), "cudaMalloc");
    for (int64_t m : ms) {
      std::string shape = "[" + std::to_string(m) + "," + std::to_string(kn.k) + "]x[" + std::to_string(kn.n) + "]";
      double flops = 2.0 * m * kn.k * kn.n;
      const double fbytes = 4.0 * (m * kn.k + kn.k * kn.n + m * kn.n);
      const double hbytes = 2.0 * (m * kn.k + kn.k * kn.n) + 4.0 * m * kn.n;
      // fp32: the CPU-order kernel (the default), cuBLAS alongside; bf16: the decode GEMV where it applies.
      const bool gemv_h = m <= CudaBackend::kLinearBf16GemvMaxM;
      double t = time_ms(be, [&](int i) { be.linear(x, m, kn.k, w[i % copies], kn.n, y); }, reps);
      report("linear fp32 (CPU order)", shape, t, fbytes, flops, bw, fp32_rate);
      be.set_linear_gemv(false);
      t = time_ms(be, [&](int i) { be.linear(x, m, kn.k, w[i % copies], kn.n, y); }, reps);
      report("linear fp32 (cuBLAS)", shape, t, fbytes, flops, bw, fp32_rate);
      be.set_linear_gemv(true);
      t = time_ms(be, [&](int i) { be.linear_bf16(xh, m, kn.k, wh[i % copies], kn.n, y); }, reps);
      report(gemv_h ? "linear bf16 (GEMV)" : "linear bf16 (cuBLAS)", shape, t, hbytes, flops, bw, bf16_rate);
      if (gemv_h) {
        be.set_linear_gemv(false);
        t = time_ms(be, [&](int i) { be.linear_bf16(xh, m, kn.k, wh[i % copies], kn.n, y); }, reps);
        report("linear bf16 (cuBLAS)", shape, t, hbytes, flops, bw, bf16_rate);
        be.set_linear_gemv(true);
      }
    }
    if (kn.n == 1024 && !linear_only) {
      const int64_t m = 256;
      std::string shape = "[256," + std::to_string(kn.k) + "]x[1024] b128";
      double t = time_ms(be, [&](int i) { be.linear_kblocked(x, m, kn.k, w[i % copies], kn.n, 128, y); }, 10);
      report("linear_kblocked fp32", shape, t, 4.0 * (m * kn.k + kn.k * kn.n + m * kn.n), 2.0 * m * kn.k * kn.n, bw,
             fp32_rate);
    }
    for (auto p : w) cudaFree(p);
    for (auto p : wh) cudaFree(p);
    cudaFree(x); cudaFree(xh); cudaFree(y);
  }

  // ---- sparse_attention: 64 heads, dim 512, k = 128 window + 512 compressed/selected
  const int64_t heads = 64, dim = 512, k = 640, pool_rows = 65536;
  float* pool = dev_random<float>(pool_rows * dim, rng);
  const auto* pool8 = reinterpret_cast<const uint8_t*>(pool);  // V4.1's packed FP8 window rows: the same bytes
  float* sink = dev_random<float>(heads, rng);
  for (int64_t tokens : linear_only ? std::vector<int64_t>{}
                        : quick || profile ? std::vector<int64_t>{1024} : std::vector<int64_t>{64, 256, 1024}) {
    float* q = dev_random<float>(tokens * heads * dim, rng);
    float* out = nullptr;
    ck(cudaMalloc(&out, tokens * heads * dim * 4), "cudaMalloc");
    std::vector<int32_t> idx(tokens * k);
    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(pool_rows - 1));
    std::vector<char> used(pool_rows, 0);
    int64_t unique = 0;
    for (auto& v : idx) {
      v = id(rng);
      if (!used[v]) used[v] = 1, ++unique;
    }
    int32_t* didx = nullptr;
    ck(cudaMalloc(&didx, idx.size() * 4), "cudaMalloc");
    ck(cudaMemcpy(didx, idx.data(), idx.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
    double bytes = 4.0 * (2 * tokens * heads * dim + unique * dim + tokens * k + heads);
    double flops = 4.0 * tokens * heads * k * dim;  // q.k and p.v, one FMA = 2 FLOPs each
    std::string shape = "t" + std::to_string(tokens) + " h64 d512 k640";
    struct Variant { int kind; const char* name; };
    const Variant variants[] = {{CudaBackend::kAttnTiled4x4, "sparse_attn tiled 4hx4w"},
                                {CudaBackend::kAttnAuto, "sparse_attn tiled 4hx8w"}};
    for (const Variant& v : variants) {
      be.set_attention_kernel(v.kind);
      if (profile) {  // one launch each, for ncu
        be.sparse_attention(q, tokens, heads, dim, pool, didx, k, sink, 0.044f, out);
        be.synchronize();
        continue;
      }
      double t = time_ms(be, [&](int) {
        be.sparse_attention(q, tokens, heads, dim, pool, didx, k, sink, 0.044f, out);
      }, reps);
      report(v.name, shape, t, bytes, flops, bw, fp32_rate);
    }
    be.set_attention_kernel(CudaBackend::kAttnAuto);
    if (attention_only || profile) {
      cudaFree(q); cudaFree(out); cudaFree(didx);
      continue;
    }
    // The default is the BF16 tensor-core kernel (q read as bf16, the rows packed FP8 decoded to bf16; these random inputs are
    // not bf16 values, which changes nothing in the timing); DEEPINFER_ATTENTION=exact the fp32 one.
    double t = time_ms(be, [&](int) {
      be.sparse_attention_online(q, tokens, heads, dim, pool8, 0, nullptr, didx, k, k, sink, 0.044f, 64, out);
    }, quick ? 3 : 10);
    report("sparse_attn_online b64 (bf16 mma)", shape, t, bytes, flops, bw, bf16_rate);
    t = time_ms(exact_attn, [&](int) {
      exact_attn.sparse_attention_online(q, tokens, heads, dim, pool8, 0, nullptr, didx, k, k, sink, 0.044f, 64, out);
    }, quick ? 3 : 10);
    report("sparse_attn_online b64 (exact fp32)", shape, t, bytes, flops, bw, fp32_rate);
    cudaFree(q); cudaFree(out); cudaFree(didx);
  }
  cudaFree(pool); cudaFree(sink);
  be.synchronize();

  std::printf("\n| op | shape | measured ms | floor ms | bound | floor/measured |\n|---|---|---|---|---|---|\n");
  for (const Row& r : rows)
    std::printf("| %s | %s | %.4f | %.4f | %s | %.0f%% |\n", r.op.c_str(), r.shape.c_str(), r.ms, r.floor_ms, r.bound,
                100.0 * r.floor_ms / r.ms);
  std::printf("ceilings used: copy %.2f TB/s, fp32 %.1f TFLOP/s, bf16 %.1f TFLOP/s\n", bw / 1e12, fp32_rate / 1e12,
              bf16_rate / 1e12);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_cuda_ops: %s\n", e.what());
  return 1;
}
