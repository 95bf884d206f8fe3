// The released-size DeepSeek-V4.1 vision tower (ViT dim 1024, 16 heads, MLP 2816, patch 14, 3x3 aligner
// into width 5120) on dummy bf16 weights: one image of a given LLM token budget through VisionTower::encode.
// Prints each op of a block alone at the tower's shapes (the per-block breakdown), and the measured time,
// the floor and their ratio for the tower and for its attention alone. The
// floor is the FLOPs at a rate: on a GPU the tensor-core peak of bf16 (dense; default 989 TFLOP/s, the
// H100/H200 SXM datasheet), on the CPU the rate the backend's linear reaches on the tower's largest GEMM
// in the same run; that GEMM's rate is printed either way. Given torch_vit.py, it runs PyTorch's
// version of the same tower (same shapes, bf16, F.scaled_dot_product_attention) in the same run. The
// release has 32 blocks; a smaller count keeps a CPU run short (time scales per block). A benchmark, not
// a test: no assertion.
//   bench_vit [blocks=1] [image_px=1302 (a 31x31-cell, 994-token span)] [runs=1] [device=cpu]
//             [torch_script=none] [peak_tflops=989]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "io/safetensors.h"
#include "vision/image_decode.h"
#include "vision/image_processor.h"
#include "vision/vision_tower.h"

namespace {

using namespace deepinfer;
namespace fs = std::filesystem;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Dummy weights in the released names and shapes (bf16, uniform with std 1/sqrt(fan_in)); written once
// per run. A xorshift generator: the release's 420M weights take a second, not a minute of normals.
void write_dummy_tower(const std::string& path, const vision::VisionConfig& c) {
  uint64_t state = 0x9e3779b97f4a7c15ull;
  auto uniform = [&] {  // [-1, 1)
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return static_cast<float>(state >> 40) * (2.0f / 16777216.0f) - 1.0f;
  };
  std::vector<std::vector<uint8_t>> storage;
  std::vector<io::TensorToWrite> tensors;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float mean, float std) {
    const int64_t n = shape.size() == 2 ? shape[0] * shape[1] : shape[0];
    std::vector<uint8_t> bytes(n * 2);
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t b = float_to_bf16(mean + std * 1.7320508f * uniform());
      std::memcpy(bytes.data() + 2 * i, &b, 2);
    }
    storage.push_back(std::move(bytes));
    tensors.push_back({name, DType::BF16, shape, storage.back()});
  };
  const int64_t d = c.dim, p = c.patch_size, r = c.downsample_ratio, t = c.text_dim;
  auto linear = [&](const std::string& name, int64_t n, int64_t k) { add(name, {n, k}, 0, 1 / std::sqrt(float(k))); };
  linear("vision.patch_embed.proj.weight", d, 3 * p * p);
  add("vision.patch_embed.proj.bias", {d}, 0, 0.1f);
  for (int64_t b = 0; b < c.n_layers; ++b) {
    const std::string q = "vision.blocks." + std::to_string(b) + ".";
    add(q + "norm1.weight", {d}, 1, 0.1f);
    linear(q + "attn.wqkv.weight", 3 * d, d);
    add(q + "attn.wqkv.bias", {3 * d}, 0, 0.1f);
    linear(q + "attn.wo.weight", d, d);
    add(q + "attn.wo.bias", {d}, 0, 0.1f);
    add(q + "norm2.weight", {d}, 1, 0.1f);
    linear(q + "mlp.w1.weight", 2 * c.inter_dim, d);
    linear(q + "mlp.w2.weight", d, c.inter_dim);
  }
  add("vision.norm.weight", {d}, 1, 0.1f);
  linear("aligner.w1.weight", t, d * r * r);
  add("aligner.w1.bias", {t}, 0, 0.1f);
  linear("aligner.w2.weight", t, t);
  add("aligner.w2.bias", {t}, 0, 0.1f);
  for (const char* n : {"image_start", "image_end", "image_newline"}) add(n, {t}, 0, 1);
  io::write_safetensors(path, tensors);
}

