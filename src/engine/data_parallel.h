// Attention data parallelism (spec §6.1): N engine ranks, each with its own requests, state arena
// and scheduler, stepping in lock-step; rank 0's Engine is also the front end that spreads new
// requests over the ranks by load and merges their outputs. With MoE expert parallelism the
// ranks' models exchange tokens at every MoE layer over an in-process communicator (one thread per
// rank, CPU ranks), so every rank runs exactly one forward per step: an idle rank an empty one.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "deepinfer/llm.h"
#include "model/causal_lm.h"
#include "parallel/cpu_communicator.h"

namespace deepinfer::parallel {
class ExpertParallel;
}

namespace deepinfer::engine {

class Engine;

// Builds the ranks' models: one per DP rank (with context_parallel_size > 1 a ContextParallelLM of cp
// ranks), each rank with its ExpertParallel under expert parallelism, over one group of dp * cp
// ranks. Returns them and keeps the communicator they share.
struct DataParallelModels {
  std::vector<std::unique_ptr<model::CausalLM>> models;
  std::shared_ptr<parallel::CpuCommGroup> group;
  std::vector<std::unique_ptr<parallel::CpuCommunicator>> comms;
};
// Checks the configuration (sizes, device, speculation) and loads the model folder once per rank.
DataParallelModels load_data_parallel_models(const std::string& model_dir, const EngineConfig& config);

// Makes the ranks' engines at once, a thread each: with speculation an engine measures its step
// costs at start-up, and under expert parallelism those forwards must run on every rank together.
// A failure on one rank aborts the group (so no rank waits for it) and is rethrown.
using MakeRankEngine = std::function<std::unique_ptr<Engine>(std::unique_ptr<model::CausalLM>)>;
std::vector<std::unique_ptr<Engine>> make_rank_engines(std::vector<std::unique_ptr<model::CausalLM>> models,
                                                       parallel::CpuCommGroup* group, const MakeRankEngine& make);

// Context parallelism: context_parallel_size (or DEEPINFER_CONTEXT_PARALLEL_SIZE) after its checks.
int context_parallel_size(const EngineConfig& config);
// The model of `cp` context-parallel ranks (model/context_parallel_lm.h), each loaded from the folder;
// expert_parallel(c), when given, is CP rank c's expert parallelism (its EP group spans the CP ranks).
using RankExpertParallel = std::function<std::shared_ptr<parallel::ExpertParallel>(int cp_rank)>;
std::unique_ptr<model::CausalLM> load_context_parallel_model(const std::string& model_dir, const EngineConfig& config,
                                                             int cp, const RankExpertParallel& expert_parallel = {});

// The front end's view of the ranks (owned by rank 0's Engine).
class DataParallelGroup {
 public:
  DataParallelGroup(Engine& front, std::vector<std::unique_ptr<Engine>> others, DataParallelModels comm);
  ~DataParallelGroup();
  int size() const { return static_cast<int>(others_.size()) + 1; }
  Engine& rank(int r);
  const Engine& rank(int r) const;

  std::string add_request(const Prompt& prompt, const SamplingParams& params, std::string request_id);
  void abort(const std::string& request_id);
  bool has_unfinished() const;
  // One lock-step step of every rank (each on its own thread); their outputs, merged.
  std::vector<RequestOutput> step(bool include_unfinished);
  // Where each live request runs (tests, stats).
  int rank_of(const std::string& request_id) const;

 private:
  int pick_rank() const;  // the least loaded: fewest queued tokens, then fewest requests, then lowest

  Engine& front_;
  std::vector<std::unique_ptr<Engine>> others_;
  DataParallelModels comm_;
  struct Placed {
    int rank;
    int64_t tokens;  // prompt + max_tokens, times n
  };
  mutable std::mutex mu_;  // guards the placement below (add_request may come from any thread)
  std::unordered_map<std::string, Placed> placed_;
  std::vector<int64_t> tokens_, requests_;  // per rank, of the live requests
  uint64_t next_id_ = 0;
};

}  // namespace deepinfer::engine
