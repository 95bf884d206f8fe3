// CPU batch scaling of the DeepSeek-V4 forward: greedy generation of N sequences x T decode tokens in
// flat batches (one forward per step for all sequences) against one sequence alone, and a prefill.
// Prints wall times, the cost ratio and ms per token (best of 5 runs alone, of 2 batched). A
// benchmark, not a test: no assertion on time.
//   bench_v4_batch [model_dir=tests/data/goldens/v4/tiny-b] [sequences=64] [decode_tokens=32] [prompt=16]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "greedy_batch.h"
#include "model/deepseek_v4/v4_model.h"

namespace {

using namespace deepinfer;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Decode time of `seqs` sequences x `decode` tokens after a prompt; *prefill: the prompt's time.
double generate(model::V4Model& m, int64_t seqs, int64_t decode, int64_t prompt, double* prefill = nullptr) {
  std::vector<std::unique_ptr<model::SequenceState>> st;
  const int64_t V = m.vocab_size();
  model::ForwardBatch b = bench::prompt_batch(m, seqs, prompt, st, [&](int64_t s, int64_t i) {
    return static_cast<int32_t>((s * 131 + i * 37 + 11) % V);
  });
  std::vector<float> logits;
  auto t0 = Clock::now();
  m.forward(b, logits);
  if (prefill) *prefill = seconds_since(t0);
  t0 = Clock::now();
  for (int64_t step = 0; step < decode; ++step) {
    bench::next_greedy_step(logits, V, b);
    m.forward(b, logits);
  }
  return seconds_since(t0);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "tests/data/goldens/v4/tiny-b";
  const int64_t seqs = argc > 2 ? std::atoll(argv[2]) : 64, decode = argc > 3 ? std::atoll(argv[3]) : 32;
  const int64_t prompt = argc > 4 ? std::atoll(argv[4]) : 16;
  auto m = model::V4Model::load(dir);
  generate(*m, 1, 2, prompt);  // warm-up
  double one = 1e30, many = 1e30, prefill = 1e30;  // best of several runs: the machine may be shared
  for (int r = 0; r < 5; ++r) {
    double p = 0;
    generate(*m, 1, 0, 512, &p);
    prefill = std::min(prefill, p);
    one = std::min(one, generate(*m, 1, decode, prompt));
  }
  for (int r = 0; r < 2; ++r) many = std::min(many, generate(*m, seqs, decode, prompt));
  std::printf("model %s (hidden %lld, %lld layers), device %s\n", dir.c_str(),
              static_cast<long long>(m->config().hidden_size), static_cast<long long>(m->config().num_layers),
              m->state_memory()->device().str().c_str());
  std::printf("prefill of 512 tokens: %.3f s (%.3f ms/token)\n", prefill, 1e3 * prefill / 512);
  std::printf("1 sequence x %lld decode tokens: %.3f s (%.2f ms/token)\n", static_cast<long long>(decode), one,
              1e3 * one / decode);
  std::printf("%lld sequences x %lld decode tokens: %.3f s (%.3f ms/token)\n", static_cast<long long>(seqs),
              static_cast<long long>(decode), many, 1e3 * many / (seqs * decode));
  std::printf("cost ratio %lld sequences / 1 sequence: %.1fx\n", static_cast<long long>(seqs), many / one);
}