// Seconds per call of fn, over `reps` calls enqueued back to back after one warm-up; `sync` waits for them.
template <typename Fn, typename Sync>
double seconds_per_call(int reps, Fn fn, Sync sync) {
  fn();
  sync();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) fn();
  sync();
  return seconds_since(t0) / reps;
}

// bf16 values in [-1, 1) (fresh data, not zeros) uploaded to a float array of the backend.
void fill_random(ops::Backend& be, float* dst, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> h(n);
  for (float& x : h) x = round_to_bf16(u(rng));
  be.upload(dst, h.data(), n * sizeof(float));
}

}  // namespace

int main(int argc, char** argv) {
  vision::VisionConfig c;  // the release's vision_config (docs/vision.md), blocks as asked
  c.n_layers = argc > 1 ? std::atoll(argv[1]) : 1;
  const int64_t px = argc > 2 ? std::atoll(argv[2]) : 1302;
  const int runs = argc > 3 ? std::max(1, std::atoi(argv[3])) : 1;
  const std::string device = argc > 4 ? argv[4] : "cpu";
  const std::string torch_script = argc > 5 && std::strcmp(argv[5], "none") != 0 ? argv[5] : "";
  const double peak = (argc > 6 ? std::atof(argv[6]) : 989.0) * 1e12;
  c.dim = 1024, c.n_heads = 16, c.inter_dim = 2816, c.text_dim = 5120, c.image_token_id = 129264;
  const bool gpu = device != "cpu";

  const fs::path dir = fs::temp_directory_path() / ("deepinfer_bench_vit_" + std::to_string(c.n_layers));
  fs::create_directories(dir);
  const std::string file = (dir / "model.safetensors").string();
  write_dummy_tower(file, c);
  ops::Backend& be = ops::backend_for(Device::parse(device));
  vision::VisionTower tower(io::Checkpoint::open(file), c, be);
  fs::remove_all(dir);

  vision::RgbImage img;  // a smooth gradient: decoding is not timed, the tower does not care
  img.width = img.height = px;
  img.rgb.resize(px * px * 3);
  for (int64_t i = 0; i < px * px * 3; ++i) img.rgb[i] = static_cast<uint8_t>((i * 7 / 3) % 251);
  const vision::ProcessedImage pi = vision::process_image(img, c);
  const int64_t N = pi.n_vit_h * pi.n_vit_w, cells = pi.plan.n_llm_h * pi.plan.n_llm_w;
  const int64_t d = c.dim, f = c.inter_dim, t = c.text_dim, pp = 3 * c.patch_size * c.patch_size;
  const int64_t H = c.n_heads, hd = c.head_dim();

  // FLOPs: patch embedding, per block qkv + wo + w1 (gate and up) + w2 + QK^T and PV, the aligner.
  const double attn_flops = 4.0 * N * N * d;
  const double per_block = 2.0 * N * d * (3 * d + d + 2 * f + f) + attn_flops;
  const double flops = 2.0 * N * pp * d + c.n_layers * per_block + 2.0 * cells * (9 * d * t + t * t);

  // Each op of a block alone at the tower's shapes (bf16 activations, the tower's weight format), on
  // fresh data: the per-block breakdown; the w1 GEMM ([N, d] x [d, 2f], the largest) gives the CPU's rate.
  const bool bf16_weights = be.weight_format(ops::WeightType::kBf16) == ops::WeightType::kBf16;
  auto bf16_buffer = [&](int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<uint16_t> h(n);
    for (auto& e : h) e = float_to_bf16(u(rng) * 0.5f);
    Buffer b(be, n * 2);
    be.upload(b.data(), h.data(), n * 2);
    return b;
  };
  auto weight = [&](int64_t n, int64_t k, Buffer& store, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-0.03f, 0.03f);
    std::vector<float> wh(n * k);
    for (float& e : wh) e = round_to_bf16(u(rng));
    if (bf16_weights) {
      std::vector<uint16_t> bits(wh.size());
      for (size_t i = 0; i < wh.size(); ++i) bits[i] = float_to_bf16(wh[i]);
      store = Buffer(be, bits.size() * 2);
      be.upload(store.data(), bits.data(), bits.size() * 2);
    } else {
      store = Buffer(be, wh.size() * 4);
      be.upload(store.data(), wh.data(), wh.size() * 4);
    }
    return ops::QWeight{bf16_weights ? ops::WeightType::kBf16 : ops::WeightType::kF32, store.data(), nullptr, n, k, 0};
  };
  Buffer wqkv_b, wo_b, w1_b, w2_b;
  const ops::QWeight wqkv = weight(3 * d, d, wqkv_b, 5), wo = weight(d, d, wo_b, 6), w1 = weight(2 * f, d, w1_b, 7),
                     w2 = weight(d, f, w2_b, 8);
  Buffer xb = bf16_buffer(N * f, 1), gub = bf16_buffer(N * 2 * f, 13), gateb(be, N * f * 2), qkvb = bf16_buffer(N * 3 * d, 2), ob(be, N * d * 2), hb(be, N * d * 2),
         resb = bf16_buffer(N * d, 3), yb(be, N * 3 * d * 4), csb(be, N * hd / 2 * 4), snb(be, N * hd / 2 * 4),
         biasb(be, 3 * d * 4), normb(be, d * 4);
  auto* xin = static_cast<const uint16_t*>(xb.data());
  auto* gu = static_cast<uint16_t*>(gub.data());
  auto* gate = static_cast<uint16_t*>(gateb.data());
  auto* qkv = static_cast<uint16_t*>(qkvb.data());
  auto* ao = static_cast<uint16_t*>(ob.data());
  auto* hn = static_cast<uint16_t*>(hb.data());
  auto* res = static_cast<uint16_t*>(resb.data());
  float* y = static_cast<float*>(yb.data());
  fill_random(be, y, N * 3 * d, 4);
  fill_random(be, static_cast<float*>(csb.data()), N * hd / 2, 9);
  fill_random(be, static_cast<float*>(snb.data()), N * hd / 2, 10);
  fill_random(be, static_cast<float*>(biasb.data()), 3 * d, 11);
  fill_random(be, static_cast<float*>(normb.data()), d, 12);
  const auto* cs = static_cast<const float*>(csb.data());
  const auto* sn = static_cast<const float*>(snb.data());
  const auto* bias = static_cast<const float*>(biasb.data());
  const auto* nw = static_cast<const float*>(normb.data());
  const int32_t seq_h[2] = {0, static_cast<int32_t>(N)};
  Buffer sb(be, sizeof seq_h);
  be.upload(sb.data(), seq_h, sizeof seq_h);
  const auto* seq = static_cast<const int32_t*>(sb.data());
  auto sync = [&] { be.synchronize(); };
  const int reps = gpu ? 20 : 1;
  struct Op {
    const char* what;
    double gflop, s;
  };
  std::vector<Op> ops_of_block;
  auto time_op = [&](const char* what, double flop, auto fn) {
    ops_of_block.push_back({what, flop / 1e9, seconds_per_call(reps, fn, sync)});
  };
  time_op("qkv GEMM", 2.0 * N * d * 3 * d, [&] { be.linear_plain_bf16(xin, N, wqkv, y, nullptr); });
  time_op("qkv bias + RoPE", 0, [&] { be.qkv_rope_bf16(y, bias, N, H, hd, cs, sn, qkv); });
  time_op("attention", attn_flops, [&] {
    be.attention_full(qkv, qkv + d, qkv + 2 * d, 3 * d, N, H, hd, seq, 1, N, 1.0f / std::sqrt(float(hd)), ao);
  });
  time_op("wo GEMM", 2.0 * N * d * d, [&] { be.linear_plain_bf16(ao, N, wo, y, nullptr); });
  time_op("residual + RMSNorm", 0, [&] { be.residual_rms_norm_bf16(y, bias, true, res, nw, N, d, 1e-6f, hn); });
  time_op("w1 GEMM (bf16 out)", 2.0 * N * d * 2 * f, [&] { be.linear_plain_bf16(xin, N, w1, nullptr, gu); });
  time_op("SwiGLU", 0, [&] { be.swiglu_bf16(gu, N, f, gate); });
  time_op("w2 GEMM", 2.0 * N * f * d, [&] { be.linear_plain_bf16(xin, N, w2, y, nullptr); });
  time_op("residual + RMSNorm", 0, [&] { be.residual_rms_norm_bf16(y, nullptr, true, res, nw, N, d, 1e-6f, hn); });
  const double gemm = ops_of_block[5].s, rate = 2.0 * N * d * 2 * f / gemm, attn = ops_of_block[2].s;

  const vision::ProcessedImage* batch[] = {&pi};
  double best = 1e30;
  if (gpu) tower.encode(batch);  // warm-up: cuBLAS handles, workspaces
  for (int i = 0; i < runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto rows = tower.encode(batch);
    best = std::min(best, seconds_since(t0));
    if (rows.at(0).size() != static_cast<size_t>(cells * t)) return std::fprintf(stderr, "bench_vit: bad output\n"), 1;
  }

  // PyTorch's tower of the same shapes, in the same run (it prints "torch_tower_s S" and "torch_attention_s S").
  double torch_tower = 0, torch_attn = 0;
  std::string torch_name;
  if (!torch_script.empty()) {
    const std::string cmd = "python3 " + torch_script + " " + std::to_string(c.n_layers) + " " +
                            std::to_string(pi.n_vit_h) + " " + std::to_string(pi.n_vit_w) + " " + std::to_string(runs);
    if (FILE* pipe = popen(cmd.c_str(), "r")) {
      char line[512];
      while (std::fgets(line, sizeof line, pipe)) {
        std::fputs(line, stdout);
        double s = 0;
        char name[256];
        if (std::sscanf(line, "torch_tower_s %lf", &s) == 1) torch_tower = s;
        if (std::sscanf(line, "torch_attention_s %lf", &s) == 1) torch_attn = s;
        if (std::strncmp(line, "torch ", 6) == 0 && std::sscanf(line + 6, "%255s", name) == 1) torch_name = name;
      }
      pclose(pipe);
    }
  }

  const double floor = flops / (gpu ? peak : rate), attn_floor = attn_flops / (gpu ? peak : rate);
  std::printf("ViT dim %lld, %lld heads, MLP %lld, %lld blocks (release: 32) on %s; image %lldx%lld px: %lld patches, "
              "%lld aligner rows, span %lld tokens\n",
              (long long)d, (long long)H, (long long)f, (long long)c.n_layers, be.device().str().c_str(), (long long)px,
              (long long)px, (long long)N, (long long)cells, (long long)pi.plan.span_len());
  std::printf("linear_plain_bf16 (%s weights) [%lld x %lld] x [%lld x %lld]: %.6f s = %.1f TFLOP/s\n",
              bf16_weights ? "bf16" : "fp32", (long long)N, (long long)d, (long long)d, (long long)(2 * f), gemm,
              rate / 1e12);
  std::printf("floor rate: %.1f TFLOP/s (%s)\n", (gpu ? peak : rate) / 1e12,
              gpu ? "bf16 dense tensor-core peak" : "the linear above");
  auto row = [&](const char* what, double gflop, double measured, double fl, double torch) {
    std::printf("%-22s %10.1f GFLOP  measured %.6f s (%.1f TFLOP/s)  floor %.6f s  ratio %.2f", what, gflop,
                measured, gflop / 1e3 / measured, fl, measured / fl);
    if (torch > 0) std::printf("  torch %.6f s (ours / torch %.2f)", torch, measured / torch);
    std::printf("\n");
  };
  double block_sum = 0;
  for (const Op& op : ops_of_block) {
    block_sum += op.s;
    std::printf("  op %-20s %8.1f GFLOP  %.6f s  x %lld blocks = %.6f s\n", op.what, op.gflop, op.s,
                (long long)c.n_layers, op.s * c.n_layers);
  }
  std::printf("  ops of a block: %.6f s, x %lld blocks = %.6f s\n", block_sum, (long long)c.n_layers,
              block_sum * c.n_layers);
  row("attention_full", attn_flops / 1e9, attn, attn_floor, torch_attn);
  row("tower (best of runs)", flops / 1e9, best, floor, torch_tower);
  std::printf("per block %.6f s; runs %d%s%s\n", best / c.n_layers, runs, torch_name.empty() ? "" : "; torch ",
              torch_name.c_str());
}
