#include "core/env.h"

#include <algorithm>
#include <cstdlib>

#include "core/error.h"

namespace deepinfer {

const std::vector<EnvVar>& env_vars() {
  static const std::vector<EnvVar> vars = {
      // Build (read by build.sh).
      {"DEEPINFER_ACCELERATOR", "", "cpu or nvidia: which backend build.sh builds (default: nvidia when a GPU is visible)"},
      {"DEEPINFER_BUILD_TYPE", "Release", "CMake build type used by build.sh"},
      {"DEEPINFER_BUILD_DIR", "build", "build folder used by build.sh and test.sh"},
      {"DEEPINFER_BUILD_JOBS", "", "parallel compile jobs for build.sh (default: nproc)"},
      {"DEEPINFER_SKIP_DEPS", "0", "1: build.sh/test.sh skip installing apt/pip dependencies (offline machines)"},
      // Runtime: engine.
      {"DEEPINFER_CPU_THREADS", "", "worker threads of the CPU backend (default: hardware concurrency)"},
      {"DEEPINFER_ASYNC_SCHEDULING", "1", "1: prepare step N+1 while step N's forward runs; 0: one step at a time"},
      {"DEEPINFER_DEVICE_SAMPLING", "1", "1: sample rows (greedy, temperature, top-k/p, min-p, penalties, bias, min_tokens, grammar masks; not rows asking for logprobs) are drawn on the model's device and only their tokens cross to the host; 0: every row's logits come back and the host samples"},
      {"DEEPINFER_BATCH_INVARIANT", "0", "1: a request's logits are bitwise identical whatever else is in the batch"},
      {"DEEPINFER_MAX_NUM_SEQS", "256", "default for max_num_seqs: sequences in one step"},
      {"DEEPINFER_MAX_NUM_BATCHED_TOKENS", "2048", "default for max_num_batched_tokens: tokens in one step"},
      {"DEEPINFER_FP8_GEMM", "tensor", "tensor: FP8/FP4 projections on the GPU's tensor cores (bf16 out, their own in-block sums; routed experts one grouped GEMM per projection) and BF16-stored weights through cuBLAS's bf16 GEMM; exact: weights dequantized/widened and summed in the CPU's order, bit for bit (slow; for verification)"},
      {"DEEPINFER_ATTENTION", "tensor", "tensor: V4.1's sparse attention (64 heads x 512) on the GPU's BF16 tensor cores (q and rows read as bf16, exact for the model's bf16 values; their own sum order); exact: the fp32 kernel, the CPU's block structure (slow; for verification)"},
      {"DEEPINFER_LOAD_FORMAT", "auto", "auto: read the checkpoint; dummy: random V4.1 weights in the released formats (benchmarks; config.json only)"},
      {"DEEPINFER_DEVICE", "cpu", "where models run: cpu, cuda or cuda:N (V4.1; V4 runs on the CPU)"},
      {"DEEPINFER_ENGRAM_DEVICE", "auto", "where V4.1's Engram tables live on a GPU: host (memory-mapped; each step's rows gathered and uploaded), device (uploaded at load; an error if they do not fit), auto (device when they take at most half of the memory free after the other weights)"},
      {"DEEPINFER_PROGRESS", "auto", "progress bar on stderr while a model loads: auto (when stderr is a terminal), 1 (always; one line per update in logs), 0 (never)"},
      {"DEEPINFER_STATE_MEMORY_MB", "0", "memory budget of per-sequence model state in MiB (0: no limit)"},
      {"DEEPINFER_DATA_PARALLEL_SIZE", "1", "default for data_parallel_size: attention-DP engine ranks stepping in lock-step (CPU threads)"},
      {"DEEPINFER_ENABLE_EXPERT_PARALLEL", "0", "default for enable_expert_parallel: 1 splits the routed experts over the DP ranks (MoE EP)"},
      {"DEEPINFER_CONTEXT_PARALLEL_SIZE", "1", "default for context_parallel_size: ranks (CPU threads) that split each forward's tokens (balanced CP for long prefills)"},
      {"DEEPINFER_CONTEXT_PARALLEL_LAYOUT", "zigzag", "context parallelism: zigzag (2·cp blocks, rank r owns r and 2·cp-1-r) or round_robin (token t to rank t mod cp)"},
      {"DEEPINFER_EPLB_INTERVAL", "0", "MoE EP: steps between EPLB rebalances from the router's expert-load counts (0: never)"},
      {"DEEPINFER_EPLB_REDUNDANT_EXPERTS", "0", "MoE EP: extra expert slots over all ranks for EPLB's replicas of hot experts (experts + these must split evenly over the EP ranks)"},
      {"DEEPINFER_HF_MODEL_DIR", "", "local folder holding the model named by a repo id (skips the HF cache and download)"},
      {"DEEPINFER_HF_ENDPOINT", "", "hub URL for downloads (default: HF_ENDPOINT, else https://huggingface.co)"},
      // Features of the original DeepInfer (seeds); read by the speculative and YOCO paths.
      {"DEEPINFER_ENABLE_MTP_VARLEN", "0", "1: DSpark speculative decoding with confidence-scheduled (variable-length) verification; 0: speculation only when asked for (speculative=, --speculative), then a fixed draft count"},
      {"DEEPINFER_USE_NEXTN_DECODE", "5", "most DSpark draft tokens a request verifies per step (1 .. the checkpoint's dspark_block_size; unset: min(5, block))"},
      {"DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE", "", "compact: decoder SWA bounded replay (V4.1 default setting)"},
      {"DEEPINFER_YOCO_PREFILL_KEEP_TOKENS", "140", "suffix kept by SWA bounded replay (must cover window + max backtrack)"},
  };
  return vars;
}

static const EnvVar& lookup(const char* name) {
  const auto& vars = env_vars();
  auto it = std::find_if(vars.begin(), vars.end(), [&](const EnvVar& v) { return std::string(v.name) == name; });
  check(it != vars.end(), "environment variable ", name, " is not registered in src/core/env.cpp");
  return *it;
}

std::string env_string(const char* name) {
  const EnvVar& v = lookup(name);
  const char* value = std::getenv(name);
  return value && *value ? std::string(value) : std::string(v.default_value);
}

int64_t env_int(const char* name) {
  std::string s = env_string(name);
  if (s.empty()) return 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  check(end && *end == '\0', name, "=", s, " is not an integer");
  return v;
}

bool env_bool(const char* name) {
  std::string s = env_string(name);
  std::transform(s.begin(), s.end(), s.begin(), ::tolower);
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s.empty() || s == "0" || s == "false" || s == "no" || s == "off") return false;
  fail(name, "=", s, " is not a boolean (use 1 or 0)");
}

}  // namespace deepinfer
