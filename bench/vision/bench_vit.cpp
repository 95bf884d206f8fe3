// The released-size DeepSeek-V4.1 vision tower (ViT dim 1024, 16 heads, MLP 2816, patch 14, 3x3 aligner
// into width 5120) on dummy bf16 weights: one image of a given LLM token budget through VisionTower::encode.
// Prints the measured time, the floor (the tower's FLOPs at the rate the same backend's linear reaches
// on the tower's largest GEMM, measured in the same run) and their ratio. The release has 32 blocks; a
// smaller count keeps a CPU run short (time scales per block). A benchmark, not a test: no assertion.
//   bench_vit [blocks=1] [image_px=1302 (a 31x31-cell, 994-token span)] [runs=1] [device=cpu]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
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

// Dummy weights in the released names and shapes (bf16, std 1/sqrt(fan_in)); written once per run.
void write_dummy_tower(const std::string& path, const vision::VisionConfig& c) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<std::vector<uint8_t>> storage;
  std::vector<io::TensorToWrite> tensors;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float mean, float std) {
    const int64_t n = shape.size() == 2 ? shape[0] * shape[1] : shape[0];
    std::vector<uint8_t> bytes(n * 2);
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t b = float_to_bf16(mean + std * normal(rng));
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

}  // namespace

int main(int argc, char** argv) {
  vision::VisionConfig c;  // the release's vision_config (docs/vision.md), blocks as asked
  c.n_layers = argc > 1 ? std::atoll(argv[1]) : 1;
  const int64_t px = argc > 2 ? std::atoll(argv[2]) : 1302;
  const int runs = argc > 3 ? std::atoi(argv[3]) : 1;
  const std::string device = argc > 4 ? argv[4] : "cpu";
  c.dim = 1024, c.n_heads = 16, c.inter_dim = 2816, c.text_dim = 5120, c.image_token_id = 129264;

  const fs::path dir = fs::temp_directory_path() / ("deepinfer_bench_vit_" + std::to_string(c.n_layers));
  fs::create_directories(dir);
  const std::string file = (dir / "model.safetensors").string();
  write_dummy_tower(file, c);
  ops::Backend& be = ops::backend_for(Device::parse(device));
  vision::VisionTower tower(io::Checkpoint::open(file), c, be);

  vision::RgbImage img;  // a smooth gradient: decoding is not timed, the tower does not care
  img.width = img.height = px;
  img.rgb.resize(px * px * 3);
  for (int64_t i = 0; i < px * px * 3; ++i) img.rgb[i] = static_cast<uint8_t>((i * 7 / 3) % 251);
  const vision::ProcessedImage pi = vision::process_image(img, c);
  const int64_t N = pi.n_vit_h * pi.n_vit_w, cells = pi.plan.n_llm_h * pi.plan.n_llm_w;
  const int64_t d = c.dim, f = c.inter_dim, t = c.text_dim, pp = 3 * c.patch_size * c.patch_size;

  // FLOPs: patch embedding, per block qkv + wo + w1 (gate and up) + w2 + QK^T and PV, the aligner.
  const double per_block = 2.0 * N * d * (3 * d + d + 2 * f + f) + 4.0 * N * N * d;
  const double flops = 2.0 * N * pp * d + c.n_layers * per_block + 2.0 * cells * (9 * d * t + t * t);

  // The ceiling: the backend's linear on the tower's largest GEMM ([N, d] x [d, 2f]), best of 3.
  Buffer xb(be, N * d * 4), wb(be, 2 * f * d * 4), yb(be, N * 2 * f * 4);
  float* x = static_cast<float*>(xb.data());
  float* w = static_cast<float*>(wb.data());
  float* y = static_cast<float*>(yb.data());
  be.fill(x, N * d, 0.01f);
  be.fill(w, 2 * f * d, 0.02f);
  double gemm = 1e30;
  for (int i = 0; i < 3; ++i) {
    float done;
    const auto t0 = std::chrono::steady_clock::now();
    be.linear(x, N, d, w, 2 * f, y);
    be.download(&done, y, sizeof done);  // waits for the op
    gemm = std::min(gemm, seconds_since(t0));
  }
  const double rate = 2.0 * N * d * 2 * f / gemm;

  const vision::ProcessedImage* batch[] = {&pi};
  double best = 1e30;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto rows = tower.encode(batch);
    best = std::min(best, seconds_since(t0));
    if (rows.at(0).size() != static_cast<size_t>(cells * t)) return std::fprintf(stderr, "bench_vit: bad output\n"), 1;
  }
  const double floor = flops / rate;
  std::printf("ViT dim %lld, %lld heads, MLP %lld, %lld blocks (release: 32) on %s; image %lldx%lld px: %lld patches, "
              "%lld aligner rows, span %lld tokens\n",
              (long long)d, (long long)c.n_heads, (long long)f, (long long)c.n_layers, device.c_str(), (long long)px,
              (long long)px, (long long)N, (long long)cells, (long long)pi.plan.span_len());
  std::printf("linear [%lld x %lld] x [%lld x %lld]: %.3f s = %.1f GFLOP/s (the floor's rate)\n", (long long)N,
              (long long)d, (long long)d, (long long)(2 * f), gemm, rate / 1e9);
  std::printf("tower: %.1f GFLOP; measured %.3f s (best of %d), floor %.3f s, ratio %.2f; per block %.3f s\n",
              flops / 1e9, best, runs, floor, best / floor, best / c.n_layers);
  fs::remove_all(dir);
}
