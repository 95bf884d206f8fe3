#include "engine/data_parallel.h"

#include <algorithm>
#include <exception>
#include <thread>

#include "core/device.h"
#include "core/env.h"
#include "core/error.h"
#include "engine/engine.h"
#include "parallel/cpu_communicator.h"
#include "parallel/expert_parallel.h"

#ifdef DEEPINFER_HAVE_MODEL_LOADER
#include "model/context_parallel_lm.h"
#include "model/deepseek_v41/v41_config.h"
#include "model/load.h"
#endif

namespace deepinfer::engine {

DataParallelModels load_data_parallel_models(const std::string& dir, const EngineConfig& config) {
  const int dp = config.data_parallel_size > 0 ? config.data_parallel_size
                                               : static_cast<int>(env_int("DEEPINFER_DATA_PARALLEL_SIZE"));
  const bool ep = config.enable_expert_parallel.value_or(env_bool("DEEPINFER_ENABLE_EXPERT_PARALLEL"));
  check(dp >= 1, "data_parallel_size must be >= 1, got ", dp);
  check(Device::resolve(config.device).is_cpu(), "data_parallel_size / enable_expert_parallel: the ranks run as CPU "
        "threads in this build (the NCCL ranks are not wired into the engine yet), but device ",
        Device::resolve(config.device).str(), " was asked for");
  const int cp = context_parallel_size(config);
  DataParallelModels out;
#ifdef DEEPINFER_HAVE_MODEL_LOADER
  // With EP the experts split over every rank, dp * cp of them: DP rank d's CP rank c is EP rank d * cp + c.
  const int world = ep ? dp * cp : dp;
  out.group = std::make_shared<parallel::CpuCommGroup>(world);
  for (int r = 0; r < world; ++r) out.comms.push_back(std::make_unique<parallel::CpuCommunicator>(*out.group, r));
  model::V41Config c;
  if (ep) c = model::V41Config::from_file(dir + "/config.json");  // V4 fails in load_causal_lm with a clear error
  auto expert_parallel = [&](int r) -> std::shared_ptr<parallel::ExpertParallel> {
    if (!ep) return nullptr;
    parallel::ExpertParallelConfig ec;
    ec.num_layers = c.n_layers, ec.num_experts = c.n_routed_experts;
    ec.redundant_experts = env_int("DEEPINFER_EPLB_REDUNDANT_EXPERTS");
    ec.rebalance_interval = env_int("DEEPINFER_EPLB_INTERVAL");
    return std::make_shared<parallel::ExpertParallel>(*out.comms[r], ec);
  };
  for (int d = 0; d < dp; ++d) {
    if (cp == 1) {
      out.models.push_back(model::load_causal_lm(dir, config.device, config.load_format, expert_parallel(d)));
    } else {
      out.models.push_back(load_context_parallel_model(dir, config, cp, [&](int c) { return expert_parallel(d * cp + c); }));
    }
  }
#else
  (void)dir, (void)ep, (void)cp;
  fail("this build has no model loader (src/model/load.h)");
#endif
  return out;
}

std::vector<std::unique_ptr<Engine>> make_rank_engines(std::vector<std::unique_ptr<model::CausalLM>> models,
                                                       parallel::CpuCommGroup* group, const MakeRankEngine& make) {
  const size_t n = models.size();
  std::vector<std::unique_ptr<Engine>> engines(n);
  std::mutex mu;
  std::exception_ptr first;
  auto run = [&](size_t r) {
    try {
      engines[r] = make(std::move(models[r]));
    } catch (const std::exception& e) {
      std::lock_guard lock(mu);
      if (!first) first = std::current_exception();
      if (group) group->abort(e.what());
    }
  };
  std::vector<std::thread> threads;
  for (size_t r = 1; r < n; ++r) threads.emplace_back(run, r);
  if (n) run(0);
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
  return engines;
}

int context_parallel_size(const EngineConfig& config) {
  check(config.context_parallel_size >= 0, "context_parallel_size must be >= 1, got ", config.context_parallel_size);
  const int cp = config.context_parallel_size > 0 ? config.context_parallel_size
                                                  : static_cast<int>(env_int("DEEPINFER_CONTEXT_PARALLEL_SIZE"));
  check(cp >= 1, "context_parallel_size must be >= 1, got ", cp);
  if (cp == 1) return cp;
  check(Device::resolve(config.device).is_cpu(), "context_parallel_size: the ranks run as CPU threads in this build "
        "(the NCCL ranks are not wired into the engine yet), but device ", Device::resolve(config.device).str(),
        " was asked for");
  return cp;
}

std::unique_ptr<model::CausalLM> load_context_parallel_model(const std::string& dir, const EngineConfig& config, int cp,
                                                             const RankExpertParallel& expert_parallel) {
#ifdef DEEPINFER_HAVE_MODEL_LOADER
  const std::string layout = config.context_parallel_layout.empty() ? env_string("DEEPINFER_CONTEXT_PARALLEL_LAYOUT")
                                                                    : config.context_parallel_layout;
  return std::make_unique<model::ContextParallelLM>(
      cp, parallel::parse_cp_layout(layout), [&](std::shared_ptr<parallel::ContextParallel> c) {
        std::shared_ptr<parallel::ExpertParallel> e = expert_parallel ? expert_parallel(c->rank()) : nullptr;
        return model::load_causal_lm(dir, config.device, config.load_format, std::move(e), std::move(c));
      });
#else
  (void)dir, (void)config, (void)cp, (void)expert_parallel;
  fail("this build has no model loader (src/model/load.h)");
#endif
}

DataParallelGroup::DataParallelGroup(Engine& front, std::vector<std::unique_ptr<Engine>> others, DataParallelModels comm)
    : front_(front), others_(std::move(others)), comm_(std::move(comm)), tokens_(size(), 0), requests_(size(), 0) {}

// The ranks' engines (each may have its last forward in flight) go before the communicator they use.
DataParallelGroup::~DataParallelGroup() { others_.clear(); }

Engine& DataParallelGroup::rank(int r) { return r == 0 ? front_ : *others_.at(r - 1); }
const Engine& DataParallelGroup::rank(int r) const { return r == 0 ? front_ : *others_.at(r - 1); }

int DataParallelGroup::pick_rank() const {
  int best = 0;
  for (int r = 1; r < size(); ++r)
    if (std::make_pair(tokens_[r], requests_[r]) < std::make_pair(tokens_[best], requests_[best])) best = r;
  return best;
}

std::string DataParallelGroup::add_request(const Prompt& prompt, const SamplingParams& params, std::string id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (id.empty()) {  // the ids one engine would give (each rank counts only its own)
    do id = std::to_string(next_id_++);
    while (placed_.count(id));
  }
  check(!placed_.count(id), "request id '", id, "' is already in use");
  Prompt p = prompt;  // encoded here once: the load counts its tokens
  if (p.token_ids.empty() && !p.text.empty() && front_.codec()) p.token_ids = front_.codec()->encode(p.text);
  const int r = pick_rank();
  rank(r).add_local(p, params, id);  // validates; throws before anything is placed
  const int64_t tokens = (static_cast<int64_t>(p.token_ids.size()) + params.max_tokens) * params.n;
  placed_[id] = {r, tokens};
  tokens_[r] += tokens;
  ++requests_[r];
  return id;
}

void DataParallelGroup::abort(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = placed_.find(id);
  if (it != placed_.end()) rank(it->second.rank).abort_local(id);
}

bool DataParallelGroup::has_unfinished() const {
  for (int r = 0; r < size(); ++r)
    if (rank(r).has_unfinished_local()) return true;
  return false;
}

int DataParallelGroup::rank_of(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = placed_.find(id);
  return it == placed_.end() ? -1 : it->second.rank;
}

std::vector<RequestOutput> DataParallelGroup::step(bool include_unfinished) {
  const int n = size();
  std::vector<std::vector<RequestOutput>> outs(n);
  std::vector<std::exception_ptr> errors(n);
  auto run = [&](int r) {
    try {
      outs[r] = r == 0 ? front_.step_local(include_unfinished) : others_[r - 1]->step(include_unfinished);
    } catch (...) {
      errors[r] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (int r = 1; r < n; ++r) threads.emplace_back(run, r);
  run(0);
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  std::vector<RequestOutput> merged;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& o : outs)
    for (auto& out : o) {
      if (out.finished) {
        auto it = placed_.find(out.request_id);
        if (it != placed_.end()) {
          tokens_[it->second.rank] -= it->second.tokens;
          --requests_[it->second.rank];
          placed_.erase(it);
        }
      }
      merged.push_back(std::move(out));
    }
  return merged;
}

}  // namespace deepinfer::engine
