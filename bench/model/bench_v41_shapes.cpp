// The V4.1 forward at a model's own shapes (e.g. DeepSeek-V4.1-Flash cut to N layers with dummy weights:
// `deepinfer make-demo-model DIR --flash-layers N`, then load_format=dummy), on DEEPINFER_DEVICE: the
// time of one prefill of P tokens (one sequence), and of one decode step of B sequences (32-token
// prompts, greedy), best of 3 each after a warm-up. Prints one JSON object per row; the floors are
// bench/sweep/report_shapes.py's (this binary only measures). With BENCH_DEVICE_DRAWS=1 each decode and
// verify row is measured a second time with every row drawn greedily on the device (the engine's device
// sampling: token ids cross to the host instead of logits). A benchmark, not a test.
//   bench_v41_shapes MODEL_DIR [auto|dummy] [batch sizes=1,8,32,128] [prefill lengths=128,1024,4096] [steps=4]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "greedy_batch.h"
#include "model/deepseek_v41/v41_model.h"
#if __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>  // "decode" / "prefill" ranges for `ncu --nvtx --nvtx-include decode/` (scripts/gpu_flash_bench.sh)
#define RANGE_PUSH(name) nvtxRangePushA(name)
#define RANGE_POP() nvtxRangePop()
#else
#define RANGE_PUSH(name)
#define RANGE_POP()
#endif

namespace {

using namespace deepinfer;
using Clock = std::chrono::steady_clock;

std::vector<int64_t> csv(const char* s) {
  std::vector<int64_t> v;
  std::stringstream in(s);
  for (std::string x; std::getline(in, x, ',');)
    if (!x.empty()) v.push_back(std::atoll(x.c_str()));
  return v;
}

// Non-finite logits of the last timed forward read back: random weights that overflow would time a model
// of NaNs (kernels with NaN inputs can take other paths), so every row reports it.
int64_t g_nonfinite = 0;
void count_nonfinite(const std::vector<float>& logits) {
  g_nonfinite = 0;
  for (float v : logits) g_nonfinite += !std::isfinite(v);
}

int32_t token(int64_t s, int64_t i, int64_t vocab) { return static_cast<int32_t>((s * 7919 + i * 104729 + 1000) % std::min<int64_t>(vocab, 100000)); }

// Prefills `seqs` sequences with `prompt` tokens each (one forward), then times `steps` decode steps.
// Returns {prefill seconds, best decode step seconds}. ranged: the prefill and the decode steps are NVTX ranges
// (not the warm-up's).
std::pair<double, double> run(model::V41Model& m, int64_t seqs, int64_t prompt, int64_t steps, bool ranged = true,
                              bool draws = false) {
  std::vector<std::unique_ptr<model::SequenceState>> st;
  const int64_t V = m.vocab_size();
  model::ForwardBatch b = bench::prompt_batch(m, seqs, prompt, st, [&](int64_t s, int64_t i) { return token(s, i, V); });
  std::vector<float> logits;
  model::RowDraws rd;
  bench::draw_all_rows(b, rd, draws);
  auto t0 = Clock::now();
  if (ranged) RANGE_PUSH("prefill");
  m.forward(b, logits);
  if (ranged) RANGE_POP();
  const double prefill = std::chrono::duration<double>(Clock::now() - t0).count();
  count_nonfinite(logits);
  double best = 1e30;
  for (int64_t step = 0; step < steps; ++step) {
    bench::next_greedy_step(logits, V, b);
    bench::draw_all_rows(b, rd, draws);
    t0 = Clock::now();
    if (ranged) RANGE_PUSH("decode");
    m.forward(b, logits);
    if (ranged) RANGE_POP();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
    if (!draws) count_nonfinite(logits);
  }
  return {prefill, best};
}

// DSpark's cost side: after a prefill of 32 tokens per sequence, the best of `reps` forwards of `seqs`
// sequences x `q` tokens each with every row's logits (verifying q - 1 drafts after the anchor: the
// draft tokens' values do not change the work), then, with time_draft and a DSpark head, the best of `reps`
// batched draft() calls (block tokens and confidences per sequence). Returns {verify seconds, draft seconds or 0}.
std::pair<double, double> verify_and_draft(model::V41Model& m, int64_t seqs, int64_t q, int reps, bool time_draft,
                                           bool draws = false) {
  std::vector<std::unique_ptr<model::SequenceState>> st;
  const int64_t V = m.vocab_size();
  model::ForwardBatch b = bench::prompt_batch(m, seqs, 32, st, [&](int64_t s, int64_t i) { return token(s, i, V); });
  std::vector<float> logits;
  m.forward(b, logits);
  double verify = 1e30, draft = 0;
  for (int r = 0; r < reps; ++r) {  // each rep appends q tokens (the context grows by a few: no rollback needed)
    b.token_ids.clear(), b.logit_rows.clear(), b.seq_start = {0};
    for (int64_t s = 0; s < seqs; ++s)
      for (int64_t i = 0; i < q; ++i) {
        b.logit_rows.push_back(static_cast<int32_t>(b.token_ids.size()));
        b.token_ids.push_back(token(s, 100 + r * q + i, V));
      }
    for (int64_t s = 1; s <= seqs; ++s) b.seq_start.push_back(static_cast<int32_t>(s * q));
    model::RowDraws rd;
    bench::draw_all_rows(b, rd, draws);
    const auto t0 = Clock::now();
    RANGE_PUSH("verify");
    m.forward(b, logits);
    RANGE_POP();
    verify = std::min(verify, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  if (time_draft && m.config().dspark_block_size > 0) {
    std::vector<model::V41SequenceState*> states;
    std::vector<int32_t> anchors;
    for (auto& x : st) states.push_back(static_cast<model::V41SequenceState*>(x.get())), anchors.push_back(1000);
    draft = 1e30;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = Clock::now();
      RANGE_PUSH("draft");
      m.draft(states, anchors, {}, /*with_logits=*/false);  // as the engine's drafter calls it
      RANGE_POP();
      draft = std::min(draft, std::chrono::duration<double>(Clock::now() - t0).count());
    }
  }
  return {verify, draft};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_v41_shapes MODEL_DIR [auto|dummy] [batches=1,8,32,128] [prefills=128,1024,4096] [steps=4] "
                 "[verify_tokens=]\n");
    return 2;
  }
  const std::string dir = argv[1];
  model::V41Options o = model::V41Options::from_env();
  o.dummy_weights = argc > 2 && std::string(argv[2]) == "dummy";
  const auto batches = csv(argc > 3 ? argv[3] : "1,8,32,128"), prefills = csv(argc > 4 ? argv[4] : "128,1024,4096");
  const int64_t steps = argc > 5 ? std::atoll(argv[5]) : 4;
  const auto verify = csv(argc > 6 ? argv[6] : "");  // tokens per sequence of a verification forward, e.g. 1,2,..6
  auto t0 = Clock::now();
  auto m = model::V41Model::load(dir, o);
  std::printf("{\"load_seconds\": %.2f, \"device\": \"%s\", \"layers\": %lld, \"dim\": %lld}\n",
              std::chrono::duration<double>(Clock::now() - t0).count(), o.device.str().c_str(),
              static_cast<long long>(m->config().n_layers), static_cast<long long>(m->config().dim));
  std::fflush(stdout);
  run(*m, 1, 16, 1, false);  // warm-up: workspaces, kernels' first launches
  const char* reps_env = std::getenv("BENCH_REPS");  // prefill, verify and draft repetitions: 1 under a profiler
  const int reps = reps_env ? std::max(1, std::atoi(reps_env)) : 3;
  for (int64_t p : prefills) {
    double best = 1e30;
    for (int r = 0; r < reps; ++r) best = std::min(best, run(*m, 1, p, 0).first);
    std::printf("{\"prefill_tokens\": %lld, \"seconds\": %.6f, \"nonfinite_logits\": %lld}\n", static_cast<long long>(p), best,
                static_cast<long long>(g_nonfinite));
    std::fflush(stdout);
  }
  const char* draws_env = std::getenv("BENCH_DEVICE_DRAWS");
  std::vector<bool> modes = {false};
  if (draws_env && std::string(draws_env) == "1") modes.push_back(true);
  for (int64_t bs : batches)
    for (bool draws : modes) {
      const double step = run(*m, bs, 32, std::max<int64_t>(steps, 1), true, draws).second;
      std::printf("{\"decode_batch\": %lld, \"device_draws\": %s, \"step_seconds\": %.6f, \"nonfinite_logits\": %lld}\n",
                  static_cast<long long>(bs), draws ? "true" : "false", step, static_cast<long long>(g_nonfinite));
      std::fflush(stdout);
    }
  for (int64_t bs : verify.empty() ? std::vector<int64_t>{} : batches) {
    double draft = 0;  // the same work whatever q: timed once, after the last
    for (int64_t q : verify)
      for (bool draws : modes) {
        const auto [t, d] = verify_and_draft(*m, bs, q, reps, q == verify.back() && !draws, draws);
        if (!draws) draft = d;
        std::printf("{\"verify_batch\": %lld, \"tokens_per_seq\": %lld, \"device_draws\": %s, \"step_seconds\": %.6f}\n",
                    static_cast<long long>(bs), static_cast<long long>(q), draws ? "true" : "false", t);
        std::fflush(stdout);
      }
    if (draft > 0) std::printf("{\"draft_batch\": %lld, \"block\": %lld, \"seconds\": %.6f}\n", static_cast<long long>(bs),
                               static_cast<long long>(m->config().dspark_block_size), draft);
  }
}
